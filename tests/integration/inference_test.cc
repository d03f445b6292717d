// Integration tests of the Open Inference Protocol front: the real posenc-server binary on
// port 0, called through stubs generated from the project's own proto/inference/
// grpc_service.proto. Every model's answer is compared bit for bit with the native posenc.v1
// rpc's answer for the same request.
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/shm_region.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/tensor/dtype.h"
#include "server/tensor/npy.h"
#include "tests/integration/v1_helpers.h"
#include "tests/support/random_values.h"
#include "tests/support/status_matchers.h"

namespace posenc::testing {
namespace {

using ::testing::HasSubstr;

using inference::ModelInferRequest;
using inference::ModelInferResponse;
using inference::ModelStreamInferResponse;

struct InferResult {
  grpc::Status status;
  ModelInferResponse response;
};

// `values` rounded to `dtype` (FLOAT32 or BFLOAT16), as little-endian bytes.
std::string Encoded(const std::vector<float>& values, v1::DType dtype) {
  const DType t = dtype == v1::BFLOAT16 ? DType::kBFloat16 : DType::kFloat32;
  std::string out(values.size() * DTypeSize(t), '\0');
  FromFloat32(values.data(), t, out.data(), values.size());
  return out;
}

const char* Datatype(v1::DType dtype) {
  switch (dtype) {
    case v1::BFLOAT16: return "BF16";
    case v1::FLOAT16: return "FP16";
    case v1::INT32: return "INT32";
    case v1::INT64: return "INT64";
    default: return "FP32";
  }
}

ModelInferRequest Request(const std::string& model, const std::string& id = "") {
  ModelInferRequest r;
  r.set_model_name(model);
  r.set_id(id);
  return r;
}

void AddRaw(ModelInferRequest& r, const std::string& name, const std::string& datatype,
            const std::vector<int64_t>& shape, std::string bytes) {
  auto* in = r.add_inputs();
  in->set_name(name);
  in->set_datatype(datatype);
  for (int64_t d : shape) in->add_shape(d);
  r.add_raw_input_contents(std::move(bytes));
}

// The native tensor as an OIP input, its bytes raw.
void AddRaw(ModelInferRequest& r, const std::string& name, const v1::Tensor& t) {
  AddRaw(r, name, Datatype(t.dtype()), {t.shape().begin(), t.shape().end()}, t.data());
}

void SetParameter(ModelInferRequest& r, const std::string& key, const std::string& value) {
  (*r.mutable_parameters())[key].set_string_param(value);
}
void SetParameter(ModelInferRequest& r, const std::string& key, int64_t value) {
  (*r.mutable_parameters())[key].set_int64_param(value);
}

std::string Json(const google::protobuf::Message& m) {
  std::string json;
  const auto converted = google::protobuf::util::MessageToJsonString(m, &json);
  EXPECT_TRUE(converted.ok()) << converted.message();  // protobuf's Status, not absl's
  return json;
}

// The output `name` of `r` holds exactly `native`: datatype, shape and every byte.
void ExpectSame(const ModelInferResponse& r, const std::string& name, const v1::Tensor& native) {
  ASSERT_EQ(r.outputs_size(), r.raw_output_contents_size());
  for (int i = 0; i < r.outputs_size(); ++i) {
    if (r.outputs(i).name() != name) continue;
    EXPECT_EQ(r.outputs(i).datatype(), Datatype(native.dtype())) << name;
    EXPECT_EQ(std::vector<int64_t>(r.outputs(i).shape().begin(), r.outputs(i).shape().end()),
              std::vector<int64_t>(native.shape().begin(), native.shape().end()))
        << name;
    EXPECT_GT(native.data().size(), 0u) << name;
    EXPECT_TRUE(r.raw_output_contents(i) == native.data()) << name << " differs from native";
    return;
  }
  ADD_FAILURE() << "no output '" << name << "'";
}

std::vector<std::string> OutputNames(const ModelInferResponse& r) {
  std::vector<std::string> names;
  for (const auto& o : r.outputs()) names.push_back(o.name());
  return names;
}

class InferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = ::testing::TempDir();
    // wpe: [64, 8]; t5rel: [32 buckets, 2 heads].
    // shawrel: [2k + 1 = 5, d = 8]; kids (a tree table): [3 children, 4].
    const std::vector<float> wpe = RandomFloats(64 * 8, 7), t5 = RandomFloats(32 * 2, 8);
    const std::vector<float> shaw = RandomFloats(5 * 8, 9), kids = RandomFloats(3 * 4, 10);
    ASSERT_THAT(WriteNpyFile(dir + "/oip_wpe.npy", DType::kFloat32, {64, 8}, Bytes(wpe)), IsOk());
    ASSERT_THAT(WriteNpyFile(dir + "/oip_t5.npy", DType::kFloat32, {32, 2}, Bytes(t5)), IsOk());
    ASSERT_THAT(WriteNpyFile(dir + "/oip_shaw.npy", DType::kFloat32, {5, 8}, Bytes(shaw)), IsOk());
    ASSERT_THAT(WriteNpyFile(dir + "/oip_kids.npy", DType::kFloat32, {3, 4}, Bytes(kids)), IsOk());
    server_ = new ServerProcess(
        {"--table=wpe=" + dir + "/oip_wpe.npy", "--table=t5rel=" + dir + "/oip_t5.npy",
         "--table=shawrel=" + dir + "/oip_shaw.npy", "--table=kids=" + dir + "/oip_kids.npy"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(server_->started());
    oip_ = inference::GRPCInferenceService::NewStub(server_->Channel());
    native_ = v1::PositionalEncoding::NewStub(server_->Channel());
  }

  InferResult Infer(const ModelInferRequest& request) {
    InferResult result;
    grpc::ClientContext ctx;
    result.status = oip_->ModelInfer(&ctx, request, &result.response);
    return result;
  }
  v1::EncodeResponse Encode(const v1::EncodeRequest& request) {
    v1::EncodeResponse response;
    EXPECT_THAT(posenc::testing::Encode(*native_, request, &response), IsOk());
    return response;
  }
  v1::BiasResponse Bias(const v1::BiasRequest& request) {
    v1::BiasResponse response;
    EXPECT_THAT(AttentionBias(*native_, request, &response), IsOk());
    return response;
  }
  v1::GraphResponse Graph(const v1::GraphRequest& request) {
    v1::GraphResponse response;
    EXPECT_THAT(GraphEncode(*native_, request, &response), IsOk());
    return response;
  }

  // The OIP request for the native Encode `native` of `model`: config = the scheme message,
  // inputs = its tensors, positions as the `positions` parameter.
  ModelInferRequest EncodeAsOip(const std::string& model, const v1::EncodeRequest& native) {
    ModelInferRequest r = Request(model, native.request_id());
    const google::protobuf::Message* scheme =
        model == "sinusoidal" ? static_cast<const google::protobuf::Message*>(&native.sinusoidal())
        : model == "learned"  ? &native.learned()
        : model == "rope"     ? &native.rope()
        : model == "hierarchical"
            ? static_cast<const google::protobuf::Message*>(&native.hierarchical())
            : &native.continuous();
    SetParameter(r, "config", Json(*scheme));
    AddRaw(r, "input", native.input());
    if (native.has_key()) AddRaw(r, "key", native.key());
    return r;
  }

  // Encode natively and through ModelInfer; every output must be the same bytes.
  void ExpectEncodeSame(const std::string& model, const v1::EncodeRequest& native,
                        const ModelInferRequest& oip) {
    const v1::EncodeResponse expected = Encode(native);
    InferResult got = Infer(oip);
    ASSERT_THAT(got.status, IsOk()) << model << ": " << got.status.error_message();
    EXPECT_EQ(got.response.model_name(), model);
    EXPECT_EQ(got.response.model_version(), "1");
    EXPECT_EQ(got.response.id(), oip.id());
    ExpectSame(got.response, "output", expected.output());
    if (native.has_key()) {
      ExpectSame(got.response, "key_output", expected.key_output());
      EXPECT_EQ(OutputNames(got.response), (std::vector<std::string>{"output", "key_output"}));
    } else {
      EXPECT_EQ(OutputNames(got.response), std::vector<std::string>{"output"});
    }
  }

  static ServerProcess* server_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> oip_;
  std::unique_ptr<v1::PositionalEncoding::Stub> native_;
};

ServerProcess* InferenceTest::server_ = nullptr;

class EveryDtype : public InferenceTest, public ::testing::WithParamInterface<v1::DType> {};

TEST_P(EveryDtype, AbsoluteModelsMatchEncodeBitForBit) {
  const v1::DType dtype = GetParam();
  v1::EncodeRequest native;
  native.set_request_id("abs");
  *native.mutable_input() = MakeTensor({2, 5, 8}, dtype, Encoded(RandomFloats(80, 1), dtype));
  native.mutable_positions()->add_offsets(3);
  native.mutable_positions()->add_offsets(40);

  v1::EncodeRequest sinusoidal = native;
  sinusoidal.mutable_sinusoidal()->set_layout(v1::CONCATENATED);
  sinusoidal.mutable_sinusoidal()->set_input_scale(2.5f);
  ModelInferRequest oip = EncodeAsOip("sinusoidal", sinusoidal);
  SetParameter(oip, "positions", Json(native.positions()));
  ExpectEncodeSame("sinusoidal", sinusoidal, oip);

  v1::EncodeRequest learned = native;
  learned.mutable_learned()->set_table("wpe");
  learned.mutable_learned()->set_overflow(v1::CLAMP);  // row 1 reaches position 44 of 64
  oip = EncodeAsOip("learned", learned);
  SetParameter(oip, "positions", Json(native.positions()));
  ExpectEncodeSame("learned", learned, oip);

  v1::EncodeRequest hierarchical = native;
  hierarchical.clear_positions();
  v1::Level* level = hierarchical.mutable_hierarchical()->add_levels();
  for (int64_t id : {0, 1, 2, 0, 1}) level->add_ids(id);
  level = hierarchical.mutable_hierarchical()->add_levels();
  for (int64_t id : {0, 0, 0, 1, 1}) level->add_ids(id);
  level->set_scale(0.5f);
  ExpectEncodeSame("hierarchical", hierarchical, EncodeAsOip("hierarchical", hierarchical));

  // Continuous: the timestamps as an FP64 input.
  v1::EncodeRequest continuous = native;
  continuous.clear_positions();
  const std::vector<double> times = {0.0, 0.25, 1.5, 2.0, 7.75};
  continuous.mutable_positions()->mutable_values()->Add(times.begin(), times.end());
  continuous.mutable_continuous()->set_value_scale(100.0);
  oip = EncodeAsOip("continuous", continuous);
  AddRaw(oip, "position_values", "FP64", {5}, Bytes(times));
  ExpectEncodeSame("continuous", continuous, oip);
}

TEST_P(EveryDtype, RopeWithGqaKeysAndPositionIdsMatchesEncodeBitForBit) {
  const v1::DType dtype = GetParam();
  v1::EncodeRequest native;
  native.set_request_id("rope-1");
  *native.mutable_input() = MakeTensor({1, 6, 4, 16}, dtype, Encoded(RandomFloats(384, 2), dtype));
  *native.mutable_key() = MakeTensor({1, 6, 2, 16}, dtype, Encoded(RandomFloats(192, 3), dtype));
  v1::Rope* rope = native.mutable_rope();
  rope->set_base(500000);
  rope->mutable_scaling()->set_type(v1::LLAMA3);
  rope->mutable_scaling()->set_factor(8);
  rope->mutable_scaling()->set_original_max_position_embeddings(8192);
  const std::vector<int64_t> ids = {100000, 100001, 100005, 7, 8, 9};
  native.mutable_positions()->mutable_ids()->Add(ids.begin(), ids.end());
  ModelInferRequest oip = EncodeAsOip("rope", native);
  AddRaw(oip, "position_ids", "INT64", {6}, Bytes(ids));
  ExpectEncodeSame("rope", native, oip);

  // One offset for every row, as the position_offset parameter; queries only.
  native.clear_key();
  native.clear_positions();
  native.mutable_positions()->add_offsets(4096);
  oip = EncodeAsOip("rope", native);
  SetParameter(oip, "position_offset", int64_t{4096});
  ExpectEncodeSame("rope", native, oip);
}

TEST_P(EveryDtype, MultimodalRopeTakesAxisIdsAndSegmentsLikeEncode) {
  const v1::DType dtype = GetParam();
  v1::EncodeRequest native;
  native.set_request_id("mrope-1");
  *native.mutable_input() = MakeTensor({2, 6, 4, 16}, dtype, Encoded(RandomFloats(768, 4), dtype));
  *native.mutable_key() = MakeTensor({2, 6, 2, 16}, dtype, Encoded(RandomFloats(384, 5), dtype));
  v1::Rope* rope = native.mutable_rope();
  rope->set_base(1000000);
  for (int s : {2, 3, 3}) rope->add_mrope_section(s);
  // [3 axes, 2 rows, 6 tokens]: an image grid in row 0, plain text in row 1.
  const std::vector<int64_t> axis_ids = {0, 1, 1, 1, 1, 3, 0, 1, 2, 3, 4, 5, 0, 1, 1, 2, 2, 3,
                                         0, 1, 2, 3, 4, 5, 0, 1, 2, 1, 2, 3, 0, 1, 2, 3, 4, 5};
  native.mutable_positions()->mutable_axis_ids()->Add(axis_ids.begin(), axis_ids.end());
  ModelInferRequest oip = EncodeAsOip("rope", native);
  AddRaw(oip, "axis_ids", "INT64", {3, 2, 6}, Bytes(axis_ids));
  ExpectEncodeSame("rope", native, oip);

  // The same prompt as segments, in the positions parameter, decoding from offset 10.
  native.clear_positions();
  v1::Positions* positions = native.mutable_positions();
  positions->add_mrope_segments()->set_text_length(2);
  v1::MropeSegment* grid = positions->add_mrope_segments();
  grid->set_grid_t(1);
  grid->set_grid_h(1);
  grid->set_grid_w(2);
  positions->add_mrope_segments()->set_text_length(2);
  positions->add_offsets(10);
  oip = EncodeAsOip("rope", native);
  SetParameter(oip, "positions", Json(native.positions()));
  ExpectEncodeSame("rope", native, oip);

  // An axis_ids shape that is not [3 axes, (2 rows,) 6 tokens] names the input, also when
  // its size would fit.
  native.clear_positions();
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{3, 5}, {6, 6}, {3, 6, 2}, {1, 3, 12}, {3, 3, 6}}) {
    oip = EncodeAsOip("rope", native);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    AddRaw(oip, "axis_ids", "INT64", shape, Bytes(std::vector<int64_t>(n, 1)));
    const InferResult bad = Infer(oip);
    EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << shape[1];
    EXPECT_THAT(bad.status.error_message(), HasSubstr("input 'axis_ids' has shape"));
  }
  // [3, 1, 6]: one row of positions shared by both rows of the batch.
  oip = EncodeAsOip("rope", native);
  AddRaw(oip, "axis_ids", "INT64", {3, 1, 6}, Bytes(std::vector<int64_t>(18, 1)));
  EXPECT_TRUE(Infer(oip).status.ok());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EveryDtype, ::testing::Values(v1::FLOAT32, v1::BFLOAT16),
                         [](const auto& info) { return std::string(Datatype(info.param)); });

