// The tensor rpcs' messages on the wire without a copy of their tensor bytes. A response is
// written as protobuf would serialize it, byte for byte, except that each tensor's bytes
// (Tensor.data, ModelInferResponse.raw_output_contents, also inside a stream's answer) are
// not copied: they move out of
// the message into a gRPC slice of their own, which frees them once gRPC has sent them,
// and the small fields around them go through protobuf into short header slices (the
// pattern of TensorFlow's grpc_tensor_coding and envoy's gRPC codec). A request is parsed
// from gRPC's received slices straight into the message, whose strings the kernels then
// write in place: its tensor bytes are copied once.
//
// The Write* functions consume the message's tensor bytes (the message is left without
// them); the rest of the message is unchanged. Thread-compatible.
#pragma once

#include "grpcpp/support/byte_buffer.h"
#include "inference/grpc_service.pb.h"
#include "posenc/v1/posenc.pb.h"

namespace posenc {

// Bytes fields shorter than this are copied into the header slice beside them: a slice of
// their own would cost more than the copy.
inline constexpr size_t kOwnSliceBytes = 4096;

grpc::ByteBuffer WriteEncodeResponse(v1::EncodeResponse& response);
grpc::ByteBuffer WriteBiasResponse(v1::BiasResponse& response);
grpc::ByteBuffer WriteTableChunk(v1::TableChunk& chunk);
grpc::ByteBuffer WriteInferResponse(inference::ModelInferResponse& response);
grpc::ByteBuffer WriteStreamInferResponse(inference::ModelStreamInferResponse& response);

// Parses `bytes` into `message` (merged into what it holds: pass a clear one). False when
// they are not a valid message of its type.
bool ParseWireRequest(const grpc::ByteBuffer& bytes, google::protobuf::MessageLite& message);

}  // namespace posenc
