#include "server/service/inference_service.h"

#include <chrono>
#include <future>
#include <memory>
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
  return absl::Status(status.code(),
                      absl::StrCat("request ", Elide(id), ": ", status.message()));
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

InferenceService::InferenceService(const ServiceState& state, const ServiceRuntime& runtime,
                                   const InferenceServiceOptions& options)
    : handlers_(state), runner_(runtime, state.max_message_bytes), options_(options),
      convert_(ConvertOptions{options.shm_enabled}) {
  SetMessageAllocatorFor_ModelInfer(&infer_messages_);
}

absl::StatusOr<CallCost> InferenceService::CostOfNative(const NativeRequest& native) {
  switch (KindOf(*native.model)) {
    case ModelKind::kEncode: return CostOf(native.encode);
    case ModelKind::kBias: return CostOf(native.bias);
    default: return CostOf(native.graph);
  }
}

grpc::Status InferenceService::Run(NativeRequest& native, const CancelCheck& cancelled,
                                   ModelInferResponse& out) const {
  SchemeLabel scheme;
  absl::Status status;
  switch (KindOf(*native.model)) {
    case ModelKind::kEncode: {
      v1::EncodeResponse response;
      status = handlers_.Encode(native.encode, response, &scheme, native.shm_owner);
      if (status.ok()) ToInferResponse(native, response, out);
      break;
    }
    case ModelKind::kBias: {
      v1::BiasResponse response;
      status = handlers_.AttentionBias(native.bias, response, &scheme, native.shm_owner);
      if (status.ok()) ToInferResponse(native, response, out);
      break;
    }
    case ModelKind::kGraph: {
      v1::GraphResponse response;
      status = handlers_.GraphEncode(native.graph, response, cancelled);
      if (status.ok()) ToInferResponse(native, response, out);
      break;
    }
  }
  return ToGrpcStatus(status, native.id);
}

// The request message is the service's (OwnedMessages) until the call is done: its raw
// bytes move into the native request.
grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const ModelInferRequest*,
                                                       ModelInferResponse* response) {
  ModelInferRequest* request = decltype(infer_messages_)::RequestOf(context);
  absl::StatusOr<std::unique_ptr<NativeRequest>> native = ToNativeRequest(*request, convert_);
  absl::StatusOr<CallCost> cost =
      native.ok() ? CostOfNative(**native) : WithId(native.status(), request->id());
  if (native.ok()) (*native)->shm_owner = SharedMemoryOwner(context);
  std::shared_ptr<NativeRequest> call(native.ok() ? std::move(*native) : nullptr);
  return runner_.ServeUnary(context, LabelOfModel(request->model_name()), request->id(), cost,
                            response,
                            [this, call, response](const CancelCheck& cancelled) {
                              return Run(*call, cancelled, *response);
                            });
}

FrontInferResult InferenceService::Infer(ModelInferRequest& request,
                                         const CancelCheck& cancelled,
                                         ModelInferResponse& response) const {
  FrontInferResult result;
  absl::StatusOr<std::unique_ptr<NativeRequest>> native = ToNativeRequest(request, convert_);
  absl::StatusOr<CallCost> cost =
      native.ok() ? CostOfNative(**native) : WithId(native.status(), request.id());
  if (!cost.ok()) {
    result.status = ToGrpcStatus(cost.status());
    return result;
  }
  absl::StatusOr<Admission::Ticket> ticket = runner_.runtime().admission->Admit(cost->bytes);
  if (!ticket.ok()) {  // refused before anything was allocated for it
    result.status = ToGrpcStatus(ticket.status());
    result.refused = true;
    return result;
  }
  result.ticket = std::move(*ticket);
  auto run = [&] {
    grpc::Status s = cancelled() ? grpc::Status(grpc::StatusCode::CANCELLED,
                                                "the call was cancelled")
                                 : Run(**native, cancelled, response);
    if (s.ok()) s = CheckResponseSize(response, runner_.max_message_bytes());
    return s;
  };
  if (cost->run_inline) {  // as ServeUnary: a few microseconds, right on this thread
    result.status = run();
    return result;
  }
  std::promise<grpc::Status> done;
  std::future<grpc::Status> status = done.get_future();
  runner_.runtime().pool->Submit(cost->lane, [&] { done.set_value(run()); });
  result.status = status.get();
  return result;
}

// Each message is converted, admitted and run (a small one inline, else on the pool), and
// counted with its model's scheme. As in Triton, a failed request answers with
// error_message and the stream goes on.
grpc::ServerBidiReactor<ModelInferRequest, ModelStreamInferResponse>*
InferenceService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  ServiceMetrics* metrics = handlers_.state().metrics;
  std::shared_ptr<TrackedCall> call = CallOf(runner_.runtime(), context, kNoScheme);
  auto handle = [this, context, metrics](ModelInferRequest& request,
                                         ModelStreamInferResponse& response,
                                         Admission::Ticket& held) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<NativeRequest>> native = ToNativeRequest(request, convert_);
    absl::StatusOr<CallCost> cost = native.ok() ? CostOfNative(**native) : native.status();
    if (native.ok()) (*native)->shm_owner = SharedMemoryOwner(context);
    absl::StatusOr<Admission::Ticket> ticket =
        cost.ok() ? runner_.runtime().admission->AdmitBytes(cost->bytes) : cost.status();
    grpc::Status status = ticket.ok() ? Run(**native, CancelCheckOf(context),
                                            *response.mutable_infer_response())
                                      : ToGrpcStatus(ticket.status(), request.id());
    if (status.ok()) status = CheckResponseSize(response, runner_.max_message_bytes());
    if (!status.ok()) {
      response.Clear();
      response.set_error_message(status.error_message());
      response.mutable_infer_response()->set_model_name(request.model_name());
      response.mutable_infer_response()->set_id(request.id());
    }
    if (metrics) {
      metrics->RecordRequest(
          Method::kModelStreamInfer, LabelOfModel(request.model_name()),
          static_cast<int>(status.error_code()),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    if (ticket.ok()) held = std::move(*ticket);  // until the response is written
    return grpc::Status::OK;
  };
  auto schedule = [this](const ModelInferRequest& request, WorkPool::Job job) {
    const CallCost placement = PlacementOf(request);
    if (placement.run_inline) {
      std::move(job)();
      return;
    }
    runner_.runtime().pool->Submit(placement.lane, std::move(job));
  };
  auto on_finish = [call](const grpc::Status& status, bool from_handler) {
    if (status.ok() || from_handler) call->counted.store(true);
  };
  return new OrderedStreamReactor<ModelInferRequest, ModelStreamInferResponse>(
      kStreamWindow, handle, schedule, on_finish, OpenStream(runner_.runtime(), *call));
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

absl::Status InferenceService::FillModelConfig(const std::string& name,
                                               const std::string& version,
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
      runner_.runtime().shm->Status(request->name(), SharedMemoryOwner(context));
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
                             request->byte_size(), SharedMemoryOwner(context))));
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse*) {
  return Finish(context, ToGrpcStatus(
                             runner_.runtime().shm->Unregister(request->name(),
                                                               SharedMemoryOwner(context))));
}

}  // namespace posenc
