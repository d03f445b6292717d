#include "server/tables/table_file.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "server/common/status_macros.h"
#include "server/tensor/npy.h"

namespace posenc {
namespace {

// The safetensors reference implementation refuses larger headers (MAX_HEADER_SIZE).
constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;
constexpr absl::string_view kSafetensorsExt = ".safetensors";

absl::Status FileError(const std::string& path, int err, absl::string_view what) {
  const std::string msg = absl::StrCat(path, ": cannot ", what, ": ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::UnavailableError(msg);
}

absl::Status Malformed(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": not a valid safetensors file: ", what));
}

absl::StatusOr<DType> SafetensorsDType(const std::string& dtype, const std::string& path,
                                       const std::string& tensor) {
  if (dtype == "F32") return DType::kFloat32;
  if (dtype == "F16") return DType::kFloat16;
  if (dtype == "BF16") return DType::kBFloat16;
  if (dtype == "F64") return DType::kFloat64;
  return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", tensor, "' has dtype ", dtype,
                                                 "; a table must be F32, F64, F16 or BF16"));
}

// Rank, emptiness and finiteness checks shared by both formats; converts to float32.
absl::StatusOr<NamedTableData> MakeTable(absl::string_view name, const std::string& where,
                                         DType dtype, const Shape& shape, const void* bytes) {
  if (shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("table '", name, "' (", where, ") has shape ",
                                                   ShapeString(shape),
                                                   "; a table must be 2-D [rows, cols]"));
  }
  if (shape[0] < 1 || shape[1] < 1) {
    return absl::InvalidArgumentError(absl::StrCat("table '", name, "' (", where, ") has shape ",
                                                   ShapeString(shape), "; it must not be empty"));
  }
  NamedTableData table;
  table.name = std::string(name);
  table.shape = shape;
  table.source_dtype = dtype;
  table.data.resize(static_cast<size_t>(shape[0] * shape[1]));
  ToFloat32(dtype, bytes, table.data.data(), table.data.size());
  if (dtype == DType::kFloat64) {
    table.float64_data.resize(table.data.size());
    std::memcpy(table.float64_data.data(), bytes, table.float64_data.size() * sizeof(double));
  }
  for (size_t i = 0; i < table.data.size(); ++i) {
    if (!std::isfinite(table.data[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", name, "' (", where, ") holds a non-finite value at [",
          i / static_cast<size_t>(shape[1]), ",", i % static_cast<size_t>(shape[1]), "]"));
    }
  }
  return table;
}

bool ValidTableName(absl::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '=' || c == ':') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<TableSpec> ParseTableSpec(absl::string_view spec) {
  const size_t eq = spec.find('=');
  if (eq == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--table '", spec, "' has no '='; use NAME=PATH.npy or NAME=PATH.safetensors:TENSOR"));
  }
  TableSpec out;
  out.name = std::string(spec.substr(0, eq));
  if (!ValidTableName(out.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--table '", spec, "': the table name '", out.name,
                     "' must be non-empty without whitespace, '=' or ':'"));
  }
  const absl::string_view rest = spec.substr(eq + 1);
  if (absl::EndsWith(rest, ".npy")) {
    out.path = std::string(rest);
    return out;
  }
  // Tensor names contain '.', and paths could contain ':', so split at the extension.
  const size_t ext = rest.rfind(absl::StrCat(kSafetensorsExt, ":"));
  if (ext != absl::string_view::npos) {
    out.safetensors = true;
    out.path = std::string(rest.substr(0, ext + kSafetensorsExt.size()));
    out.tensor = std::string(rest.substr(ext + kSafetensorsExt.size() + 1));
    if (out.tensor.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--table '", spec, "': the tensor name after ':' is empty"));
    }
    return out;
  }
  if (absl::EndsWith(rest, kSafetensorsExt)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--table '", spec, "': a safetensors table needs the tensor name: ", rest, ":TENSOR"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--table '", spec, "': the path must end in .npy, or .safetensors:TENSOR"));
}

