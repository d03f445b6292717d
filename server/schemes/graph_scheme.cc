#include "server/schemes/graph_scheme.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/common/checked_math.h"
#include "server/common/status_macros.h"

namespace posenc {
namespace {

absl::Status CheckInput(const GraphSpec& spec, const ConstTensorView& input,
                        const SchemeLimits& limits) {
  if (!IsFloat(input.dtype) || input.shape.size() != 2 || input.shape[0] != spec.num_nodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input is ", ShapeString(input.shape), " ", DTypeName(input.dtype),
        "; GraphEncode needs [num_nodes (", spec.num_nodes,
        "), d] FLOAT32, FLOAT16 or BFLOAT16"));
  }
  // d <= 2^40 (a checked shape) and k < 2^31, so d + k cannot overflow.
  return SizeWithin({spec.num_nodes, input.shape[1] + std::max(spec.k, 0),
                     static_cast<int64_t>(DTypeSize(input.dtype))},
                    static_cast<int64_t>(limits.max_output_bytes), "the output",
                    "--max_message_bytes")
      .status();
}

// [n, d + k] in the input's dtype: each row is the input row, then the encoding.
std::string Concatenate(const ConstTensorView& input, const GraphEncoding& encoding) {
  const int64_t n = encoding.num_nodes, k = encoding.k, d = input.shape[1];
  const size_t elem = DTypeSize(input.dtype);
  std::string out(static_cast<size_t>(n * (d + k)) * elem, '\0');
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(out.data() + r * (d + k) * elem,
                static_cast<const char*>(input.data) + r * d * elem, d * elem);
    FromFloat32(encoding.vectors.data() + r * k, input.dtype,
                out.data() + (r * (d + k) + d) * elem, k);
  }
  return out;
}

}  // namespace

absl::StatusOr<GraphResult> ApplyGraph(const GraphSpec& spec,
                                       const std::optional<ConstTensorView>& input,
                                       const SchemeLimits& limits, GraphLimits graph_limits,
                                       const CancelCheck& cancelled) {
  if (input) RETURN_IF_ERROR(CheckInput(spec, *input, limits));
  graph_limits.max_output_elements = static_cast<int64_t>(limits.max_output_bytes / 4);
  ASSIGN_OR_RETURN(GraphEncoding encoding,
                   ComputeLaplacianEncoding(spec, graph_limits, cancelled));
  GraphResult result;
  result.eigenvalues = std::move(encoding.eigenvalues);
  const int64_t n = encoding.num_nodes, k = encoding.k;
  if (!input) {
    result.shape = {n, k};
    result.data.assign(reinterpret_cast<const char*>(encoding.vectors.data()),
                       encoding.vectors.size() * sizeof(float));
    return result;
  }
  result.shape = {n, input->shape[1] + k};
  result.dtype = input->dtype;
  result.data = Concatenate(*input, encoding);
  return result;
}

}  // namespace posenc
