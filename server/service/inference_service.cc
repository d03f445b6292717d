#include "server/service/inference_service.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "inference/model_config.pb.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"
#include "server/service/ordered_stream.h"
#include "server/service/proto_convert.h"

namespace posenc {
namespace {

using inference::ModelInferRequest;
using inference::ModelInferResponse;
using inference::ModelStreamInferResponse;

// The metrics label of a request for `model_name`, known or not.
SchemeLabel LabelOfModel(const std::string& model_name) {
  const SchemeDescriptor* scheme = FindScheme(model_name);
  return scheme ? scheme->label : kNoScheme;
}

// A conversion error names the request, as native errors do.
absl::Status WithId(const absl::Status& status, const std::string& id) {
  if (id.empty() || status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("request ", Elide(id), ": ", status.message()));
}

inference::DataType ConfigType(const std::string& datatype) {
  inference::DataType type = inference::TYPE_INVALID;
  inference::DataType_Parse("TYPE_" + datatype, &type);
  return type;
}

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context, const grpc::Status& s) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(s);
  return reactor;
}

}  // namespace

InferenceService::InferenceService(const ServiceState& state, const CallRunner& runner,
                                   const InferenceServiceOptions& options)
    : handlers_(state), runner_(runner), options_(options),
      convert_(ConvertOptions{options.shm_enabled}) {}

absl::StatusOr<CallCost> InferenceService::CostOfNative(const NativeRequest& native) {
  absl::StatusOr<CallCost> cost;
  switch (KindOf(*native.model)) {
    case ModelKind::kEncode: cost = CostOf(native.encode); break;
    case ModelKind::kBias: cost = CostOf(native.bias); break;
    default: cost = CostOf(native.graph); break;
  }
  // An input copied out of its region is held inline and answered inline: its bytes twice
  // more, in the bulk lane when large.
  if (!cost.ok()) return cost;
  for (const v1::Tensor* t : native.copy_from_shm) {
    cost->bytes += 2 * t->shm().byte_size();
    if (cost->bytes > kCheapCallBytes) cost->lane = Lane::kBulk, cost->run_inline = false;
  }
  return cost;
}

grpc::Status InferenceService::Run(NativeRequest& native, const CancelCheck& cancelled,
                                   ModelInferResponse& out) const {
  SchemeLabel scheme = LabelOfModel(native.model->name);
  absl::Status status = CopyShmInputsInline(native, handlers_.state().shm);
  if (!status.ok()) return ToGrpcStatus(status, native.id);
  switch (KindOf(*native.model)) {
    case ModelKind::kEncode: {
      auto& response = native.NewResponse<v1::EncodeResponse>();
      status = handlers_.Encode(native.encode, response, &scheme, native.shm_owner);
      if (status.ok()) ToInferResponse(native, response, out);
      break;
    }
    case ModelKind::kBias: {
      auto& response = native.NewResponse<v1::BiasResponse>();
      status = handlers_.AttentionBias(native.bias, response, &scheme, native.shm_owner);
      if (status.ok()) ToInferResponse(native, response, out);
      break;
    }
    case ModelKind::kGraph: {
      auto& response = native.NewResponse<v1::GraphResponse>();
      status = handlers_.GraphEncode(native.graph, response, cancelled);
      if (status.ok()) ToInferResponse(native, response, out);
      break;
    }
  }
  return ToGrpcStatus(status, native.id);
}

// The request's raw bytes move into the native request, and the answer's from its result
// to gRPC.
grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* wire_request,
                                                       grpc::ByteBuffer* wire_response) {
  using Call = WireUnaryCall<ModelInferRequest, ModelInferResponse>;
  auto* call =
      new Call(context, runtime().tracker, Method::kModelInfer, wire_response, &WriteInferResponse);
  if (!call->Parse(*wire_request)) return call;
  ModelInferRequest* request = call->request();
  ModelInferResponse* response = call->response();
  absl::StatusOr<std::unique_ptr<NativeRequest>> native = ToNativeRequest(*request, convert_);
  absl::StatusOr<CallCost> cost =
      native.ok() ? CostOfNative(**native) : WithId(native.status(), request->id());
  if (native.ok()) (*native)->shm_owner = SharedMemoryOwner(context);
  std::shared_ptr<NativeRequest> native_call(native.ok() ? std::move(*native) : nullptr);
  runner_.ServeUnaryWith(
      context, LabelOfModel(request->model_name()), request->id(), cost, response,
      [this, native_call, response](const CancelCheck& cancelled) {
        return Run(*native_call, cancelled, *response);
      },
      [call](grpc::Status status) { call->Reply(std::move(status)); });
  return call;
}