TEST_F(InferenceTest, TypedContentsEqualRawBytes) {
  const std::vector<float> x = RandomFloats(3 * 8, 4);
  ModelInferRequest raw = Request("sinusoidal");
  AddRaw(raw, "input", "FP32", {3, 8}, Bytes(x));
  ModelInferRequest typed = Request("sinusoidal");
  auto* in = typed.add_inputs();
  in->set_name("input");
  in->set_datatype("FP32");
  in->add_shape(3);
  in->add_shape(8);
  in->mutable_contents()->mutable_fp32_contents()->Add(x.begin(), x.end());
  auto* ids = typed.add_inputs();
  ids->set_name("position_ids");
  ids->set_datatype("INT32");
  ids->add_shape(3);
  for (int32_t id : {0, 1, 2}) ids->mutable_contents()->add_int_contents(id);
  InferResult a = Infer(raw), b = Infer(typed);
  ASSERT_THAT(a.status, IsOk());
  ASSERT_THAT(b.status, IsOk());
  ASSERT_EQ(b.response.raw_output_contents_size(), 1);
  EXPECT_TRUE(a.response.raw_output_contents(0) == b.response.raw_output_contents(0));
  EXPECT_NE(a.response.raw_output_contents(0), Bytes(x));  // the encoding was added
}

