// RoPE parameters (plain structs mirroring posenc.v1.Rope), their validation, the inverse
// frequencies and attention factor of every HF transformers rope_type, and cos/sin rows
// computed in float64 and rounded once. Pure functions; thread-safe. No ownership.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/tables/table_cache.h"

namespace posenc {

// The model's rope_scaling (HF config.json). Unset fields take HF's defaults; see
// ComputeRopeFrequencies for which fields each type reads.
struct RopeScalingSpec {
  enum class Type { kNone, kLinear, kDynamic, kYarn, kLlama3, kLongRope, kProportional };
  Type type = Type::kNone;
  std::optional<double> factor;
  std::optional<double> beta_fast;         // YARN, default 32
  std::optional<double> beta_slow;         // YARN, default 1
  std::optional<double> mscale;            // YARN (DeepSeek)
  std::optional<double> mscale_all_dim;    // YARN (DeepSeek)
  std::optional<double> attention_factor;  // YARN, LONGROPE: overrides the computed one
  std::optional<double> low_freq_factor;   // LLAMA3, default 1
  std::optional<double> high_freq_factor;  // LLAMA3, default 4
  std::optional<int64_t> original_max_position_embeddings;
  std::optional<int64_t> max_position_embeddings;
  std::vector<double> short_factor;       // LONGROPE, rotary_dim/2 entries
  std::vector<double> long_factor;        // LONGROPE, rotary_dim/2 entries
  std::optional<bool> truncate;           // YARN, default true
  std::optional<double> rope_proportion;  // PROPORTIONAL, default 1
};

struct RopeSpec {
  // NEOX: pairs (i, i + rotary_dim/2) (rotate_half); GPTJ: pairs (2i, 2i+1).
  enum class Style { kNeox, kGptj };
  // BSHD: [batch, seq, heads, head_dim]; BHSD: [batch, heads, seq, head_dim];
  // THD: [tokens, heads, head_dim].
  enum class Layout { kBshd, kBhsd, kThd };

  std::optional<double> base;     // default 10000
  std::optional<int> rotary_dim;  // default head_dim
  Style style = Style::kNeox;
  Layout layout = Layout::kBshd;
  RopeScalingSpec scaling;
  // Multimodal RoPE (Qwen2-VL; interleaved: Qwen3-VL): slot f turns by the position on axis
  // RopeSlotAxes(...)[f]. The sections sum to rotary_dim/2. Empty: one axis.
  std::vector<int> mrope_section;
  bool mrope_interleaved = false;
  // Axial RoPE over this many axes (0 = off; Qwen2-VL's vision tower uses 2).
  int axial_axes = 0;
  // xPos (FlashAttention's RotaryEmbedding(scale_base)): queries times
  // zeta_k^((p - c) / scale_base), keys divided by it; c defaults per request.
  std::optional<double> xpos_scale_base;
  std::optional<int64_t> xpos_center;

