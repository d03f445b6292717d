#include "server/schemes/bias_scheme.h"

#include "absl/strings/str_cat.h"
#include "server/common/checked_math.h"
#include "server/common/status_macros.h"

namespace posenc {
namespace {

absl::StatusOr<const Table*> FindTable(const NamedTables& tables, const std::string& name,
                                       absl::string_view field) {
  const NamedTable* named = tables.Find(name);
  if (!named) {
    return absl::NotFoundError(
        absl::StrCat(field, " '", name, "' is not loaded (see ListSchemes)"));
  }
  return named->table.get();
}

absl::Status PlanT5(BiasPlan& plan, const NamedTables& tables) {
  const T5Spec& t5 = *plan.spec.t5;
  RETURN_IF_ERROR(ValidateT5Spec(t5));
  const std::string& name = plan.spec.t5_table;
  if (!name.empty()) {
    ASSIGN_OR_RETURN(plan.t5_table, FindTable(tables, name, "t5.table"));
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

// Shaw: indices, embeddings, or (with a query) the query term; see ShawRelative.
absl::Status PlanShaw(BiasPlan& plan, const NamedTables& tables) {
  const BiasSpec& s = plan.spec;
  const BiasGeometry& g = s.geom;
  RETURN_IF_ERROR(ValidateShawSpec(*s.shaw));
  if (s.shaw_table.empty()) {
    if (s.query_shape) {
      return absl::InvalidArgumentError(
          "query is set but shaw.table is empty; the query term needs a [2k + 1, d] table");
    }
    if (s.add_to_scores) {
      return absl::InvalidArgumentError(
          "scores is set but shaw.table is empty; Shaw without a table returns indices, "
          "which are not added to scores (add a table and a query)");
    }
    plan.output_shape = {g.query_length, g.key_length};
    plan.output_dtype = DType::kInt32;
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(plan.shaw_table, FindTable(tables, s.shaw_table, "shaw.table"));
  const int64_t shape[2] = {plan.shaw_table->rows, plan.shaw_table->cols};
  RETURN_IF_ERROR(ValidateShawTableShape(*s.shaw, shape));
  const int64_t d = plan.shaw_table->cols;
  if (!s.query_shape) {
    if (s.add_to_scores) {
      return absl::InvalidArgumentError(
          "scores is set but query is not; Shaw adds sum_d query * table[index] to scores");
    }
    plan.output_shape = {g.query_length, g.key_length, d};
    plan.output_dtype = DType::kFloat32;
    return absl::OkStatus();
  }
  const Shape& qs = *s.query_shape;
  if (qs.size() == 4 && (qs[0] < 1 || qs[1] < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "query is ", ShapeString(qs), ": query.shape[", qs[0] < 1 ? 0 : 1, "] (",
        qs[0] < 1 ? "batch" : "heads", ") is ", qs[0] < 1 ? qs[0] : qs[1],
        "; batch and heads must be >= 1 (an empty query has no query term: send at least "
        "one row, or leave query unset for the embeddings [query_length, key_length, d])"));
  }
  if (!IsFloat(s.query_dtype) || qs.size() != 4 || qs[2] != g.query_length || qs[3] != d) {
    return absl::InvalidArgumentError(
        absl::StrCat("query is ", ShapeString(qs), " ", DTypeName(s.query_dtype),
                     "; it must be [batch, heads, query_length (", g.query_length, "), d (", d,
                     ", shaw.table's width)] FLOAT32, FLOAT16 or BFLOAT16"));
  }
  plan.shaw_query_term = true;
  plan.heads = qs[1];
  plan.output_shape = {qs[0], qs[1], g.query_length, g.key_length};
  plan.output_dtype = s.query_dtype;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BiasPlan> PlanBias(const BiasSpec& spec, const NamedTables& tables) {
  const int schemes = spec.alibi.has_value() + spec.t5.has_value() + spec.shaw.has_value() +
                      spec.deberta.has_value();
  if (schemes != 1) {
    return absl::InvalidArgumentError("scheme is not set; set alibi, t5, shaw or deberta");
  }
  RETURN_IF_ERROR(ValidateBiasGeometry(spec.geom));
  BiasPlan plan;
  plan.spec = spec;
  const BiasGeometry& g = spec.geom;
  if (spec.query_shape && !spec.shaw) {
    return absl::InvalidArgumentError("query is set; only shaw (with a table) takes it");
  }
  if (spec.shaw) {
    RETURN_IF_ERROR(PlanShaw(plan, tables));
    return plan;
  }
  if (spec.deberta) {
    RETURN_IF_ERROR(ValidateDebertaSpec(*spec.deberta, g));
    if (spec.add_to_scores) {
      return absl::InvalidArgumentError(
          "scores is set; deberta returns INT32 relative positions, which are not added to "
          "scores");
    }
    plan.output_shape = {g.query_length, g.key_length};
    plan.output_dtype = DType::kInt32;
    return plan;
  }
  if (spec.alibi) {
    RETURN_IF_ERROR(ValidateAlibiSpec(*spec.alibi));
    plan.heads = spec.alibi->num_heads;
  } else {
    RETURN_IF_ERROR(PlanT5(plan, tables));
  }
  const bool bucket_ids = spec.t5 && !plan.t5_table;
  plan.output_shape = bucket_ids ? Shape{g.query_length, g.key_length}
                                 : Shape{plan.heads, g.query_length, g.key_length};
  plan.output_dtype = bucket_ids ? DType::kInt32 : DType::kFloat32;
  return plan;
}

absl::StatusOr<int64_t> BiasOutputBytes(const BiasPlan& plan, const SchemeLimits& limits) {
  const Shape& s = plan.output_shape;
  const int64_t elem = static_cast<int64_t>(DTypeSize(plan.output_dtype));
  return SizeWithin({elem, s[0], s[1], s.size() >= 3 ? s[2] : 1, s.size() >= 4 ? s[3] : 1},
                    static_cast<int64_t>(limits.max_output_bytes),
                    absl::StrCat("the bias ", ShapeString(s)),
                    "--max_message_bytes (or pass output_shm)");
}

absl::Status BuildBias(const BiasPlan& plan, const TensorView& out, const ConstTensorView* query) {
  const BiasSpec& s = plan.spec;
  if (s.alibi) return BuildAlibiBias(*s.alibi, s.geom, out.As<float>());
  if (s.deberta) return BuildDebertaPositions(*s.deberta, s.geom, out.As<int32_t>());
  if (s.shaw) {
    if (!plan.shaw_table) return BuildShawIndex(*s.shaw, s.geom, out.As<int32_t>());
    const Table& t = *plan.shaw_table;
    if (!plan.shaw_query_term) {
      return BuildShawEmbeddings(*s.shaw, s.geom, t.data.data(), t.cols, out.As<float>());
    }
    if (query == nullptr) return absl::InvalidArgumentError("query has no data");
    return ShawQueryTerm(*s.shaw, s.geom, t.data.data(), t.cols, *query, out,
                         /*add_to_out=*/false);
  }
  if (!plan.t5_table) return BuildT5Buckets(*s.t5, s.geom, out.As<int32_t>());
  return BuildT5Bias(*s.t5, s.geom, plan.t5_table->data.data(), static_cast<int32_t>(plan.heads),
                     out.As<float>());
}

absl::Status AddBias(const BiasPlan& plan, const TensorView& scores, const ConstTensorView* query) {
  const BiasSpec& s = plan.spec;
  if (s.shaw) {
    if (!plan.shaw_query_term || query == nullptr) {
      return absl::InvalidArgumentError("scores with shaw need shaw.table and query");
    }
    const Table& t = *plan.shaw_table;
    return ShawQueryTerm(*s.shaw, s.geom, t.data.data(), t.cols, *query, scores,
                         /*add_to_out=*/true);
  }
  if (s.deberta) return absl::InvalidArgumentError("deberta does not add to scores");
  RETURN_IF_ERROR(
      ValidateScores(s.geom, plan.heads, s.alibi ? "alibi.num_heads" : "t5.table", scores));
  if (s.alibi) return AddAlibiBias(*s.alibi, s.geom, scores);
  return AddT5Bias(*s.t5, s.geom, plan.t5_table->data.data(), static_cast<int32_t>(plan.heads),
                   scores);
}

}  // namespace posenc
