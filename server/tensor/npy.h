// NumPy .npy reading and writing (format versions 1.0, 2.0 and 3.0; little-endian float32,
// float64, float16, int32 and int64; C order only), in memory and on disk.
// Pure functions; thread-safe. NpyArray owns its bytes.
//
//   ASSIGN_OR_RETURN(NpyArray a, ReadNpyFile("x.npy"));   // a.dtype, a.shape, a.data
//   RETURN_IF_ERROR(WriteNpyFile("y.npy", DType::kFloat32, {2, 3}, bytes));
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/tensor/dtype.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

struct NpyArray {
  DType dtype = DType::kFloat32;
  Shape shape;
  // Row-major little-endian elements, exactly product(shape) * DTypeSize(dtype) bytes.
  std::string data;

  ConstTensorView view() const { return ConstTensorView(dtype, shape, data.data()); }
};

// What the header of an .npy file says, and where its data starts.
struct NpyHeader {
  DType dtype = DType::kFloat32;
  Shape shape;
  size_t data_offset = 0;  // bytes from the start of the file to the first element
  size_t data_bytes = 0;   // product(shape) * DTypeSize(dtype)
};

// Parses the magic, version and header dict at the start of `bytes` (which may hold only
// the header, or the whole file). `name` (a file name or "input") is used in messages.
// Malformed or unsupported headers (big-endian, Fortran order, other dtypes) give
// INVALID_ARGUMENT naming `name`.
absl::StatusOr<NpyHeader> ParseNpyHeader(absl::string_view bytes, absl::string_view name);

// Parses a whole .npy image. The data must be exactly as long as the header says.
absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes, absl::string_view name);

// Builds an .npy image (version 1.0, or 2.0 when the header needs more than 64 KiB).
// INVALID_ARGUMENT for bfloat16 (the format has no such dtype) or when data.size() does not
// match the shape.
absl::StatusOr<std::string> SerializeNpy(DType dtype, absl::Span<const int64_t> shape,
                                         absl::string_view data);

// Reads an .npy file. NOT_FOUND when it does not exist, PERMISSION_DENIED when it cannot
// be opened, INVALID_ARGUMENT when malformed. The header is checked against the file size
// before the data is allocated.
absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path);

// Writes (replaces) an .npy file.
absl::Status WriteNpyFile(const std::string& path, DType dtype, absl::Span<const int64_t> shape,
                          absl::string_view data);
inline absl::Status WriteNpyFile(const std::string& path, const NpyArray& array) {
  return WriteNpyFile(path, array.dtype, array.shape, array.data);
}

}  // namespace posenc
