// Server reflection v1 (grpc.reflection.v1) against a real posenc-server: the services, a
// symbol's file with its imports, and NOT_FOUND for what does not exist.
#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/server_process.h"

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
  EXPECT_TRUE(stream->Finish().ok());

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

}  // namespace
}  // namespace posenc::testing
