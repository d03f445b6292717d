#include "server/service/positions_json.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace posenc {
namespace {

// An int64 the way protobuf's JSON parser reads one from a JSON integer or a decimal string;
// false for any other spelling (a fraction, an exponent, a sign on a string, spaces), which
// is left to protobuf to accept or refuse.
bool ReadInt64(const nlohmann::json& value, int64_t* out) {
  if (value.is_number_integer() && !value.is_number_unsigned()) {
    *out = value.get<int64_t>();
    return true;
  }
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (!value.is_string()) return false;
  const std::string& s = value.get_ref<const std::string&>();
  const absl::string_view digits = !s.empty() && s[0] == '-' ? absl::string_view(s).substr(1) : s;
  if (digits.empty() || digits.size() > 19 || (digits.size() > 1 && digits[0] == '0')) return false;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(s, out);
}

// The direct reading; false when the JSON is not of the common shape (nothing is decided).
bool ReadCommonShape(const std::string& json, v1::Positions& positions) {
  nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return false;
  v1::Positions read;
  for (auto it = doc.cbegin(); it != doc.cend(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& list = it.value();
    google::protobuf::RepeatedField<int64_t>* field = nullptr;
    if (key == "offsets") {
      field = read.mutable_offsets();
    } else if (key == "ids") {
      field = read.mutable_ids();
    } else {
      return false;
    }
    // nlohmann keeps the last of repeated keys; protobuf's reading of them is its own.
    const std::string quoted = "\"" + key + "\"";
    const size_t first = json.find(quoted);
    if (first == std::string::npos || json.find(quoted, first + 1) != std::string::npos) {
      return false;
    }
    if (!list.is_array()) return false;
    field->Reserve(static_cast<int>(list.size()));
    for (const nlohmann::json& value : list) {
      int64_t v = 0;
      if (!ReadInt64(value, &v)) return false;
      field->Add(v);
    }
  }
  positions.Swap(&read);
  return true;
}

}  // namespace

absl::Status ParsePositionsJson(const std::string& json, v1::Positions& positions) {
  // Escapes could spell a key another way ("\u006fffsets"): protobuf's reading decides.
  if (!absl::StrContains(json, '\\') && ReadCommonShape(json, positions)) {
    return absl::OkStatus();
  }
  positions.Clear();
  const auto status = google::protobuf::util::JsonStringToMessage(json, &positions);
  if (status.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(std::string(status.message()));
}

}  // namespace posenc
