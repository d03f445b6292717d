#include "server/service/positions_json.h"

#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/util/json_util.h"

namespace posenc {
namespace {

// A cursor over the JSON text for the direct reading. Every method returns false when the
// text is not of the common shape; the caller then leaves the text to protobuf.
class Scanner {
 public:
  explicit Scanner(absl::string_view text) : rest_(text) {}

  void SkipSpace() {
    while (!rest_.empty() &&
           (rest_[0] == ' ' || rest_[0] == '\t' || rest_[0] == '\n' || rest_[0] == '\r')) {
      rest_.remove_prefix(1);
    }
  }
  bool Take(char c) {
    SkipSpace();
    if (rest_.empty() || rest_[0] != c) return false;
    rest_.remove_prefix(1);
    return true;
  }
  bool Peek(char c) {
    SkipSpace();
    return !rest_.empty() && rest_[0] == c;
  }
  bool AtEnd() {
    SkipSpace();
    return rest_.empty();
  }
  // A key: a quoted string without escapes.
  bool Key(absl::string_view* key) {
    if (!Take('"')) return false;
    const size_t close = rest_.find('"');
    if (close == absl::string_view::npos) return false;
    *key = rest_.substr(0, close);
    rest_.remove_prefix(close + 1);
    return true;
  }
  // An int64 the way protobuf's JSON parser reads one from a JSON integer or a decimal
  // string; false for any other spelling (a fraction, an exponent, a sign on a quoted
  // number's digits other than '-', spaces inside quotes, leading zeros).
  bool Int64(int64_t* out) {
    SkipSpace();
    const bool quoted = !rest_.empty() && rest_[0] == '"';
    if (quoted) rest_.remove_prefix(1);
    size_t n = 0;
    if (n < rest_.size() && rest_[n] == '-') ++n;
    const size_t first_digit = n;
    while (n < rest_.size() && rest_[n] >= '0' && rest_[n] <= '9') ++n;
    const size_t digits = n - first_digit;
    if (digits == 0 || digits > 19 || (digits > 1 && rest_[first_digit] == '0')) return false;
    const absl::string_view number = rest_.substr(0, n);
    rest_.remove_prefix(n);
    if (quoted) {
      if (rest_.empty() || rest_[0] != '"') return false;
      rest_.remove_prefix(1);
    } else if (!rest_.empty() && (rest_[0] == '.' || rest_[0] == 'e' || rest_[0] == 'E')) {
      return false;
    }
    return absl::SimpleAtoi(number, out);
  }

 private:
  absl::string_view rest_;
};

// A list of integers into `field`.
bool ReadList(Scanner& in, google::protobuf::RepeatedField<int64_t>* field) {
  if (!in.Take('[')) return false;
  if (in.Take(']')) return true;
  do {
    int64_t v = 0;
    if (!in.Int64(&v)) return false;
    field->Add(v);
  } while (in.Take(','));
  return in.Take(']');
}

// The direct reading, in place (a swap with a message of another arena would copy it);
// false when the JSON is not of the common shape (nothing is decided, `positions` is left
// partly read). Escapes could spell a key another way ("\u006fffsets"): protobuf's reading
// decides those.
bool ReadCommonShape(const std::string& json, v1::Positions& positions) {
  if (absl::StrContains(json, '\\')) return false;
  Scanner in(json);
  positions.Clear();
  bool seen_offsets = false, seen_ids = false;
  if (!in.Take('{')) return false;
  if (!in.Peek('}')) {
    do {
      absl::string_view key;
      if (!in.Key(&key) || !in.Take(':')) return false;
      google::protobuf::RepeatedField<int64_t>* field = nullptr;
      // A key given twice is left to protobuf, whose reading of it is its own.
      if (key == "offsets" && !seen_offsets) {
        seen_offsets = true;
        field = positions.mutable_offsets();
      } else if (key == "ids" && !seen_ids) {
        seen_ids = true;
        field = positions.mutable_ids();
      } else {
        return false;
      }
      if (!ReadList(in, field)) return false;
    } while (in.Take(','));
  }
  return in.Take('}') && in.AtEnd();
}

}  // namespace

namespace positions_json_internal {
bool ReadsDirectly(const std::string& json) {
  v1::Positions positions;
  return ReadCommonShape(json, positions);
}
}  // namespace positions_json_internal

absl::Status ParsePositionsJson(const std::string& json, v1::Positions& positions) {
  if (ReadCommonShape(json, positions)) return absl::OkStatus();
  positions.Clear();
  const auto status = google::protobuf::util::JsonStringToMessage(json, &positions);
  if (status.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(std::string(status.message()));
}

}  // namespace posenc
