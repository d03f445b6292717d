// RoPE's formula element by element in float32, the reference the kernels are tested
// against: independent of server/kernels' code (its own loads, stores and loop), sharing only
// the geometry and pairing types. Pure function; thread-safe.
#pragma once

#include "absl/types/span.h"
#include "server/kernels/rope_kernel.h"

namespace posenc::testing {

// Rotates x in place as RopeRotateInPlace does (same contract), one element at a time:
// x_a' = x_a*cos_k - x_b*sin_k, x_b' = x_b*cos_k + x_a*sin_k in float32, 16-bit inputs
// widened and rounded once with the scalar conversions.
void RopeRotateReference(const TensorView& x, const RopeGeometry& g, RopePairing pairing,
                         int rotary_dim, absl::Span<const float* const> token_rows);

}  // namespace posenc::testing
