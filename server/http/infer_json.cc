#include "server/http/infer_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "server/common/status_macros.h"
#include "server/tensor/dtype.h"

namespace posenc {
namespace {

using nlohmann::json;

// Nested "data" arrays deeper than this are refused (tensors here have at most 5 axes).
constexpr int kMaxDataDepth = 32;
// Arrays and objects a request body may nest (the "data" arrays are bounded tighter above).
constexpr int kMaxJsonDepth = 64;

enum class Kind { kFloat, kSigned, kUnsigned, kBool };

struct Datatype {
  const char* name;
  size_t bytes;
  Kind kind;
};

constexpr Datatype kDatatypes[] = {{"BOOL", 1, Kind::kBool},       {"UINT8", 1, Kind::kUnsigned},
                                   {"UINT16", 2, Kind::kUnsigned}, {"UINT32", 4, Kind::kUnsigned},
                                   {"UINT64", 8, Kind::kUnsigned}, {"INT8", 1, Kind::kSigned},
                                   {"INT16", 2, Kind::kSigned},    {"INT32", 4, Kind::kSigned},
                                   {"INT64", 8, Kind::kSigned},    {"FP16", 2, Kind::kFloat},
                                   {"BF16", 2, Kind::kFloat},      {"FP32", 4, Kind::kFloat},
                                   {"FP64", 8, Kind::kFloat}};

const Datatype* FindDatatype(absl::string_view name) {
  for (const Datatype& d : kDatatypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; the rest is useful.
std::string ParseErrorText(const char* what) {
  absl::string_view text(what);
  if (!text.empty() && text[0] == '[') {
    const size_t end = text.find("] ");
    if (end != absl::string_view::npos) text.remove_prefix(end + 2);
  }
  return std::string(text);
}

// A JSON string literal; bytes that are not UTF-8 become U+FFFD.
std::string Quote(absl::string_view text) {
  return json(std::string(text)).dump(-1, ' ', false, json::error_handler_t::replace);
}

// ---- The request body: one SAX pass, no document ----
//
// The handler below builds the request while nlohmann's (iterative) SAX parser reads the
// body: tensors go straight into their bytes, and what it keeps besides is what the request
// holds. Nothing recurses per level of nesting. Errors are kept, not returned, until the
// body has been read: a body that is not valid JSON is reported as such wherever it breaks,
// and the other errors are then checked in the order of the request's fields (request.id,
// parameters, inputs[0..], the binary part, outputs[0..]), as a document would be walked.
//
// Duplicate keys: the last one wins, in every object (as nlohmann::json's document does).

enum class JKind { kNull, kBool, kInt, kUint, kFloat, kString, kObject, kArray };

const char* TypeName(JKind kind) {
  switch (kind) {
    case JKind::kNull: return "null";
    case JKind::kBool: return "boolean";
    case JKind::kString: return "string";
    case JKind::kObject: return "object";
    case JKind::kArray: return "array";
    default: return "number";
  }
}

// One value as the SAX parser reports it; objects and arrays by their kind alone. Integers
// >= 0 are kUint, negative ones kInt (as nlohmann's number_unsigned / number_integer).
struct Scalar {
  JKind kind = JKind::kNull;
  bool b = false;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  std::string* s = nullptr;

  bool IsNumber() const { return IsInteger() || kind == JKind::kFloat; }
  bool IsInteger() const { return kind == JKind::kInt || kind == JKind::kUint; }
  double AsDouble() const {
    if (kind == JKind::kInt) return static_cast<double>(i);
    return kind == JKind::kUint ? static_cast<double>(u) : d;
  }
  int64_t AsInt64() const { return kind == JKind::kUint ? static_cast<int64_t>(u) : i; }
  uint64_t AsUint64() const { return kind == JKind::kUint ? u : static_cast<uint64_t>(i); }
};

Scalar Container(JKind kind) {
  Scalar v;
  v.kind = kind;
  return v;
}
Scalar BoolScalar(bool b) {
  Scalar v = Container(JKind::kBool);
  v.b = b;
  return v;
}
Scalar IntScalar(int64_t i) {
  Scalar v = Container(JKind::kInt);
  v.i = i;
  return v;
}
Scalar UintScalar(uint64_t u) {
  Scalar v = Container(JKind::kUint);
  v.u = u;
  return v;
}
Scalar FloatScalar(double d) {
  Scalar v = Container(JKind::kFloat);
  v.d = d;
  return v;
}

// The bytes a parse holds besides the body, as the handler counts them: tensors at their
// reserve, shapes, kept strings, parameter text and its bookkeeping, and the lexer's token
// buffer (up to twice the longest string). Past what was charged, `budget` is asked for more.
class Meter {
 public:
  explicit Meter(const ParseBudget* budget)
      : budget_(budget), charged_(budget ? budget->charged : 0) {}
  void Add(uint64_t n) { live_ += n; }
  void Sub(uint64_t n) { live_ -= std::min(live_, n); }
  void Token(size_t n) { token_ = std::max<uint64_t>(token_, 2 * uint64_t{n}); }
  // False when the budget refused what the parse holds now (status() says why).
  bool Check() {
    const uint64_t held = live_ + token_;
    peak_ = std::max(peak_, held);
    if (budget_ == nullptr || held <= charged_ || !status_.ok()) return status_.ok();
    const uint64_t more = held - charged_ + (uint64_t{1} << 20);  // in steps of 1 MiB at least
    status_ = budget_->grow ? budget_->grow(more) : absl::OkStatus();
    if (status_.ok()) charged_ += more;
    return status_.ok();
  }
  const absl::Status& status() const { return status_; }
  uint64_t peak() const { return peak_; }

 private:
  const ParseBudget* budget_;
  uint64_t charged_;
  uint64_t live_ = 0;
  uint64_t token_ = 0;
  uint64_t peak_ = 0;
  absl::Status status_;
};

// An error of "data[index]" (the message's tail after the input's name).
absl::Status OutOfRange(int64_t index, const char* type) {
  return absl::InvalidArgumentError(absl::StrCat(".data[", index, "] is out of range for ", type));
}

// A JSON number as the little-endian bytes of a floating-point `type` in `buf`.
absl::Status FloatElement(const Scalar& v, const Datatype& type, int64_t index, char* buf) {
  if (!v.IsNumber()) {
    return absl::InvalidArgumentError(
        absl::StrCat(".data[", index, "] is ", TypeName(v.kind), ", not a number"));
  }
  const double d = v.AsDouble();
  const float f = static_cast<float>(d);
  if (!std::isfinite(d) || (type.bytes < 8 && !std::isfinite(f)))
    return OutOfRange(index, type.name);
  if (type.bytes == 8) {
    std::memcpy(buf, &d, 8);
  } else if (type.bytes == 4) {
    std::memcpy(buf, &f, 4);
  } else {
    const bool bf16 = std::string_view(type.name) == "BF16";
    const uint16_t h = bf16 ? FloatToBFloat16(f) : FloatToHalf(f);
    if (!bf16 && !std::isfinite(HalfToFloat(h))) return OutOfRange(index, "FP16");
    std::memcpy(buf, &h, 2);
  }
  return absl::OkStatus();
}

// A JSON integer as the little-endian bytes of an integer `type` in `buf`.
absl::Status IntegerElement(const Scalar& v, const Datatype& type, int64_t index, char* buf) {
  if (!v.IsInteger()) {
    return absl::InvalidArgumentError(
        absl::StrCat(".data[", index, "] is ", v.IsNumber() ? "not an integer" : TypeName(v.kind),
                     "; ", type.name, " needs integers"));
  }
  const int bits = static_cast<int>(type.bytes) * 8;
  uint64_t raw = 0;
  if (type.kind == Kind::kUnsigned) {
    const bool negative = v.kind == JKind::kInt && v.i < 0;
    const uint64_t u = negative ? 0 : v.AsUint64();
    if (negative || (bits < 64 && u >> bits != 0)) return OutOfRange(index, type.name);
    raw = u;
  } else {
    if (v.kind == JKind::kUint &&
        v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return OutOfRange(index, type.name);
    }
    const int64_t s = v.AsInt64();
    if (bits < 64 && (s < -(int64_t{1} << (bits - 1)) || s >= (int64_t{1} << (bits - 1)))) {
      return OutOfRange(index, type.name);
    }
    raw = static_cast<uint64_t>(s);
  }
  std::memcpy(buf, &raw, type.bytes);  // little-endian host
  return absl::OkStatus();
}

// One element as little-endian bytes of `type` in `buf` (type.bytes of it).
absl::Status ToElement(const Scalar& v, const Datatype& type, int64_t index, char* buf) {
  switch (type.kind) {
    case Kind::kBool:
      if (v.kind != JKind::kBool) {
        return absl::InvalidArgumentError(
            absl::StrCat(".data[", index, "] must be true or false for BOOL"));
      }
      buf[0] = v.b ? 1 : 0;
      return absl::OkStatus();
    case Kind::kFloat: return FloatElement(v, type, index, buf);
    case Kind::kSigned:
    case Kind::kUnsigned: break;
  }
  return IntegerElement(v, type, index, buf);
}

// "data" (flat, or nested row-major as KServe allows) into `bytes` as its events arrive,
// from the data array's own start to its end: exactly `count` elements of `type`, arrays
// nested at most kMaxDataDepth deep. The first error is kept as the message's tail after the
// input's name ("what"); past it, events are only counted.
class DataWriter {
 public:
  // `span` is an upper bound on the bytes of JSON the data takes: every element takes a
  // character and a ',' or ']' after it, so the reserve needs no more than span / 2 of them.
  DataWriter(const Datatype& type, int64_t count, size_t span, std::string& bytes, Meter& meter)
      : type_(type), count_(count), bytes_(bytes) {
    const uint64_t elements = std::min<uint64_t>(static_cast<uint64_t>(count), span / 2);
    bytes_.clear();
    bytes_.reserve(static_cast<size_t>(elements * type.bytes));
    meter.Add(bytes_.capacity());
  }
  void Start(JKind kind) {
    if (skip_ > 0 || kind == JKind::kObject) {  // an object element, or inside one
      if (skip_++ == 0) Element(Container(JKind::kObject));
      return;
    }
    if (depth_ >= kMaxDataDepth && error_.empty()) {
      error_ = absl::StrCat(".data is nested deeper than ", kMaxDataDepth, " arrays");
    }
    ++depth_;
  }
  void End() {
    if (skip_ > 0) {
      --skip_;
    } else if (--depth_ == 0 && error_.empty() && n_ != count_) {
      error_ = absl::StrCat(".data has ", n_, " elements; its shape holds ", count_);
    }
  }
  void Value(const Scalar& v) {
    if (skip_ == 0) Element(v);
  }
  const std::string& error() const { return error_; }

 private:
  void Element(const Scalar& v) {
    if (!error_.empty()) return;
    if (n_ == count_) {
      error_ = absl::StrCat(".data has more than the ", count_, " elements its shape holds");
      return;
    }
    char buf[8];
    const absl::Status status = ToElement(v, type_, n_, buf);
    if (!status.ok()) {
      error_ = std::string(status.message());
      return;
    }
    bytes_.append(buf, type_.bytes);
    ++n_;
  }

  const Datatype& type_;
  const int64_t count_;
  std::string& bytes_;
  int depth_ = 0;  // data arrays open, the data itself included
  int skip_ = 0;   // containers open inside an object element
  int64_t n_ = 0;
  std::string error_;
};

// "shape" from its own start to its end: dimensions >= 0 whose product stays bounded (no
// tensor of a body can hold more elements than the body has bytes, except the empty ones).
class ShapeReader {
 public:
  void Start() {
    if (depth_++ == 1) Element(Container(JKind::kArray));  // a container as a dimension
  }
  void End() { --depth_; }
  void Value(const Scalar& v, Meter& meter) {
    if (depth_ != 1) return;
    Element(v);
    meter.Add(sizeof(int64_t));
  }
  const std::string& error() const { return error_; }
  int64_t count() const { return count_; }
  const std::vector<int64_t>& dims() const { return dims_; }

 private:
  void Element(const Scalar& v) {
    const size_t i = index_++;
    if (!error_.empty()) return;
    if (!v.IsInteger() || (v.kind == JKind::kInt && v.i < 0)) {
      error_ = absl::StrCat(".shape[", i, "] must be an integer >= 0");
      return;
    }
    const uint64_t d = v.AsUint64();
    if (d > (uint64_t{1} << 40) ||
        (count_ > 0 && d > 0 && static_cast<uint64_t>(count_) > (uint64_t{1} << 48) / d)) {
      error_ = ".shape has more elements than any request can carry";
      return;
    }
    count_ *= static_cast<int64_t>(d);
    dims_.push_back(static_cast<int64_t>(d));
  }

  int depth_ = 0;
  size_t index_ = 0;
  int64_t count_ = 1;
  std::vector<int64_t> dims_;
  std::string error_;
};

// An object or array parameter's JSON text exactly as nlohmann::json's dump() writes it
// (compact; object keys in byte order, the last of duplicate keys), with a stack of open
// containers rather than recursion.
class ParamText {
 public:
  explicit ParamText(Meter& meter) : meter_(meter) {}
  void Start(bool object) {
    frames_.emplace_back();
    frames_.back().object = object;
    if (!object) frames_.back().text = "[";
  }
  void Key(std::string& key) { frames_.back().key = std::move(key); }
  void Value(const Scalar& v) {
    switch (v.kind) {
      case JKind::kNull: return Append("null");
      case JKind::kBool: return Append(v.b ? "true" : "false");
      case JKind::kInt: return Append(absl::StrCat(v.i));
      case JKind::kUint: return Append(absl::StrCat(v.u));
      case JKind::kFloat: return Append(json(v.d).dump());
      case JKind::kString: return Append(json(std::move(*v.s)).dump());
      default: return;
    }
  }
  // Closes the innermost container; true, with the whole text in `done`, at the outermost.
  bool End(std::string& done) {
    Frame frame = std::move(frames_.back());
    frames_.pop_back();
    meter_.Sub(frame.held);
    std::string text = Close(frame);
    if (!frames_.empty()) {
      Append(std::move(text));
      return false;
    }
    done = std::move(text);
    return true;
  }

 private:
  struct Frame {
    bool object = false;
    std::string text;  // arrays: "[" and the elements so far
    std::vector<std::pair<std::string, std::string>> members;  // objects: key, value text
    std::string key;
    uint64_t held = 0;
  };

  void Append(std::string text) {
    Frame& f = frames_.back();
    const uint64_t n = text.size() + f.key.size() + 2 * sizeof(std::string);
    f.held += n;
    meter_.Add(n);
    if (f.object) {
      f.members.emplace_back(std::move(f.key), std::move(text));
      return;
    }
    if (f.text.size() > 1) f.text.push_back(',');
    f.text.append(text);
  }
  static std::string Close(Frame& f) {
    if (!f.object) return std::move(f.text.append("]"));
    std::stable_sort(f.members.begin(), f.members.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::string text = "{";
    for (size_t i = 0; i < f.members.size(); ++i) {
      if (i + 1 < f.members.size() && f.members[i + 1].first == f.members[i].first) continue;
      if (text.size() > 1) text.push_back(',');
      text.append(json(f.members[i].first).dump()).push_back(':');
      text.append(f.members[i].second);
    }
    return text.append("}");
  }

  Meter& meter_;
  std::vector<Frame> frames_;
};

// A string field (name, datatype, id) as it came: present, its kind, its text if a string.
struct Field {
  bool present = false;
  JKind kind = JKind::kNull;
  std::string text;
  void Set(const Scalar& v, Meter& meter) {
    present = true;
    kind = v.kind;
    text = kind == JKind::kString ? std::move(*v.s) : std::string();
    meter.Add(text.size());
  }
};

// The field's string into `out`; INVALID_ARGUMENT when it is not a string (or is missing and
// `required`).
absl::Status StringField(const Field& f, const char* key, const std::string& what, bool required,
                         std::string& out) {
  if (!f.present) {
    if (!required) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(what, ".", key, " is missing"));
  }
  if (f.kind != JKind::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ".", key, " must be a string, not ", TypeName(f.kind)));
  }
  out = f.text;
  return absl::OkStatus();
}

// A "parameters" value as it came: an object (its members by key, in byte order) or not.
struct Params {
  struct Param {
    JKind kind = JKind::kNull;
    inference::InferParameter value;
  };
  bool present = false;
  bool object = false;
  std::map<std::string, Param> values;

