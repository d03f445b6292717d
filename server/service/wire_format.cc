#include "server/service/wire_format.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/slice.h"

namespace posenc {
namespace {

size_t VarintBytes(uint64_t value) {
  size_t n = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++n;
  }
  return n;
}

// A length-delimited field's bytes on the wire: its tag (one byte for fields 1-15), its
// length and its contents.
size_t FieldBytes(size_t contents) { return 1 + VarintBytes(contents) + contents; }

// Gathers a message's wire bytes: small parts are appended to a header that becomes a
// copied slice, each large bytes field becomes a slice that owns the field's buffer.
class SliceWriter {
 public:
  // A string or bytes field, or one element of a repeated one; a large value's buffer
  // moves into a slice of its own and `value` is left empty.
  void Bytes(int field, std::string& value) {
    Tag(field);
    Varint(value.size());
    if (value.size() < kOwnSliceBytes) {
      header_.append(value);
      return;
    }
    Flush();
    auto* owned = new std::string();
    owned->swap(value);
    slices_.emplace_back(owned->data(), owned->size(), &DeleteString, owned);
  }

  // A singular string field, which proto3 writes only when it is not empty.
  void String(int field, const std::string& value) {
    if (value.empty()) return;
    Tag(field);
    Varint(value.size());
    header_.append(value);
  }

  // An int64 field, which proto3 writes only when it is not zero (negative: ten bytes).
  void Int64(int field, int64_t value) {
    if (value == 0) return;
    Varint(static_cast<uint64_t>(field) << 3);  // wire type 0
    Varint(static_cast<uint64_t>(value));
  }

  void Message(int field, const google::protobuf::MessageLite& message) {
    Tag(field);
    Varint(message.ByteSizeLong());
    message.AppendPartialToString(&header_);
  }

  // A Tensor field: shape (1) and dtype (2) through protobuf, data (3) as Bytes, then shm (4).
  void Tensor(int field, v1::Tensor& tensor) {
    std::string data;
    data.swap(*tensor.mutable_data());
    const std::string others = tensor.SerializePartialAsString();  // fields 1, 2 and 4
    const size_t shm_bytes = tensor.has_shm() ? FieldBytes(tensor.shm().ByteSizeLong()) : 0;
    const std::string_view view(others);
    Tag(field);
    Varint(others.size() + (data.empty() ? 0 : FieldBytes(data.size())));
    header_.append(view.substr(0, others.size() - shm_bytes));
    if (!data.empty()) Bytes(3, data);
    header_.append(view.substr(others.size() - shm_bytes));
  }

  // A ModelInferResponse: the whole message, or with `field` > 0 that field of an enclosing
  // one. raw_output_contents (6) is its last field: with its elements emptied, protobuf
  // writes the others and then two bytes (tag, zero length) per element, which are
  // replaced by the elements themselves.
  void InferResponse(inference::ModelInferResponse& response, int field) {
    const int n = response.raw_output_contents_size();
    std::vector<std::string> contents(n);
    for (int i = 0; i < n; ++i) contents[i].swap(*response.mutable_raw_output_contents(i));
    const std::string others = response.SerializePartialAsString();
    const size_t head = others.size() - 2 * static_cast<size_t>(n);
    if (field > 0) {
      size_t size = head;
      for (const std::string& content : contents) size += FieldBytes(content.size());
      Tag(field);
      Varint(size);
    }
    header_.append(std::string_view(others).substr(0, head));
    for (std::string& content : contents) Bytes(6, content);
  }

  grpc::ByteBuffer Finish() {
    Flush();
    return grpc::ByteBuffer(slices_.data(), slices_.size());
  }

 private:
  static void DeleteString(void* owned) { delete static_cast<std::string*>(owned); }

  // Every field this writer writes is length-delimited (wire type 2).
  void Tag(int field) { Varint((static_cast<uint64_t>(field) << 3) | 2); }

  void Varint(uint64_t value) {
    while (value >= 0x80) {
      header_.push_back(static_cast<char>(value | 0x80));
      value >>= 7;
    }
    header_.push_back(static_cast<char>(value));
  }

  void Flush() {
    if (header_.empty()) return;
    slices_.emplace_back(static_cast<const void*>(header_.data()), header_.size());
    header_.clear();
  }

  std::string header_;
  std::vector<grpc::Slice> slices_;
};

}  // namespace

// Fields in number order, as protobuf writes them.
grpc::ByteBuffer WriteEncodeResponse(v1::EncodeResponse& response) {
  SliceWriter writer;
  writer.String(1, response.request_id());
  if (response.has_output()) writer.Tensor(2, *response.mutable_output());
  if (response.has_key_output()) writer.Tensor(3, *response.mutable_key_output());
  if (response.has_error()) writer.Message(4, response.error());
  return writer.Finish();
}

grpc::ByteBuffer WriteBiasResponse(v1::BiasResponse& response) {
  SliceWriter writer;
  writer.String(1, response.request_id());
  if (response.has_output()) writer.Tensor(2, *response.mutable_output());
  return writer.Finish();
}

grpc::ByteBuffer WriteTableChunk(v1::TableChunk& chunk) {
  SliceWriter writer;
  writer.Int64(1, chunk.first_position());
  if (chunk.has_rows()) writer.Tensor(2, *chunk.mutable_rows());
  return writer.Finish();
}

grpc::ByteBuffer WriteInferResponse(inference::ModelInferResponse& response) {
  SliceWriter writer;
  writer.InferResponse(response, /*field=*/0);
  return writer.Finish();
}

grpc::ByteBuffer WriteStreamInferResponse(inference::ModelStreamInferResponse& response) {
  SliceWriter writer;
  writer.String(1, response.error_message());
  if (response.has_infer_response()) writer.InferResponse(*response.mutable_infer_response(), 2);
  return writer.Finish();
}

bool ParseWireRequest(const grpc::ByteBuffer& bytes, google::protobuf::MessageLite& message) {
  grpc::ByteBuffer shared(bytes);  // the same slices, one more reference
  grpc::ProtoBufferReader reader(&shared);
  return reader.status().ok() && message.ParseFromZeroCopyStream(&reader);
}

}  // namespace posenc