absl::StatusOr<NamedTableData> LoadNpyTable(const std::string& path, absl::string_view name) {
  ASSIGN_OR_RETURN(NpyArray array, ReadNpyFile(path));
  if (array.dtype != DType::kFloat32 && array.dtype != DType::kFloat64 &&
      array.dtype != DType::kFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("table '", name, "' (", path, ") has dtype ", DTypeName(array.dtype),
                     "; a table must be float32, float64 or float16"));
  }
  return MakeTable(name, path, array.dtype, array.shape, array.data.data());
}

namespace {

// A safetensors file: an 8-byte little-endian header length, the JSON header, then the
// data buffer the header's data_offsets index.
struct SafetensorsHeader {
  nlohmann::json json;
  uint64_t data_start = 0;
  uint64_t buffer_size = 0;
};

absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(std::ifstream& in,
                                                        const std::string& path) {
  in.seekg(0, std::ios::end);
  const std::streamoff file_size_signed = in.tellg();
  if (file_size_signed < 0) {
    return absl::UnavailableError(absl::StrCat(path, ": cannot determine the file size"));
  }
  const uint64_t file_size = static_cast<uint64_t>(file_size_signed);
  in.seekg(0, std::ios::beg);
  if (file_size < 8) return Malformed(path, absl::StrCat("only ", file_size, " bytes"));
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(len_bytes[i]) << (8 * i);
  if (header_len > kMaxSafetensorsHeader) {
    return Malformed(path, absl::StrCat("header length ", header_len, " exceeds ",
                                        kMaxSafetensorsHeader));
  }
  if (8 + header_len > file_size) {
    return Malformed(path, absl::StrCat("header length ", header_len, " runs past the end of the ",
                                        file_size, "-byte file"));
  }
  std::string header_text(static_cast<size_t>(header_len), '\0');
  in.read(header_text.data(), static_cast<std::streamsize>(header_len));
  if (!in) return absl::DataLossError(absl::StrCat(path, ": header read failed"));
  SafetensorsHeader header;
  header.json = nlohmann::json::parse(header_text, nullptr, /*allow_exceptions=*/false);
  if (header.json.is_discarded() || !header.json.is_object()) {
    return Malformed(path, "the header is not a JSON object");
  }
  header.data_start = 8 + header_len;
  header.buffer_size = file_size - header.data_start;
  return header;
}

// The header's entry for `tensor`, or NOT_FOUND listing (the first few of) those it has.
absl::StatusOr<const nlohmann::json*> FindSafetensorsEntry(const nlohmann::json& header,
                                                           const std::string& path,
                                                           const std::string& tensor) {
  auto entry_it = header.find(tensor);
  if (entry_it != header.end() && tensor != "__metadata__") return &*entry_it;
  std::vector<std::string> names;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() != "__metadata__") names.push_back(it.key());
  }
  constexpr size_t kListed = 20;
  std::string listed =
      absl::StrJoin(names.begin(), names.begin() + std::min(names.size(), kListed), ", ");
  if (names.size() > kListed) absl::StrAppend(&listed, ", ... (", names.size(), " in all)");
  return absl::NotFoundError(absl::StrCat(path, ": no tensor '", tensor,
                                          "'; it has: ", names.empty() ? "(none)" : listed));
}

// One entry's dtype, shape and byte range, checked against the data buffer.
struct SafetensorsEntry {
  DType dtype;
  Shape shape;
  uint64_t begin = 0;
  uint64_t bytes = 0;
};

absl::StatusOr<Shape> SafetensorsShape(const nlohmann::json& dims, const std::string& path,
                                       const std::string& tensor) {
  Shape shape;
  for (const auto& d : dims) {
    if (!d.is_number_unsigned()) {
      return Malformed(path, absl::StrCat("entry '", tensor, "' has a shape element that is ",
                                          "not a non-negative integer"));
    }
    const uint64_t v = d.get<uint64_t>();
    if (v > static_cast<uint64_t>(kMaxElements)) {
      return Malformed(path, absl::StrCat("entry '", tensor, "' has a dimension of ", v));
    }
    shape.push_back(static_cast<int64_t>(v));
  }
  return shape;
}