  void Reset(bool is_object) {
    present = true;
    object = is_object;
    values.clear();
  }
  // One parameter as the gRPC binding's InferParameter (null has none: an error later).
  void Set(std::string key, const Scalar& v, Meter& meter) {
    meter.Add(key.size() + sizeof(Param) + 64);
    Param& p = values[std::move(key)];
    p.kind = v.kind;
    p.value.Clear();
    switch (v.kind) {
      case JKind::kBool: p.value.set_bool_param(v.b); break;
      case JKind::kInt: p.value.set_int64_param(v.i); break;
      case JKind::kUint:
        if (v.u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          p.value.set_int64_param(static_cast<int64_t>(v.u));
        } else {
          p.value.set_uint64_param(v.u);
        }
        break;
      case JKind::kFloat: p.value.set_double_param(v.d); break;
      case JKind::kString:
        meter.Add(v.s->size());
        p.value.set_string_param(std::move(*v.s));
        break;
      default: break;
    }
  }
  // An object or array parameter: its JSON text, as the gRPC binding takes it in a string.
  void SetText(std::string key, JKind kind, std::string text) {
    Param& p = values[std::move(key)];
    p.kind = kind;
    p.value.Clear();
    p.value.set_string_param(std::move(text));
  }
  const Param* Find(const char* key) const {
    auto it = values.find(key);
    return it == values.end() ? nullptr : &it->second;
  }
};

// Copies `params` into `out`, except the HTTP-only keys in `skip`.
absl::Status ToParameters(const Params& params, const std::string& what,
                          std::initializer_list<absl::string_view> skip,
                          google::protobuf::Map<std::string, inference::InferParameter>& out) {
  if (!params.object) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be a JSON object"));
  }
  for (const auto& [key, param] : params.values) {
    if (std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
    if (param.kind == JKind::kNull) {
      return absl::InvalidArgumentError(absl::StrCat(what, ".", key,
                                                     " is null; a parameter is a bool, number, "
                                                     "string or JSON object"));
    }
    out[key] = param.value;
  }
  return absl::OkStatus();
}

// Whether the tensor parameter `key` is true; INVALID_ARGUMENT when it is not a bool.
absl::StatusOr<bool> BoolParam(const Params& params, const char* key, const std::string& what) {
  const Params::Param* p = params.object ? params.Find(key) : nullptr;
  if (p == nullptr) return false;
  if (p->kind != JKind::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ".parameters.", key, " must be true or false"));
  }
  return p->value.bool_param();
}

