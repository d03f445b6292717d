// Tests for the C++ client library (client/posenc_client, client/tensor_proto) against a fake
// in-process PositionalEncoding service on port 0 and on a unix socket: deadlines, status
// mapping, EncodeStream ordering under load, GetTable chunk joining, health, TLS options.
#include "client/posenc_client.h"

#include <unistd.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/tensor_proto.h"
#include "gmock/gmock.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace posenc::client {
namespace {

using ::posenc::testing::IsOk;

using ::testing::HasSubstr;

// Echoes inputs; request ids steer the failure paths.
class FakeService final : public v1::PositionalEncoding::Service {
 public:
  grpc::Status Encode(grpc::ServerContext*, const v1::EncodeRequest* request,
                      v1::EncodeResponse* response) override {
    if (request->request_id() == "fail") {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "input.shape[2] is odd");
    }
    if (request->request_id() == "slow")
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    response->set_request_id(request->request_id());
    *response->mutable_output() = request->input();
    return grpc::Status::OK;
  }

  grpc::Status EncodeStream(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::EncodeResponse, v1::EncodeRequest>* stream) override {
    v1::EncodeRequest request;
    while (stream->Read(&request)) {
      v1::EncodeResponse response;
      response.set_request_id(request.request_id());
      *response.mutable_output() = request.input();
      if (!stream->Write(response)) break;
    }
    return grpc::Status::OK;
  }

  // Three chunks of two [.., 4] rows each; length 99 leaves a gap to test the client's check.
  grpc::Status GetTable(grpc::ServerContext*, const v1::TableRequest* request,
                        grpc::ServerWriter<v1::TableChunk>* writer) override {
    for (int chunk = 0; chunk < 3; ++chunk) {
      std::vector<float> rows(8);
      for (int i = 0; i < 8; ++i) rows[i] = static_cast<float>(chunk * 8 + i);
      v1::TableChunk message;
      message.set_first_position(chunk * 2 + (request->length() == 99 && chunk == 2 ? 1 : 0));
      *message.mutable_rows() = *MakeTensor(rows, {2, 4});
      writer->Write(message);
    }
    return grpc::Status::OK;
  }

  grpc::Status ListSchemes(grpc::ServerContext*, const v1::ListSchemesRequest*,
                           v1::ListSchemesResponse* response) override {
    response->add_schemes("sinusoidal");
    response->set_version("fake");
    return grpc::Status::OK;
  }
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    socket_ = absl::StrCat(::testing::TempDir(), "/posenc_client_test_", getpid(), ".sock");
    unlink(socket_.c_str());
    builder.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    ClientOptions options;
    options.target = absl::StrCat("127.0.0.1:", port_);
    options.timeout = absl::Seconds(10);
    auto client = PosencClient::Create(options);
    ASSERT_THAT(client, IsOk());
    client_ = std::move(*client);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    unlink(socket_.c_str());
  }

  FakeService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string socket_;
  std::unique_ptr<PosencClient> client_;
};

TEST_F(ClientTest, EncodeRoundTripsTensorsInEveryFloatDtype) {
  const std::vector<float> values = {0.5f, -1.25f, 3.0f, 1.0f / 3.0f, 65504.0f, -0.0f};
  for (v1::DType dtype : {v1::FLOAT32, v1::FLOAT16, v1::BFLOAT16}) {
    v1::EncodeRequest request;
    request.set_request_id("rt");
    auto tensor = MakeTensor(values, {1, 2, 3}, dtype);
    ASSERT_THAT(tensor, IsOk());
    *request.mutable_input() = *tensor;
    request.mutable_sinusoidal();
    auto response = client_->Encode(request);
    ASSERT_THAT(response, IsOk());
    EXPECT_EQ(response->request_id(), "rt");
    auto out = TensorToFloats(response->output(), "output");
    ASSERT_THAT(out, IsOk());
    ASSERT_EQ(out->size(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      const float expected = dtype == v1::FLOAT16    ? HalfToFloat(FloatToHalf(values[i]))
                             : dtype == v1::BFLOAT16 ? BFloat16ToFloat(FloatToBFloat16(values[i]))
                                                     : values[i];
      EXPECT_EQ((*out)[i], expected) << v1::DType_Name(dtype) << " " << i;
    }
  }
}

TEST_F(ClientTest, MapsStatusCodesAndDeadlines) {
  v1::EncodeRequest request;
  request.set_request_id("fail");
  auto failed = client_->Encode(request);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(failed.status().message(), "input.shape[2] is odd");

  client_->set_timeout(absl::Milliseconds(100));
  request.set_request_id("slow");
  EXPECT_EQ(client_->Encode(request).status().code(), absl::StatusCode::kDeadlineExceeded);

  // Every grpc code maps to the absl code of the same number.
  for (int code = 0; code <= 16; ++code) {
    const absl::Status s = FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(code), "m"));
    EXPECT_EQ(static_cast<int>(s.code()), code);
  }
}