void InferenceService::InferAsync(ModelInferRequest& request, ShmOwner shm_owner,
                                  CancelCheck cancelled, ModelInferResponse& response,
                                  InferDone done, std::optional<Lane> running_on) const {
  auto native = std::make_shared<absl::StatusOr<std::unique_ptr<NativeRequest>>>(
      ToNativeRequest(request, convert_));
  if (native->ok()) (**native)->shm_owner = std::move(shm_owner);
  absl::StatusOr<CallCost> cost =
      native->ok() ? CostOfNative(***native) : WithId(native->status(), request.id());
  if (cost.ok() && running_on == cost->lane) cost->run_inline = true;
  runner_.Run(
      cost, CallRunner::Slot::kCall, /*request_id=*/"",
      [cancelled = std::move(cancelled)] {
        return cancelled() ? grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled")
                           : grpc::Status::OK;
      },
      response,
      [this, native, &response](const CancelCheck& stopped) {
        return Run(***native, stopped, response);
      },
      std::move(done));
}

// Each message is placed (inline or on the pool) before it is converted, since the
// conversion is work too; converted, it is admitted and run right there by the CallRunner
// and counted with its model's scheme. As in Triton, a failed request answers with
// error_message and the stream goes on.
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* InferenceService::ModelStreamInfer(
    grpc::CallbackServerContext* context) {
  using Reactor = OrderedStreamReactor<ModelInferRequest, ModelStreamInferResponse, kRawWire>;
  CallRunner::OpenedStream stream = runner_.OpenStream(context, Method::kModelStreamInfer);
  // The stream's connection, named once: every message's regions are its.
  auto handle = [this, context, owner = SharedMemoryOwner(context)](
                    ModelInferRequest& request, ModelStreamInferResponse& response,
                    Reactor::Reply reply) {
    auto job = [this, context, &owner, &request, &response, reply = std::move(reply)]() mutable {
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<std::unique_ptr<NativeRequest>> native = ToNativeRequest(request, convert_);
      absl::StatusOr<CallCost> cost = native.ok() ? CostOfNative(**native) : native.status();
      if (native.ok()) (*native)->shm_owner = owner;
      if (cost.ok()) cost->run_inline = true;  // already where PlacementOf put it
      runner_.RunMessage(
          Method::kModelStreamInfer, LabelOfModel(request.model_name()), start, request.id(), cost,
          response,
          [this, context, &native, &response](const CancelCheck&) {
            return Run(**native, CancelCheckOf(context), *response.mutable_infer_response());
          },
          [&request, &response, reply = std::move(reply)](CallOutcome outcome) mutable {
            if (!outcome.status.ok()) {
              response.Clear();
              response.set_error_message(outcome.status.error_message());
              response.mutable_infer_response()->set_model_name(request.model_name());
              response.mutable_infer_response()->set_id(request.id());
            }
            std::move(reply)(grpc::Status::OK, std::move(outcome.ticket));
          });
    };
    const CallCost placement = PlacementOf(request);
    if (placement.run_inline) {
      std::move(job)();
    } else {
      runner_.runtime().pool->Submit(placement.lane, std::move(job));
    }
  };
  return new Reactor({&WriteStreamInferResponse, MethodName(Method::kModelStreamInfer)},
                     kStreamWindow, handle, std::move(stream.on_finish), stream.refusal);
}

grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* context,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  response->set_live(true);
  return Finish(context, grpc::Status::OK);
}

// Not ready once the drain has begun, so that a load balancer stops sending.
grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* context,
                                                        const inference::ServerReadyRequest*,
                                                        inference::ServerReadyResponse* response) {
  response->set_ready(Ready());
  return Finish(context, grpc::Status::OK);
}

// As Triton: an unknown model is not ready (not an error).
bool InferenceService::ModelIsReady(const std::string& name, const std::string& version) const {
  return FindModel(name, version).ok() && Ready();
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  response->set_ready(ModelIsReady(request->name(), request->version()));
  return Finish(context, grpc::Status::OK);
}

