// The responses written for gRPC's raw path (server/service/wire_format.h) are the bytes
// stock protobuf serializes, and their large tensors are handed over without a copy.
#include "server/service/wire_format.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/arena.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"

namespace posenc {
namespace {

// What gRPC sends: the buffer's slices, joined.
std::string Joined(const grpc::ByteBuffer& buffer, std::vector<const char*>* starts = nullptr) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    if (starts != nullptr) starts->push_back(reinterpret_cast<const char*>(slice.begin()));
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

// Bytes whose every position differs from its neighbours, so a misplaced piece shows.
std::string Pattern(size_t n, int seed) {
  std::string bytes(n, '\0');
  for (size_t i = 0; i < n; ++i)
    bytes[i] = static_cast<char>((i * 131 + seed * 7 + i / 251) & 0xff);
  return bytes;
}

void FillTensor(v1::Tensor& tensor, size_t bytes, int seed, bool shm) {
  tensor.add_shape(1);
  tensor.add_shape(static_cast<int64_t>(bytes / 4 + 300));  // a multi-byte varint
  tensor.set_dtype(v1::FLOAT32);
  if (bytes > 0) tensor.set_data(Pattern(bytes, seed));
  if (shm) {
    tensor.mutable_shm()->set_region("region-" + std::to_string(seed));
    tensor.mutable_shm()->set_offset(64);
    tensor.mutable_shm()->set_byte_size(bytes + 1000);
  }
}

// Tensor sizes around the own-slice threshold and a varint length change, and a large one.
const size_t kSizes[] = {0, 1, 127, 128, kOwnSliceBytes - 1, kOwnSliceBytes, 16384, 1 << 20};

TEST(WireFormat, EncodeResponsesAreProtobufsBytes) {
  int seed = 0;
  for (size_t size : kSizes) {
    for (int variant = 0; variant < 8; ++variant) {
      google::protobuf::Arena arena;
      auto* response = google::protobuf::Arena::CreateMessage<v1::EncodeResponse>(&arena);
      if (variant & 1) response->set_request_id("call-" + std::to_string(size));
      FillTensor(*response->mutable_output(), size, ++seed, /*shm=*/variant == 6);
      if (variant & 2) FillTensor(*response->mutable_key_output(), size / 2 + 3, ++seed, false);
      if (variant & 4) {
        response->mutable_error()->set_code(3);
        response->mutable_error()->set_message("input.data: wrong size");
      }
      const std::string expected = response->SerializeAsString();
      const std::string written = Joined(WriteEncodeResponse(*response));
      ASSERT_EQ(written, expected) << "size " << size << " variant " << variant;
      v1::EncodeResponse parsed;
      ASSERT_TRUE(parsed.ParseFromString(written));
      EXPECT_EQ(parsed.output().data().size(), size);
      EXPECT_TRUE(response->output().data().empty());  // consumed
    }
  }
}

TEST(WireFormat, BiasResponsesAreProtobufsBytes) {
  for (size_t size : kSizes) {
    v1::BiasResponse response;
    response.set_request_id("b");
    FillTensor(*response.mutable_output(), size, static_cast<int>(size % 97), false);
    const std::string expected = response.SerializeAsString();
    ASSERT_EQ(Joined(WriteBiasResponse(response)), expected) << size;
  }
  v1::BiasResponse empty;
  EXPECT_EQ(Joined(WriteBiasResponse(empty)), "");
}

TEST(WireFormat, TableChunksAreProtobufsBytes) {
  for (int64_t first : {int64_t{0}, int64_t{1}, int64_t{300}, int64_t{-1}, int64_t{1} << 40}) {
    for (size_t size : kSizes) {
      v1::TableChunk chunk;
      chunk.set_first_position(first);
      FillTensor(*chunk.mutable_rows(), size, 4, false);
      const std::string expected = chunk.SerializeAsString();
      ASSERT_EQ(Joined(WriteTableChunk(chunk)), expected) << first << " " << size;
    }
  }
}

TEST(WireFormat, InferResponsesAreProtobufsBytes) {
  for (int outputs = 0; outputs <= 3; ++outputs) {
    for (size_t size : kSizes) {
      inference::ModelInferResponse response;
      response.set_model_name("rope");
      response.set_model_version("1");
      response.set_id("id-7");
      (*response.mutable_parameters())["sequence_id"].set_int64_param(5);
      for (int i = 0; i < outputs; ++i) {
        auto* out = response.add_outputs();
        out->set_name("output" + std::to_string(i));
        out->set_datatype("FP32");
        out->add_shape(static_cast<int64_t>(size / 4));
        (*out->mutable_parameters())["binary_data_size"].set_int64_param(
            static_cast<int64_t>(size));
        // Sizes differ per output, empty ones included.
        response.add_raw_output_contents(Pattern(i == 1 ? 0 : size + i, i));
      }
      const std::string expected = response.SerializeAsString();
      ASSERT_EQ(Joined(WriteInferResponse(response)), expected)
          << outputs << " outputs of " << size;
      EXPECT_EQ(response.raw_output_contents_size(), outputs);
    }
  }
}

TEST(WireFormat, StreamInferResponsesAreProtobufsBytes) {
  for (size_t size : kSizes) {
    for (int variant = 0; variant < 3; ++variant) {
      inference::ModelStreamInferResponse response;
      if (variant != 1) {
        auto* infer = response.mutable_infer_response();
        infer->set_model_name("sinusoidal");
        infer->set_id("s");
        infer->add_outputs()->set_name("output");
        infer->add_raw_output_contents(Pattern(size, 5));
        infer->add_raw_output_contents(Pattern(size / 3, 6));
      }
      if (variant != 0) response.set_error_message("input: wrong size");
      const std::string expected = response.SerializeAsString();
      ASSERT_EQ(Joined(WriteStreamInferResponse(response)), expected)
          << size << " variant " << variant;
    }
  }
}

// The tensor's own buffer is what gRPC gets, and it stays alive after the message is gone.
TEST(WireFormat, LargeTensorIsHandedOverAndOutlivesTheMessage) {
  grpc::ByteBuffer buffer;
  std::string expected;
  const char* tensor_bytes = nullptr;
  {
    google::protobuf::Arena arena;
    auto* response = google::protobuf::Arena::CreateMessage<v1::EncodeResponse>(&arena);
    FillTensor(*response->mutable_output(), 1 << 20, 3, false);
    expected = response->SerializeAsString();
    tensor_bytes = response->output().data().data();
    buffer = WriteEncodeResponse(*response);
  }
  std::vector<const char*> starts;
  EXPECT_EQ(Joined(buffer, &starts), expected);
  EXPECT_THAT(starts, testing::Contains(tensor_bytes));
  EXPECT_EQ(starts.size(), 2u);  // header, tensor
}

TEST(WireFormat, SmallTensorIsOneSlice) {
  v1::EncodeResponse response;
  FillTensor(*response.mutable_output(), 64, 1, false);
  std::vector<const char*> starts;
  Joined(WriteEncodeResponse(response), &starts);
  EXPECT_EQ(starts.size(), 1u);
}

TEST(WireFormat, RequestsParseFromSlices) {
  v1::EncodeRequest request;
  request.set_request_id("r");
  request.mutable_input()->add_shape(4096);
  request.mutable_input()->set_data(Pattern(1 << 14, 9));
  const std::string bytes = request.SerializeAsString();
  // Cut into uneven slices, as a transport delivers them.
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += 1000 + at % 7) {
    slices.emplace_back(bytes.data() + at, std::min<size_t>(1000 + at % 7, bytes.size() - at));
  }
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  v1::EncodeRequest parsed;
  ASSERT_TRUE(ParseWireRequest(buffer, parsed));
  EXPECT_EQ(parsed.SerializeAsString(), bytes);
  grpc::Slice garbage("\xff\xff\xff", 3);
  EXPECT_FALSE(ParseWireRequest(grpc::ByteBuffer(&garbage, 1), parsed));
}

}  // namespace
}  // namespace posenc
