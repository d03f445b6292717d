// What posenc-bench's parts share: options, timing, aligned buffers, fills and labels.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "server/tensor/dtype.h"

namespace posenc::bench {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double SecondsSince(Clock::time_point t);

struct Options {
  bool json = false;
  bool quick = false;
  bool kernels = true;
  bool e2e = true;
  int threads = 0;            // kernel threads, here and in posenc-server; 0 = cores
  double cell_seconds = 1.0;  // per e2e cell and round; 48 MiB cells get 2.5x
  // Each side keeps its best of these (e2e: posenc and the echo; kernels: the kernel and
  // its roofline, at least 2), so one noisy round hurts neither.
  int rounds = 3;
  std::string filter;  // kernel cases ("name dtype size") and e2e cells ("rpc payload xN")
  std::string server_binary;
  std::string echo_binary;
  std::string http_echo_binary;  // posenc-bench-http-echo, beside this binary
  // The kernel ISAs to run ("avx2", "avx512"); empty: every vector ISA this CPU has.
  std::string isa;
  std::string self_binary;  // this posenc-bench, for the child passes
  // With a target (host:port), only DriveTarget runs: `calls` calls per selected cell.
  std::string target;
  int64_t calls = 1000;
  // End to end only, both sides posenc-bench-echo (two processes): what the machine's noise
  // alone does to the ratios and targets, the floor any server can be judged against.
  bool echo_vs_echo = false;
};

// A 64-byte aligned, uninitialised byte buffer.
class Buffer {
 public:
  explicit Buffer(size_t bytes)
      : bytes_(bytes),
        data_(static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)), &std::free) {}
  void* data() const { return data_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
  std::unique_ptr<char, decltype(&std::free)> data_;
};

void FillFloats(void* p, DType dtype, size_t n, float value);

// Best wall time of `fn` over at least min_reps runs (after one warm-up run), continuing
// while under budget_s and max_reps. `prepare`, if given, runs before each run, untimed
// (its time still counts against budget_s).
double BestSeconds(const std::function<void()>& fn, double budget_s, int min_reps = 3,
                   int max_reps = 1000000, const std::function<void()>& prepare = nullptr);

// "fp32", "fp16", "bf16".
const char* DTypeLabel(DType t);
// "64 KiB", "48 MiB".
std::string PayloadLabel(size_t bytes);
// Exits the bench with a message naming `what` unless status is OK.
void Check(const absl::Status& status, const std::string& what);

}  // namespace posenc::bench
