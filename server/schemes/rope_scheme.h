// RoPE: validates queries/keys against a RopeSpec, resolves positions, fetches cos/sin rows
// (from the table cache, or just for the positions present) and rotates in place.
// Thread-safe (the cache synchronises itself); the caller owns the tensors.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/schemes/positions.h"
#include "server/tables/rope_frequencies.h"
#include "server/tables/table_cache.h"
#include "server/tables/table_positions.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

// Widest rotary dimension served (head_dim, or rope.rotary_dim), as GetTable's dim.
inline constexpr int kMaxRotaryDim = 1 << 20;

// Rotates `query` and, when given, `*key` in place (proto/posenc/v1/posenc.proto, Rope).
//  - query: FLOAT32, FLOAT16 or BFLOAT16 in spec.layout: BSHD [batch, seq, heads, head_dim],
//    BHSD [batch, heads, seq, head_dim], THD [tokens, heads, head_dim].
//  - key: the same layout, batch, seq and head_dim; its head count must divide the query's
//    (GQA/MQA). Its dtype may differ from the query's.
//  - positions: BSHD/BHSD as ResolvePositions over [batch, seq]. THD: `ids` has one entry
//    per token (default 0..tokens-1); `offsets`, if given, is a single start position
//    (token t at offsets[0] + t), i.e. THD is treated as one row of `tokens` positions.
//    `values` is not accepted. Multi-axis RoPE (spec.mrope_section, spec.axial_axes) may
//    take `axis_ids` or `mrope_segments` instead of `ids` (ResolveAxisPositions; THD is one
//    row); without them every axis takes the position above. Tokens whose axes differ get
//    cos/sin rows assembled from the position table rows of their axes.
//  - xPos (spec.xpos_scale_base): queries and keys rotate by different rows.
// DYNAMIC and LONGROPE take seq_len = the largest position in the request + 1.
// Errors: INVALID_ARGUMENT naming the field (input.shape[3], key.shape[2], input.dtype,
// rope.rotary_dim, rope.scaling.factor, positions.ids, ...); RESOURCE_EXHAUSTED for a rotary
// dimension over kMaxRotaryDim. Nothing is written on error.
// Results are finite or refused: the spec's ranges (rope_frequencies.h) keep every cos/sin
// row finite, and the rows are checked before the rotation as a backstop. A NaN or inf in
// the queries or keys is the client's data: it propagates, and the call is OK.
absl::Status ApplyRope(const RopeSpec& spec, TensorView query, TensorView* key,
                       const PositionsSpec& positions, TableCache& cache);

// GetTable rows for RoPE: [n, rotary_dim] float32, row r holding cos (rotary_dim/2) then
// sin (rotary_dim/2) of position first + r, times the attention factor. DYNAMIC and
// LONGROPE take seq_len = table_length. INVALID_ARGUMENT for a bad spec, rotary_dim,
// negative first/n, or first + n > table_length.
// With `positions` (not Identity()) row r holds position positions.At(r) instead, and
// DYNAMIC and LONGROPE take seq_len = the largest position of the table + 1.
// REQUIRES: ValidateTablePositions(positions, table_length, false) OK.
absl::StatusOr<Table> RopeTableRows(const RopeSpec& spec, int rotary_dim, int64_t first, int64_t n,
                                    int64_t table_length,
                                    const TablePositions& positions = TablePositions{});

}  // namespace posenc
