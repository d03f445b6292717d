#include "client/infer_command.h"

#include <algorithm>
#include <cstring>
#include <iostream>
#include <map>
#include <set>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/cli_call.h"
#include "client/cli_flags.h"
#include "client/posenc_client.h"
#include "client/tensor_io.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/common/status_macros.h"
#include "server/tensor/dtype.h"
#include "server/tensor/npy.h"

namespace posenc::client {

const char kInferUsage[] = R"(usage: posenc-client infer --model MODEL [flags]

One ModelInfer call of the Open Inference Protocol (inference.GRPCInferenceService).
models: sinusoidal learned rope hierarchical continuous alibi t5 graph_laplacian

  --target ADDR --timeout DUR --tls --tls-ca F --tls-cert F --tls-key F   as for the others
  --input x.npy | --shape 1,8,2,16 [--seed N]   input 'input' (random values for --shape)
  --datatype FP32|FP16|BF16                     its datatype (default: the file's, else FP32)
  --key k.npy | --key-shape S                   input 'key' (rope)
  --scores s.npy                                input 'scores' (alibi, t5)
  --edges 0-1,1-2                               input 'edges' (graph_laplacian)
  --position-ids 3,4,5                          input 'position_ids'
  --config JSON                                 parameter 'config': the scheme message
  --param NAME=VALUE                            any parameter, repeatable: an integer is
                                                int64, true/false bool, else a string
                                                (e.g. position_offset=100, k=4)
  --output y.npy                                writes output 'output' (BF16 as float32)
  --print N                                     values shown per output (default 8)
  --id ID                                       the request's id
)";

namespace {

using inference::ModelInferRequest;
using inference::ModelInferResponse;
const std::set<std::string> kInferFlags = {"model",  "input",     "shape",  "seed",  "datatype",
                                           "key",    "key-shape", "scores", "edges", "position-ids",
                                           "config", "param",     "output", "print", "id"};

absl::StatusOr<DType> FloatType(const std::string& datatype) {
  if (datatype == "FP32") return DType::kFloat32;
  if (datatype == "FP16") return DType::kFloat16;
  if (datatype == "BF16") return DType::kBFloat16;
  return absl::InvalidArgumentError("--datatype '" + datatype + "' is not FP32, FP16 or BF16");
}

const char* DatatypeOf(DType t) {
  switch (t) {
    case DType::kFloat16: return "FP16";
    case DType::kBFloat16: return "BF16";
    case DType::kInt32: return "INT32";
    case DType::kInt64: return "INT64";
    default: return "FP32";
  }
}

void AddInput(ModelInferRequest& r, const std::string& name, const char* datatype,
              const std::vector<int64_t>& shape, std::string bytes) {
  auto* in = r.add_inputs();
  in->set_name(name);
  in->set_datatype(datatype);
  for (int64_t d : shape) in->add_shape(d);
  r.add_raw_input_contents(std::move(bytes));
}

// A float input from an .npy file or random values of --<shape_flag>, in `datatype` (or
// the file's own when empty).
absl::Status AddFloatInput(const Flags& f, ModelInferRequest& r, const std::string& name,
                           const std::string& file_flag, const std::string& shape_flag,
                           uint64_t seed) {
  const std::string datatype = f.Str("datatype");
  if (f.Has(file_flag)) {
    ASSIGN_OR_RETURN(NpyArray a, ReadNpyFile(f.Str(file_flag)));
    if (!IsFloat(a.dtype) && a.dtype != DType::kFloat64) {
      return absl::InvalidArgumentError(f.Str(file_flag) + " is not a float array");
    }
    DType want = a.dtype == DType::kFloat64 ? DType::kFloat32 : a.dtype;  // no FP64 input
    if (!datatype.empty()) {
      ASSIGN_OR_RETURN(want, FloatType(datatype));
    }
    std::vector<float> values(a.data.size() / DTypeSize(a.dtype));
    ToFloat32(a.dtype, a.data.data(), values.data(), values.size());
    std::string bytes(values.size() * DTypeSize(want), '\0');
    FromFloat32(values.data(), want, bytes.data(), values.size());
    AddInput(r, name, DatatypeOf(want), {a.shape.begin(), a.shape.end()}, std::move(bytes));
    return absl::OkStatus();
  }
  if (shape_flag.empty() || !f.Has(shape_flag)) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, f.IntList(shape_flag, ",-x"));
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (shape.empty() || n <= 0 || n > (int64_t{1} << 28)) {
    return absl::InvalidArgumentError("--" + shape_flag + " must have positive dimensions");
  }
  ASSIGN_OR_RETURN(const DType type, FloatType(datatype.empty() ? "FP32" : datatype));
  const std::vector<float> values = RandomFloats(static_cast<size_t>(n), seed);
  std::string bytes(values.size() * DTypeSize(type), '\0');
  FromFloat32(values.data(), type, bytes.data(), values.size());
  AddInput(r, name, DatatypeOf(type), shape, std::move(bytes));
  return absl::OkStatus();
}

absl::Status AddParams(const Flags& f, ModelInferRequest& r) {
  if (f.Has("config")) (*r.mutable_parameters())["config"].set_string_param(f.Str("config"));
  for (const std::string& param : f.All("param")) {
    const size_t eq = param.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError("--param '" + param + "' is not NAME=VALUE");
    }
    const std::string value = param.substr(eq + 1);
    inference::InferParameter& p = (*r.mutable_parameters())[param.substr(0, eq)];
    int64_t i;
    if (absl::SimpleAtoi(value, &i)) {
      p.set_int64_param(i);
    } else if (value == "true" || value == "false") {
      p.set_bool_param(value == "true");
    } else {
      p.set_string_param(value);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelInferRequest> BuildRequest(const Flags& f) {
  ModelInferRequest r;
  r.set_model_name(f.Str("model"));
  if (r.model_name().empty()) return absl::InvalidArgumentError("infer needs --model MODEL");
  r.set_id(f.Str("id"));
  ASSIGN_OR_RETURN(const int64_t seed, f.Int("seed", 0));
  RETURN_IF_ERROR(AddFloatInput(f, r, "input", "input", "shape", static_cast<uint64_t>(seed)));
  RETURN_IF_ERROR(AddFloatInput(f, r, "key", "key", "key-shape", static_cast<uint64_t>(seed) + 1));
  RETURN_IF_ERROR(AddFloatInput(f, r, "scores", "scores", "", 0));
  for (const char* flag : {"edges", "position-ids"}) {
    if (!f.Has(flag)) continue;
    ASSIGN_OR_RETURN(std::vector<int64_t> v, f.IntList(flag, ",-x"));
    const bool edges = std::string(flag) == "edges";
    if (edges && v.size() % 2 != 0) return absl::InvalidArgumentError("--edges needs pairs u-v");
    const std::vector<int64_t> shape =
        edges ? std::vector<int64_t>{static_cast<int64_t>(v.size() / 2), 2}
              : std::vector<int64_t>{static_cast<int64_t>(v.size())};
    AddInput(r, edges ? "edges" : "position_ids", "INT64", shape,
             std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t)));
  }
  RETURN_IF_ERROR(AddParams(f, r));
  return r;
}

template <typename T>
double At(const char* p) {
  T x;
  std::memcpy(&x, p, sizeof(T));
  return static_cast<double>(x);
}

// The first `count` values of an output, printed.
std::string FirstValues(const std::string& datatype, const std::string& raw, size_t count) {
  const bool wide = datatype == "FP64" || datatype == "INT64";
  const size_t size = wide ? 8 : datatype == "FP32" || datatype == "INT32" ? 4 : 2;
  std::string out;
  for (size_t i = 0; i < std::min(count, raw.size() / size); ++i) {
    const char* p = raw.data() + i * size;
    double v;
    if (datatype == "FP64") {
      v = At<double>(p);
    } else if (datatype == "INT64") {
      v = At<int64_t>(p);
    } else if (datatype == "INT32") {
      v = At<int32_t>(p);
    } else if (datatype == "FP32") {
      v = At<float>(p);
    } else {
      float x;
      ToFloat32(datatype == "FP16" ? DType::kFloat16 : DType::kBFloat16, p, &x, 1);
      v = x;
    }
    absl::StrAppendFormat(&out, "%s%.6g", i ? " " : "", v);
  }
  return out;
}

int Report(const Flags& f, const ModelInferResponse& response, absl::Duration elapsed) {
  const size_t print = static_cast<size_t>(f.IntIn("print", 0, INT32_MAX, 8).value_or(8));
  std::cout << "model " << response.model_name() << " version " << response.model_version() << "\n";
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& o = response.outputs(i);
    const std::string& raw =
        i < response.raw_output_contents_size() ? response.raw_output_contents(i) : "";
    std::cout << o.name() << ": shape [" << absl::StrJoin(o.shape(), ",") << "] " << o.datatype()
              << "  first: " << FirstValues(o.datatype(), raw, print) << "\n";
    if (o.name() != "output" || !f.Has("output")) continue;
    std::vector<int64_t> shape(o.shape().begin(), o.shape().end());
    const DType type = o.datatype() == "FP16"    ? DType::kFloat16
                       : o.datatype() == "BF16"  ? DType::kBFloat16
                       : o.datatype() == "INT32" ? DType::kInt32
                                                 : DType::kFloat32;
    if (absl::Status s = WriteNpyWidened(f.Str("output"), type, shape, raw); !s.ok()) {
      std::cerr << "posenc-client: writing --output: " << s.message() << "\n";
      return kExitUsage;
    }
    std::cout << "wrote " << f.Str("output") << "\n";
  }
  PrintElapsed(elapsed);
  return kExitOk;
}

int Usage(const absl::Status& s) {
  return UsageError(s, "posenc-client", "posenc-client infer --help");
}

}  // namespace

int RunInferCommand(const std::vector<std::string>& args) {
  absl::StatusOr<Flags> f = ParseCommandFlags(args, kInferFlags);
  if (!f.ok()) return Usage(f.status());
  if (f->Has("help")) {
    std::cout << kInferUsage;
    return kExitOk;
  }
  absl::StatusOr<ModelInferRequest> request = BuildRequest(*f);
  if (!request.ok()) return Usage(request.status());
  absl::StatusOr<ClientOptions> options = ClientOptionsFromFlags(*f);
  if (!options.ok()) return Usage(options.status());
  absl::StatusOr<std::unique_ptr<PosencClient>> client = PosencClient::Create(*options);
  if (!client.ok()) return Usage(client.status());
  auto stub = inference::GRPCInferenceService::NewStub((*client)->channel());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options->timeout));
  ModelInferResponse response;
  const absl::Time start = absl::Now();
  const grpc::Status status = stub->ModelInfer(&context, *request, &response);
  if (!status.ok()) return RpcError("ModelInfer", FromGrpcStatus(status));
  return Report(*f, response, absl::Now() - start);
}

}  // namespace posenc::client