// inputs[i] as it came. `bytes` holds the data converted for the datatype and shape the
// input ended with; `begin`/`end` are the data array's bytes in the JSON.
struct InputRecord {
  bool object = true;
  Field name, datatype;
  bool shape_present = false, shape_array = false;
  ShapeReader shape;
  Params params;
  bool data_present = false;
  bool data_array = false;
  std::string data_error;  // the message's tail after the input's name
  size_t begin = 0, end = 0;
  const Datatype* converted_type = nullptr;  // what `bytes` were converted for
  int64_t converted_count = -1;
  std::string bytes;

  // The datatype and element count when they are valid (the data can be converted).
  const Datatype* Type() const {
    return datatype.present && datatype.kind == JKind::kString ? FindDatatype(datatype.text)
                                                               : nullptr;
  }
  bool ShapeOk() const { return shape_present && shape_array && shape.error().empty(); }
  // Whether the data is refused whatever it holds (it sits beside a binary or shared-memory
  // placement), so converting it is wasted.
  bool DataPlacedElsewhere() const {
    return params.object && (params.Find("binary_data_size") != nullptr ||
                             params.Find("shared_memory_region") != nullptr);
  }
};

struct OutputRecord {
  bool object = true;
  Field name;
  Params params;
};

// A body iterator that remembers the last byte the lexer read (SAX events carry no offsets,
// and a "data" array that precedes its datatype or shape is converted from its span later).
// At start_array that byte is the '[', at end_array the ']'.
class Cursor {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  Cursor(const char* p, const char** last) : p_(p), last_(last) {}
  const char& operator*() const {
    *last_ = p_;
    return *p_;
  }
  Cursor& operator++() {
    ++p_;
    return *this;
  }
  Cursor operator++(int) {
    Cursor c = *this;
    ++p_;
    return c;
  }
  bool operator==(const Cursor& o) const { return p_ == o.p_; }
  bool operator!=(const Cursor& o) const { return p_ != o.p_; }