absl::StatusOr<SafetensorsEntry> ParseSafetensorsEntry(const nlohmann::json& entry,
                                                       uint64_t buffer_size,
                                                       const std::string& path,
                                                       const std::string& tensor) {
  if (!entry.is_object()) {
    return Malformed(path, absl::StrCat("entry '", tensor, "' is not an object"));
  }
  auto dtype_it = entry.find("dtype");
  auto shape_it = entry.find("shape");
  auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end() || !dtype_it->is_string() || shape_it == entry.end() ||
      !shape_it->is_array() || offsets_it == entry.end() || !offsets_it->is_array() ||
      offsets_it->size() != 2) {
    return Malformed(path, absl::StrCat("entry '", tensor, "' needs a string dtype, an array ",
                                        "shape and two data_offsets"));
  }
  SafetensorsEntry out;
  const std::string dtype_name = dtype_it->get<std::string>();
  ASSIGN_OR_RETURN(out.dtype, SafetensorsDType(dtype_name, path, tensor));
  ASSIGN_OR_RETURN(out.shape, SafetensorsShape(*shape_it, path, tensor));
  const auto& begin_json = (*offsets_it)[0];
  const auto& end_json = (*offsets_it)[1];
  if (!begin_json.is_number_unsigned() || !end_json.is_number_unsigned()) {
    return Malformed(path, absl::StrCat("entry '", tensor, "' has data_offsets that are not ",
                                        "non-negative integers"));
  }
  out.begin = begin_json.get<uint64_t>();
  const uint64_t end = end_json.get<uint64_t>();
  if (out.begin > end || end > buffer_size) {
    return Malformed(path, absl::StrCat("entry '", tensor, "' has data_offsets [", out.begin, ", ",
                                        end, "] outside the ", buffer_size, "-byte data buffer"));
  }
  ASSIGN_OR_RETURN(const int64_t n, CheckedNumElements(out.shape, absl::StrCat(path, ":", tensor)));
  out.bytes = static_cast<uint64_t>(n) * DTypeSize(out.dtype);
  if (end - out.begin != out.bytes) {
    return Malformed(path, absl::StrCat("entry '", tensor, "' spans ", end - out.begin,
                                        " bytes, but shape ", ShapeString(out.shape), " of ",
                                        dtype_name, " needs ", out.bytes));
  }
  return out;
}

}  // namespace

absl::StatusOr<NamedTableData> LoadSafetensorsTable(const std::string& path,
                                                    const std::string& tensor,
                                                    absl::string_view name) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return FileError(path, errno, "open");
  ASSIGN_OR_RETURN(const SafetensorsHeader header, ReadSafetensorsHeader(in, path));
  ASSIGN_OR_RETURN(const nlohmann::json* json, FindSafetensorsEntry(header.json, path, tensor));
  ASSIGN_OR_RETURN(const SafetensorsEntry entry,
                   ParseSafetensorsEntry(*json, header.buffer_size, path, tensor));
  const std::string where = absl::StrCat(path, ":", tensor);
  // Rank before reading, so a wrong tensor costs no large read.
  if (entry.shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("table '", name, "' (", where, ") has shape ",
                                                   ShapeString(entry.shape),
                                                   "; a table must be 2-D [rows, cols]"));
  }
  std::string bytes(static_cast<size_t>(entry.bytes), '\0');
  in.seekg(static_cast<std::streamoff>(header.data_start + entry.begin), std::ios::beg);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in) {
    return absl::DataLossError(absl::StrCat(where, ": read of ", entry.bytes, " bytes failed"));
  }
  return MakeTable(name, where, entry.dtype, entry.shape, bytes.data());
}

absl::StatusOr<NamedTableData> LoadTableSpec(absl::string_view spec) {
  ASSIGN_OR_RETURN(TableSpec parsed, ParseTableSpec(spec));
  if (parsed.safetensors) return LoadSafetensorsTable(parsed.path, parsed.tensor, parsed.name);
  return LoadNpyTable(parsed.path, parsed.name);
}

}  // namespace posenc