TEST_F(InferenceTest, AlibiAndT5MatchAttentionBiasWithAndWithoutScores) {
  for (const char* model : {"alibi", "t5"}) {
    for (v1::DType dtype : {v1::DTYPE_UNSPECIFIED, v1::FLOAT32, v1::BFLOAT16}) {
      SCOPED_TRACE(std::string(model) + " " + Datatype(dtype));
      v1::BiasRequest native;
      native.set_query_length(3);
      native.set_key_length(7);
      native.set_query_offset(2);
      const google::protobuf::Message* scheme = nullptr;
      if (std::string(model) == "alibi") {
        native.mutable_alibi()->set_num_heads(2);
        native.mutable_alibi()->set_mode(v1::CAUSAL);
        scheme = &native.alibi();
      } else {
        native.mutable_t5()->set_bidirectional(true);
        // Without scores the bucket ids (INT32); with scores the table's bias.
        if (dtype != v1::DTYPE_UNSPECIFIED) native.mutable_t5()->set_table("t5rel");
        scheme = &native.t5();
      }
      ModelInferRequest oip = Request(model);
      SetParameter(oip, "config", Json(*scheme));
      SetParameter(oip, "query_length", int64_t{3});
      SetParameter(oip, "key_length", int64_t{7});
      SetParameter(oip, "query_offset", int64_t{2});
      if (dtype != v1::DTYPE_UNSPECIFIED) {
        *native.mutable_scores() =
            MakeTensor({1, 2, 3, 7}, dtype, Encoded(RandomFloats(42, 5), dtype));
        AddRaw(oip, "scores", native.scores());
      }
      const v1::BiasResponse expected = Bias(native);
      InferResult got = Infer(oip);
      ASSERT_THAT(got.status, IsOk());
      ExpectSame(got.response, "output", expected.output());
    }
  }
}

TEST_F(InferenceTest, GraphLaplacianMatchesGraphEncodeWithAndWithoutInput) {
  // A 6-ring plus a chord, as INT64 [num_edges, 2].
  const std::vector<int64_t> edges = {0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 0, 0, 3};
  for (bool with_input : {false, true}) {
    SCOPED_TRACE(with_input ? "with input" : "encoding only");
    v1::GraphRequest native;
    native.set_num_nodes(6);
    native.mutable_edges()->Add(edges.begin(), edges.end());
    native.set_k(3);
    native.set_normalized(true);
    ModelInferRequest oip = Request("graph_laplacian");
    AddRaw(oip, "edges", "INT64", {7, 2}, Bytes(edges));
    SetParameter(oip, "num_nodes", int64_t{6});
    SetParameter(oip, "k", int64_t{3});
    (*oip.mutable_parameters())["normalized"].set_bool_param(true);
    if (with_input) {
      *native.mutable_input() =
          MakeTensor({6, 4}, v1::FLOAT32, Encoded(RandomFloats(24, 6), v1::FLOAT32));
      AddRaw(oip, "input", native.input());
    }
    const v1::GraphResponse expected = Graph(native);
    InferResult got = Infer(oip);
    ASSERT_THAT(got.status, IsOk());
    ExpectSame(got.response, "output", expected.output());
    EXPECT_EQ(OutputNames(got.response), (std::vector<std::string>{"output", "eigenvalues"}));
    ASSERT_EQ(got.response.outputs(1).datatype(), "FP64");
    ASSERT_EQ(got.response.outputs(1).shape_size(), 1);
    EXPECT_EQ(got.response.outputs(1).shape(0), 3);
    const std::vector<double> eigenvalues(expected.eigenvalues().begin(),
                                          expected.eigenvalues().end());
    EXPECT_TRUE(got.response.raw_output_contents(1) == Bytes(eigenvalues));
  }
}