 private:
  const char* p_;
  const char** last_;
};

// The SAX events of one data array's span (already valid JSON) into a DataWriter.
class DataPass {
 public:
  explicit DataPass(DataWriter& writer) : w_(writer) {}
  bool null() { return Value(Scalar{}); }
  bool boolean(bool b) { return Value(BoolScalar(b)); }
  bool number_integer(json::number_integer_t i) { return Value(IntScalar(i)); }
  bool number_unsigned(json::number_unsigned_t u) { return Value(UintScalar(u)); }
  bool number_float(json::number_float_t d, const json::string_t&) { return Value(FloatScalar(d)); }
  bool string(json::string_t&) { return Value(Container(JKind::kString)); }
  bool binary(json::binary_t&) { return false; }
  bool start_object(std::size_t) { return w_.Start(JKind::kObject), true; }
  bool start_array(std::size_t) { return w_.Start(JKind::kArray), true; }
  bool key(json::string_t&) { return true; }
  bool end_object() { return w_.End(), true; }
  bool end_array() { return w_.End(), true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;
  }

 private:
  bool Value(const Scalar& v) {
    w_.Value(v);
    return true;
  }
  DataWriter& w_;
};

// The request's SAX handler (nlohmann::json::sax_parse's interface): the body's fields into
// records as they come, the data converted on the way where its datatype and shape came
// before it. Finish() then checks the records in the request's order.
class RequestSax {
 public:
  RequestSax(absl::string_view json_text, Meter& meter)
      : json_(json_text), last_(json_text.data()), meter_(meter) {}
  Cursor begin() { return Cursor(json_.data(), &last_); }
  Cursor end() { return Cursor(json_.data() + json_.size(), &last_); }

