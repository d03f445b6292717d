#include "server/tensor/npy.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"

namespace posenc {
namespace {

constexpr absl::string_view kMagic = "\x93NUMPY";
// magic(6) + version(2) + header length (2 bytes in v1.0, 4 in v2.0/3.0).
constexpr size_t kPreambleV1 = 10;
constexpr size_t kPreambleV2 = 12;
// numpy refuses headers above this too (np.lib.format._MAX_HEADER_SIZE, 10000 by default,
// larger with allow_pickle); a shape never needs more, and the bound keeps a hostile length
// field from making us read or allocate much.
constexpr size_t kMaxHeaderBytes = 1 << 20;

absl::Status Malformed(absl::string_view name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": not a valid .npy file: ", what));
}

uint32_t ReadLE(absl::string_view bytes, size_t offset, size_t width) {
  uint32_t v = 0;
  for (size_t i = 0; i < width; ++i) {
    v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  }
  return v;
}

// A recursive-descent reader for the Python dict literal numpy writes, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderDictParser {
 public:
  HeaderDictParser(absl::string_view text, absl::string_view name) : text_(text), name_(name) {}

  absl::Status Parse() {
    RETURN_IF_ERROR(Expect('{'));
    while (true) {
      SkipSpace();
      if (Peek() == '}') {
        ++pos_;
        break;
      }
      ASSIGN_OR_RETURN(std::string key, ParseString());
      RETURN_IF_ERROR(Expect(':'));
      SkipSpace();
      if (key == "descr") {
        ASSIGN_OR_RETURN(descr_, ParseString());
        have_descr_ = true;
      } else if (key == "fortran_order") {
        ASSIGN_OR_RETURN(fortran_order_, ParseBool());
        have_fortran_ = true;
      } else if (key == "shape") {
        RETURN_IF_ERROR(ParseShape());
        have_shape_ = true;
      } else {
        return Malformed(name_, absl::StrCat("unexpected header key '", key, "'"));
      }
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
      } else if (Peek() != '}') {
        return Malformed(name_, "expected ',' or '}' in the header dict");
      }
    }
    // numpy pads with spaces and ends the header with '\n'.
    for (; pos_ < text_.size(); ++pos_) {
      if (!std::isspace(static_cast<unsigned char>(text_[pos_])) && text_[pos_] != '\0') {
        return Malformed(name_, "trailing characters after the header dict");
      }
    }
    if (!have_descr_ || !have_fortran_ || !have_shape_) {
      return Malformed(name_, "header lacks one of 'descr', 'fortran_order', 'shape'");
    }
    return absl::OkStatus();
  }

  const std::string& descr() const { return descr_; }
  bool fortran_order() const { return fortran_order_; }
  const Shape& shape() const { return shape_; }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  absl::Status Expect(char c) {
    SkipSpace();
    if (Peek() != c)
      return Malformed(name_, absl::StrCat("expected '", std::string(1, c), "' in the header"));
    ++pos_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ParseString() {
    SkipSpace();
    const char quote = Peek();
    if (quote != '\'' && quote != '"')
      return Malformed(name_, "expected a quoted string in the header");
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == absl::string_view::npos)
      return Malformed(name_, "unterminated string in the header");
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return s;
  }
  absl::StatusOr<bool> ParseBool() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    return Malformed(name_, "'fortran_order' is neither True nor False");
  }
  absl::Status ParseShape() {
    if (Peek() != '(') return Malformed(name_, "'shape' is not a tuple");
    ++pos_;
    while (true) {
      SkipSpace();
      if (Peek() == ')') {
        ++pos_;
        return absl::OkStatus();
      }
      if (!std::isdigit(static_cast<unsigned char>(Peek()))) {
        return Malformed(name_, "'shape' holds something other than non-negative integers");
      }
      int64_t d = 0;
      while (std::isdigit(static_cast<unsigned char>(Peek()))) {
        if (d > (std::numeric_limits<int64_t>::max() - 9) / 10) {
          return Malformed(name_, "a 'shape' dimension is too large");
        }
        d = d * 10 + (Peek() - '0');
        ++pos_;
      }
      if (Peek() == 'L') ++pos_;  // Python 2 long literals, still found in old files.
      shape_.push_back(d);
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
      } else if (Peek() != ')') {
        return Malformed(name_, "expected ',' or ')' in 'shape'");
      }
    }
  }

  absl::string_view text_;
  absl::string_view name_;
  size_t pos_ = 0;
  std::string descr_;
  bool fortran_order_ = false;
  Shape shape_;
  bool have_descr_ = false, have_fortran_ = false, have_shape_ = false;
};

