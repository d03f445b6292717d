#include "bench/bench_common.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace posenc::bench {

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void FillFloats(void* p, DType dtype, size_t n, float value) {
  if (dtype == DType::kInt32) {  // ids: written, never read
    std::fill_n(static_cast<int32_t*>(p), n, 0);
  } else if (dtype == DType::kFloat32) {
    std::fill_n(static_cast<float*>(p), n, value);
  } else {
    const uint16_t v = dtype == DType::kFloat16 ? FloatToHalf(value) : FloatToBFloat16(value);
    std::fill_n(static_cast<uint16_t*>(p), n, v);
  }
}

double BestSeconds(const std::function<void()>& fn, double budget_s, int min_reps, int max_reps,
                   const std::function<void()>& prepare) {
  if (prepare) prepare();
  fn();  // warm-up: tables, primitives, page faults
  double best = 1e30;
  const Clock::time_point start = Clock::now();
  for (int rep = 0; rep < max_reps; ++rep) {
    if (prepare) prepare();
    const Clock::time_point t = Clock::now();
    fn();
    best = std::min(best, SecondsSince(t));
    if (rep + 1 >= min_reps && SecondsSince(start) > budget_s) break;
  }
  return best;
}

const char* DTypeLabel(DType t) {
  switch (t) {
    case DType::kFloat32: return "fp32";
    case DType::kFloat16: return "fp16";
    case DType::kBFloat16: return "bf16";
    case DType::kInt32: return "i32";
    default: return "?";
  }
}

void Check(const absl::Status& status, const std::string& what) {
  if (!status.ok()) {
    std::fprintf(stderr, "posenc-bench: %s failed: %s\n", what.c_str(),
                 std::string(status.message()).c_str());
    std::exit(1);
  }
}

std::string PayloadLabel(size_t bytes) {
  return bytes >= (1 << 20) ? absl::StrCat(bytes >> 20, " MiB") : absl::StrCat(bytes >> 10, " KiB");
}

}  // namespace posenc::bench