  bool null() { return Value(Scalar{}); }
  bool boolean(bool b) { return Value(BoolScalar(b)); }
  bool number_integer(json::number_integer_t i) { return Value(IntScalar(i)); }
  bool number_unsigned(json::number_unsigned_t u) { return Value(UintScalar(u)); }
  bool number_float(json::number_float_t d, const json::string_t&) { return Value(FloatScalar(d)); }
  bool string(json::string_t& s) {
    meter_.Token(s.size());
    Scalar v = Container(JKind::kString);
    v.s = &s;
    return Value(v);
  }
  bool binary(json::binary_t&) { return false; }  // never in JSON
  bool start_object(std::size_t) { return Begin(JKind::kObject); }
  bool start_array(std::size_t) { return Begin(JKind::kArray); }
  bool key(json::string_t& k);
  bool end_object() { return End(); }
  bool end_array() { return End(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    syntax_error_ = ParseErrorText(e.what());
    return false;
  }

  bool too_deep() const { return too_deep_; }
  const std::string& syntax_error() const { return syntax_error_; }
  // `binary` is the body after the JSON; with `binary_owner` (the string that holds it), an
  // input whose binary data is all of it takes the owner's buffer instead of a copy.
  absl::Status Finish(absl::string_view binary, std::string* binary_owner, InferRequestBody& out);

 private:
  enum class Ctx { kTop, kParams, kInputs, kInput, kOutputs, kOutput };
  enum class Sub { kNone, kSkip, kData, kDataSpan, kShape, kParam };
  struct Frame {
    explicit Frame(Ctx c, Params* p = nullptr) : ctx(c), params(p) {}
    Ctx ctx;
    Params* params;   // kParams
    std::string key;  // the object's current key
  };

  bool Ok() { return meter_.Check(); }
  bool Value(const Scalar& v);
  bool Begin(JKind kind);
  bool End();
  void Dispatch(const Scalar& v);
  void InTop(const std::string& key, const Scalar& v);
  void InInput(const std::string& key, const Scalar& v);
  void InOutput(const std::string& key, const Scalar& v);
  void OpenParams(Params& params, const Scalar& v);
  void OpenList(bool& present, bool& array, Ctx ctx, const Scalar& v);
  void StartData(InputRecord& in, const Scalar& v);
  void StartSub(Sub sub, const Scalar& v);
  void SubStart(JKind kind);
  void SubEnd();
  void EndSub();
  void FinishData(InputRecord& in);
  size_t Offset() const { return static_cast<size_t>(last_ - json_.data()); }
  absl::Status FinishInput(size_t i, absl::string_view binary, size_t& offset,
                           inference::ModelInferRequest& request);
  absl::Status FinishInputs(absl::string_view binary, inference::ModelInferRequest& request);
  absl::Status TakeBinary(const std::string& what, uint64_t n, absl::string_view binary,
                          size_t& offset, std::string& contents);
  absl::Status FinishOutputs(InferRequestBody& out);

  absl::string_view json_;
  const char* last_;
  Meter& meter_;
  int depth_ = 0;  // arrays and objects open
  bool too_deep_ = false;
  std::string syntax_error_;
  std::vector<Frame> stack_;  // the request's own levels (top, parameters, inputs, ...)
  std::string* binary_owner_ = nullptr;
  // A value taken whole (skipped, data, shape or an object/array parameter) while open.
  Sub sub_ = Sub::kNone;
  int sub_depth_ = 0;
  std::optional<DataWriter> data_;
  std::optional<ParamText> param_;
  Params* param_target_ = nullptr;
  std::string param_key_;

  bool top_object_ = true;
  Field id_;
  Params params_;
  bool inputs_present_ = false, inputs_array_ = false;
  std::vector<InputRecord> inputs_;
  bool outputs_present_ = false, outputs_array_ = false;
  std::vector<OutputRecord> outputs_;
};

bool RequestSax::key(json::string_t& k) {
  meter_.Token(k.size());
  if (sub_ == Sub::kParam) {
    param_->Key(k);
  } else if (sub_ == Sub::kNone) {
    stack_.back().key = std::move(k);
  }
  return Ok();
}

bool RequestSax::Value(const Scalar& v) {
  switch (sub_) {
    case Sub::kNone: Dispatch(v); break;
    case Sub::kData: data_->Value(v); break;
    case Sub::kShape: inputs_.back().shape.Value(v, meter_); break;
    case Sub::kParam: param_->Value(v); break;
    default: break;
  }
  return Ok();
}

// Nesting is bounded here, as the document's parser callback bounded it: a container more
// than kMaxJsonDepth levels inside the body's own value ends the parse.
bool RequestSax::Begin(JKind kind) {
  if (depth_ > kMaxJsonDepth) {
    too_deep_ = true;
    return false;
  }
  ++depth_;
  if (sub_ == Sub::kNone) {
    Dispatch(Container(kind));
  } else {
    SubStart(kind);
  }
  return Ok();
}

bool RequestSax::End() {
  --depth_;
  if (sub_ != Sub::kNone) {
    SubEnd();
    return Ok();
  }
  const Ctx ctx = stack_.back().ctx;
  stack_.pop_back();
  if (ctx == Ctx::kInput) FinishData(inputs_.back());
  return Ok();
}

void RequestSax::StartSub(Sub sub, const Scalar& v) {
  if (v.kind != JKind::kObject && v.kind != JKind::kArray) return;  // a scalar is whole
  sub_ = sub;
  sub_depth_ = 0;
  SubStart(v.kind);
}

void RequestSax::SubStart(JKind kind) {
  ++sub_depth_;
  switch (sub_) {
    case Sub::kData: data_->Start(kind); break;
    case Sub::kShape: inputs_.back().shape.Start(); break;
    case Sub::kParam: param_->Start(kind == JKind::kObject); break;
    default: break;
  }
}

void RequestSax::SubEnd() {
  --sub_depth_;
  std::string text;
  switch (sub_) {
    case Sub::kData: data_->End(); break;
    case Sub::kShape: inputs_.back().shape.End(); break;
    case Sub::kParam:
      if (param_->End(text)) {
        meter_.Add(text.size());
        param_target_->SetText(std::move(param_key_), JKind::kObject, std::move(text));
      }
      break;
    default: break;
  }
  if (sub_depth_ == 0) EndSub();
}

void RequestSax::EndSub() {
  if (sub_ == Sub::kData || sub_ == Sub::kDataSpan) {
    InputRecord& in = inputs_.back();
    in.end = Offset() + 1;
    if (data_) in.data_error = data_->error();
  }
  data_.reset();
  param_.reset();
  sub_ = Sub::kNone;
}

// A value at the request's own levels: by where it is and under which key.
void RequestSax::Dispatch(const Scalar& v) {
  if (stack_.empty()) {  // the body's value
    top_object_ = v.kind == JKind::kObject;
    if (top_object_) {
      stack_.emplace_back(Ctx::kTop);
    } else {
      StartSub(Sub::kSkip, v);
    }
    return;
  }
  Frame& f = stack_.back();
  switch (f.ctx) {
    case Ctx::kTop: return InTop(f.key, v);
    case Ctx::kInput: return InInput(f.key, v);
    case Ctx::kOutput: return InOutput(f.key, v);
    case Ctx::kParams:
      if (v.kind == JKind::kObject || v.kind == JKind::kArray) {
        param_target_ = f.params;
        param_key_ = std::move(f.key);
        param_.emplace(meter_);
        return StartSub(Sub::kParam, v);
      }
      return f.params->Set(std::move(f.key), v, meter_);
    case Ctx::kInputs:
      inputs_.emplace_back();
      inputs_.back().object = v.kind == JKind::kObject;
      if (v.kind == JKind::kObject) return (void)stack_.emplace_back(Ctx::kInput);
      return StartSub(Sub::kSkip, v);
    case Ctx::kOutputs:
      outputs_.emplace_back();
      outputs_.back().object = v.kind == JKind::kObject;
      if (v.kind == JKind::kObject) return (void)stack_.emplace_back(Ctx::kOutput);
      return StartSub(Sub::kSkip, v);
  }
}

void RequestSax::OpenParams(Params& params, const Scalar& v) {
  params.Reset(v.kind == JKind::kObject);
  if (params.object) {
    stack_.emplace_back(Ctx::kParams, &params);
  } else {
    StartSub(Sub::kSkip, v);
  }
}

void RequestSax::OpenList(bool& present, bool& array, Ctx ctx, const Scalar& v) {
  present = true;
  array = v.kind == JKind::kArray;
  if (array) {
    stack_.emplace_back(ctx);
  } else {
    StartSub(Sub::kSkip, v);
  }
}

void RequestSax::InTop(const std::string& key, const Scalar& v) {
  if (key == "id") {
    id_.Set(v, meter_);
    StartSub(Sub::kSkip, v);
  } else if (key == "parameters") {
    OpenParams(params_, v);
  } else if (key == "inputs") {
    inputs_.clear();
    OpenList(inputs_present_, inputs_array_, Ctx::kInputs, v);
  } else if (key == "outputs") {
    outputs_.clear();
    OpenList(outputs_present_, outputs_array_, Ctx::kOutputs, v);
  } else {
    StartSub(Sub::kSkip, v);
  }
}

void RequestSax::InInput(const std::string& key, const Scalar& v) {
  InputRecord& in = inputs_.back();
  if (key == "name" || key == "datatype") {
    (key == "name" ? in.name : in.datatype).Set(v, meter_);
    StartSub(Sub::kSkip, v);
  } else if (key == "shape") {
    in.shape = ShapeReader();
    in.shape_present = true;
    in.shape_array = v.kind == JKind::kArray;
    StartSub(in.shape_array ? Sub::kShape : Sub::kSkip, v);
  } else if (key == "parameters") {
    OpenParams(in.params, v);
  } else if (key == "data") {
    StartData(in, v);
  } else {
    StartSub(Sub::kSkip, v);
  }
}

void RequestSax::InOutput(const std::string& key, const Scalar& v) {
  OutputRecord& o = outputs_.back();
  if (key == "name") {
    o.name.Set(v, meter_);
    StartSub(Sub::kSkip, v);
  } else if (key == "parameters") {
    OpenParams(o.params, v);
  } else {
    StartSub(Sub::kSkip, v);
  }
}

// "data" (the last one, if the input has several): converted now if its datatype and shape
// came before it, else only its span is kept for FinishData.
void RequestSax::StartData(InputRecord& in, const Scalar& v) {
  meter_.Sub(in.bytes.capacity());
  std::string().swap(in.bytes);
  in.data_present = true;
  in.data_array = v.kind == JKind::kArray;
  in.data_error.clear();
  in.converted_type = nullptr;
  in.converted_count = -1;
  if (!in.data_array) {
    in.data_error = ".data must be an array";
    return StartSub(Sub::kSkip, v);
  }
  in.begin = Offset();
  const Datatype* type = in.Type();
  if (type == nullptr || !in.ShapeOk() || in.DataPlacedElsewhere()) {
    return StartSub(Sub::kDataSpan, v);
  }
  in.converted_type = type;
  in.converted_count = in.shape.count();
  data_.emplace(*type, in.shape.count(), json_.size() - in.begin, in.bytes, meter_);
  StartSub(Sub::kData, v);
}

// At the input's end: its data converted from its span if it was not converted for the
// datatype and shape the input ended with (they came after it, or again). A second pass
// over the span alone: the bytes it writes are the tensor's, nothing else is kept.
void RequestSax::FinishData(InputRecord& in) {
  const Datatype* type = in.Type();
  if (!in.data_array || type == nullptr || !in.ShapeOk() || in.DataPlacedElsewhere()) return;
  if (in.converted_type == type && in.converted_count == in.shape.count()) return;
  meter_.Sub(in.bytes.capacity());
  in.converted_type = type;
  in.converted_count = in.shape.count();
  const absl::string_view span = json_.substr(in.begin, in.end - in.begin);
  DataWriter writer(*type, in.shape.count(), span.size(), in.bytes, meter_);
  DataPass pass(writer);
  json::sax_parse(span.begin(), span.end(), &pass);
  in.data_error = writer.error();
}

// Appends the elements of raw little-endian bytes of `type` as JSON numbers or bools.
// One floating-point element of `type` at `p` as text into buf; null when not finite.
char* FormatFloat(const char* p, const Datatype& type, char* buf, size_t size) {
  if (type.bytes == 8) {
    double d = 0;
    std::memcpy(&d, p, 8);
    return std::isfinite(d) ? std::to_chars(buf, buf + size, d).ptr : nullptr;
  }
  float f = 0;
  if (type.bytes == 4) {
    std::memcpy(&f, p, 4);
  } else {
    uint16_t h;
    std::memcpy(&h, p, 2);
    f = std::string_view(type.name) == "BF16" ? BFloat16ToFloat(h) : HalfToFloat(h);
  }
  return std::isfinite(f) ? std::to_chars(buf, buf + size, f).ptr : nullptr;
}

// The longest JSON text of one element of `type`: "false", "-9223372036854775808",
// shortest round-trip floats ("-1.17549435e-38", "-2.2250738585072014e-308"; FP16 and BF16
// print as the float32 they widen to).
size_t MaxElementText(const Datatype& type) {
  switch (type.kind) {
    case Kind::kBool: return 5;
    case Kind::kFloat: return type.bytes == 8 ? 24 : 15;
    case Kind::kSigned:
      return type.bytes == 1 ? 4 : type.bytes == 2 ? 6 : type.bytes == 4 ? 11 : 20;
    case Kind::kUnsigned:
      return type.bytes == 1 ? 3 : type.bytes == 2 ? 5 : type.bytes == 4 ? 10 : 20;
  }
  return 24;
}

void AppendData(absl::string_view raw, const Datatype& type, std::string& out) {
  const size_t n = raw.size() / type.bytes;
  out.push_back('[');
  char buf[64];
  for (size_t i = 0; i < n; ++i) {
    if (i) out.push_back(',');
    const char* p = raw.data() + i * type.bytes;
    char* end = buf;
    switch (type.kind) {
      case Kind::kBool: {
        out.append(*p ? "true" : "false");
        continue;
      }
      case Kind::kFloat:
        end = FormatFloat(p, type, buf, sizeof(buf));
        if (end == nullptr) {  // JSON has no NaN or infinity (the engine never returns them)
          out.append("null");
          continue;
        }
        break;
      case Kind::kSigned: {
        int64_t v = 0;
        if (type.bytes == 1) v = *reinterpret_cast<const int8_t*>(p);
        if (type.bytes == 2) {
          int16_t x;
          std::memcpy(&x, p, 2);
          v = x;
        }
        if (type.bytes == 4) {
          int32_t x;
          std::memcpy(&x, p, 4);
          v = x;
        }
        if (type.bytes == 8) std::memcpy(&v, p, 8);
        end = std::to_chars(buf, buf + sizeof(buf), v).ptr;
        break;
      }
      case Kind::kUnsigned: {
        uint64_t v = 0;
        std::memcpy(&v, p, type.bytes);
        end = std::to_chars(buf, buf + sizeof(buf), v).ptr;
        break;
      }
    }
    out.append(buf, static_cast<size_t>(end - buf));
  }
  out.push_back(']');
}

void AppendParameter(const inference::InferParameter& p, std::string& out) {
  switch (p.parameter_choice_case()) {
    case inference::InferParameter::kBoolParam:
      out.append(p.bool_param() ? "true" : "false");
      break;
    case inference::InferParameter::kInt64Param: absl::StrAppend(&out, p.int64_param()); break;
    case inference::InferParameter::kUint64Param: absl::StrAppend(&out, p.uint64_param()); break;
    case inference::InferParameter::kDoubleParam: out.append(json(p.double_param()).dump()); break;
    case inference::InferParameter::kStringParam: out.append(Quote(p.string_param())); break;
    default: out.append("null"); break;
  }
}

// `"parameters":{...}` from `params` plus `extra` (already JSON), or nothing if both empty.
void AppendParameters(const google::protobuf::Map<std::string, inference::InferParameter>& params,
                      const std::string& extra, std::string& out) {
  if (params.empty() && extra.empty()) return;
  out.append(",\"parameters\":{");
  bool first = true;
  for (const auto& [key, value] : params) {
    if (!first) out.push_back(',');
    first = false;
    out.append(Quote(key));
    out.push_back(':');
    AppendParameter(value, out);
  }
  if (!extra.empty()) {
    if (!first) out.push_back(',');
    out.append(extra);
  }
  out.push_back('}');
}

// The next `n` bytes of the binary part (at `offset`, which advances) into `contents`: the
// owner's buffer itself when they are all of it, else a copy.
absl::Status RequestSax::TakeBinary(const std::string& what, uint64_t n, absl::string_view binary,
                                    size_t& offset, std::string& contents) {
  if (n > binary.size() - offset) {
    return absl::InvalidArgumentError(absl::StrCat(what, ".parameters.binary_data_size is ", n,
                                                   " but only ", binary.size() - offset,
                                                   " bytes of binary data are left in the body"));
  }
  if (binary_owner_ != nullptr && n == binary.size() && n > 0) {
    contents.swap(*binary_owner_);  // `binary` (its view) is not read again
  } else {
    contents.assign(binary.data() + offset, n);
  }
  offset += n;
  return absl::OkStatus();
}

// inputs[i]: its data from "data", from the binary part after the JSON (at `offset`, which
// advances), or from its shared-memory region (read later).
absl::Status RequestSax::FinishInput(size_t i, absl::string_view binary, size_t& offset,
                                     inference::ModelInferRequest& request) {
  InputRecord& r = inputs_[i];
  std::string what = absl::StrCat("inputs[", i, "]");
  auto* in = request.add_inputs();
  if (!r.object) return absl::InvalidArgumentError(absl::StrCat(what, " must be an object"));
  RETURN_IF_ERROR(StringField(r.name, "name", what, true, *in->mutable_name()));
  what = absl::StrCat(what, " ('", in->name(), "')");
  RETURN_IF_ERROR(StringField(r.datatype, "datatype", what, true, *in->mutable_datatype()));
  if (FindDatatype(in->datatype()) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ".datatype '", in->datatype(),
                                                   "' is not one of BOOL, UINT8..UINT64, "
                                                   "INT8..INT64, FP16, BF16, FP32, FP64"));
  }
  if (!r.shape_present) return absl::InvalidArgumentError(absl::StrCat(what, ".shape is missing"));
  if (!r.shape_array) {
    return absl::InvalidArgumentError(absl::StrCat(what, ".shape must be an array of integers"));
  }
  if (!r.shape.error().empty()) return absl::InvalidArgumentError(what + r.shape.error());
  in->mutable_shape()->Add(r.shape.dims().begin(), r.shape.dims().end());
  if (r.params.present) {
    RETURN_IF_ERROR(ToParameters(r.params, what + ".parameters", {"binary_data_size"},
                                 *in->mutable_parameters()));
  }
  if (const Params::Param* size = r.params.object ? r.params.Find("binary_data_size") : nullptr) {
    if (size->kind != JKind::kUint) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ".parameters.binary_data_size must be an integer >= 0"));
    }
    if (r.data_present) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has both data and parameters.binary_data_size"));
    }
    const uint64_t n = size->value.has_uint64_param()
                           ? size->value.uint64_param()
                           : static_cast<uint64_t>(size->value.int64_param());
    return TakeBinary(what, n, binary, offset, *request.add_raw_input_contents());
  }
  if (in->parameters().count("shared_memory_region")) {
    if (!r.data_present) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has both data and parameters.shared_memory_region"));
  }
  if (!r.data_present) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " has no data, parameters.binary_data_size or parameters.shared_memory_region"));
  }
  if (!r.data_error.empty()) return absl::InvalidArgumentError(what + r.data_error);
  *request.add_raw_input_contents() = std::move(r.bytes);
  return absl::OkStatus();
}