TEST_F(InferenceTest, ShawAndDebertaMatchAttentionBias) {
  struct Case {
    const char* model;
    bool table, query, scores;
  };
  for (const Case& c : {Case{"shaw", false, false, false}, Case{"shaw", true, false, false},
                        Case{"shaw", true, true, false}, Case{"shaw", true, true, true},
                        Case{"deberta", false, false, false}}) {
    SCOPED_TRACE(std::string(c.model) + (c.table ? " table" : "") + (c.query ? " query" : "") +
                 (c.scores ? " scores" : ""));
    v1::BiasRequest native;
    native.set_query_length(3);
    native.set_key_length(7);
    native.set_query_offset(2);
    const google::protobuf::Message* scheme = nullptr;
    if (std::string(c.model) == "shaw") {
      native.mutable_shaw()->set_max_relative_position(2);
      if (c.table) native.mutable_shaw()->set_table("shawrel");
      scheme = &native.shaw();
    } else {
      native.mutable_deberta()->set_position_buckets(4);
      native.mutable_deberta()->set_max_relative_positions(8);
      scheme = &native.deberta();
    }
    ModelInferRequest oip = Request(c.model);
    SetParameter(oip, "config", Json(*scheme));
    SetParameter(oip, "query_length", int64_t{3});
    SetParameter(oip, "key_length", int64_t{7});
    SetParameter(oip, "query_offset", int64_t{2});
    if (c.scores) {
      *native.mutable_scores() =
          MakeTensor({1, 2, 3, 7}, v1::FLOAT32, Encoded(RandomFloats(42, 5), v1::FLOAT32));
      AddRaw(oip, "scores", native.scores());
    }
    if (c.query) {
      *native.mutable_query() =
          MakeTensor({1, 2, 3, 8}, v1::BFLOAT16, Encoded(RandomFloats(48, 6), v1::BFLOAT16));
      AddRaw(oip, "query", native.query());
    }
    const v1::BiasResponse expected = Bias(native);
    InferResult got = Infer(oip);
    ASSERT_THAT(got.status, IsOk());
    ExpectSame(got.response, "output", expected.output());
  }
}

TEST_F(InferenceTest, RandomWalkShortestPathAndTreeMatchGraphEncode) {
  const std::vector<int64_t> edges = {0, 1, 1, 2, 2, 3, 3, 0, 0, 2};  // node 4 isolated
  for (const char* model : {"graph_random_walk", "graph_shortest_path", "tree"}) {
    for (bool with_input : {false, true}) {
      SCOPED_TRACE(std::string(model) + (with_input ? " with input" : ""));
      v1::GraphRequest native;
      native.set_num_nodes(5);
      ModelInferRequest oip = Request(model);
      SetParameter(oip, "num_nodes", int64_t{5});
      const std::string name = model;
      if (name == "tree") {
        const std::vector<int64_t> parents = {-1, 0, 0, 1, -1};
        native.set_encoding(v1::TREE);
        native.mutable_parents()->Add(parents.begin(), parents.end());
        native.set_max_depth(2);
        native.set_max_children(3);
        native.set_depth_decay(0.5);
        AddRaw(oip, "parents", "INT64", {5}, Bytes(parents));
        SetParameter(oip, "max_depth", int64_t{2});
        SetParameter(oip, "max_children", int64_t{3});
        (*oip.mutable_parameters())["depth_decay"].set_double_param(0.5);
        if (with_input) {  // the summed table this time
          native.set_table("kids");
          SetParameter(oip, "config", std::string("{\"table\": \"kids\"}"));
        }
      } else {
        native.mutable_edges()->Add(edges.begin(), edges.end());
        AddRaw(oip, "edges", "INT64", {5, 2}, Bytes(edges));
        if (name == "graph_random_walk") {
          native.set_encoding(v1::RANDOM_WALK);
          native.set_walk_length(4);
          SetParameter(oip, "walk_length", int64_t{4});
        } else {
          native.set_encoding(v1::SHORTEST_PATH);
          native.add_anchors(1);
          native.add_anchors(4);
          SetParameter(oip, "anchors", std::string("[1, 4]"));
        }
      }
      if (with_input) {
        *native.mutable_input() =
            MakeTensor({5, 2}, v1::BFLOAT16, Encoded(RandomFloats(10, 6), v1::BFLOAT16));
        AddRaw(oip, "input", native.input());
      }
      const v1::GraphResponse expected = Graph(native);
      InferResult got = Infer(oip);
      ASSERT_THAT(got.status, IsOk());
      ExpectSame(got.response, "output", expected.output());
      EXPECT_EQ(OutputNames(got.response), (std::vector<std::string>{"output"}));
    }
  }
  ModelInferRequest bad = Request("graph_shortest_path");
  AddRaw(bad, "edges", "INT64", {5, 2}, Bytes(edges));
  SetParameter(bad, "num_nodes", int64_t{5});
  SetParameter(bad, "anchors", std::string("1, 4"));
  EXPECT_THAT(Infer(bad).status,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("parameter 'anchors'")));
}

TEST_F(InferenceTest, RequestedOutputsComeInTheirOrder) {
  ModelInferRequest r = Request("graph_laplacian");
  AddRaw(r, "edges", "INT64", {2, 2}, Bytes(std::vector<int64_t>{0, 1, 1, 2}));
  SetParameter(r, "num_nodes", int64_t{3});
  SetParameter(r, "k", int64_t{1});
  r.add_outputs()->set_name("eigenvalues");
  r.add_outputs()->set_name("output");
  InferResult got = Infer(r);
  ASSERT_THAT(got.status, IsOk());
  EXPECT_EQ(OutputNames(got.response), (std::vector<std::string>{"eigenvalues", "output"}));
  EXPECT_EQ(got.response.raw_output_contents(0).size(), 8u);
  EXPECT_EQ(got.response.raw_output_contents(1).size(), 3u * 4u);

  ModelInferRequest rope = Request("rope");
  AddRaw(rope, "input", "FP32", {1, 2, 1, 4}, Bytes(RandomFloats(8, 9)));
  AddRaw(rope, "key", "FP32", {1, 2, 1, 4}, Bytes(RandomFloats(8, 10)));
  rope.add_outputs()->set_name("key_output");
  got = Infer(rope);
  ASSERT_THAT(got.status, IsOk());
  EXPECT_EQ(OutputNames(got.response), std::vector<std::string>{"key_output"});
}

// A client's strings are bounded before they cost anything: the same output twice is
// refused naming it; a huge positions JSON is refused before it is parsed; a 1 MiB id is
// echoed cut short, so the real code reaches the client (not oversized metadata).
TEST_F(InferenceTest, DuplicateOutputsHugeJsonAndHugeIdsAreRefusedCleanly) {
  ModelInferRequest twice = Request("sinusoidal");
  AddRaw(twice, "input", "FP32", {2, 4}, Bytes(std::vector<float>(8, 1.0f)));
  twice.add_outputs()->set_name("output");
  twice.add_outputs()->set_name("output");
  InferResult got = Infer(twice);
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(got.status.error_message().find("output 'output' is requested more than once"),
            std::string::npos)
      << got.status.error_message();

  ModelInferRequest json = Request("sinusoidal");
  AddRaw(json, "input", "FP32", {2, 4}, Bytes(std::vector<float>(8, 1.0f)));
  std::string positions = "{\"ids\": [";
  while (positions.size() < (size_t{2} << 20)) positions += "1, ";
  positions += "1]}";
  (*json.mutable_parameters())["positions"].set_string_param(positions);
  got = Infer(json);
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(got.status.error_message().find("parameter 'positions' is"), std::string::npos)
      << got.status.error_message().substr(0, 200);

  ModelInferRequest huge_id = Request("no_such_model", std::string(1 << 20, 'x'));
  got = Infer(huge_id);
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::NOT_FOUND)
      << got.status.error_message().size();
  EXPECT_LT(got.status.error_message().size(), 2048u);
}

