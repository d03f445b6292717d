// The schemes posenc serves: one SchemeDescriptor per scheme, all registered in one list
// (Schemes(), scheme_registry.cc). A descriptor owns everything the service needs to know
// about its scheme: its name (the ListSchemes entry, the Open Inference Protocol model name
// and the metrics label), its family, how a request selects it, its proto conversion and
// validation, its cost model, whether it works in place, its apply step and its OIP model.
// Every consumer (ListSchemes, request dispatch, request cost, metrics labels, the OIP model
// index, metadata and dispatch, the "unknown scheme" messages) iterates the list or looks a
// descriptor up here; nothing outside server/schemes/ names an individual scheme.
//
// The list is built once, on first use, and never changes; every function here is
// thread-safe. Descriptors are owned by the registry and live for the whole process.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "google/protobuf/message.h"
#include "posenc/v1/posenc.pb.h"
#include "server/common/cancel.h"
#include "server/graph/laplacian.h"
#include "server/schemes/absolute_scheme.h"
#include "server/schemes/bias_scheme.h"
#include "server/schemes/graph_scheme.h"
#include "server/schemes/positions.h"
#include "server/tables/named_tables.h"
#include "server/tables/table_cache.h"
#include "server/tensor/tensor_view.h"

namespace posenc {

// Which request a scheme is served through and how the service runs it:
//  kAdditive  EncodeRequest; returns encoding rows combined with the input (ADD in place, or
//             CONCAT into a new buffer), e.g. sinusoidal;
//  kTable     as kAdditive, the rows looked up in a table loaded with --table (learned);
//  kRotary    EncodeRequest; rotates the input (and an optional key) in place (rope);
//  kBias      BiasRequest; builds a bias or adds it to the scores in place (alibi, t5);
//  kGraph     GraphRequest, told apart by GraphRequest's encoding; node encodings from the
//             graph's structure (graph_laplacian).
enum class SchemeFamily { kAdditive, kTable, kRotary, kBias, kGraph };
const char* FamilyName(SchemeFamily family);

// What an apply step may use; not owned, shared by every call, thread-safe.
struct SchemeEnv {
  TableCache* cache = nullptr;
  const NamedTables* tables = nullptr;
  SchemeLimits limits;
  // max_output_elements is always taken from limits.max_output_bytes.
  GraphLimits graph_limits;
};

// What a call holds while it runs, computed from the request message alone (before any
// field is validated): an upper bound in bytes, and whether the work is slow enough to go
// to the bulk lane whatever its size. The service turns it into admission and a lane.
struct SchemeCost {
  uint64_t bytes = 0;
  bool slow = false;
};

// One tensor of an Open Inference Protocol model.
struct ModelTensor {
  std::string name;
  std::vector<std::string> datatypes;  // accepted; the first is the one metadata declares
  std::vector<int64_t> shape;          // -1: any size
  bool optional = false;
};

// A scheme's Open Inference Protocol model (the model's name is the scheme's name).
struct OipModel {
  std::vector<ModelTensor> inputs;
  std::vector<ModelTensor> outputs;
  std::vector<std::string> parameters;  // request parameters it takes
};

// GetTable rows of a scheme: float32 values and the chunk tensor's shape.
struct TableRows {
  Table rows;
  Shape shape;
};

// A scheme's metrics label: 1 + its index in Schemes(); kNoScheme for none (a request that
// names no scheme, or a method that serves none).
using SchemeLabel = int;
inline constexpr SchemeLabel kNoScheme = 0;

// Everything about one scheme. Function pointers of the request types the scheme is not
// served through are null. Proto3 enums are open: a conversion answers INVALID_ARGUMENT
// naming the field for a value the proto does not name, never a silent default; parameter
// ranges are checked in the apply steps, next to the math. Errors name the field.
struct SchemeDescriptor {
  std::string name;
  SchemeFamily family = SchemeFamily::kAdditive;
  // Set by the registry: 1 + the index in Schemes().
  SchemeLabel label = kNoScheme;

  // How a request selects it: the oneof case of the request type the family uses (0: not
  // served through that request), or for kGraph the GraphRequest encoding value.
  int encode_case = 0;      // v1::EncodeRequest::SchemeCase
  int bias_case = 0;        // v1::BiasRequest::SchemeCase
  int table_case = 0;       // v1::TableRequest::SchemeCase (served by GetTable)
  int graph_encoding = -1;  // v1::GraphEncoding (GraphRequest.encoding)

