// GetTable: the bytes are one TableRequest; PlanTable, then the first two chunks and the
// last one (the largest row indices), as the streaming handler would send them. Each chunk's
// first_position is the position of its first row.
#include <algorithm>
#include <cstdint>
#include <optional>

#include "tests/fuzz/fuzz_state.h"
#include "tests/fuzz/proto_mutator.h"

namespace {

// The position of table row r: first_position + r * position_step, clamped to
// [-clamp_position, clamp_position] when set (TableRequest), in 128 bits: a clamped row's
// unclamped position may be far outside int64 (r and position_step are up to 2^40 each).
// Empty when an unclamped position does not fit int64.
std::optional<int64_t> RowPosition(const posenc::v1::TableRequest& request, int64_t r) {
  const __int128 step = request.has_position_step() ? request.position_step() : 1;
  __int128 p = static_cast<__int128>(r) * step + request.first_position();
  if (request.has_clamp_position()) {
    p = std::clamp<__int128>(p, -request.clamp_position(), request.clamp_position());
  }
  if (p < INT64_MIN || p > INT64_MAX) return std::nullopt;
  return static_cast<int64_t>(p);
}

void Chunk(const posenc::v1::TableRequest& request, int64_t first, int64_t rows) {
  const int64_t n = std::min(rows, request.length() - first);
  posenc::v1::TableChunk chunk;
  const absl::Status status = posenc::fuzz::Handlers().TableChunk(request, first, n, chunk);
  posenc::fuzz::CheckStatus(status, "TableChunk");
  if (!status.ok()) return;
  const std::optional<int64_t> position = RowPosition(request, first);
  if (!position || chunk.first_position() != *position || chunk.rows().shape_size() < 1 ||
      chunk.rows().shape(0) != n) {
    __builtin_trap();
  }
  posenc::fuzz::CheckTensor(chunk.rows(), "TableChunk rows");
}

}  // namespace

POSENC_FUZZ_PROTO_MUTATOR(posenc::v1::TableRequest)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  posenc::v1::TableRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return -1;
  posenc::SchemeLabel scheme = posenc::kNoScheme;
  const absl::StatusOr<int64_t> rows = posenc::fuzz::Handlers().PlanTable(request, &scheme);
  posenc::fuzz::CheckStatus(rows.status(), "PlanTable");
  if (!rows.ok()) return 0;
  if (*rows < 1) __builtin_trap();
  const auto ticket = posenc::fuzz::Admit(posenc::CostOf(request, *rows));
  if (!ticket) return 0;
  const int64_t chunks = (request.length() - 1) / *rows + 1;
  for (int64_t c = 0; c < std::min<int64_t>(chunks, 2); ++c) Chunk(request, c * *rows, *rows);
  if (chunks > 2) Chunk(request, (chunks - 1) * *rows, *rows);
  return 0;
}
