// Survives a client that shrinks (ftruncate) a shared-memory object the server has mapped.
// Touching a MAP_SHARED page past the object's end raises SIGBUS. A process-wide SIGBUS
// handler, installed on the first Claim, looks the fault address up in a fixed table of
// guarded ranges; inside one, it maps anonymous zero pages over the whole range
// (MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS) and marks it faulted, so the access resumes and
// the request path sees the mark afterwards. Faults outside every range, and SIGBUS sent
// by kill(), go to the handler that was installed before (or the default action: death).
//
// Thread-safe and lock-free: the handler reads only atomics, so it is async-signal-safe
// (mmap is a plain system call on Linux). Each range lives in one slot from Claim until
// Release; REQUIRES: nothing touches the range after Release (munmap it right after).
#pragma once

#include <cstddef>
#include <cstdint>

namespace posenc::fault_guard {

// Ranges guarded at once, across the process (registered and not yet unmapped regions).
inline constexpr int kMaxRanges = 4096;

// Guards [base, base + length) (page-aligned, as mmap returns it). Returns the slot, or -1
// when all kMaxRanges slots are taken.
int Claim(void* base, size_t length);

// Stops guarding the slot's range. Call before munmap.
void Release(int slot);

// Whether a fault hit the slot's range since its Claim. Lock-free.
bool Faulted(int slot);

// Faults absorbed since the process started (each range counts once).
uint64_t FaultCount();

}  // namespace posenc::fault_guard