absl::Status RequestSax::FinishInputs(absl::string_view binary,
                                      inference::ModelInferRequest& request) {
  if (!inputs_array_) return absl::InvalidArgumentError("inputs must be an array of tensors");
  size_t offset = 0;  // into `binary`
  for (size_t i = 0; i < inputs_.size(); ++i) {
    RETURN_IF_ERROR(FinishInput(i, binary, offset, request));
  }
  if (offset != binary.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the body has ", binary.size(),
        " bytes of binary data after the JSON header "
        "(Inference-Header-Content-Length), but the inputs' binary_data_size add up to ",
        offset));
  }
  return absl::OkStatus();
}

absl::Status RequestSax::FinishOutputs(InferRequestBody& out) {
  if (!outputs_array_) return absl::InvalidArgumentError("outputs must be an array");
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const OutputRecord& o = outputs_[i];
    std::string what = absl::StrCat("outputs[", i, "]");
    if (!o.object) return absl::InvalidArgumentError(absl::StrCat(what, " must be an object"));
    auto* requested = out.request.add_outputs();
    RETURN_IF_ERROR(StringField(o.name, "name", what, true, *requested->mutable_name()));
    what = absl::StrCat(what, " ('", requested->name(), "')");
    if (!o.params.present) continue;
    RETURN_IF_ERROR(ToParameters(o.params, what + ".parameters", {"binary_data"},
                                 *requested->mutable_parameters()));
    if (o.params.Find("binary_data") != nullptr) {
      ASSIGN_OR_RETURN(out.outputs.binary[requested->name()],
                       BoolParam(o.params, "binary_data", what));
    }
  }
  return absl::OkStatus();
}

