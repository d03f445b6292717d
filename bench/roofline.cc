#include "bench/roofline.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "server/kernels/threads.h"

namespace posenc::bench {
namespace {

void RmwScalar(float* x, size_t n, float a, float b) {
  for (size_t i = 0; i < n; ++i) x[i] = x[i] * a + b;
}

__attribute__((target("avx2,fma"))) void RmwAvx2(float* x, size_t n, float a, float b) {
  const __m256 va = _mm256_set1_ps(a);
  const __m256 vb = _mm256_set1_ps(b);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {  // four independent vectors per step
    _mm256_storeu_ps(x + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), va, vb));
    _mm256_storeu_ps(x + i + 8, _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), va, vb));
    _mm256_storeu_ps(x + i + 16, _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), va, vb));
    _mm256_storeu_ps(x + i + 24, _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), va, vb));
  }
  RmwScalar(x + i, n - i, a, b);
}

// x = b over n floats with streaming stores, or plain ones: the write-only baseline for the
// bias builds, which only write (and stream their stores from 8 MiB up).
__attribute__((target("avx2"))) void WriteAvx2(float* x, size_t n, float, float b) {
  const __m256 vb = _mm256_set1_ps(b);
  size_t i = 0;
  for (; i < n && (reinterpret_cast<uintptr_t>(x + i) & 31) != 0; ++i) x[i] = b;
  for (; i + 8 <= n; i += 8) _mm256_stream_ps(x + i, vb);
  for (; i < n; ++i) x[i] = b;
  _mm_sfence();
}

__attribute__((target("avx2"))) void WritePlainAvx2(float* x, size_t n, float, float b) {
  const __m256 vb = _mm256_set1_ps(b);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm256_storeu_ps(x + i, vb);
    _mm256_storeu_ps(x + i + 8, vb);
    _mm256_storeu_ps(x + i + 16, vb);
    _mm256_storeu_ps(x + i + 24, vb);
  }
  for (; i < n; ++i) x[i] = b;
}

void WriteScalar(float* x, size_t n, float, float b) { std::fill_n(x, n, b); }

// Sums n floats into a sink the compiler cannot drop: the read-only baseline for the scans.
float g_read_sink = 0;

void ReadScalar(float* x, size_t n, float, float) {
  float sum = 0;
  for (size_t i = 0; i < n; ++i) sum += x[i];
  g_read_sink += sum;
}

__attribute__((target("avx2"))) void ReadAvx2(float* x, size_t n, float, float) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {  // four independent loads per step
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(x + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(x + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(x + i + 24));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (float lane : lanes) g_read_sink += lane;
  ReadScalar(x + i, n - i, 0, 0);
}

// x = x*a + b over n floats split across `threads` kernel threads (ParallelFor, as the
// kernels split theirs) in contiguous chunks of whole 64-byte blocks.
// pass: 0 the read-modify-write, 1 write-only with streaming stores, 2 with plain stores,
// 3 read-only.
void Rmw(float* x, size_t n, float a, float b, int threads, int pass = 0) {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  auto run = pass == 0   ? (avx2 ? RmwAvx2 : RmwScalar)
             : pass == 3 ? (avx2 ? ReadAvx2 : ReadScalar)
             : !avx2     ? WriteScalar
             : pass == 1 ? WriteAvx2
                         : WritePlainAvx2;
  const auto blocks = static_cast<int64_t>((n + 15) / 16);
  ParallelFor(threads, blocks, [&](int64_t first, int64_t last) {
    const size_t begin = static_cast<size_t>(first) * 16;
    run(x + begin, std::min(n, static_cast<size_t>(last) * 16) - begin, a, b);
  });
}

}  // namespace

void Roofline::ReadWritePass(void* x, size_t bytes) {
  Rmw(static_cast<float*>(x), bytes / sizeof(float), 0.5f, 0.5f, KernelThreads());
}

double Roofline::Gbps(size_t bytes, double budget_s, RooflineKind kind,
                      const std::function<void()>& prepare) {
  auto& buffer = buffers_[bytes];
  if (!buffer) {
    buffer = std::make_unique<Buffer>(bytes);
    std::fill_n(static_cast<float*>(buffer->data()), bytes / sizeof(float), 1.0f);
  }
  const size_t n = bytes / sizeof(float);
  auto* x = static_cast<float*>(buffer->data());
  const std::vector<int> passes = kind == RooflineKind::kWriteOnly  ? std::vector<int>{1, 2}
                                  : kind == RooflineKind::kReadOnly ? std::vector<int>{3}
                                                                    : std::vector<int>{0};
  double best_s = 1e30;
  for (int threads : {1, KernelThreads()}) {
    for (int pass : passes) {
      // a, b keep values bounded: x -> 0.5x + 0.5 converges to 1.
      best_s = std::min(best_s, BestSeconds([&] { Rmw(x, n, 0.5f, 0.5f, threads, pass); }, budget_s,
                                            3, 1000000, prepare));
    }
    if (KernelThreads() == 1) break;
  }
  const double sides = kind == RooflineKind::kReadWrite ? 2.0 : 1.0;
  return sides * static_cast<double>(bytes) / best_s / 1e9;
}

}  // namespace posenc::bench