TEST_F(InferenceTest, MetadataConfigAndIndexAreWellFormed) {
  const std::vector<std::string> models = {"sinusoidal",
                                           "learned",
                                           "rope",
                                           "hierarchical",
                                           "continuous",
                                           "alibi",
                                           "t5",
                                           "shaw",
                                           "deberta",
                                           "graph_laplacian",
                                           "graph_random_walk",
                                           "graph_shortest_path",
                                           "tree",
                                           "sinusoidal_2d",
                                           "fourier"};
  inference::RepositoryIndexResponse index;
  {
    grpc::ClientContext ctx;
    ASSERT_THAT(oip_->RepositoryIndex(&ctx, {}, &index), IsOk());
  }
  // Every model above, each once, version 1 and ready (the index may hold more).
  for (const std::string& name : models) {
    int found = 0;
    for (const auto& m : index.models()) {
      if (m.name() != name) continue;
      ++found;
      EXPECT_EQ(m.version(), "1") << name;
      EXPECT_EQ(m.state(), "READY") << name;
    }
    EXPECT_EQ(found, 1) << name;
  }
  for (const std::string& name : models) {
    SCOPED_TRACE(name);
    inference::ModelMetadataRequest mreq;
    mreq.set_name(name);
    inference::ModelMetadataResponse meta;
    grpc::ClientContext ctx;
    ASSERT_THAT(oip_->ModelMetadata(&ctx, mreq, &meta), IsOk());
    EXPECT_EQ(meta.name(), name);
    ASSERT_EQ(meta.versions_size(), 1);
    EXPECT_EQ(meta.versions(0), "1");
    EXPECT_EQ(meta.platform(), "posenc");
    ASSERT_GE(meta.inputs_size(), 1);
    ASSERT_GE(meta.outputs_size(), 1);
    EXPECT_EQ(meta.outputs(0).name(), "output");

    inference::ModelConfigRequest creq;
    creq.set_name(name);
    creq.set_version("1");
    inference::ModelConfigResponse config;
    grpc::ClientContext cctx;
    ASSERT_THAT(oip_->ModelConfig(&cctx, creq, &config), IsOk());
    EXPECT_EQ(config.config().name(), name);
    EXPECT_EQ(config.config().platform(), "posenc");
    EXPECT_EQ(config.config().max_batch_size(), 0);
    ASSERT_EQ(config.config().input_size(), meta.inputs_size());
    ASSERT_EQ(config.config().output_size(), meta.outputs_size());
    for (int i = 0; i < meta.inputs_size(); ++i) {
      const auto& in = meta.inputs(i);
      EXPECT_EQ(config.config().input(i).name(), in.name());
      EXPECT_EQ(inference::DataType_Name(config.config().input(i).data_type()),
                "TYPE_" + in.datatype());
      ASSERT_EQ(config.config().input(i).dims_size(), in.shape_size());
      for (int d = 0; d < in.shape_size(); ++d) {
        EXPECT_TRUE(in.shape(d) == -1 || (in.name() == "edges" && d == 1 && in.shape(d) == 2));
      }
    }
    for (int i = 0; i < meta.outputs_size(); ++i) {
      EXPECT_EQ(inference::DataType_Name(config.config().output(i).data_type()),
                "TYPE_" + meta.outputs(i).datatype());
    }
  }
  inference::ServerMetadataResponse server;
  {
    grpc::ClientContext ctx;
    ASSERT_THAT(oip_->ServerMetadata(&ctx, {}, &server), IsOk());
  }
  v1::ListSchemesResponse schemes;
  {
    grpc::ClientContext ctx;
    ASSERT_THAT(native_->ListSchemes(&ctx, {}, &schemes), IsOk());
  }
  EXPECT_EQ(server.name(), "posenc");
  EXPECT_EQ(server.version(), schemes.version());
  EXPECT_EQ(server.extensions_size(), 0);  // no --shm
}