  // --- EncodeRequest (kAdditive, kTable, kRotary) ---------------------------------------
  // Whether the request's `key` / `positions.values` / per-axis positions
  // (`positions.axis_ids`, `positions.mrope_segments`) may be set.
  bool takes_key = false;
  bool takes_position_values = false;
  bool takes_axis_positions = false;
  // Optional, with takes_position_values: how many values each token's position has in
  // `positions.values` for this request (Fourier's num_axes); null: one, and the OIP input
  // position_values is then shaped as position_ids.
  int64_t (*position_value_axes)(const v1::EncodeRequest& request) = nullptr;
  // Optional, with takes_axis_positions: how many axes the request's per-axis positions
  // have (M-RoPE's sections, axial RoPE's axes; 0 for none); null: none.
  int64_t (*position_axes)(const v1::EncodeRequest& request) = nullptr;
  // Whether the result overwrites the input (nullptr: always). False: `add` returns a new
  // buffer (CONCAT).
  bool (*in_place)(const v1::EncodeRequest& request) = nullptr;
  // kAdditive, kTable: converts, validates and applies the scheme to `input` (modified in
  // place when in_place says so).
  absl::StatusOr<AbsoluteResult> (*add)(const SchemeEnv& env, const v1::EncodeRequest& request,
                                        TensorView input, const PositionsSpec& positions) = nullptr;
  // kRotary: converts, validates and rotates `query` and `*key` (when given) in place.
  absl::Status (*rotate)(const SchemeEnv& env, const v1::EncodeRequest& request, TensorView query,
                         TensorView* key, const PositionsSpec& positions) = nullptr;
  absl::StatusOr<SchemeCost> (*encode_cost)(const v1::EncodeRequest& request) = nullptr;

  // --- BiasRequest (kBias) --------------------------------------------------------------
  // Converts the scheme's message into `spec` (its alibi or t5 part; the geometry is the
  // service's).
  absl::Status (*bias_spec)(const v1::BiasRequest& request, BiasSpec& spec) = nullptr;
  // An upper bound of the heads of a bias built without scores (for its cost).
  int64_t (*bias_heads)(const v1::BiasRequest& request) = nullptr;
  // Optional: work beyond moving bytes (Shaw's dot products with its query), as bytes in
  // `bytes` (so that a long call is neither run inline nor in the cheap lane) and `slow`.
  absl::StatusOr<SchemeCost> (*bias_work)(const v1::BiasRequest& request) = nullptr;

  // --- GraphRequest (kGraph) ------------------------------------------------------------
  absl::StatusOr<GraphResult> (*graph)(const SchemeEnv& env, const v1::GraphRequest& request,
                                       const std::optional<ConstTensorView>& input,
                                       const CancelCheck& cancelled) = nullptr;
  absl::StatusOr<SchemeCost> (*graph_cost)(const v1::GraphRequest& request) = nullptr;

  // --- TableRequest (GetTable; any family with table_case) ------------------------------
  // Checks the request's spec (and what it needs of `dim`) before any chunk goes out.
  absl::Status (*check_table)(const v1::TableRequest& request) = nullptr;
  // Rows first..first+n-1 of the table.
  absl::StatusOr<TableRows> (*table_rows)(const v1::TableRequest& request, int64_t first,
                                          int64_t n) = nullptr;

  // --- Open Inference Protocol ----------------------------------------------------------
  OipModel model;
};

// Every registered scheme, in ListSchemes order.
const std::vector<SchemeDescriptor>& Schemes();

// Lookups; null when no registered scheme matches (an unset oneof, a case or encoding no
// scheme registered, an unknown name).
const SchemeDescriptor* FindScheme(absl::string_view name);

// The scheme message that oneof case `scheme_case` of `request` selects (an encode_case or
// bias_case), set, so the OIP front can parse a `config` into it. Null for case 0 or a
// case that is not a message member of the oneof. A oneof case is its member's field
// number, so descriptors need not name the accessor.
google::protobuf::Message* MutableSchemeMessage(v1::EncodeRequest& request, int scheme_case);
google::protobuf::Message* MutableSchemeMessage(v1::BiasRequest& request, int scheme_case);
const SchemeDescriptor* SchemeOf(const v1::EncodeRequest& request);
const SchemeDescriptor* SchemeOf(const v1::BiasRequest& request);
const SchemeDescriptor* SchemeOf(const v1::GraphRequest& request);
const SchemeDescriptor* SchemeOf(const v1::TableRequest& request);
// The scheme whose label this is; null for kNoScheme or out of range.
const SchemeDescriptor* SchemeOfLabel(SchemeLabel label);

// The label of the scheme a request selects (kNoScheme when none).
template <typename Request>
SchemeLabel LabelOf(const Request& request) {
  const SchemeDescriptor* s = SchemeOf(request);
  return s ? s->label : kNoScheme;
}
// "none" for kNoScheme, else the scheme's name.
const char* LabelName(SchemeLabel label);

// GraphRequest.encoding, read and set (the OIP front sets it from the model).
int GraphEncodingOf(const v1::GraphRequest& request);
void SetGraphEncoding(int encoding, v1::GraphRequest& request);

// "sinusoidal, learned, rope": the names of the schemes `pred` accepts, in registry order.
template <typename Pred>
std::string SchemeNames(Pred pred) {
  std::string names;
  for (const SchemeDescriptor& s : Schemes()) {
    if (!pred(s)) continue;
    if (!names.empty()) names += ", ";
    names += s.name;
  }
  return names;
}

// INVALID_ARGUMENT for a request of this type that selects no registered scheme:
// "scheme is not set; set one of sinusoidal, learned, ..." (or, for a case no scheme
// registered, "scheme is field number N, which is not a known scheme; ...").
absl::Status UnknownScheme(const v1::EncodeRequest& request);
absl::Status UnknownScheme(const v1::BiasRequest& request);
absl::Status UnknownScheme(const v1::GraphRequest& request);
absl::Status UnknownScheme(const v1::TableRequest& request);

}  // namespace posenc
