// The scheme messages of posenc.v1 (proto/posenc/v1/posenc.proto) converted into the plain
// specs the schemes take. Used by the descriptors (scheme_registry.h); stateless,
// thread-safe.
//
// Proto3 enums are open: a value the proto does not name (e.g. `rope.style = 99`) arrives as
// that number, and each converter answers INVALID_ARGUMENT naming the field and listing the
// known names, never a silent default. Parameter ranges are the schemes' to check
// (Validate*, Apply*), next to their math.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "posenc/v1/posenc.pb.h"
#include "server/graph/laplacian.h"
#include "server/schemes/absolute_scheme.h"
#include "server/schemes/bias_scheme.h"
#include "server/schemes/graph_scheme.h"
#include "server/tables/rope_frequencies.h"
#include "server/tables/sinusoidal_table.h"
#include "server/tables/table_positions.h"

namespace posenc {

absl::StatusOr<SinusoidalSpec> SinusoidalFromProto(const v1::Sinusoidal& s);
absl::StatusOr<CombineSpec> CombineFromSinusoidal(const v1::Sinusoidal& s);
absl::StatusOr<CombineSpec> CombineFromLearned(const v1::Learned& l);
absl::StatusOr<Overflow> OverflowFromProto(v1::Overflow o);
absl::StatusOr<ContinuousSpec> ContinuousFromProto(const v1::Continuous& c);
absl::StatusOr<RopeSpec> RopeFromProto(const v1::Rope& r);
absl::StatusOr<AlibiSpec> AlibiFromProto(const v1::Alibi& a);
T5Spec T5FromProto(const v1::T5Bias& t);
absl::StatusOr<Sinusoidal2DSpec> Sinusoidal2DFromProto(const v1::Sinusoidal2D& s);
absl::StatusOr<CombineSpec> CombineFromSinusoidal2D(const v1::Sinusoidal2D& s);
absl::StatusOr<CombineSpec> CombineFromFourier(const v1::Fourier& f);
// Which position each row of a GetTable stream has (first_position, position_step,
// clamp_position); unchecked: ValidateTablePositions checks it.
TablePositions TablePositionsFromProto(const v1::TableRequest& r);
DebertaSpec DebertaFromProto(const v1::DebertaRelative& d);
// Spans point into `h`.
std::vector<HierarchicalLevel> HierarchicalFromProto(const v1::Hierarchical& h);
// The encoding and every field of every encoding (ApplyGraph refuses those that do not
// belong). The registry chose the descriptor by the encoding, so it is a named value here.
// Spans point into `request`.
GraphRequestSpec GraphFromProto(const v1::GraphRequest& request);

}  // namespace posenc