TEST_F(InferenceTest, LiveAndReady) {
  inference::ServerLiveResponse live;
  inference::ServerReadyResponse ready;
  grpc::ClientContext c1, c2, c3, c4;
  ASSERT_THAT(oip_->ServerLive(&c1, {}, &live), IsOk());
  ASSERT_THAT(oip_->ServerReady(&c2, {}, &ready), IsOk());
  EXPECT_TRUE(live.live());
  EXPECT_TRUE(ready.ready());
  inference::ModelReadyRequest req;
  inference::ModelReadyResponse model;
  req.set_name("rope");
  ASSERT_THAT(oip_->ModelReady(&c3, req, &model), IsOk());
  EXPECT_TRUE(model.ready());
  req.set_name("bert");
  ASSERT_THAT(oip_->ModelReady(&c4, req, &model), IsOk());
  EXPECT_FALSE(model.ready());
  // grpc.health.v1 knows the service by name, as it knows posenc.v1.
  auto health = grpc::health::v1::Health::NewStub(server_->Channel());
  grpc::health::v1::HealthCheckRequest check;
  check.set_service("inference.GRPCInferenceService");
  grpc::health::v1::HealthCheckResponse serving;
  grpc::ClientContext c5;
  ASSERT_THAT(health->Check(&c5, check, &serving), IsOk());
  EXPECT_EQ(serving.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(InferenceTest, StreamAnswersInOrderAndAnErrorFailsOnlyItsRequest) {
  grpc::ClientContext ctx;
  auto stream = oip_->ModelStreamInfer(&ctx);
  const int n = 12;
  std::vector<ModelInferRequest> requests;
  for (int i = 0; i < n; ++i) {
    ModelInferRequest r = Request(i == 5 ? "no_such_model" : "sinusoidal", "s" + std::to_string(i));
    AddRaw(r, "input", "FP32", {4, 8}, Bytes(std::vector<float>(32, 0.0f)));
    SetParameter(r, "position_offset", int64_t{i * 10});
    requests.push_back(r);
  }
  std::thread writer([&] {
    for (const auto& r : requests) ASSERT_TRUE(stream->Write(r));
    stream->WritesDone();
  });
  std::vector<ModelStreamInferResponse> responses;
  ModelStreamInferResponse response;
  while (stream->Read(&response)) responses.push_back(response);
  writer.join();
  ASSERT_THAT(stream->Finish(), IsOk());
  ASSERT_EQ(responses.size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(responses[i].infer_response().id(), "s" + std::to_string(i));
    if (i == 5) {
      EXPECT_NE(responses[i].error_message().find("no_such_model"), std::string::npos);
      continue;
    }
    EXPECT_EQ(responses[i].error_message(), "");
    InferResult unary = Infer(requests[i]);
    ASSERT_THAT(unary.status, IsOk());
    EXPECT_TRUE(responses[i].infer_response().raw_output_contents(0) ==
                unary.response.raw_output_contents(0));
  }
  // Different offsets, different answers: the order is visible.
  EXPECT_NE(responses[1].infer_response().raw_output_contents(0),
            responses[2].infer_response().raw_output_contents(0));
}

// The code and a fragment the message must contain, for each bad request.
struct BadCase {
  const char* what;
  ModelInferRequest request;
  grpc::StatusCode code;
  const char* names;
};

std::vector<BadCase> BadCases() {
  std::vector<BadCase> cases;
  auto good = [] {
    ModelInferRequest r = Request("sinusoidal");
    AddRaw(r, "input", "FP32", {2, 4}, Bytes(std::vector<float>(8, 1.0f)));
    return r;
  };
  ModelInferRequest r = good();
  r.set_model_name("bert");
  cases.push_back({"unknown model", r, grpc::StatusCode::NOT_FOUND, "'bert'"});
  r = good();
  r.set_model_version("2");
  cases.push_back({"unknown version", r, grpc::StatusCode::NOT_FOUND, "version 2"});
  r = good();
  r.mutable_inputs(0)->set_name("inputs");
  cases.push_back({"unknown input", r, grpc::StatusCode::INVALID_ARGUMENT, "'inputs'"});
  r = good();
  r.mutable_inputs(0)->set_datatype("INT32");
  cases.push_back({"wrong datatype", r, grpc::StatusCode::INVALID_ARGUMENT, "'input' data-type"});
  r = good();
  r.mutable_inputs(0)->set_datatype("FP16");  // 8 elements need 16 bytes, 32 came
  cases.push_back({"size mismatch", r, grpc::StatusCode::INVALID_ARGUMENT, "'input'"});
  r = good();
  r.mutable_raw_input_contents(0)->resize(31);
  cases.push_back(
      {"raw size mismatch", r, grpc::StatusCode::INVALID_ARGUMENT, "Expected 32, got 31"});
  r = Request("sinusoidal");
  AddRaw(r, "input", "FP32", {2, 4}, "");
  r.clear_raw_input_contents();
  r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f);
  cases.push_back({"typed size mismatch", r, grpc::StatusCode::INVALID_ARGUMENT, "'input'"});
  r = good();
  r.mutable_inputs(0)->set_datatype("BF16");
  r.mutable_inputs(0)->add_shape(2);  // [2, 4, 2]: 16 BF16 = 32 bytes
  r.clear_raw_input_contents();
  r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f);
  cases.push_back({"bf16 typed", r, grpc::StatusCode::INVALID_ARGUMENT, "raw_input_contents"});
  r = good();
  SetParameter(r, "config", "{\"base\": ");
  cases.push_back({"bad config JSON", r, grpc::StatusCode::INVALID_ARGUMENT,
                   "parameter 'config' is not a posenc.v1."});  // the message's full name
  r = good();
  SetParameter(r, "config", "{\"bass\": 10}");
  cases.push_back({"unknown config field", r, grpc::StatusCode::INVALID_ARGUMENT, "'config'"});
  r = good();
  SetParameter(r, "config", "{\"base\": -1}");
  cases.push_back({"config value", r, grpc::StatusCode::INVALID_ARGUMENT, "base"});
  r = good();
  SetParameter(r, "config", int64_t{3});
  cases.push_back({"config not a string", r, grpc::StatusCode::INVALID_ARGUMENT, "'config'"});
  r = good();
  SetParameter(r, "query_length", int64_t{3});
  cases.push_back(
      {"parameter of another model", r, grpc::StatusCode::INVALID_ARGUMENT, "'query_length'"});
  r = good();
  r.add_outputs()->set_name("logits");
  cases.push_back({"unknown output", r, grpc::StatusCode::INVALID_ARGUMENT, "'logits'"});
  r = Request("rope");
  cases.push_back({"missing input", r, grpc::StatusCode::INVALID_ARGUMENT, "'input'"});
  r = good();
  r.add_raw_input_contents("extra");
  cases.push_back({"raw count", r, grpc::StatusCode::INVALID_ARGUMENT, "raw_input_contents"});
  r = Request("graph_laplacian");
  AddRaw(r, "edges", "INT64", {4}, Bytes(std::vector<int64_t>{0, 1, 1, 2}));
  cases.push_back({"edges shape", r, grpc::StatusCode::INVALID_ARGUMENT, "'edges'"});
  r = good();
  (*r.mutable_inputs(0)->mutable_parameters())["shared_memory_region"].set_string_param("in0");
  cases.push_back({"shm off", r, grpc::StatusCode::FAILED_PRECONDITION, "--shm"});
  r = good();
  r.mutable_inputs(0)->set_shape(1, -4);
  cases.push_back({"negative dim", r, grpc::StatusCode::INVALID_ARGUMENT, "'input'"});
  return cases;
}

TEST_F(InferenceTest, EveryBadInputGetsItsCodeAndNamesWhatIsWrong) {
  for (const BadCase& c : BadCases()) {
    SCOPED_TRACE(c.what);
    InferResult got = Infer(c.request);
    EXPECT_EQ(got.status.error_code(), c.code) << got.status.error_message();
    EXPECT_NE(got.status.error_message().find(c.names), std::string::npos)
        << got.status.error_message();
  }
  grpc::ClientContext ctx;
  inference::SystemSharedMemoryRegisterRequest shm;
  shm.set_name("r");
  shm.set_key("/posenc_x");
  shm.set_byte_size(64);
  inference::SystemSharedMemoryRegisterResponse shm_response;
  const grpc::Status s = oip_->SystemSharedMemoryRegister(&ctx, shm, &shm_response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("--shm"), std::string::npos);
  // The server is unharmed.
  ModelInferRequest r = Request("sinusoidal");
  AddRaw(r, "input", "FP32", {2, 4}, Bytes(std::vector<float>(8, 1.0f)));
  EXPECT_THAT(Infer(r).status, IsOk());
}

// Each input is checked by its shape, not only its element count, and the message names
// the input and the shapes it may have.
struct ShapeCase {
  const char* what;
  ModelInferRequest request;
  const char* words;
};

// Position inputs whose count fits but whose shape does not.
std::vector<ShapeCase> MisshapedPositionCases() {
  std::vector<ShapeCase> cases;
  const std::string ids6 = Bytes(std::vector<int64_t>{0, 1, 2, 0, 1, 2});
  {
    ModelInferRequest r = Request("sinusoidal");
    AddRaw(r, "input", "FP32", {2, 3, 8}, Bytes(std::vector<float>(48, 0.5f)));
    AddRaw(r, "position_ids", "INT64", {3, 2}, ids6);
    cases.push_back({"position_ids [3, 2] for [2, 3, 8]", r,
                     "input 'position_ids' has shape [3, 2]; with input [2, 3, 8] (batch 2, "
                     "seq 3) it must be [3] or [2, 3]"});
  }
  {
    ModelInferRequest r = Request("rope");
    AddRaw(r, "input", "FP32", {1, 4, 2, 8}, Bytes(std::vector<float>(64, 0.5f)));
    AddRaw(r, "position_ids", "INT64", {2, 2}, Bytes(std::vector<int64_t>{0, 1, 2, 3}));
    cases.push_back({"rope position_ids [2, 2] for BSHD seq 4", r,
                     "input 'position_ids' has shape [2, 2]; with input [1, 4, 2, 8] (batch 1, "
                     "seq 4) it must be [4] or [1, 4]"});
  }
  {
    ModelInferRequest r = Request("fourier");
    SetParameter(r, "config", "{\"frequencies\": [1, 0.5, 0.25, 2], \"num_axes\": 2}");
    AddRaw(r, "input", "FP32", {1, 3, 4}, Bytes(std::vector<float>(12, 0.5f)));
    AddRaw(r, "position_values", "FP64", {2, 3}, Bytes(std::vector<double>(6, 0.5)));
    cases.push_back({"fourier position_values [2, 3] for [3, 2]", r,
                     "input 'position_values' has shape [2, 3]; with input [1, 3, 4] (batch 1, "
                     "seq 3) it must be [3, 2] or [1, 3, 2]"});
  }
  {
    ModelInferRequest r = Request("continuous");
    AddRaw(r, "input", "FP32", {2, 3, 8}, Bytes(std::vector<float>(48, 0.5f)));
    AddRaw(r, "position_values", "FP64", {6}, Bytes(std::vector<double>(6, 0.5)));
    cases.push_back({"continuous position_values [6] for [2, 3, 8]", r,
                     "input 'position_values' has shape [6]; with input [2, 3, 8] (batch 2, seq "
                     "3) it must be [3] or [2, 3]"});
  }
  return cases;
}

