// Process-wide settings of the libraries a gRPC server process runs on, applied once at the
// start of main() by posenc-server and by its benchmark baseline, so both pay the same.
#ifndef POSENC_SERVER_COMMON_PROCESS_TUNING_H_
#define POSENC_SERVER_COMMON_PROCESS_TUNING_H_

#include "absl/synchronization/mutex.h"

namespace posenc {

// abseil built without NDEBUG (Debian's packages are) checks every absl::Mutex lock for
// lock-order cycles: each Lock and Unlock of gRPC's and posenc's mutexes looks the mutex up
// in one process-wide graph under a global spin lock. That is a debugging aid, a few
// thousand instructions per call and a lock every thread shares; a serving process turns
// it off. The tests and the sanitizer builds keep it.
inline void TuneProcessForServing() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace posenc

#endif  // POSENC_SERVER_COMMON_PROCESS_TUNING_H_
