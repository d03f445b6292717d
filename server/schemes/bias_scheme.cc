#include "server/schemes/bias_scheme.h"

#include "absl/strings/str_cat.h"
#include "server/common/checked_math.h"
#include "server/common/status_macros.h"

namespace posenc {
namespace {

absl::Status PlanT5(BiasPlan& plan, const NamedTables& tables) {
  const T5Spec& t5 = *plan.spec.t5;
  RETURN_IF_ERROR(ValidateT5Spec(t5));
  const std::string& name = plan.spec.t5_table;
  if (!name.empty()) {
    const NamedTable* named = tables.Find(name);
    if (!named) {
      return absl::NotFoundError(
          absl::StrCat("t5.table '", name, "' is not loaded (see ListSchemes)"));
    }
    plan.t5_table = named->table.get();
    const int64_t shape[2] = {plan.t5_table->rows, plan.t5_table->cols};
    RETURN_IF_ERROR(ValidateT5TableShape(t5, shape));
    plan.heads = plan.t5_table->cols;
  }
  if (plan.spec.add_to_scores && !plan.t5_table) {
    return absl::InvalidArgumentError(
        "scores is set but t5.table is empty; adding T5 biases needs a [num_buckets, heads] "
        "table");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BiasPlan> PlanBias(const BiasSpec& spec, const NamedTables& tables) {
  if (spec.alibi.has_value() == spec.t5.has_value()) {
    return absl::InvalidArgumentError("scheme is not set; set alibi or t5");
  }
  RETURN_IF_ERROR(ValidateBiasGeometry(spec.geom));
  BiasPlan plan;
  plan.spec = spec;
  if (spec.alibi) {
    RETURN_IF_ERROR(ValidateAlibiSpec(*spec.alibi));
    plan.heads = spec.alibi->num_heads;
  } else {
    RETURN_IF_ERROR(PlanT5(plan, tables));
  }
  const BiasGeometry& g = spec.geom;
  const bool bucket_ids = spec.t5 && !plan.t5_table;
  plan.output_shape = bucket_ids ? Shape{g.query_length, g.key_length}
                                 : Shape{plan.heads, g.query_length, g.key_length};
  plan.output_dtype = bucket_ids ? DType::kInt32 : DType::kFloat32;
  return plan;
}

absl::StatusOr<int64_t> BiasOutputBytes(const BiasPlan& plan, const SchemeLimits& limits) {
  const Shape& s = plan.output_shape;
  return SizeWithin({4, s[0], s[1], s.size() == 3 ? s[2] : 1},
                    static_cast<int64_t>(limits.max_output_bytes),
                    absl::StrCat("the bias ", ShapeString(s)),
                    "--max_message_bytes (or pass output_shm)");
}

absl::Status BuildBias(const BiasPlan& plan, const TensorView& out) {
  const BiasSpec& s = plan.spec;
  if (s.alibi) return BuildAlibiBias(*s.alibi, s.geom, out.As<float>());
  if (!plan.t5_table) return BuildT5Buckets(*s.t5, s.geom, out.As<int32_t>());
  return BuildT5Bias(*s.t5, s.geom, plan.t5_table->data.data(),
                     static_cast<int32_t>(plan.heads), out.As<float>());
}

absl::Status AddBias(const BiasPlan& plan, const TensorView& scores) {
  const BiasSpec& s = plan.spec;
  RETURN_IF_ERROR(
      ValidateScores(s.geom, plan.heads, s.alibi ? "alibi.num_heads" : "t5.table", scores));
  if (s.alibi) return AddAlibiBias(*s.alibi, s.geom, scores);
  return AddT5Bias(*s.t5, s.geom, plan.t5_table->data.data(), static_cast<int32_t>(plan.heads),
                   scores);
}

}  // namespace posenc
