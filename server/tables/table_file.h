// Loads the named tables of the server's --table flag from .npy and .safetensors files.
// Pure functions (file reads only); thread-safe. The result owns its float32 copy.
//
//   ASSIGN_OR_RETURN(NamedTableData t, LoadTableSpec("gpt2_wpe=/models/wpe.npy"));
//   ASSIGN_OR_RETURN(NamedTableData u,
//                    LoadTableSpec("t5=/m/model.safetensors:encoder.rel_bias.weight"));
#pragma once

#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "server/tensor/dtype.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

struct NamedTableData {
  std::string name;
  Shape shape;                           // [rows, cols], both >= 1
  DType source_dtype = DType::kFloat32;  // as stored in the file
  std::vector<float> data;               // float32, row-major [rows, cols]
  std::vector<double> float64_data;      // the values as read when the file held float64
};

// Spec grammar: NAME=PATH.npy | NAME=PATH.safetensors:TENSOR. NAME is non-empty and has no
// whitespace, '=' or ':'. The table must be 2-D with at least one row and column, and hold
// finite values: .npy float32/float64/float16 in C order; safetensors F32/F64/F16/BF16.
// Errors: a malformed spec, file, dtype or rank -> INVALID_ARGUMENT; a missing file, or a
// tensor name the file lacks (the message lists the ones it has) -> NOT_FOUND.
absl::StatusOr<NamedTableData> LoadTableSpec(absl::string_view spec);

// The pieces of a spec, without touching the file system.
struct TableSpec {
  std::string name;
  std::string path;
  std::string tensor;  // safetensors only; empty for .npy
  bool safetensors = false;
};
absl::StatusOr<TableSpec> ParseTableSpec(absl::string_view spec);

// Reads one 2-D tensor from a safetensors file; `tensor` must name an entry of its header.
// Only that tensor's bytes are read. `name` is the table name, for messages.
absl::StatusOr<NamedTableData> LoadSafetensorsTable(const std::string& path,
                                                    const std::string& tensor,
                                                    absl::string_view name);

// Reads a 2-D float32/float64/float16 .npy file.
absl::StatusOr<NamedTableData> LoadNpyTable(const std::string& path, absl::string_view name);

}  // namespace posenc
