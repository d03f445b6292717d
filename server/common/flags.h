// Command-line flags, one parser for posenc-server, posenc-client (each command) and
// posenc-bench: --name=value, --name value, or a bare --name for a boolean. A flag given
// twice keeps every value (All, for repeatable flags such as --table or --param); the
// other getters read the last. With an environment prefix, a flag absent from the command
// line is read from the environment variable prefix + its name in upper case
// (POSENC_CACHE_BYTES for --cache_bytes); the command line wins. Errors are INVALID_ARGUMENT
// naming the flag (and the variable, for a value that came from it), e.g.
// "--threads 'x' is not an integer in [0, 1024]"; the caller prints them and exits 2.
// Depends only on absl. Plain values; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace posenc {

// "10" (seconds), "10s", "500ms", "5m"; nullopt when it is none of these.
std::optional<absl::Duration> ParseDurationText(absl::string_view text);

class CommandFlags {
 public:
  struct Options {
    std::set<std::string> known;     // names as spelled after separator folding
    std::set<std::string> booleans;  // a bare --name means --name=true
    // When set, '-' and '_' in a name both become it (--max_requests == --max-requests).
    char separator = 0;
  };

  // The environment variable that can carry --name: "POSENC_CACHE_BYTES" for "cache_bytes".
  static std::string EnvName(const std::string& prefix, const std::string& name);

  // Every argument must be a flag in `options.known`: INVALID_ARGUMENT for "unexpected
  // argument 'x'", "unknown flag --x" and "--x needs a value". With a non-empty
  // `env_prefix`, every known flag the arguments leave out is looked up in the environment
  // as EnvName(env_prefix, name); an empty variable is the value "", and a repeatable flag
  // takes one value from there.
  static absl::StatusOr<CommandFlags> Parse(absl::Span<const std::string> args,
                                            const Options& options,
                                            const std::string& env_prefix = "");

  bool Has(const std::string& name) const { return values_.count(name) != 0; }
  std::string Str(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> All(const std::string& name) const;

  absl::StatusOr<std::optional<int64_t>> OptInt(const std::string& name) const;
  absl::StatusOr<std::optional<double>> OptDouble(const std::string& name) const;
  absl::StatusOr<int64_t> Int(const std::string& name, int64_t fallback) const;
  // A whole number >= 1, or fallback when absent.
  absl::StatusOr<int64_t> Count(const std::string& name, int64_t fallback) const;
  // In [lo, hi], or fallback when absent.
  absl::StatusOr<int64_t> IntIn(const std::string& name, int64_t lo, int64_t hi,
                                int64_t fallback) const;
  // true/false, 1/0, yes/no (any case); false when absent.
  absl::StatusOr<bool> Bool(const std::string& name) const;
  // A duration in [lo, hi] (lo_exclusive: (lo, hi]), or fallback when absent.
  absl::StatusOr<absl::Duration> Duration(const std::string& name, absl::Duration fallback,
                                          absl::Duration lo = absl::ZeroDuration(),
                                          absl::Duration hi = absl::InfiniteDuration(),
                                          bool lo_exclusive = false) const;
  // "2,16,64" (any of `separators` splits); empty when absent.
  absl::StatusOr<std::vector<int64_t>> IntList(const std::string& name,
                                               absl::string_view separators = ",x") const;
  absl::StatusOr<std::vector<double>> DoubleList(const std::string& name) const;

  // INVALID_ARGUMENT "--name 'value' is not <expected>".
  absl::Status Bad(const std::string& name, absl::string_view expected) const;

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::map<std::string, std::string> from_env_;  // flag name -> variable that set it
};

}  // namespace posenc