TEST_F(ClientTest, EncodeStreamKeepsOrderUnderLoad) {
  // Enough bytes in flight (~16 MiB each way) that a client which wrote everything before
  // reading would stall on flow control.
  std::vector<v1::EncodeRequest> requests(256);
  const std::vector<float> values(16384, 1.0f);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].set_request_id(absl::StrCat("r", i));
    *requests[i].mutable_input() = *MakeTensor(values, {1, 128, 128});
  }
  auto responses = client_->EncodeStream(requests);
  ASSERT_THAT(responses, IsOk());
  ASSERT_EQ(responses->size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ((*responses)[i].request_id(), absl::StrCat("r", i));
  }
}

TEST_F(ClientTest, EncodeStreamCallbackErrorCancels) {
  std::vector<v1::EncodeRequest> requests(50);
  int seen = 0;
  size_t next = 0;
  const absl::Status status = client_->EncodeStream(
      [&]() -> const v1::EncodeRequest* {
        return next < requests.size() ? &requests[next++] : nullptr;
      },
      [&](v1::EncodeResponse&&) {
        return ++seen == 3 ? absl::DataLossError("stop here") : absl::OkStatus();
      });
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(), "stop here");
}

TEST_F(ClientTest, GetTableJoinsChunks) {
  v1::TableRequest request;
  request.set_length(6);
  auto chunks = client_->GetTable(request);
  ASSERT_THAT(chunks, IsOk());
  EXPECT_EQ(chunks->size(), 3u);
  auto table = client_->GetTableTensor(request);
  ASSERT_THAT(table, IsOk());
  EXPECT_THAT(table->shape(), ::testing::ElementsAre(6, 4));
  auto values = TensorToFloats(*table, "table");
  ASSERT_THAT(values, IsOk());
  for (int i = 0; i < 24; ++i) EXPECT_EQ((*values)[i], static_cast<float>(i));

  request.set_length(99);
  auto gap = client_->GetTableTensor(request);
  EXPECT_EQ(gap.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(gap.status().message(), HasSubstr("first_position is 5; expected 4"));
}

TEST_F(ClientTest, HealthListAndUnimplemented) {
  auto health = client_->Health();
  ASSERT_THAT(health, IsOk());
  EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(client_->Health("no.such.Service").status().code(), absl::StatusCode::kNotFound);

  auto list = client_->ListSchemes();
  ASSERT_THAT(list, IsOk());
  EXPECT_EQ(list->version(), "fake");
  EXPECT_EQ(client_->GraphEncode(v1::GraphRequest()).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(client_->AttentionBias(v1::BiasRequest()).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_THAT(client_->WaitForConnected(absl::Seconds(5)), IsOk());
}

TEST_F(ClientTest, UnixSocketTarget) {
  ClientOptions options;
  options.target = "unix:" + socket_;
  auto client = PosencClient::Create(options);
  ASSERT_THAT(client, IsOk());
  auto list = (*client)->ListSchemes();
  ASSERT_THAT(list, IsOk());
  EXPECT_EQ(list->version(), "fake");
}

TEST(ClientOptionsTest, RejectsBadOptions) {
  ClientOptions options;
  options.target = "";
  EXPECT_EQ(PosencClient::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.target = "127.0.0.1:1";
  options.timeout = absl::ZeroDuration();
  EXPECT_EQ(PosencClient::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.timeout = absl::Seconds(1);
  options.tls_cert_file = "/tmp/cert.pem";
  EXPECT_EQ(PosencClient::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.tls_cert_file.clear();
  options.tls_ca_file = "/nonexistent/ca.pem";
  auto missing = PosencClient::Create(options);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/ca.pem"));
  // A server that is not there: UNAVAILABLE, not a hang.
  options.tls_ca_file.clear();
  auto client = PosencClient::Create(options);
  ASSERT_THAT(client, IsOk());
  EXPECT_EQ((*client)->ListSchemes().status().code(), absl::StatusCode::kUnavailable);
}

TEST(TensorProtoTest, ValidatesSizesAndDtypes) {
  EXPECT_EQ(MakeTensor({1, 2, 3}, {2, 2}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeTensor({1}, {1}, v1::INT32).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeTensor({1}, {1}, v1::DTYPE_UNSPECIFIED).status().code(),
            absl::StatusCode::kInvalidArgument);

  v1::Tensor t = *MakeTensor({1, 2, 3, 4}, {2, 2});
  t.mutable_data()->pop_back();
  auto view = ViewTensor(t, "input");
  EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(view.status().message(), HasSubstr("input.data has 15 bytes"));

  const std::vector<int32_t> ids = {-3, 0, 7};
  auto ints = MakeTensorFromBytes(DType::kInt32, {3},
                                  std::string(reinterpret_cast<const char*>(ids.data()), 12));
  ASSERT_THAT(ints, IsOk());
  EXPECT_THAT(*TensorToInts(*ints, "ids"), ::testing::ElementsAre(-3, 0, 7));
  EXPECT_EQ(TensorToFloats(*ints, "ids").status().code(), absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(*ParseDTypeName("BF16"), v1::BFLOAT16);
  EXPECT_EQ(*ParseDTypeName("half"), v1::FLOAT16);
  EXPECT_EQ(ParseDTypeName("float64").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace posenc::client