// The records in the request's order, as the request's fields.
absl::Status RequestSax::Finish(absl::string_view binary, std::string* binary_owner,
                                InferRequestBody& out) {
  binary_owner_ = binary_owner;
  if (!top_object_) return absl::InvalidArgumentError("the request body must be a JSON object");
  RETURN_IF_ERROR(StringField(id_, "id", "request", false, *out.request.mutable_id()));
  if (params_.present) {
    RETURN_IF_ERROR(ToParameters(params_, "parameters", {"binary_data_output"},
                                 *out.request.mutable_parameters()));
    ASSIGN_OR_RETURN(out.outputs.binary_default,
                     BoolParam(params_, "binary_data_output", "request"));
  }
  if (!inputs_present_) return absl::InvalidArgumentError("inputs is missing");
  RETURN_IF_ERROR(FinishInputs(binary, out.request));
  if (outputs_present_) RETURN_IF_ERROR(FinishOutputs(out));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<size_t> ParseHeaderLength(absl::string_view value) {
  uint64_t n = 0;
  if (value.empty() || value.size() > 19 || !absl::SimpleAtoi(value, &n) ||
      value.find_first_not_of("0123456789") != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("Inference-Header-Content-Length '", value, "' is not a byte count"));
  }
  return static_cast<size_t>(n);
}