// Graph, bias and config inputs that do not fit their model.
std::vector<ShapeCase> MisshapedOtherCases() {
  std::vector<ShapeCase> cases;
  {
    ModelInferRequest r = Request("graph_laplacian");
    SetParameter(r, "num_nodes", int64_t{3});
    AddRaw(r, "edges", "INT64", {4}, Bytes(std::vector<int64_t>{0, 1, 1, 2}));
    cases.push_back({"edges [4]", r,
                     "input 'edges' has shape [4]; model 'graph_laplacian' needs [num_edges, 2]"});
  }
  {
    ModelInferRequest r = Request("tree");
    SetParameter(r, "num_nodes", int64_t{4});
    SetParameter(r, "max_depth", int64_t{2});
    SetParameter(r, "max_children", int64_t{2});
    AddRaw(r, "parents", "INT64", {3}, Bytes(std::vector<int64_t>{-1, 0, 0}));
    cases.push_back({"parents [3] for 4 nodes", r,
                     "input 'parents' has shape [3]; model 'tree' needs [num_nodes] = [4]"});
  }
  {
    ModelInferRequest r = Request("alibi");
    SetParameter(r, "config", "{\"num_heads\": 2}");
    SetParameter(r, "query_length", int64_t{3});
    SetParameter(r, "key_length", int64_t{5});
    AddRaw(r, "scores", "FP32", {1, 2, 5, 3}, Bytes(std::vector<float>(30, 0.5f)));
    cases.push_back({"scores [1, 2, 5, 3] for q 3, k 5", r, "scores"});
  }
  {
    ModelInferRequest r = Request("shaw");
    SetParameter(r, "config", "{\"max_relative_position\": 2, \"table\": \"shawrel\"}");
    SetParameter(r, "query_length", int64_t{3});
    SetParameter(r, "key_length", int64_t{3});
    AddRaw(r, "query", "FP32", {0, 2, 3, 8}, "");
    cases.push_back({"empty shaw query", r,
                     "query.shape[0] (batch) is 0; batch and heads must be >= 1 (an empty query "
                     "has no query term"});
  }
  {
    ModelInferRequest r = Request("tree");
    SetParameter(r, "num_nodes", int64_t{3});
    SetParameter(r, "config", "{\"num_nodes\": 5, \"max_depth\": 2, \"max_children\": 2}");
    AddRaw(r, "parents", "INT64", {3}, Bytes(std::vector<int64_t>{-1, 0, 0}));
    cases.push_back({"tree config setting num_nodes", r,
                     "parameter 'config' sets 'num_nodes', which model 'tree' does not take "
                     "from config"});
  }
  return cases;
}

TEST_F(InferenceTest, MisshapedInputsAreRefusedNamingTheShapeTheyMustHave) {
  std::vector<ShapeCase> cases = MisshapedPositionCases();
  for (ShapeCase& c : MisshapedOtherCases()) cases.push_back(std::move(c));
  for (const ShapeCase& c : cases) {
    SCOPED_TRACE(c.what);
    const InferResult got = Infer(c.request);
    EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(got.status.error_message(), HasSubstr(c.words));
  }
  // The shapes the documentation gives pass: [seq], [batch, seq]; fourier's [seq, m].
  ModelInferRequest ok = Request("sinusoidal");
  AddRaw(ok, "input", "FP32", {2, 3, 8}, Bytes(std::vector<float>(48, 0.5f)));
  AddRaw(ok, "position_ids", "INT64", {2, 3}, Bytes(std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_THAT(Infer(ok).status, IsOk());
  ModelInferRequest fourier = cases[2].request;
  fourier.mutable_inputs(1)->clear_shape();
  fourier.mutable_inputs(1)->add_shape(3);
  fourier.mutable_inputs(1)->add_shape(2);
  EXPECT_THAT(Infer(fourier).status, IsOk());
}

// Fields the chosen type does not read are refused, naming the field and the type.
TEST_F(InferenceTest, ScalingFieldsOfAnotherTypeAreRefused) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"{\"type\": \"LINEAR\", \"factor\": 2, \"rope_proportion\": 0.5}",
       "rope.scaling.rope_proportion is set, but rope.scaling.type LINEAR does not use it; "
       "LINEAR takes factor"},
      {"{\"factor\": 2}",
       "rope.scaling.factor is set, but rope.scaling.type NONE does not use it; NONE takes no "
       "other field"},
      {"{\"type\": \"LINEAR\", \"factor\": 2, \"beta_fast\": 16}",
       "rope.scaling.beta_fast is set, but rope.scaling.type LINEAR does not use it"},
      {"{\"type\": \"PROPORTIONAL\", \"short_factor\": [1, 1]}",
       "rope.scaling.short_factor is set, but rope.scaling.type PROPORTIONAL does not use it; "
       "PROPORTIONAL takes factor, rope_proportion"},
  };
  for (const auto& [scaling, words] : cases) {
    SCOPED_TRACE(scaling);
    v1::EncodeRequest native;
    *native.mutable_input() =
        MakeTensor({1, 2, 1, 4}, v1::FLOAT32, Bytes(std::vector<float>(8, 0.5f)));
    v1::RopeScaling* parsed = native.mutable_rope()->mutable_scaling();
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(scaling, parsed).ok());
    v1::EncodeResponse response;
    EXPECT_THAT(posenc::testing::Encode(*native_, native, &response),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(words)));
  }
}

// GraphEncode takes its input inline only; a reference is refused saying so.
TEST_F(InferenceTest, NativeGraphInputByReferenceSaysToSendItInline) {
  v1::GraphRequest r;
  r.set_num_nodes(3);
  r.set_k(1);
  for (int64_t v : {0, 1, 1, 2}) r.add_edges(v);
  r.mutable_input()->add_shape(3);
  r.mutable_input()->add_shape(1);
  r.mutable_input()->set_dtype(v1::FLOAT32);
  r.mutable_input()->mutable_shm()->set_region("r");
  r.mutable_input()->mutable_shm()->set_byte_size(12);
  v1::GraphResponse response;
  EXPECT_THAT(GraphEncode(*native_, r, &response),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("GraphEncode takes input inline only: send its bytes in "
                                 "input.data")));
}