absl::StatusOr<DType> DTypeFromDescr(absl::string_view descr, absl::string_view name) {
  // '|' and '=' never appear for these multi-byte types in files numpy writes on
  // little-endian machines, but other writers use '=' for native order.
  if (descr == "<f4" || descr == "=f4") return DType::kFloat32;
  if (descr == "<f2" || descr == "=f2") return DType::kFloat16;
  if (descr == "<i4" || descr == "=i4") return DType::kInt32;
  if (descr == "<i8" || descr == "=i8") return DType::kInt64;
  if (descr == "<f8" || descr == "=f8") return DType::kFloat64;
  return absl::InvalidArgumentError(absl::StrCat(
      name, ": .npy dtype '", descr,
      "' is not supported; use little-endian float32 (<f4), float64 (<f8), float16 (<f2), "
      "int32 (<i4) or int64 (<i8)"));
}

absl::StatusOr<absl::string_view> DescrFromDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return absl::string_view("<f4");
    case DType::kFloat16: return absl::string_view("<f2");
    case DType::kInt32: return absl::string_view("<i4");
    case DType::kInt64: return absl::string_view("<i8");
    case DType::kFloat64: return absl::string_view("<f8");
    case DType::kBFloat16: break;
  }
  return absl::InvalidArgumentError(
      "the .npy format has no bfloat16 dtype; convert to float32 before writing");
}

absl::Status OpenError(const std::string& path, int err, absl::string_view what) {
  const std::string msg = absl::StrCat(path, ": cannot ", what, ": ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::UnavailableError(msg);
}

}  // namespace

absl::StatusOr<NpyHeader> ParseNpyHeader(absl::string_view bytes, absl::string_view name) {
  if (bytes.size() < kPreambleV1 || bytes.substr(0, kMagic.size()) != kMagic) {
    return Malformed(name, "missing the \\x93NUMPY magic");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t preamble;
  size_t header_len;
  if (major == 1) {
    preamble = kPreambleV1;
    header_len = ReadLE(bytes, 8, 2);
  } else if (major == 2 || major == 3) {
    if (bytes.size() < kPreambleV2) return Malformed(name, "truncated preamble");
    preamble = kPreambleV2;
    header_len = ReadLE(bytes, 8, 4);
  } else {
    return Malformed(name, absl::StrCat("format version ", major, ".",
                                        static_cast<unsigned char>(bytes[7]),
                                        " is not supported (1.0, 2.0 and 3.0 are)"));
  }
  if (header_len > kMaxHeaderBytes) {
    return Malformed(name,
                     absl::StrCat("header length ", header_len, " exceeds ", kMaxHeaderBytes));
  }
  if (bytes.size() < preamble + header_len) {
    return Malformed(name, absl::StrCat("header of ", header_len, " bytes is truncated (",
                                        bytes.size() - preamble, " present)"));
  }
  HeaderDictParser parser(bytes.substr(preamble, header_len), name);
  RETURN_IF_ERROR(parser.Parse());
  if (parser.fortran_order()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name,
                     ": fortran_order is True; only C-order arrays are supported (save with "
                     "np.ascontiguousarray)"));
  }
  NpyHeader header;
  ASSIGN_OR_RETURN(header.dtype, DTypeFromDescr(parser.descr(), name));
  header.shape = parser.shape();
  ASSIGN_OR_RETURN(const int64_t n, CheckedNumElements(header.shape, name));
  header.data_offset = preamble + header_len;
  header.data_bytes = static_cast<size_t>(n) * DTypeSize(header.dtype);
  return header;
}

namespace {

// The data after the header must be exactly what the header's shape and dtype need.
absl::Status CheckDataBytes(const NpyHeader& header, size_t present, absl::string_view name) {
  if (present == header.data_bytes) return absl::OkStatus();
  return Malformed(name, absl::StrCat("shape ", ShapeString(header.shape), " of ",
                                      DTypeName(header.dtype), " needs ", header.data_bytes,
                                      " data bytes, the file has ", present));
}

}  // namespace

absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes, absl::string_view name) {
  ASSIGN_OR_RETURN(NpyHeader header, ParseNpyHeader(bytes, name));
  RETURN_IF_ERROR(CheckDataBytes(header, bytes.size() - header.data_offset, name));
  NpyArray array;
  array.dtype = header.dtype;
  array.shape = std::move(header.shape);
  const absl::string_view payload = bytes.substr(header.data_offset);
  array.data.assign(payload.data(), payload.size());
  return array;
}

