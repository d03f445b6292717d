#include "server/service/reflection_v1.h"

#include <set>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "server/service/ordered_stream.h"

namespace posenc {
namespace {

using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;
using grpc::reflection::v1::ServerReflectionRequest;
using grpc::reflection::v1::ServerReflectionResponse;

// `file` and everything it imports, each once, dependencies first.
void AddFileAndImports(const FileDescriptor* file, std::set<const FileDescriptor*>& seen,
                       ServerReflectionResponse& response) {
  if (!seen.insert(file).second) return;
  for (int i = 0; i < file->dependency_count(); ++i) {
    AddFileAndImports(file->dependency(i), seen, response);
  }
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(response.mutable_file_descriptor_response()->add_file_descriptor_proto());
}

void NotFound(const std::string& what, ServerReflectionResponse& response) {
  auto* error = response.mutable_error_response();
  error->set_error_code(static_cast<int>(grpc::StatusCode::NOT_FOUND));
  error->set_error_message(what + " not found");
}

}  // namespace

ServerReflectionResponse ReflectionV1Service::Answer(const ServerReflectionRequest& request) const {
  ServerReflectionResponse response;
  response.set_valid_host(request.host());
  *response.mutable_original_request() = request;
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  std::set<const FileDescriptor*> seen;
  const FileDescriptor* file = nullptr;
  switch (request.message_request_case()) {
    case ServerReflectionRequest::kListServices:
      for (const std::string& name : services_) {
        response.mutable_list_services_response()->add_service()->set_name(name);
      }
      return response;
    case ServerReflectionRequest::kFileByFilename:
      file = pool->FindFileByName(request.file_by_filename());
      if (!file) NotFound("file " + request.file_by_filename(), response);
      break;
    case ServerReflectionRequest::kFileContainingSymbol:
      file = pool->FindFileContainingSymbol(request.file_containing_symbol());
      if (!file) NotFound("symbol " + request.file_containing_symbol(), response);
      break;
    case ServerReflectionRequest::kFileContainingExtension: {
      const auto& ext = request.file_containing_extension();
      const auto* type = pool->FindMessageTypeByName(ext.containing_type());
      const auto* field =
          type ? pool->FindExtensionByNumber(type, ext.extension_number()) : nullptr;
      file = field ? field->file() : nullptr;
      if (!file) NotFound("extension of " + ext.containing_type(), response);
      break;
    }
    case ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const auto* type = pool->FindMessageTypeByName(request.all_extension_numbers_of_type());
      if (!type) {
        NotFound("type " + request.all_extension_numbers_of_type(), response);
        return response;
      }
      std::vector<const google::protobuf::FieldDescriptor*> extensions;
      pool->FindAllExtensions(type, &extensions);
      auto* numbers = response.mutable_all_extension_numbers_response();
      numbers->set_base_type_name(type->full_name());
      for (const auto* e : extensions) numbers->add_extension_number(e->number());
      return response;
    }
    default: {
      auto* error = response.mutable_error_response();
      error->set_error_code(static_cast<int>(grpc::StatusCode::UNIMPLEMENTED));
      error->set_error_message("no message_request set");
      return response;
    }
  }
  if (file) AddFileAndImports(file, seen, response);
  return response;
}

grpc::ServerBidiReactor<ServerReflectionRequest, ServerReflectionResponse>*
ReflectionV1Service::ServerReflectionInfo(grpc::CallbackServerContext*) {
  using Reactor = OrderedStreamReactor<ServerReflectionRequest, ServerReflectionResponse>;
  return new Reactor(/*window=*/2, Reactor::Inline([this](ServerReflectionRequest& in,
                                                          ServerReflectionResponse& out) {
                       out = Answer(in);
                       return grpc::Status::OK;
                     }));
}

}  // namespace posenc
