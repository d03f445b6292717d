#include "server/kernels/threads.h"

#include <omp.h>

#include <algorithm>
#include <thread>

namespace posenc {

void SetKernelThreads(int n) {
  if (n < 1) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  omp_set_num_threads(n);
}

int KernelThreads() { return omp_get_max_threads(); }

}  // namespace posenc
