// The Open Inference Protocol's models, and the conversions between its messages
// (package inference) and posenc.v1's: a ModelInferRequest becomes the EncodeRequest,
// BiasRequest or GraphRequest its model stands for, and the native response becomes a
// ModelInferResponse. Every registered scheme is a model of the same name; its inputs,
// outputs and parameters are its descriptor's (schemes/scheme_registry.h). No scheme logic
// lives here: the native RequestHandlers do the work.
// Errors are those Triton gives for the same cases (unknown model NOT_FOUND; an input or
// output with a wrong name, datatype or size INVALID_ARGUMENT naming it).
// Stateless; thread-safe.
//
// Tensor bytes move rather than copy: raw_input_contents entries are swapped into the
// native tensors, and the native outputs are swapped into raw_output_contents.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/arena.h"
#include "inference/grpc_service.pb.h"
#include "posenc/v1/posenc.pb.h"
#include "server/schemes/scheme_registry.h"
#include "server/shm/peer_identity.h"
#include "server/shm/shared_memory_registry.h"

namespace posenc {

namespace oip = ::inference;

// Which native rpc a model's requests become (by its scheme's family).
enum class ModelKind { kEncode, kBias, kGraph };
ModelKind KindOf(const SchemeDescriptor& scheme);

// A model is a scheme: its name, and its OipModel's inputs, outputs and parameters.
using ModelInfo = SchemeDescriptor;

inline constexpr char kModelVersion[] = "1";
inline constexpr char kModelPlatform[] = "posenc";

// The models: every registered scheme, in the order of ListSchemes.
const std::vector<ModelInfo>& Models();
// NOT_FOUND (Triton's message) for a model posenc does not serve or a version but "1".
absl::StatusOr<const ModelInfo*> FindModel(absl::string_view name, absl::string_view version);

// The native request a ModelInferRequest stands for; exactly the one of `kind` is used.
// The native messages live on the request's own arena (its first block part of the
// request), with the native response the service builds (NewResponse): their small fields
// cost no allocation each. Not copyable.
struct NativeRequest {
  NativeRequest();
  NativeRequest(const NativeRequest&) = delete;
  NativeRequest& operator=(const NativeRequest&) = delete;

  // A native response on the request's arena, freed with it.
  template <typename Response>
  Response& NewResponse() {
    return *google::protobuf::Arena::CreateMessage<Response>(&arena);
  }

 private:
  static constexpr size_t kFirstBlockBytes = 2048;
  alignas(std::max_align_t) char first_block_[kFirstBlockBytes];

 public:
  google::protobuf::Arena arena;  // after the block it starts in; destroyed before it
  const ModelInfo* model = nullptr;
  std::string id;
  v1::EncodeRequest& encode;
  v1::BiasRequest& bias;
  v1::GraphRequest& graph;
  std::vector<std::string> outputs;  // the outputs to return, in order
  // Tensors that came by shared memory but must not be written there (Triton's rule: an
  // output goes to a region only when it names one) or that the native rpc takes inline
  // only (GraphRequest.input). CopyShmInputsInline reads them into `data` before the run.
  std::vector<v1::Tensor*> copy_from_shm;
  ShmOwner shm_owner;  // whose shared-memory regions it may use (set by the front)
};

struct ConvertOptions {
  // Whether tensors may come as (and go to) shared-memory regions (--shm). Off, a tensor
  // with shared_memory_region is FAILED_PRECONDITION.
  bool shm_enabled = false;
};

// Converts `request`, taking its raw_input_contents' bytes (so it is left without them).
// An integer parameter, carried as int64_param or as uint64_param (up to INT64_MAX);
// nullopt when absent, INVALID_ARGUMENT naming it when of another type. Every reader of an
// integer parameter (the conversion, and the lane a streamed request is put in) uses it.
absl::StatusOr<std::optional<int64_t>> IntParam(
    const google::protobuf::Map<std::string, oip::InferParameter>& params, absl::string_view name);

absl::StatusOr<std::unique_ptr<NativeRequest>> ToNativeRequest(oip::ModelInferRequest& request,
                                                               const ConvertOptions& options);

// Reads each tensor of `native.copy_from_shm` from its slice (the regions native.shm_owner
// may use) into its `data`, leaving the region untouched; the work then happens on that
// copy and the result goes back inline. Errors are the slice's (NOT_FOUND, INVALID_ARGUMENT,
// FAILED_PRECONDITION, DATA_LOSS), naming the input.
absl::Status CopyShmInputsInline(NativeRequest& native, const SharedMemoryRegistry* shm);

// Fills `out` with the outputs `native.outputs` names, taking the response's tensor bytes.
void ToInferResponse(const NativeRequest& native, v1::EncodeResponse& response,
                     oip::ModelInferResponse& out);
void ToInferResponse(const NativeRequest& native, v1::BiasResponse& response,
                     oip::ModelInferResponse& out);
void ToInferResponse(const NativeRequest& native, v1::GraphResponse& response,
                     oip::ModelInferResponse& out);

// "FP32", "FP16", "BF16", "INT32", "INT64" for the native dtypes.
const char* DatatypeOf(v1::DType dtype);

}  // namespace posenc
