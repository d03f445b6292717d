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
// glibc's malloc starts with mmap and trim thresholds of 128 KiB and raises them only as
// large blocks are freed (to at most 32 and 64 MiB). Until then a large call's buffers (the
// receive slices, the parsed tensor, the serialised response) are fresh mappings, or heap
// that earlier frees trimmed, and each call faults its pages in again: at 48 MiB that was
// a third of a call's CPU time. Both are set to those ceilings from the start, so blocks up
// to 32 MiB come from the heaps and up to 64 MiB of free heap top stays mapped for the next
// call. The server's monitor hands free memory back (malloc_trim) once it has been idle
// for a second, and once a second under traffic when the free heap is large (server.cc).
inline void TuneProcessForServing() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

}  // namespace posenc

#endif  // POSENC_SERVER_COMMON_PROCESS_TUNING_H_
