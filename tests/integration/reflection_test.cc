// Server reflection v1 (grpc.reflection.v1) against a real posenc-server: the services, a
// symbol's file with its imports, and NOT_FOUND for what does not exist; and the older
// grpc.reflection.v1alpha, which grpcurl and many clients still ask first.
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/integration/server_process.h"
#include "tests/support/status_matchers.h"

namespace posenc::testing {
namespace {

using grpc::reflection::v1::ServerReflectionRequest;
using grpc::reflection::v1::ServerReflectionResponse;

TEST(ReflectionV1, ListsServicesAndServesFilesWithTheirImports) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  auto stub = grpc::reflection::v1::ServerReflection::NewStub(server.Channel());
  grpc::ClientContext ctx;
  auto stream = stub->ServerReflectionInfo(&ctx);
  ServerReflectionRequest list;
  list.set_list_services("");
  ServerReflectionRequest symbol;
  symbol.set_file_containing_symbol("posenc.v1.PositionalEncoding");
  ServerReflectionRequest missing;
  missing.set_file_containing_symbol("no.such.Service");
  for (const auto* r : {&list, &symbol, &missing}) ASSERT_TRUE(stream->Write(*r));
  stream->WritesDone();
  ServerReflectionResponse listed, file, not_found;
  ASSERT_TRUE(stream->Read(&listed));
  ASSERT_TRUE(stream->Read(&file));
  ASSERT_TRUE(stream->Read(&not_found));
  EXPECT_THAT(stream->Finish(), IsOk());

  std::set<std::string> names;
  for (const auto& s : listed.list_services_response().service()) names.insert(s.name());
  for (const char* want : {"posenc.v1.PositionalEncoding", "inference.GRPCInferenceService",
                           "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"}) {
    EXPECT_TRUE(names.count(want)) << want;
  }
  std::set<std::string> files;
  for (const std::string& bytes : file.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto proto;
    ASSERT_TRUE(proto.ParseFromString(bytes));
    files.insert(proto.name());
    if (proto.name() == "posenc/v1/posenc.proto") {
      ASSERT_GE(proto.service_size(), 1);
      EXPECT_EQ(proto.service(0).name(), "PositionalEncoding");
    }
  }
  EXPECT_TRUE(files.count("posenc/v1/posenc.proto"));
  EXPECT_EQ(not_found.error_response().error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
}

TEST(ReflectionV1Alpha, ListsTheServiceOverRawBytes) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  // grpc.reflection.v1alpha ServerReflectionRequest{list_services: ""} is field 7, empty:
  // bytes 0x3a 0x00. The reply names the services; raw bytes keep this test free of the
  // reflection proto.
  grpc::GenericStub stub(server.Channel());
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto call =
      stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  auto next = [&](intptr_t want) {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), want);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(next(1));
  const char request_bytes[] = {0x3a, 0x00};
  grpc::Slice slice(request_bytes, 2);
  call->Write(grpc::ByteBuffer(&slice, 1), reinterpret_cast<void*>(2));
  ASSERT_TRUE(next(2));
  grpc::ByteBuffer reply;
  call->Read(&reply, reinterpret_cast<void*>(3));
  ASSERT_TRUE(next(3));
  std::vector<grpc::Slice> slices;
  ASSERT_THAT(reply.Dump(&slices), IsOk());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_NE(bytes.find("posenc.v1.PositionalEncoding"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
  call->WritesDone(reinterpret_cast<void*>(4));
  next(4);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  next(5);
  EXPECT_THAT(status, IsOk());
}

}  // namespace
}  // namespace posenc::testing
