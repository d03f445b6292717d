#include "server/common/flags.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace posenc {

std::optional<absl::Duration> ParseDurationText(absl::string_view text) {
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds)) return absl::Seconds(seconds);
  absl::Duration d;
  if (absl::ParseDuration(text, &d)) return d;
  return std::nullopt;
}

absl::StatusOr<CommandFlags> CommandFlags::Parse(absl::Span<const std::string> args,
                                                 const Options& options,
                                                 const std::string& env_prefix) {
  CommandFlags flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    if (options.separator != 0) {
      std::replace_if(
          name.begin(), name.end(), [](char c) { return c == '-' || c == '_'; }, options.separator);
    }
    if (options.known.count(name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (!value) {
      if (options.booleans.count(name) != 0) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
    }
    flags.values_[name].push_back(*std::move(value));
  }
  if (!env_prefix.empty()) {
    for (const std::string& name : options.known) {
      if (flags.Has(name)) continue;
      const std::string variable = EnvName(env_prefix, name);
      const char* value = std::getenv(variable.c_str());
      if (value == nullptr) continue;
      flags.values_[name].push_back(value);
      flags.from_env_[name] = variable;
    }
  }
  return flags;
}

std::string CommandFlags::EnvName(const std::string& prefix, const std::string& name) {
  std::string variable = absl::StrCat(prefix, absl::AsciiStrToUpper(name));
  std::replace(variable.begin(), variable.end(), '-', '_');
  return variable;
}

std::string CommandFlags::Str(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second.back();
}

std::vector<std::string> CommandFlags::All(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>() : it->second;
}

absl::Status CommandFlags::Bad(const std::string& name, absl::string_view expected) const {
  auto env = from_env_.find(name);
  const std::string source = env == from_env_.end() ? absl::StrCat("--", name)
                                                    : absl::StrCat(env->second, " (--", name, ")");
  return absl::InvalidArgumentError(absl::StrCat(source, " '", Str(name), "' is not ", expected));
}

absl::StatusOr<std::optional<int64_t>> CommandFlags::OptInt(const std::string& name) const {
  if (!Has(name)) return std::optional<int64_t>();
  int64_t v;
  if (!absl::SimpleAtoi(Str(name), &v)) return Bad(name, "an integer");
  return std::optional<int64_t>(v);
}

absl::StatusOr<std::optional<double>> CommandFlags::OptDouble(const std::string& name) const {
  if (!Has(name)) return std::optional<double>();
  double v;
  if (!absl::SimpleAtod(Str(name), &v)) return Bad(name, "a number");
  return std::optional<double>(v);
}

absl::StatusOr<int64_t> CommandFlags::Int(const std::string& name, int64_t fallback) const {
  absl::StatusOr<std::optional<int64_t>> v = OptInt(name);
  if (!v.ok()) return v.status();
  return v->value_or(fallback);
}

absl::StatusOr<int64_t> CommandFlags::Count(const std::string& name, int64_t fallback) const {
  if (!Has(name)) return fallback;
  int64_t v;
  if (!absl::SimpleAtoi(Str(name), &v) || v < 1) return Bad(name, "a positive whole number");
  return v;
}

absl::StatusOr<int64_t> CommandFlags::IntIn(const std::string& name, int64_t lo, int64_t hi,
                                            int64_t fallback) const {
  if (!Has(name)) return fallback;
  int64_t v;
  if (!absl::SimpleAtoi(Str(name), &v) || v < lo || v > hi) {
    return Bad(name, absl::StrCat("an integer in [", lo, ", ", hi, "]"));
  }
  return v;
}

absl::StatusOr<bool> CommandFlags::Bool(const std::string& name) const {
  if (!Has(name)) return false;
  const std::string v = absl::AsciiStrToLower(Str(name));
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  return Bad(name, "true or false");
}

absl::StatusOr<absl::Duration> CommandFlags::Duration(const std::string& name,
                                                      absl::Duration fallback, absl::Duration lo,
                                                      absl::Duration hi, bool lo_exclusive) const {
  if (!Has(name)) return fallback;
  const std::optional<absl::Duration> d = ParseDurationText(Str(name));
  if (!d) return Bad(name, "a duration (10s, 500ms, 5m)");
  if ((lo_exclusive ? *d <= lo : *d < lo) || *d > hi) {
    return Bad(name, absl::StrCat("a duration in ", lo_exclusive ? "(" : "[",
                                  absl::FormatDuration(lo), ", ", absl::FormatDuration(hi),
                                  hi == absl::InfiniteDuration() ? ")" : "]"));
  }
  return *d;
}

absl::StatusOr<std::vector<int64_t>> CommandFlags::IntList(const std::string& name,
                                                           absl::string_view separators) const {
  std::vector<int64_t> out;
  if (!Has(name)) return out;
  for (absl::string_view part :
       absl::StrSplit(Str(name), absl::ByAnyChar(separators), absl::SkipEmpty())) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v)) return Bad(name, "a comma-separated list of integers");
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::vector<double>> CommandFlags::DoubleList(const std::string& name) const {
  std::vector<double> out;
  if (!Has(name)) return out;
  for (absl::string_view part : absl::StrSplit(Str(name), ',', absl::SkipEmpty())) {
    double v;
    if (!absl::SimpleAtod(part, &v)) return Bad(name, "a comma-separated list of numbers");
    out.push_back(v);
  }
  return out;
}

}  // namespace posenc