  // Positions per token: len(mrope_section), axial_axes, or 1.
  int num_axes() const {
    if (!mrope_section.empty()) return static_cast<int>(mrope_section.size());
    return axial_axes > 0 ? axial_axes : 1;
  }
};

inline constexpr double kDefaultRopeBase = 10000.0;

// Ranges that keep RoPE finite. With them every inverse frequency is at most 1e12
// (base^(-2i/d) <= 1e6, divided by a factor >= 1e-6), every angle p * inv_freq with
// p <= 2^40 below 1.1e24, and cos and sin times the attention factor within float32, so
// finite queries and keys of magnitude below 1e32 rotate to finite values. Outside them
// (e.g. a LINEAR factor of 1e-300 at position 1e9, a YARN attention_factor of 1e300) the
// rows would be inf or NaN: INVALID_ARGUMENT naming the field instead.
inline constexpr double kMinRopeBase = 1e-6;  // rope.base (upwards only shrinks frequencies)
// rope.scaling.factor (given, or max / original), the entries of short_factor and
// long_factor, beta_fast and beta_slow.
inline constexpr double kMinRopeFactor = 1e-6;
inline constexpr double kMaxRopeFactor = 1e6;
// The attention factor, given or computed from mscale / mscale_all_dim; mscale and
// mscale_all_dim themselves are in [0, kMaxRopeFactor].
inline constexpr double kMinAttentionFactor = 1e-6;
inline constexpr double kMaxAttentionFactor = 1e6;

// Most axes served (mrope_section entries, axial_axes).
inline constexpr int kMaxRopeAxes = 8;
// xPos scale bases allowed: a smaller one makes zeta^((p - c) / scale_base) overflow at
// modest positions (the rows are checked finite anyway).
inline constexpr double kMinXposScaleBase = 1e-3;

// xPos of one request: the scale base and the resolved centre.
struct XposParams {
  double scale_base = 0;
  int64_t center = 0;
};

// What the cos/sin rows are made of: angle(p, f) = p_{slot_axis[f]} * inv_freq[f], and cos
// and sin are both multiplied by attention_factor (and, with xpos, by zeta_f^((p - c) /
// scale_base) for queries, divided by it for keys; p the slot's position).
struct RopeFrequencies {
  std::vector<double> inv_freq;  // rotary_dim / 2 entries
  double attention_factor = 1.0;
  // The axis whose position each slot takes (rotary_dim / 2 entries) for multi-axis specs
  // (mrope_section or axial_axes set, even with one axis); empty otherwise.
  std::vector<uint8_t> slot_axis;
  int num_axes = 1;
  std::optional<XposParams> xpos;
};

// Checks `spec` for a head of `rotary_dim` rotated features (already defaulted from
// head_dim by the caller). INVALID_ARGUMENT naming the field (rope.base, rope.rotary_dim,
// rope.scaling.factor, rope.scaling.long_factor, ...) for a value that does not fit,
// including one outside the ranges above.
absl::Status ValidateRopeSpec(const RopeSpec& spec, int rotary_dim);

// The inverse frequencies and attention factor exactly as HF transformers'
// modeling_rope_utils.py computes them, in float64. `seq_len` is the sequence length the
// request needs (largest position + 1); only DYNAMIC (NTK base stretch once seq_len passes
// max_position_embeddings) and LONGROPE (long_factor once seq_len passes
// original_max_position_embeddings) read it. Validates with ValidateRopeSpec first, and
// checks what it computed: every inverse frequency finite and the attention factor in
// [kMinAttentionFactor, kMaxAttentionFactor], else INVALID_ARGUMENT naming the parameters.
//
// Where HF reads a field from the model config rather than rope_scaling:
//  - DYNAMIC: max_position_embeddings, falling back to original_max_position_embeddings.
//  - YARN: the correction range uses original_max_position_embeddings, falling back to
//    max_position_embeddings; factor, when unset, is max / original (HF v5).
//  - LONGROPE: factor, when unset, is max_position_embeddings / original.
absl::StatusOr<RopeFrequencies> ComputeRopeFrequencies(const RopeSpec& spec, int rotary_dim,
                                                       int64_t seq_len);

// Fills one row per position into `out` (positions.size() rows of width
// 2 * inv_freq.size()): cos of every angle, then sin, each computed in float64, times the
// attention factor, rounded once to float32. Every axis takes the row's position; with xPos
// the rows are the queries' (FillRopeTokenRow gives both).
void FillRopeRows(const RopeFrequencies& freqs, absl::Span<const int64_t> positions, float* out);

// The same for the positions first .. first + n - 1.
void FillRopeRowRange(const RopeFrequencies& freqs, int64_t first, int64_t n, float* out);

// One token's rows from its position on each axis (axis_positions[a], num_axes entries):
// the query row and, when key_row is not null, the key row (they differ only with xPos).
// Each of width 2 * inv_freq.size(), computed in float64 and rounded once.
void FillRopeTokenRow(const RopeFrequencies& freqs, absl::Span<const int64_t> axis_positions,
                      float* query_row, float* key_row);

// The table of positions first .. first + n - 1 with, per row, the query row then the key
// row (width 4 * inv_freq.size()); every axis takes the row's position. For xPos.
void FillRopeQueryKeyRowRange(const RopeFrequencies& freqs, int64_t first, int64_t n, float* out);

// The cache key of the table of positions first .. first + rows - 1 built from `freqs`.
// It holds every inverse frequency and the attention factor exactly (their bytes), so
// two specs share a table exactly when they produce the same rows.
// With xPos the key also holds the scale base and centre (the table holds query and key rows).
std::string RopeCacheKey(const RopeFrequencies& freqs, int64_t first, int64_t rows);

// Whether ComputeRopeFrequencies(spec, rotary_dim, seq_len) reads seq_len: DYNAMIC,
// LONGROPE, and xPos without a centre.
bool RopeFrequenciesReadLength(const RopeSpec& spec);

// Whether two specs are equal in every field, doubles compared bit for bit, so that what was
// computed from one holds for the other.
bool SameRopeSpec(const RopeSpec& a, const RopeSpec& b);

// ComputeRopeFrequencies and RopeCacheKey, remembered for the last arguments: a decode loop
// asks with the same spec every step, and computing both again (float64 inverse
// frequencies; a key of 65 doubles for a head of 128) cost about 3,500 instructions a call.
// Not thread-safe: one per thread.
class RopeFrequencyMemo {
 public:
  // ComputeRopeFrequencies(spec, rotary_dim, seq_len), remembered while the spec and
  // rotary_dim stay the same, and seq_len too where the spec reads it. The pointer is valid
  // until the next call.
  absl::StatusOr<const RopeFrequencies*> Get(const RopeSpec& spec, int rotary_dim, int64_t seq_len);
  // RopeCacheKey(*Get(...), 0, rows). REQUIRES: the last Get returned OK.
  const std::string& PrefixTableKey(int64_t rows);

 private:
  bool valid_ = false;
  RopeSpec spec_;
  int rotary_dim_ = 0;
  int64_t seq_len_ = 0;
  RopeFrequencies freqs_;
  int64_t key_rows_ = -1;  // the rows key_ names; -1: none yet
  std::string key_;
};

}  // namespace posenc