namespace {

// The JSON header `json` into `out`; `binary` (held by `binary_owner` when not null) is the
// body after it.
absl::Status ParseParts(absl::string_view json, absl::string_view binary, std::string* binary_owner,
                        const std::string& model_name, const std::string& model_version,
                        InferRequestBody& out, const ParseBudget* budget) {
  Meter meter(budget);
  RequestSax sax(json, meter);
  json::sax_parse(sax.begin(), sax.end(), &sax);
  if (!meter.status().ok()) return meter.status();
  if (!sax.syntax_error().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body is not valid JSON: ", sax.syntax_error()));
  }
  if (sax.too_deep()) {
    return absl::InvalidArgumentError(absl::StrCat("the request body is nested deeper than ",
                                                   kMaxJsonDepth, " levels of arrays and objects"));
  }
  out.request.set_model_name(model_name);
  out.request.set_model_version(model_version);
  return sax.Finish(binary, binary_owner, out);
}

absl::Status HeaderPastBody(size_t header_length, size_t body_bytes) {
  return absl::InvalidArgumentError(absl::StrCat("Inference-Header-Content-Length is ",
                                                 header_length, ", past the body's ", body_bytes,
                                                 " bytes"));
}

}  // namespace

absl::Status ParseInferRequest(absl::string_view body, std::optional<size_t> header_length,
                               const std::string& model_name, const std::string& model_version,
                               InferRequestBody& out, const ParseBudget* budget) {
  const size_t json_bytes = header_length.value_or(body.size());
  if (json_bytes > body.size()) return HeaderPastBody(json_bytes, body.size());
  return ParseParts(body.substr(0, json_bytes), body.substr(json_bytes), nullptr, model_name,
                    model_version, out, budget);
}

absl::Status ParseInferRequest(absl::string_view json, std::string& binary, size_t header_length,
                               const std::string& model_name, const std::string& model_version,
                               InferRequestBody& out, const ParseBudget* budget) {
  if (json.size() != header_length) return HeaderPastBody(header_length, json.size());
  const absl::string_view view(binary);
  return ParseParts(json, view, &binary, model_name, model_version, out, budget);
}

size_t InferResponseJsonBytes(const inference::ModelInferResponse& response,
                              const OutputEncoding& outputs) {
  // Names, datatypes, shapes and parameters: at most 6 characters of text per byte of their
  // protobuf encoding (a control character quoted as \u00XX), plus the fixed keys.
  size_t raw_total = 0;
  for (const std::string& raw : response.raw_output_contents()) raw_total += raw.size();
  size_t bytes = 1024 + 6 * (response.ByteSizeLong() - raw_total);
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& o = response.outputs(i);
    const Datatype* type = FindDatatype(o.datatype());
    if (type == nullptr || o.parameters().count("shared_memory_region") != 0 ||
        outputs.Binary(o.name()) || i >= response.raw_output_contents_size()) {
      continue;
    }
    bytes +=
        64 + (response.raw_output_contents(i).size() / type->bytes) * (MaxElementText(*type) + 1);
  }
  return bytes;
}

InferResponseBody WriteInferResponse(const inference::ModelInferResponse& response,
                                     const OutputEncoding& outputs) {
  InferResponseBody body;
  std::string& out = body.json;
  // Reserved whole: growing by doubling would hold the old text and the new at once.
  out.reserve(InferResponseJsonBytes(response, outputs));
  out.append("{\"model_name\":");
  out.append(Quote(response.model_name()));
  out.append(",\"model_version\":");
  out.append(Quote(response.model_version()));
  if (!response.id().empty()) {
    out.append(",\"id\":");
    out.append(Quote(response.id()));
  }
  AppendParameters(response.parameters(), "", out);
  out.append(",\"outputs\":[");
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& o = response.outputs(i);
    if (i) out.push_back(',');
    out.append("{\"name\":");
    out.append(Quote(o.name()));
    out.append(",\"datatype\":");
    out.append(Quote(o.datatype()));
    out.append(",\"shape\":[");
    out.append(absl::StrJoin(o.shape(), ","));
    out.push_back(']');
    const bool in_shm = o.parameters().count("shared_memory_region") != 0;
    const absl::string_view raw = i < response.raw_output_contents_size()
                                      ? absl::string_view(response.raw_output_contents(i))
                                      : absl::string_view();
    const Datatype* type = FindDatatype(o.datatype());
    const bool binary = !in_shm && (outputs.Binary(o.name()) || type == nullptr);
    AppendParameters(o.parameters(),
                     binary ? absl::StrCat("\"binary_data_size\":", raw.size()) : "", out);
    if (binary) {
      body.binary.push_back(raw);
      body.binary_bytes += raw.size();
    } else if (!in_shm) {
      out.append(",\"data\":");
      AppendData(raw, *type, out);
    }
    out.push_back('}');
  }
  out.append("]}");
  return body;
}

std::string ErrorJson(absl::string_view message) {
  return absl::StrCat("{\"error\":", Quote(message), "}");
}

}  // namespace posenc
