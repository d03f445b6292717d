// HealthService on an in-process gRPC server (port 0): Check follows Set, an unknown
// service is NOT_FOUND, a Watch sees each transition, and Shutdown turns every service
// NOT_SERVING and ends every open Watch (status OK), later Watches included.
#include "server/service/health_service.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace posenc {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

class HealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&health_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    stub_ = Health::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    health_.Shutdown();
    if (server_) server_->Shutdown();
  }

  // The status Check reports for `service`, or the call's error code as a negative number.
  int CheckStatus(const std::string& service) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    HealthCheckRequest request;
    request.set_service(service);
    HealthCheckResponse response;
    const grpc::Status status = stub_->Check(&context, request, &response);
    return status.ok() ? static_cast<int>(response.status()) : -status.error_code();
  }

  HealthService health_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Health::Stub> stub_;
};

TEST_F(HealthServiceTest, CheckFollowsSet) {
  EXPECT_EQ(CheckStatus(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(CheckStatus("liveness"), HealthCheckResponse::SERVING);
  EXPECT_EQ(CheckStatus("no.such.Service"), -grpc::StatusCode::NOT_FOUND);
  health_.Set("", false);
  EXPECT_EQ(CheckStatus(""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(CheckStatus("liveness"), HealthCheckResponse::SERVING);
  health_.Set("", true);
  EXPECT_EQ(CheckStatus(""), HealthCheckResponse::SERVING);
  health_.Set("posenc.v1.PositionalEncoding", true);
  EXPECT_EQ(CheckStatus("posenc.v1.PositionalEncoding"), HealthCheckResponse::SERVING);
}

TEST_F(HealthServiceTest, WatchSeesEachTransitionAndEndsAtShutdown) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  HealthCheckRequest request;
  HealthCheckResponse response;
  auto reader = stub_->Watch(&context, request);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  health_.Set("", false);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  health_.Set("", false);  // no change: nothing sent
  health_.Set("", true);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  health_.Shutdown();
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(reader->Read(&response));
  EXPECT_TRUE(reader->Finish().ok());
  // After Shutdown: Set changes nothing, and a new Watch says NOT_SERVING and ends.
  health_.Set("", true);
  EXPECT_EQ(CheckStatus(""), HealthCheckResponse::NOT_SERVING);
  // The process is alive while its accepted calls finish: a liveness probe must not kill it.
  EXPECT_EQ(CheckStatus("liveness"), HealthCheckResponse::SERVING);
  grpc::ClientContext late_context;
  late_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto late = stub_->Watch(&late_context, request);
  ASSERT_TRUE(late->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(late->Read(&response));
  EXPECT_TRUE(late->Finish().ok());
}

TEST_F(HealthServiceTest, WatchOfAnUnknownServiceSaysSoAndFollowsItsFirstSet) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  HealthCheckRequest request;
  request.set_service("later.Service");
  HealthCheckResponse response;
  auto reader = stub_->Watch(&context, request);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  health_.Set("later.Service", true);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  context.TryCancel();
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

}  // namespace
}  // namespace posenc