void InferenceService::FillServerMetadata(inference::ServerMetadataResponse& response) const {
  response.set_name("posenc");
  response.set_version(handlers_.state().version);
  if (options_.shm_enabled) response.add_extensions("system_shared_memory");
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  if (CallOf(runner_.runtime(), context, kNoScheme)->late) {
    return Finish(context, kShuttingDown);
  }
  FillServerMetadata(*response);
  return Finish(context, grpc::Status::OK);
}

absl::Status InferenceService::FillModelMetadata(const std::string& name,
                                                 const std::string& version,
                                                 inference::ModelMetadataResponse& response) {
  ASSIGN_OR_RETURN(const ModelInfo* model, FindModel(name, version));
  response.set_name(model->name);
  response.add_versions(kModelVersion);
  response.set_platform(kModelPlatform);
  auto add = [](const ModelTensor& t, auto* out) {
    out->set_name(t.name);
    out->set_datatype(t.datatypes.front());
    out->mutable_shape()->Add(t.shape.begin(), t.shape.end());
  };
  for (const ModelTensor& t : model->model.inputs) add(t, response.add_inputs());
  for (const ModelTensor& t : model->model.outputs) add(t, response.add_outputs());
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  if (CallOf(runner_.runtime(), context, kNoScheme)->late) {
    return Finish(context, kShuttingDown);
  }
  return Finish(context,
                ToGrpcStatus(FillModelMetadata(request->name(), request->version(), *response)));
}

absl::Status InferenceService::FillModelConfig(const std::string& name, const std::string& version,
                                               inference::ModelConfigResponse& response) {
  ASSIGN_OR_RETURN(const ModelInfo* model, FindModel(name, version));
  inference::ModelConfig* config = response.mutable_config();
  config->set_name(model->name);
  config->set_platform(kModelPlatform);
  config->set_backend(kModelPlatform);
  config->set_max_batch_size(0);
  for (const ModelTensor& t : model->model.inputs) {
    inference::ModelInput* in = config->add_input();
    in->set_name(t.name);
    in->set_data_type(ConfigType(t.datatypes.front()));
    in->mutable_dims()->Add(t.shape.begin(), t.shape.end());
    in->set_optional(t.optional);
  }
  for (const ModelTensor& t : model->model.outputs) {
    inference::ModelOutput* out = config->add_output();
    out->set_name(t.name);
    out->set_data_type(ConfigType(t.datatypes.front()));
    out->mutable_dims()->Add(t.shape.begin(), t.shape.end());
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* context, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  if (CallOf(runner_.runtime(), context, kNoScheme)->late) {
    return Finish(context, kShuttingDown);
  }
  return Finish(context,
                ToGrpcStatus(FillModelConfig(request->name(), request->version(), *response)));
}

void InferenceService::FillRepositoryIndex(inference::RepositoryIndexResponse& response) {
  for (const ModelInfo& m : Models()) {
    auto* entry = response.add_models();
    entry->set_name(m.name);
    entry->set_version(kModelVersion);
    entry->set_state("READY");
  }
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* context, const inference::RepositoryIndexRequest*,
    inference::RepositoryIndexResponse* response) {
  if (CallOf(runner_.runtime(), context, kNoScheme)->late) {
    return Finish(context, kShuttingDown);
  }
  FillRepositoryIndex(*response);
  return Finish(context, grpc::Status::OK);
}

// Shared memory: the same registry as posenc.v1's RegisterSharedMemory, so a region
// registered through either service serves both, on the connection that registered it.
grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* context, const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* response) {
  absl::StatusOr<std::vector<ShmRegionStatus>> regions =
      runner_.runtime().shm->Status(request->name(), SharedMemoryOwner(context).name());
  if (!regions.ok()) return Finish(context, ToGrpcStatus(regions.status()));
  for (const ShmRegionStatus& r : *regions) {
    auto& out = (*response->mutable_regions())[r.name];
    out.set_name(r.name);
    out.set_offset(r.offset);
    out.set_byte_size(r.byte_size);
  }
  return Finish(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse*) {
  return Finish(context, ToGrpcStatus(runner_.runtime().shm->Register(
                             request->name(), request->key(), request->offset(),
                             request->byte_size(), SharedMemoryOwner(context).name())));
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse*) {
  return Finish(context, ToGrpcStatus(runner_.runtime().shm->Unregister(
                             request->name(), SharedMemoryOwner(context).name())));
}

}  // namespace posenc
