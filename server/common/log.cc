#include "server/common/log.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace posenc {
namespace {

std::atomic<LogFormat> g_format{LogFormat::kText};

const char* LevelName(LogLevel level, bool json) {
  switch (level) {
    case LogLevel::kInfo: return json ? "info" : "INFO";
    case LogLevel::kWarning: return json ? "warn" : "WARN";
    case LogLevel::kError: return json ? "error" : "ERROR";
  }
  return "INFO";
}

// JSON string escaping; text values with spaces or quotes get the same treatment.
std::string Quote(absl::string_view v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out, "\\u00", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

bool NeedsQuotes(absl::string_view v) {
  if (v.empty()) return true;
  for (char c : v) {
    if (c == ' ' || c == '"' || c == '=' || static_cast<unsigned char>(c) < 0x20) return true;
  }
  return false;
}

}  // namespace

void SetLogFormat(LogFormat format) { g_format.store(format); }

bool ParseLogFormat(absl::string_view name, LogFormat* format) {
  if (name == "text") {
    *format = LogFormat::kText;
  } else if (name == "json") {
    *format = LogFormat::kJson;
  } else {
    return false;
  }
  return true;
}

void Log(LogLevel level, absl::string_view event, std::initializer_list<LogField> fields) {
  const bool json = g_format.load() == LogFormat::kJson;
  const std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  std::string line;
  if (json) {
    line = absl::StrCat("{\"ts\":\"", ts, "\",\"level\":\"", LevelName(level, true),
                        "\",\"event\":", Quote(event));
    for (const LogField& f : fields) {
      absl::StrAppend(&line, ",", Quote(f.key), ":", f.number ? f.value : Quote(f.value));
    }
    line += "}\n";
  } else {
    line = absl::StrCat(ts, " ", LevelName(level, false), " ", event);
    for (const LogField& f : fields) {
      absl::StrAppend(&line, " ", f.key, "=", NeedsQuotes(f.value) ? Quote(f.value) : f.value);
    }
    line += "\n";
  }
  // One write per line: lines from different threads never interleave.
  const ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

bool LogRateLimiter::Allow(int64_t* suppressed) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - window_start_ >= std::chrono::seconds(1)) {
    window_start_ = now;
    in_window_ = 0;
  }
  if (in_window_ >= per_second_) {
    ++suppressed_;
    return false;
  }
  ++in_window_;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

}  // namespace posenc