TEST(InferenceMetrics, ModelInferAndStreamAreCountedWithTheirScheme) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  auto oip = inference::GRPCInferenceService::NewStub(server.Channel());
  ModelInferRequest r = Request("rope");
  AddRaw(r, "input", "FP32", {1, 2, 1, 4}, Bytes(RandomFloats(8, 11)));
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    ModelInferResponse response;
    ASSERT_THAT(oip->ModelInfer(&ctx, r, &response), IsOk());
  }
  r.mutable_inputs(0)->set_name("query");
  {
    grpc::ClientContext ctx;
    ModelInferResponse response;
    EXPECT_THAT(oip->ModelInfer(&ctx, r, &response),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("unexpected inference input 'query' for model 'rope'")));
  }
  {
    grpc::ClientContext ctx;
    auto stream = oip->ModelStreamInfer(&ctx);
    ModelInferRequest s = Request("alibi");
    SetParameter(s, "config", "{\"num_heads\": 2}");
    SetParameter(s, "query_length", int64_t{1});
    SetParameter(s, "key_length", int64_t{3});
    ASSERT_TRUE(stream->Write(s));
    ASSERT_TRUE(stream->Write(s));
    stream->WritesDone();
    ModelStreamInferResponse response;
    int n = 0;
    while (stream->Read(&response)) n += response.error_message().empty();
    EXPECT_EQ(n, 2);
    EXPECT_THAT(stream->Finish(), IsOk());
  }
  const std::string text = HttpGet(server.metrics_port(), "/metrics");
  const std::string total = "posenc_requests_total";
  EXPECT_EQ(MetricSum(text, total, {"method=\"ModelInfer\"", "scheme=\"rope\"", "code=\"OK\""}), 3);
  EXPECT_EQ(MetricSum(text, total, {"method=\"ModelInfer\"", "code=\"INVALID_ARGUMENT\""}), 1);
  EXPECT_EQ(MetricSum(text, total,
                      {"method=\"ModelStreamInfer\"", "scheme=\"alibi\"", "code=\"OK\""}),
            2);
  EXPECT_EQ(MetricSum(text, total, {"method=\"ModelStreamInfer\""}), 2);  // not the stream again
  EXPECT_EQ(MetricSum(text, "posenc_inflight_requests", {}), 0);
}

// Shared memory through Triton's tensor parameters, on the one registry both fronts share.
TEST(InferenceShm, RegionsFromEitherFrontServeInputsInlineAnswersAndInPlace) {
  ServerProcess server({"--shm"});
  ASSERT_TRUE(server.started());
  auto oip = inference::GRPCInferenceService::NewStub(server.Channel());
  auto native = v1::PositionalEncoding::NewStub(server.Channel());
  {
    grpc::ClientContext ctx;
    inference::ServerMetadataResponse meta;
    ASSERT_THAT(oip->ServerMetadata(&ctx, {}, &meta), IsOk());
    EXPECT_EQ(std::vector<std::string>(meta.extensions().begin(), meta.extensions().end()),
              std::vector<std::string>{"system_shared_memory"});
  }
  const std::string key = "/posenc_oip_" + std::to_string(getpid());
  auto region = client::ShmRegion::Create(key, 1 << 20);
  ASSERT_THAT(region, IsOk());
  {  // registered through the Open Inference Protocol...
    inference::SystemSharedMemoryRegisterRequest reg;
    reg.set_name("oip_region");
    reg.set_key(key);
    reg.set_byte_size(1 << 20);
    grpc::ClientContext ctx;
    inference::SystemSharedMemoryRegisterResponse resp;
    ASSERT_THAT(oip->SystemSharedMemoryRegister(&ctx, reg, &resp), IsOk());
  }
  {  // ...and seen by posenc.v1's status
    grpc::ClientContext ctx;
    v1::SharedMemoryStatusRequest req;
    v1::SharedMemoryStatusResponse resp;
    ASSERT_THAT(native->SharedMemoryStatus(&ctx, req, &resp), IsOk());
    ASSERT_EQ(resp.regions_size(), 1);
    EXPECT_EQ(resp.regions(0).name(), "oip_region");
  }
  const std::vector<float> x = RandomFloats(2 * 8 * 4 * 16, 21);
  v1::EncodeRequest inline_req;
  inline_req.mutable_rope();
  *inline_req.mutable_input() = MakeTensor({2, 8, 4, 16}, v1::FLOAT32, Bytes(x));
  v1::EncodeResponse expected;
  {
    grpc::ClientContext ctx;
    ASSERT_THAT(native->Encode(&ctx, inline_req, &expected), IsOk());
  }
  std::memcpy(region->bytes().data() + 4096, x.data(), x.size() * 4);
  ModelInferRequest r = Request("rope", "shm-1");
  auto* in = r.add_inputs();
  in->set_name("input");
  in->set_datatype("FP32");
  for (int64_t d : {2, 8, 4, 16}) in->add_shape(d);
  (*in->mutable_parameters())["shared_memory_region"].set_string_param("oip_region");
  (*in->mutable_parameters())["shared_memory_byte_size"].set_int64_param(x.size() * 4);
  (*in->mutable_parameters())["shared_memory_offset"].set_int64_param(4096);
  ModelInferResponse resp;
  {
    grpc::ClientContext ctx;
    const grpc::Status st = oip->ModelInfer(&ctx, r, &resp);
    ASSERT_THAT(st, IsOk());
  }
  const auto region_bytes = [&] {
    return std::string(reinterpret_cast<const char*>(region->bytes().data()) + 4096, x.size() * 4);
  };
  // The output named no region: it comes back inline, and the input's region is untouched.
  ASSERT_EQ(resp.outputs_size(), 1);
  ASSERT_EQ(resp.raw_output_contents_size(), 1);
  EXPECT_TRUE(resp.raw_output_contents(0) == expected.output().data());
  EXPECT_EQ(resp.outputs(0).parameters().count("shared_memory_region"), 0u);
  EXPECT_TRUE(region_bytes() == Bytes(x));
  // Named over the input's own range: computed in place there, no bytes travel.
  auto* out = r.add_outputs();
  out->set_name("output");
  *out->mutable_parameters() = in->parameters();
  {
    grpc::ClientContext ctx;
    ASSERT_THAT(oip->ModelInfer(&ctx, r, &resp), IsOk());
  }
  ASSERT_EQ(resp.raw_output_contents_size(), 1);
  EXPECT_TRUE(resp.raw_output_contents(0).empty());
  EXPECT_EQ(resp.outputs(0).parameters().at("shared_memory_region").string_param(), "oip_region");
  EXPECT_TRUE(region_bytes() == expected.output().data());
  {  // unregistered through posenc.v1, gone for the protocol too
    grpc::ClientContext ctx;
    v1::UnregisterSharedMemoryRequest req;
    v1::UnregisterSharedMemoryResponse out;
    ASSERT_THAT(native->UnregisterSharedMemory(&ctx, req, &out), IsOk());
    grpc::ClientContext ctx2;
    inference::SystemSharedMemoryStatusResponse status;
    ASSERT_THAT(oip->SystemSharedMemoryStatus(&ctx2, {}, &status), IsOk());
    EXPECT_TRUE(status.regions().empty());
  }
}

}  // namespace
}  // namespace posenc::testing