absl::StatusOr<std::string> SerializeNpy(DType dtype, absl::Span<const int64_t> shape,
                                         absl::string_view data) {
  ASSIGN_OR_RETURN(const absl::string_view descr, DescrFromDType(dtype));
  ASSIGN_OR_RETURN(const int64_t n, CheckedNumElements(shape, "npy"));
  if (data.size() != static_cast<size_t>(n) * DTypeSize(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy: shape ", ShapeString(shape), " of ", DTypeName(dtype), " needs ",
                     static_cast<size_t>(n) * DTypeSize(dtype), " bytes, got ", data.size()));
  }
  // A 1-tuple needs its trailing comma to stay a tuple in Python.
  std::string shape_text = absl::StrJoin(shape, ", ");
  if (shape.size() == 1) shape_text += ",";
  std::string dict = absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (",
                                  shape_text, "), }");
  // The data starts on a 64-byte boundary (numpy >= 1.14 aligns to 64); the header ends
  // with '\n' after the space padding.
  size_t preamble = kPreambleV1;
  size_t total = preamble + dict.size() + 1;
  if (total + 63 > preamble + 0xffff) {
    preamble = kPreambleV2;
    total = preamble + dict.size() + 1;
  }
  const size_t padded = (total + 63) / 64 * 64;
  const size_t header_len = padded - preamble;
  dict.append(padded - total, ' ');
  dict.push_back('\n');

  std::string out;
  out.reserve(padded + data.size());
  out.append(kMagic.data(), kMagic.size());
  out.push_back(static_cast<char>(preamble == kPreambleV1 ? 1 : 2));
  out.push_back(0);
  const size_t len_width = preamble - 8;
  for (size_t i = 0; i < len_width; ++i)
    out.push_back(static_cast<char>((header_len >> (8 * i)) & 0xff));
  out.append(dict);
  out.append(data.data(), data.size());
  return out;
}

absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return OpenError(path, errno, "open");
  in.seekg(0, std::ios::end);
  const std::streamoff file_size = in.tellg();
  if (file_size < 0)
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot determine the file size"));
  in.seekg(0, std::ios::beg);

  // Read the preamble, then exactly the header, so a bogus header cannot make us allocate.
  std::string head(std::min<size_t>(static_cast<size_t>(file_size), kPreambleV2), '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  if (head.size() < kPreambleV1 || head.substr(0, kMagic.size()) != kMagic) {
    return Malformed(path, "missing the \\x93NUMPY magic");
  }
  const int major = static_cast<unsigned char>(head[6]);
  size_t header_end = kPreambleV1 + ReadLE(head, 8, 2);
  if ((major == 2 || major == 3) && head.size() >= kPreambleV2)
    header_end = kPreambleV2 + ReadLE(head, 8, 4);
  if (header_end > static_cast<size_t>(file_size) || header_end > kMaxHeaderBytes + kPreambleV2) {
    // Let the header parser produce the precise message from what there is.
    header_end = std::min<size_t>(static_cast<size_t>(file_size), kMaxHeaderBytes + kPreambleV2);
  }
  head.resize(header_end);
  in.seekg(0, std::ios::beg);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  if (!in) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  ASSIGN_OR_RETURN(NpyHeader header, ParseNpyHeader(head, path));

  RETURN_IF_ERROR(
      CheckDataBytes(header, static_cast<size_t>(file_size) - header.data_offset, path));
  NpyArray array;
  array.dtype = header.dtype;
  array.shape = std::move(header.shape);
  array.data.resize(header.data_bytes);
  in.seekg(static_cast<std::streamoff>(header.data_offset), std::ios::beg);
  in.read(array.data.data(), static_cast<std::streamsize>(array.data.size()));
  if (!in) {
    return absl::DataLossError(
        absl::StrCat(path, ": read of ", header.data_bytes, " bytes failed"));
  }
  return array;
}

absl::Status WriteNpyFile(const std::string& path, DType dtype, absl::Span<const int64_t> shape,
                          absl::string_view data) {
  auto image = SerializeNpy(dtype, shape, data);
  if (!image.ok()) {
    return absl::Status(image.status().code(), absl::StrCat(path, ": ", image.status().message()));
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return OpenError(path, errno, "create");
  out.write(image->data(), static_cast<std::streamsize>(image->size()));
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace posenc
