// Process-wide settings of the libraries a gRPC server process runs on, applied once at the
// start of main() by posenc-server and by its benchmark baseline, so both pay the same.
#ifndef POSENC_SERVER_COMMON_PROCESS_TUNING_H_
#define POSENC_SERVER_COMMON_PROCESS_TUNING_H_

#include <malloc.h>

#include "absl/synchronization/mutex.h"

namespace posenc {

// abseil built without NDEBUG (Debian's packages are) checks every absl::Mutex lock for
// lock-order cycles: each Lock and Unlock of gRPC's and posenc's mutexes looks the mutex up
// in one process-wide graph under a global spin lock. That is a debugging aid, a few
// thousand instructions per call and a lock every thread shares; a serving process turns
// it off. The tests and the sanitizer builds keep it.
//
// glibc's malloc gives freed memory back to the kernel as soon as a heap's free top passes
// the trim threshold (by default twice the dynamic mmap threshold, a few MiB at most), and
// serves each block over the mmap threshold (128 KiB at first) with a fresh mapping. A
// large call's buffers (the receive slices, the parsed tensor, the serialised response)
// were then page-faulted in again on every call: at 48 MiB a third of the call's CPU time
// went to faults and zeroing pages. Blocks up to 32 MiB (glibc's largest mmap threshold)
// now come from the heaps, and up to 256 MiB of free heap stays mapped for the next call.
// Only what was freed stays: the process never holds more than its peak, which admission
// (--max_inflight_bytes) bounds.
inline void TuneProcessForServing() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

}  // namespace posenc

#endif  // POSENC_SERVER_COMMON_PROCESS_TUNING_H_
