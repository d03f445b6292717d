// The descriptor of RoPE (rope_scheme.h), registered in scheme_registry.cc.
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/schemes/rope_scheme.h"
#include "server/schemes/scheme_cost.h"
#include "server/schemes/scheme_proto.h"
#include "server/schemes/scheme_registry.h"

namespace posenc {
namespace {

absl::Status CheckRopeTable(const v1::TableRequest& r) {
  if (r.dim() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim is ", r.dim(), "; the rotary dimension must be even"));
  }
  // Checks the spec (and computes the first row) before any chunk goes out.
  ASSIGN_OR_RETURN(const RopeSpec rope, RopeFromProto(r.rope()));
  const TablePositions positions = TablePositionsFromProto(r);
  RETURN_IF_ERROR(ValidateTablePositions(positions, r.length(), /*allow_negative=*/false));
  return RopeTableRows(rope, r.dim(), 0, 1, r.length(), positions).status();
}

// [n, dim] holding cos then sin per row is the same memory as [n, 2, dim/2].
absl::StatusOr<TableRows> RopeRows(const v1::TableRequest& r, int64_t first, int64_t n) {
  ASSIGN_OR_RETURN(const RopeSpec rope, RopeFromProto(r.rope()));
  ASSIGN_OR_RETURN(Table rows,
                   RopeTableRows(rope, r.dim(), first, n, r.length(), TablePositionsFromProto(r)));
  return TableRows{std::move(rows), {n, 2, r.dim() / 2}};
}

}  // namespace

SchemeDescriptor RopeScheme() {
  const std::vector<std::string> floats = {"FP32", "FP16", "BF16"};
  SchemeDescriptor s;
  s.name = "rope";
  s.family = SchemeFamily::kRotary;
  s.encode_case = v1::EncodeRequest::kRope;
  s.table_case = v1::TableRequest::kRope;
  s.takes_key = true;
  s.takes_axis_positions = true;
  s.position_axes = [](const v1::EncodeRequest& r) -> int64_t {
    const v1::Rope& rope = r.rope();
    return rope.mrope_section_size() > 0 ? rope.mrope_section_size() : rope.axial_axes();
  };
  s.rotate = [](const SchemeEnv& env, const v1::EncodeRequest& r, TensorView query, TensorView* key,
                const PositionsSpec& positions) -> absl::Status {
    ASSIGN_OR_RETURN(const RopeSpec rope, RopeFromProto(r.rope()));
    return ApplyRope(rope, query, key, positions, *env.cache);
  };
  // The tensors go back in place (one more copy when serialized); cos/sin for every
  // token's angles, at most one pair of rows per token.
  s.encode_cost = [](const v1::EncodeRequest& r) {
    const CostBytes in = EncodeInBytes(r);
    return (in + in + CostBytes::Product({CostRows(r.input()), CostDim(r.input(), -1), 8}))
        .Cost("input.shape");
  };
  s.check_table = CheckRopeTable;
  s.table_rows = RopeRows;
  s.model = OipModel{{{"input", floats, {-1, -1, -1, -1}, false},
                      {"key", floats, {-1, -1, -1, -1}, true},
                      {"position_ids", {"INT64", "INT32"}, {-1, -1}, true},
                      {"axis_ids", {"INT64", "INT32"}, {-1, -1, -1}, true}},
                     {{"output", {"FP32"}, {-1, -1, -1, -1}, false},
                      {"key_output", {"FP32"}, {-1, -1, -1, -1}, true}},
                     {"config", "positions", "position_offset"}};
  return s;
}

}  // namespace posenc
