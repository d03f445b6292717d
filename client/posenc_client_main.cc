// posenc-client: command-line client of the posenc service. See kUsage below.
// Exit codes: 0 ok, 1 the RPC failed (or health is not SERVING), 2 usage or local file error.

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli_flags.h"
#include "client/hf_config.h"
#include "client/load_command.h"
#include "client/plot_command.h"
#include "client/shm_region.h"
#include "server/common/version.h"
#include "client/infer_command.h"
#include "client/posenc_client.h"
#include "client/tensor_proto.h"
#include "server/common/status_macros.h"
#include "server/tensor/npy.h"

namespace posenc::client {
namespace {

constexpr char kUsage[] = R"(usage: posenc-client COMMAND [flags]

commands:
  encode   one Encode call; prints shape, dtype, first values and the elapsed time
  stream   --count N copies of the encode request over one EncodeStream; prints throughput
  bias     AttentionBias (--scheme alibi|t5)
  graph    GraphEncode (Laplacian eigenvectors)
  table    GetTable (sinusoidal rows or rope cos/sin) into an .npy file
  list     ListSchemes
  infer    ModelInfer of the Open Inference Protocol (--model MODEL); posenc-client infer --help
  plot     a table, bias or graph encoding as a PNG heatmap (plot --help)
  health   grpc.health.v1 Check (exit 1 unless SERVING)
  load     concurrent calls for a duration; throughput, p50/p99, errors by code (load --help)

common flags:
  --target ADDR        host:port or unix:/path (default 127.0.0.1:50051)
  --timeout DUR        per call, e.g. 10, 10s, 500ms (default 30s)
  --tls                TLS with the system roots
  --tls-ca FILE        CA bundle (PEM) that signed the server's certificate (implies --tls)
  --tls-cert FILE --tls-key FILE   client certificate and key for mutual TLS
  --tls-server-name N  name to expect in the server certificate
  --request-id ID

encode / stream:
  --scheme sinusoidal|learned|rope|hierarchical|continuous
                       (default sinusoidal; rope with --hf-config)
  input:  --shape 2,16,64 [--fill random|zeros] [--seed N]  or  --input x.npy
          --dtype float32|float16|bfloat16 (default: the file's, else float32)
  positions: --offsets 0,5  --ids 3,4,5  --values 0.0,0.5 (continuous)
  sinusoidal/continuous: --base --layout interleaved|concatenated
          --timescale per_dim|half_minus_one --value-scale (continuous)
  sinusoidal/learned: --input-scale --pe-scale --fusion add|concat --pe-dim (sinusoidal)
  learned: --table NAME --overflow error|clamp|interpolate
  hierarchical: --levels "0,1,0;0,0,1" (ids per level, levels split by ';')
          --level-scales 1,0.5  --level-bases 10000,100
  rope:   --hf-config config.json  --base --rotary-dim --style neox|gptj
          --rope-layout bshd|bhsd|thd  --scaling linear|dynamic|yarn|llama3 --factor F
          --original-max-pos N  --key k.npy | --key-shape 1,16,2,64  --key-output ko.npy
          (with --hf-config and no --shape/--input: 8 tokens of the model's heads)
  --output y.npy (bfloat16 outputs are written as float32)  --print N (values shown, 8)
          --shm  pass the tensors through POSIX shared memory (a server with --shm)
  stream: --count N (default 100)

bias:   --scheme alibi|t5 --query-length Q --key-length K [--query-offset O]
        alibi: --heads H --mode symmetric|causal --max-bias B
        t5: --num-buckets --max-distance --bidirectional --table NAME
        --scores s.npy [--dtype]  --output b.npy
graph:  --nodes N --edges 0-1,1-2,2-0 --k K [--normalized] [--input x.npy] [--output e.npy]
table:  --scheme sinusoidal|rope --length L --dim D [--dtype] [--rows-per-chunk R]
        sinusoidal flags as above; rope: --base --hf-config --scaling --factor
        --output t.npy
health: [--service NAME]
)";

const std::set<std::string> kSinusoidalFlags = {"base", "layout", "timescale", "input-scale",
                                                "pe-scale", "fusion", "pe-dim", "value-scale"};
const std::set<std::string> kRopeFlags = {"base", "rotary-dim", "style", "rope-layout", "hf-config",
                                          "scaling", "factor", "original-max-pos"};

std::set<std::string> Union(std::initializer_list<const std::set<std::string>*> sets,
                            std::initializer_list<const char*> extra = {}) {
  std::set<std::string> out = {"request-id"};
  for (const auto* s : sets) out.insert(s->begin(), s->end());
  for (const char* e : extra) out.insert(e);
  return out;
}

// --------------------------------------------------------------------------------------
// Local helpers.

int UsageError(const absl::Status& status) {
  std::cerr << "posenc-client: " << status.message() << "\n(run posenc-client --help for usage)\n";
  return kExitUsage;
}

int RpcError(absl::string_view rpc, const absl::Status& status) {
  std::cerr << "posenc-client: " << rpc << " failed: " << absl::StatusCodeToString(status.code())
            << ": " << status.message() << "\n";
  return kExitRpc;
}

absl::StatusOr<std::unique_ptr<PosencClient>> MakeClient(const Flags& flags) {
  ASSIGN_OR_RETURN(const ClientOptions options, ClientOptionsFromFlags(flags));
  return PosencClient::Create(options);
}

// Reads an .npy of float32/float16 into a Tensor of `dtype` (or the file's dtype if unset).
absl::StatusOr<v1::Tensor> TensorFromNpy(const std::string& path, std::optional<v1::DType> dtype) {
  ASSIGN_OR_RETURN(NpyArray array, ReadNpyFile(path));
  if (!IsFloat(array.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " holds ", DTypeName(array.dtype),
                                                   "; a float32 or float16 array is needed"));
  }
  const v1::DType want = dtype.value_or(ToProtoDType(array.dtype));
  if (want == ToProtoDType(array.dtype)) return MakeTensorFromBytes(array.dtype, array.shape, array.data);
  std::vector<float> values(array.data.size() / DTypeSize(array.dtype));
  ToFloat32(array.dtype, array.data.data(), values.data(), values.size());
  return MakeTensor(values, array.shape, want);
}

absl::StatusOr<v1::Tensor> FilledTensor(const std::vector<int64_t>& shape, const std::string& fill,
                                        uint64_t seed, v1::DType dtype) {
  ASSIGN_OR_RETURN(const int64_t n, CheckedNumElements(shape, "--shape"));
  std::vector<float> values(static_cast<size_t>(n), 0.0f);
  if (fill == "random") {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (float& v : values) v = uniform(rng);
  } else if (fill != "zeros") {
    return absl::InvalidArgumentError(absl::StrCat("--fill '", fill, "' is not random or zeros"));
  }
  return MakeTensor(values, shape, dtype);
}

// Writes a response tensor; .npy has no bfloat16, so those become float32.
absl::Status WriteTensorNpy(const std::string& path, const v1::Tensor& tensor) {
  ASSIGN_OR_RETURN(const ConstTensorView view, ViewTensor(tensor, "output"));
  if (view.dtype != DType::kBFloat16) {
    return WriteNpyFile(path, view.dtype, view.shape, absl::string_view(tensor.data()));
  }
  ASSIGN_OR_RETURN(std::vector<float> values, TensorToFloats(tensor, "output"));
  std::cerr << "note: " << path << ": bfloat16 written as float32 (.npy has no bfloat16)\n";
  return WriteNpyFile(path, DType::kFloat32, view.shape,
                      absl::string_view(reinterpret_cast<const char*>(values.data()),
                                       values.size() * sizeof(float)));
}

void PrintTensorSummary(absl::string_view label, const v1::Tensor& tensor, int64_t count) {
  auto view = ViewTensor(tensor, label);
  if (!view.ok()) {
    std::cout << label << ": " << view.status().message() << "\n";
    return;
  }
  std::string first;
  if (IsFloat(view->dtype)) {
    auto values = TensorToFloats(tensor, label);
    const size_t k = std::min<size_t>(values->size(), static_cast<size_t>(std::max<int64_t>(count, 0)));
    for (size_t i = 0; i < k; ++i) absl::StrAppendFormat(&first, "%s%.6g", i ? " " : "", (*values)[i]);
    if (k < values->size()) first += " ...";
  } else {
    auto values = TensorToInts(tensor, label);
    const size_t k = std::min<size_t>(values->size(), static_cast<size_t>(std::max<int64_t>(count, 0)));
    for (size_t i = 0; i < k; ++i) absl::StrAppend(&first, i ? " " : "", (*values)[i]);
    if (k < values->size()) first += " ...";
  }
  std::cout << label << ": shape " << ShapeString(view->shape) << " " << DTypeName(view->dtype)
            << "  first: " << first << "\n";
}

double Millis(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// --------------------------------------------------------------------------------------
// Request builders. Errors from these are usage errors (exit 2).

absl::Status FillSinusoidal(const Flags& f, v1::Sinusoidal* s) {
  ASSIGN_OR_RETURN(auto base, f.OptDouble("base"));
  if (base) s->set_base(*base);
  ASSIGN_OR_RETURN(auto layout, EnumFlag<v1::SinusoidalLayout>(f, "layout", v1::SinusoidalLayout_Parse,
                                                              v1::SinusoidalLayout_descriptor()));
  if (layout) s->set_layout(*layout);
  ASSIGN_OR_RETURN(auto timescale, EnumFlag<v1::Timescale>(f, "timescale", v1::Timescale_Parse,
                                                          v1::Timescale_descriptor()));
  if (timescale) s->set_timescale(*timescale);
  ASSIGN_OR_RETURN(auto input_scale, f.OptDouble("input-scale"));
  if (input_scale) s->set_input_scale(static_cast<float>(*input_scale));
  ASSIGN_OR_RETURN(auto pe_scale, f.OptDouble("pe-scale"));
  if (pe_scale) s->set_pe_scale(static_cast<float>(*pe_scale));
  ASSIGN_OR_RETURN(auto fusion, EnumFlag<v1::Fusion>(f, "fusion", v1::Fusion_Parse, v1::Fusion_descriptor()));
  if (fusion) s->set_fusion(*fusion);
  ASSIGN_OR_RETURN(auto pe_dim, f.OptInt("pe-dim"));
  if (pe_dim) s->set_pe_dim(static_cast<int32_t>(*pe_dim));
  return absl::OkStatus();
}

// Fills a Rope from --hf-config, then the explicit flags on top. `hf` receives the config.
absl::Status FillRope(const Flags& f, v1::Rope* rope, std::optional<HfRopeConfig>* hf) {
  if (f.Has("hf-config")) {
    ASSIGN_OR_RETURN(HfRopeConfig config, LoadHfRopeConfig(f.Str("hf-config")));
    *rope = config.rope;
    *hf = std::move(config);
  }
  ASSIGN_OR_RETURN(auto base, f.OptDouble("base"));
  if (base) rope->set_base(*base);
  ASSIGN_OR_RETURN(auto rotary_dim, f.OptInt("rotary-dim"));
  if (rotary_dim) rope->set_rotary_dim(static_cast<int32_t>(*rotary_dim));
  ASSIGN_OR_RETURN(auto style, EnumFlag<v1::RopeStyle>(f, "style", v1::RopeStyle_Parse, v1::RopeStyle_descriptor()));
  if (style) rope->set_style(*style);
  ASSIGN_OR_RETURN(auto layout, EnumFlag<v1::RopeLayout>(f, "rope-layout", v1::RopeLayout_Parse,
                                                        v1::RopeLayout_descriptor()));
  if (layout) rope->set_layout(*layout);
  ASSIGN_OR_RETURN(auto scaling, EnumFlag<v1::RopeScalingType>(f, "scaling", v1::RopeScalingType_Parse,
                                                              v1::RopeScalingType_descriptor()));
  if (scaling) rope->mutable_scaling()->set_type(*scaling);
  ASSIGN_OR_RETURN(auto factor, f.OptDouble("factor"));
  if (factor) rope->mutable_scaling()->set_factor(*factor);
  ASSIGN_OR_RETURN(auto original, f.OptInt("original-max-pos"));
  if (original) rope->mutable_scaling()->set_original_max_position_embeddings(*original);
  return absl::OkStatus();
}

absl::StatusOr<v1::EncodeRequest> BuildEncodeRequest(const Flags& f) {
  v1::EncodeRequest request;
  request.set_request_id(f.Str("request-id"));
  const std::string scheme = f.Str("scheme", f.Has("hf-config") ? "rope" : "sinusoidal");
  std::optional<HfRopeConfig> hf;
  if (scheme == "sinusoidal") {
    RETURN_IF_ERROR(FillSinusoidal(f, request.mutable_sinusoidal()));
  } else if (scheme == "learned") {
    v1::Learned* learned = request.mutable_learned();
    if (!f.Has("table")) return absl::InvalidArgumentError("--scheme learned needs --table NAME");
    learned->set_table(f.Str("table"));
    ASSIGN_OR_RETURN(auto overflow, EnumFlag<v1::Overflow>(f, "overflow", v1::Overflow_Parse, v1::Overflow_descriptor()));
    if (overflow) learned->set_overflow(*overflow);
    v1::Sinusoidal tmp;  // shares the scale and fusion flags
    RETURN_IF_ERROR(FillSinusoidal(f, &tmp));
    if (tmp.has_input_scale()) learned->set_input_scale(tmp.input_scale());
    if (tmp.has_pe_scale()) learned->set_pe_scale(tmp.pe_scale());
    learned->set_fusion(tmp.fusion());
  } else if (scheme == "rope") {
    RETURN_IF_ERROR(FillRope(f, request.mutable_rope(), &hf));
  } else if (scheme == "continuous") {
    v1::Continuous* c = request.mutable_continuous();
    v1::Sinusoidal tmp;
    RETURN_IF_ERROR(FillSinusoidal(f, &tmp));
    if (tmp.has_base()) c->set_base(tmp.base());
    c->set_layout(tmp.layout());
    c->set_timescale(tmp.timescale());
    ASSIGN_OR_RETURN(auto value_scale, f.OptDouble("value-scale"));
    if (value_scale) c->set_value_scale(*value_scale);
  } else if (scheme == "hierarchical") {
    // --levels "0,1,0;0,0,1": one comma-separated id list per level, levels split by ';'.
    if (!f.Has("levels")) {
      return absl::InvalidArgumentError("--scheme hierarchical needs --levels \"ids;ids...\"");
    }
    ASSIGN_OR_RETURN(std::vector<double> scales, f.DoubleList("level-scales"));
    ASSIGN_OR_RETURN(std::vector<double> bases, f.DoubleList("level-bases"));
    size_t index = 0;
    for (absl::string_view ids : absl::StrSplit(f.Str("levels"), ';', absl::SkipEmpty())) {
      v1::Level* level = request.mutable_hierarchical()->add_levels();
      for (absl::string_view part : absl::StrSplit(ids, ',', absl::SkipEmpty())) {
        int64_t v;
        if (!absl::SimpleAtoi(part, &v)) {
          return absl::InvalidArgumentError("--levels takes integers: \"0,1,0;0,0,1\"");
        }
        level->add_ids(v);
      }
      if (index < scales.size()) level->set_scale(static_cast<float>(scales[index]));
      if (index < bases.size()) level->set_base(bases[index]);
      ++index;
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--scheme '", scheme,
        "' is not one of sinusoidal, learned, rope, hierarchical, continuous"));
  }

  // Input.
  std::optional<v1::DType> dtype;
  if (f.Has("dtype")) { ASSIGN_OR_RETURN(dtype, ParseDTypeName(f.Str("dtype"))); }
  if (f.Has("input") && f.Has("shape")) return absl::InvalidArgumentError("give --input or --shape, not both");
  ASSIGN_OR_RETURN(const int64_t seed, f.Int("seed", 0));
  if (f.Has("input")) {
    ASSIGN_OR_RETURN(*request.mutable_input(), TensorFromNpy(f.Str("input"), dtype));
  } else {
    ASSIGN_OR_RETURN(std::vector<int64_t> shape, f.IntList("shape"));
    if (shape.empty() && hf && hf->num_attention_heads > 0) {
      // 8 tokens of the model's query heads, in the chosen layout.
      constexpr int64_t kTokens = 8;
      switch (request.rope().layout()) {
        case v1::BHSD: shape = {1, hf->num_attention_heads, kTokens, hf->head_dim}; break;
        case v1::THD: shape = {kTokens, hf->num_attention_heads, hf->head_dim}; break;
        default: shape = {1, kTokens, hf->num_attention_heads, hf->head_dim}; break;
      }
    }
    if (shape.empty()) return absl::InvalidArgumentError("give --shape 2,16,64 or --input x.npy");
    ASSIGN_OR_RETURN(*request.mutable_input(),
                     FilledTensor(shape, f.Str("fill", "random"), static_cast<uint64_t>(seed),
                                  dtype.value_or(v1::FLOAT32)));
  }
  if (f.Has("key") || f.Has("key-shape")) {
    if (scheme != "rope") return absl::InvalidArgumentError("--key and --key-shape are for --scheme rope");
    if (f.Has("key")) {
      ASSIGN_OR_RETURN(*request.mutable_key(), TensorFromNpy(f.Str("key"), request.input().dtype()));
    } else {
      ASSIGN_OR_RETURN(std::vector<int64_t> key_shape, f.IntList("key-shape"));
      ASSIGN_OR_RETURN(*request.mutable_key(),
                       FilledTensor(key_shape, f.Str("fill", "random"), static_cast<uint64_t>(seed) + 1,
                                    request.input().dtype()));
    }
  }

  // Positions.
  ASSIGN_OR_RETURN(std::vector<int64_t> offsets, f.IntList("offsets"));
  ASSIGN_OR_RETURN(std::vector<int64_t> ids, f.IntList("ids"));
  ASSIGN_OR_RETURN(std::vector<double> values, f.DoubleList("values"));
  request.mutable_positions()->mutable_offsets()->Add(offsets.begin(), offsets.end());
  request.mutable_positions()->mutable_ids()->Add(ids.begin(), ids.end());
  request.mutable_positions()->mutable_values()->Add(values.begin(), values.end());
  return request;
}

// --------------------------------------------------------------------------------------
// Commands.

// Writes `tensor` as .npy to the path --<flag> gives, if it gives one.
absl::Status WriteIfAsked(const Flags& f, const std::string& flag, const v1::Tensor& tensor) {
  if (!f.Has(flag)) return absl::OkStatus();
  return WriteTensorNpy(f.Str(flag), tensor);
}

// One unary call: connects, times call(client), and hands the response, --print and the
// elapsed time to report(), whose return is the exit code. Bad flags and RPC errors
// become their exit codes here.
template <typename Call, typename Report>
int TimedCall(const Flags& f, absl::string_view rpc, const Call& call, const Report& report) {
  auto client = MakeClient(f);
  if (!client.ok()) return UsageError(client.status());
  auto print = f.Int("print", 8);
  if (!print.ok()) return UsageError(print.status());
  const absl::Time start = absl::Now();
  auto response = call(**client);
  const absl::Duration elapsed = absl::Now() - start;
  if (!response.ok()) return RpcError(rpc, response.status());
  return report(*response, *print, elapsed);
}

void PrintElapsed(absl::Duration elapsed) {
  std::cout << absl::StrFormat("elapsed %.3f ms\n", Millis(elapsed));
}

const std::set<std::string> kEncodeOnly = {"scheme", "table", "overflow", "offsets", "ids", "values", "levels", "level-scales", "level-bases",
                                           "shape", "fill", "seed", "input", "dtype", "output", "key",
                                           "key-shape", "key-output", "print", "count", "shm"};

int RunEncodeStream(const Flags& f, v1::EncodeRequest& request);

// --shm: the tensors travel through a POSIX shared-memory object this command creates,
// registers, and removes again; the server rotates or adds them in place, and the answer
// is read back from the object (the server must run with --shm).
absl::StatusOr<v1::EncodeResponse> EncodeByReference(PosencClient& client,
                                                     v1::EncodeRequest request) {
  const uint64_t in = request.input().data().size(), key = request.key().data().size();
  const uint64_t key_at = (in + 63) / 64 * 64;
  const std::string name = absl::StrCat("cli_", getpid());
  ASSIGN_OR_RETURN(ShmRegion region,
                   ShmRegion::Create(absl::StrCat("/posenc_cli_", getpid()),
                                     std::max<uint64_t>(key_at + key, 64)));
  std::memcpy(region.bytes().data(), request.input().data().data(), in);
  *request.mutable_input()->mutable_shm() = ShmRegion::Ref(name, 0, in);
  request.mutable_input()->clear_data();
  if (request.has_key()) {
    std::memcpy(region.bytes().data() + key_at, request.key().data().data(), key);
    *request.mutable_key()->mutable_shm() = ShmRegion::Ref(name, key_at, key);
    request.mutable_key()->clear_data();
  }
  RETURN_IF_ERROR(client.RegisterSharedMemory(region.RegisterRequest(name)));
  absl::StatusOr<v1::EncodeResponse> response = client.Encode(request);
  const absl::Status unregistered = client.UnregisterSharedMemory(name);
  if (!response.ok()) return response.status();
  RETURN_IF_ERROR(unregistered);
  if (!response->key_output().has_shm()) response->clear_key_output();
  for (v1::Tensor* t : {response->mutable_output(), response->mutable_key_output()}) {
    if (!t->has_shm()) continue;  // e.g. CONCAT, answered inline; or no key
    ASSIGN_OR_RETURN(absl::Span<uint8_t> bytes, region.Slice(t->shm().offset(), t->shm().byte_size()));
    t->set_data(bytes.data(), bytes.size());
    t->clear_shm();
  }
  return response;
}

int RunEncode(const Flags& f, bool stream) {
  auto request = BuildEncodeRequest(f);
  if (!request.ok()) return UsageError(request.status());
  if (stream) return RunEncodeStream(f, *request);
  auto by_reference = f.Bool("shm");
  if (!by_reference.ok()) return UsageError(by_reference.status());
  return TimedCall(
      f, "Encode",
      [&](PosencClient& client) {
        return *by_reference ? EncodeByReference(client, *request) : client.Encode(*request);
      },
      [&](const v1::EncodeResponse& response, int64_t print, absl::Duration elapsed) {
        PrintTensorSummary("output", response.output(), print);
        if (response.has_key_output()) {
          PrintTensorSummary("key_output", response.key_output(), print);
        }
        PrintElapsed(elapsed);
        if (absl::Status s = WriteIfAsked(f, "output", response.output()); !s.ok()) {
          return RpcError("writing --output", s);
        }
        if (response.has_key_output()) {
          if (absl::Status s = WriteIfAsked(f, "key-output", response.key_output()); !s.ok()) {
            return RpcError("writing --key-output", s);
          }
        }
        return kExitOk;
      });
}

// EncodeStream: --count requests down one stream, then the rates.
int RunEncodeStream(const Flags& f, v1::EncodeRequest& request) {
  auto client = MakeClient(f);
  if (!client.ok()) return UsageError(client.status());
  auto print = f.Int("print", 8);
  if (!print.ok()) return UsageError(print.status());
  auto count = f.Int("count", 100);
  if (!count.ok()) return UsageError(count.status());
  if (*count < 1) return UsageError(absl::InvalidArgumentError("--count must be >= 1"));
  const std::string id_prefix = request.request_id().empty() ? "stream" : request.request_id();
  int64_t sent = 0;
  int64_t received = 0;
  size_t bytes_out = 0;
  v1::EncodeResponse last;
  const absl::Time start = absl::Now();
  absl::Status status = (*client)->EncodeStream(
      [&]() -> const v1::EncodeRequest* {
        if (sent == *count) return nullptr;
        request.set_request_id(absl::StrCat(id_prefix, "-", sent++));
        return &request;
      },
      [&](v1::EncodeResponse&& response) {
        bytes_out += response.output().data().size() + response.key_output().data().size();
        ++received;
        if (received == *count) last = std::move(response);
        return absl::OkStatus();
      });
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!status.ok()) return RpcError("EncodeStream", status);
  const size_t bytes_in = static_cast<size_t>(*count) *
                          (request.input().data().size() + request.key().data().size());
  PrintTensorSummary("last output", last.output(), *print);
  std::cout << absl::StrFormat(
      "%d responses in %.3f s: %.1f req/s, %.1f MiB/s sent, %.1f MiB/s received\n", received,
      seconds, received / seconds, bytes_in / seconds / (1 << 20), bytes_out / seconds / (1 << 20));
  return kExitOk;
}

int RunBias(const Flags& f) {
  v1::BiasRequest request;
  auto build = [&]() -> absl::Status {
    request.set_request_id(f.Str("request-id"));
    ASSIGN_OR_RETURN(auto q, f.OptInt("query-length"));
    ASSIGN_OR_RETURN(auto k, f.OptInt("key-length"));
    if (!q || !k) return absl::InvalidArgumentError("bias needs --query-length and --key-length");
    request.set_query_length(*q);
    request.set_key_length(*k);
    ASSIGN_OR_RETURN(auto offset, f.OptInt("query-offset"));
    if (offset) request.set_query_offset(*offset);
    const std::string scheme = f.Str("scheme", "alibi");
    if (scheme == "alibi") {
      v1::Alibi* alibi = request.mutable_alibi();
      ASSIGN_OR_RETURN(auto heads, f.OptInt("heads"));
      if (!heads) return absl::InvalidArgumentError("--scheme alibi needs --heads");
      alibi->set_num_heads(static_cast<int32_t>(*heads));
      ASSIGN_OR_RETURN(auto mode, EnumFlag<v1::AlibiMode>(f, "mode", v1::AlibiMode_Parse, v1::AlibiMode_descriptor()));
      if (mode) alibi->set_mode(*mode);
      ASSIGN_OR_RETURN(auto max_bias, f.OptDouble("max-bias"));
      if (max_bias) alibi->set_max_bias(*max_bias);
    } else if (scheme == "t5") {
      v1::T5Bias* t5 = request.mutable_t5();
      ASSIGN_OR_RETURN(auto buckets, f.OptInt("num-buckets"));
      if (buckets) t5->set_num_buckets(static_cast<int32_t>(*buckets));
      ASSIGN_OR_RETURN(auto max_distance, f.OptInt("max-distance"));
      if (max_distance) t5->set_max_distance(static_cast<int32_t>(*max_distance));
      ASSIGN_OR_RETURN(const bool bidirectional, f.Bool("bidirectional"));
      t5->set_bidirectional(bidirectional);
      t5->set_table(f.Str("table"));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--scheme '", scheme, "' is not alibi or t5"));
    }
    if (f.Has("scores")) {
      std::optional<v1::DType> dtype;
      if (f.Has("dtype")) { ASSIGN_OR_RETURN(dtype, ParseDTypeName(f.Str("dtype"))); }
      ASSIGN_OR_RETURN(*request.mutable_scores(), TensorFromNpy(f.Str("scores"), dtype));
    }
    return absl::OkStatus();
  };
  if (absl::Status s = build(); !s.ok()) return UsageError(s);
  return TimedCall(
      f, "AttentionBias", [&](PosencClient& client) { return client.AttentionBias(request); },
      [&](const v1::BiasResponse& response, int64_t print, absl::Duration elapsed) {
        PrintTensorSummary("output", response.output(), print);
        PrintElapsed(elapsed);
        if (absl::Status s = WriteIfAsked(f, "output", response.output()); !s.ok()) {
          return RpcError("writing --output", s);
        }
        return kExitOk;
      });
}

int RunGraph(const Flags& f) {
  v1::GraphRequest request;
  auto build = [&]() -> absl::Status {
    request.set_request_id(f.Str("request-id"));
    ASSIGN_OR_RETURN(auto nodes, f.OptInt("nodes"));
    ASSIGN_OR_RETURN(auto k, f.OptInt("k"));
    if (!nodes || !k) return absl::InvalidArgumentError("graph needs --nodes and --k");
    request.set_num_nodes(*nodes);
    request.set_k(static_cast<int32_t>(*k));
    ASSIGN_OR_RETURN(const bool normalized, f.Bool("normalized"));
    request.set_normalized(normalized);
    // "0-1,1-2" and "0,1,1,2" both list the pairs (0,1), (1,2).
    std::vector<int64_t> edges;
    for (absl::string_view part : absl::StrSplit(f.Str("edges"), absl::ByAnyChar(",- "), absl::SkipEmpty())) {
      int64_t v;
      if (!absl::SimpleAtoi(part, &v)) {
        return absl::InvalidArgumentError(absl::StrCat("--edges: '", part, "' is not a node id"));
      }
      edges.push_back(v);
    }
    if (edges.size() % 2 != 0) return absl::InvalidArgumentError("--edges has an odd number of node ids");
    request.mutable_edges()->Add(edges.begin(), edges.end());
    if (f.Has("input")) { ASSIGN_OR_RETURN(*request.mutable_input(), TensorFromNpy(f.Str("input"), std::nullopt)); }
    return absl::OkStatus();
  };
  if (absl::Status s = build(); !s.ok()) return UsageError(s);
  return TimedCall(
      f, "GraphEncode", [&](PosencClient& client) { return client.GraphEncode(request); },
      [&](const v1::GraphResponse& response, int64_t print, absl::Duration elapsed) {
        PrintTensorSummary("output", response.output(), print);
        std::cout << "eigenvalues: " << absl::StrJoin(response.eigenvalues(), " ") << "\n";
        PrintElapsed(elapsed);
        if (absl::Status s = WriteIfAsked(f, "output", response.output()); !s.ok()) {
          return RpcError("writing --output", s);
        }
        return kExitOk;
      });
}

int RunTable(const Flags& f) {
  v1::TableRequest request;
  auto build = [&]() -> absl::Status {
    std::optional<HfRopeConfig> hf;
    const std::string scheme = f.Str("scheme", f.Has("hf-config") ? "rope" : "sinusoidal");
    if (scheme == "sinusoidal") {
      RETURN_IF_ERROR(FillSinusoidal(f, request.mutable_sinusoidal()));
    } else if (scheme == "rope") {
      RETURN_IF_ERROR(FillRope(f, request.mutable_rope(), &hf));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--scheme '", scheme, "' is not sinusoidal or rope"));
    }
    ASSIGN_OR_RETURN(auto length, f.OptInt("length"));
    if (!length) {
      if (hf && hf->max_position_embeddings > 0) {
        length = hf->max_position_embeddings;
      } else {
        return absl::InvalidArgumentError("table needs --length");
      }
    }
    request.set_length(*length);
    ASSIGN_OR_RETURN(auto dim, f.OptInt("dim"));
    if (!dim && hf) dim = request.rope().has_rotary_dim() ? request.rope().rotary_dim() : hf->rotary_dim;
    if (!dim) return absl::InvalidArgumentError("table needs --dim");
    request.set_dim(static_cast<int32_t>(*dim));
    if (f.Has("dtype")) {
      ASSIGN_OR_RETURN(const v1::DType dtype, ParseDTypeName(f.Str("dtype")));
      request.set_dtype(dtype);
    }
    ASSIGN_OR_RETURN(auto rows, f.OptInt("rows-per-chunk"));
    if (rows) request.set_rows_per_chunk(*rows);
    return absl::OkStatus();
  };
  if (absl::Status s = build(); !s.ok()) return UsageError(s);
  return TimedCall(
      f, "GetTable", [&](PosencClient& client) { return client.GetTableTensor(request); },
      [&](const v1::Tensor& table, int64_t print, absl::Duration elapsed) {
        PrintTensorSummary("table", table, print);
        PrintElapsed(elapsed);
        if (absl::Status s = WriteIfAsked(f, "output", table); !s.ok()) {
          return RpcError("writing --output", s);
        }
        if (f.Has("output")) std::cout << "wrote " << f.Str("output") << "\n";
        return kExitOk;
      });
}

int RunList(const Flags& f) {
  auto client = MakeClient(f);
  if (!client.ok()) return UsageError(client.status());
  auto response = (*client)->ListSchemes();
  if (!response.ok()) return RpcError("ListSchemes", response.status());
  std::cout << "version: " << response->version() << "\n";
  std::cout << "schemes: " << absl::StrJoin(response->schemes(), " ") << "\n";
  std::vector<std::string> dtypes;
  for (int d : response->dtypes()) dtypes.push_back(v1::DType_Name(static_cast<v1::DType>(d)));
  std::cout << "dtypes: " << absl::StrJoin(dtypes, " ") << "\n";
  std::cout << "tables:" << (response->tables().empty() ? " (none)" : "") << "\n";
  for (const v1::NamedTable& t : response->tables()) {
    std::cout << "  " << t.name() << " [" << absl::StrJoin(t.shape(), ",") << "] "
              << v1::DType_Name(t.dtype()) << "\n";
  }
  return kExitOk;
}

int RunHealth(const Flags& f) {
  auto client = MakeClient(f);
  if (!client.ok()) return UsageError(client.status());
  auto status = (*client)->Health(f.Str("service"));
  if (!status.ok()) return RpcError("Health/Check", status.status());
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(*status) << "\n";
  return *status == grpc::health::v1::HealthCheckResponse::SERVING ? kExitOk : kExitRpc;
}

int Main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    std::cout << kUsage;
    return argc < 2 ? kExitUsage : kExitOk;
  }
  const std::string command = argv[1];
  if (command == "--version") {
    std::cout << "posenc-client " << posenc::kVersion << "\n";
    return kExitOk;
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "load") return RunLoadCommand(args);
  if (command == "infer") return RunInferCommand(args);
  if (command == "plot") return posenc::client::RunPlotCommand(args);
  std::set<std::string> known;
  if (command == "encode" || command == "stream") {
    known = Union({&kSinusoidalFlags, &kRopeFlags, &kEncodeOnly});
  } else if (command == "bias") {
    known = Union({}, {"scheme", "query-length", "key-length", "query-offset", "heads", "mode",
                       "max-bias", "num-buckets", "max-distance", "bidirectional", "table",
                       "scores", "dtype", "output", "print"});
  } else if (command == "graph") {
    known = Union({}, {"nodes", "edges", "k", "normalized", "input", "output", "print"});
  } else if (command == "table") {
    known = Union({&kSinusoidalFlags, &kRopeFlags},
                  {"scheme", "length", "dim", "dtype", "rows-per-chunk", "output", "print"});
  } else if (command == "list") {
    known = Union({});
  } else if (command == "health") {
    known = Union({}, {"service"});
  } else {
    return UsageError(absl::InvalidArgumentError(absl::StrCat("unknown command '", command, "'")));
  }
  auto flags = ParseCommandFlags(args, known, {"bidirectional", "normalized", "shm"});
  if (!flags.ok()) return UsageError(flags.status());
  if (flags->Has("help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  if (command == "encode") return RunEncode(*flags, /*stream=*/false);
  if (command == "stream") return RunEncode(*flags, /*stream=*/true);
  if (command == "bias") return RunBias(*flags);
  if (command == "graph") return RunGraph(*flags);
  if (command == "table") return RunTable(*flags);
  if (command == "list") return RunList(*flags);
  return RunHealth(*flags);
}

}  // namespace
}  // namespace posenc::client

int main(int argc, char** argv) { return posenc::client::Main(argc, argv); }
