// posenc-client load: a closed-loop load generator. --concurrency threads each keep one
// call in flight, over --channels channels, drawing requests from a weighted --mix, until
// --duration passes or --max-requests calls have started; then it prints throughput,
// latency percentiles and the calls by gRPC code (--json: one JSON object).
// The pieces below are pure and thread-compatible (one thread per object); RunLoadCommand
// owns its threads and joins them before it returns.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace posenc::client {

extern const char kLoadUsage[];

// One kind of request in the mix: "sinusoidal:1,8,16*4" is kind "sinusoidal", dims
// {1,8,16}, weight 4 (the default weight is 1).
struct MixItem {
  std::string kind;
  std::vector<int64_t> dims;
  int weight = 1;
  std::string label;  // "sinusoidal:1,8,16", as printed
};

// Parses a mix ("KIND:DIMS[*WEIGHT];...") or a preset name (small, mixed, large).
// INVALID_ARGUMENT naming the item for an unknown kind, a wrong number of dims, a dim < 1
// or a weight outside [1, 1000].
absl::StatusOr<std::vector<MixItem>> ParseMix(absl::string_view text);

// The service config for --lb and --retry (empty when neither asks for anything).
// The retry policy retries UNAVAILABLE up to 5 attempts on every posenc.v1 method.
std::string LoadServiceConfig(const std::string& lb_policy, bool retry);

// Latencies in log-spaced buckets 2% wide, 1 us .. 100 s: bounded memory for any run
// length; a percentile is within 2% of the exact one.
class LatencyHistogram {
 public:
  void Add(absl::Duration latency);
  void Merge(const LatencyHistogram& other);
  int64_t count() const { return count_; }
  // q in [0, 1]; 0 when empty. Never above the largest latency seen.
  double PercentileMillis(double q) const;
  double MaxMillis() const { return max_us_ / 1000.0; }
  double MeanMillis() const { return count_ == 0 ? 0.0 : sum_us_ / count_ / 1000.0; }

 private:
  std::vector<int64_t> buckets_;
  int64_t count_ = 0;
  double sum_us_ = 0;
  double max_us_ = 0;
};

// The calls of one mix item, or of one worker thread over all items.
struct CallStats {
  int64_t calls = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  std::map<absl::StatusCode, int64_t> codes;
  std::map<absl::StatusCode, std::string> first_message;  // one error message per code
  LatencyHistogram latency;

  void Record(const absl::Status& status, absl::Duration elapsed, int64_t sent, int64_t received);
  void Merge(const CallStats& other);
  int64_t errors() const;
};

// args: the flags after "load". Exit code: 0 when every call was OK, 1 when a call failed
// or no channel connected, 2 for a usage error.
int RunLoadCommand(const std::vector<std::string>& args);

}  // namespace posenc::client
