// What the posenc.v1 integration tests share: tensors built from values, values read back,
// the paper's sinusoid written directly, and blocking calls with a deadline that return the
// status (so a test states it with IsOk()/StatusIs() from tests/support/status_matchers.h).
// No state; the calls are as thread-safe as the stub.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "tests/integration/server_process.h"

namespace posenc::testing {

// The little-endian bytes of `v`.
template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// An inline tensor of `shape` and `dtype` holding `bytes`.
v1::Tensor MakeTensor(const std::vector<int64_t>& shape, v1::DType dtype, std::string bytes);
// A FLOAT32 tensor of `shape` holding `values`.
v1::Tensor FloatTensor(const std::vector<int64_t>& shape, const std::vector<float>& values);
// The FLOAT32 values of an inline tensor.
std::vector<float> Floats(const v1::Tensor& t);

// The paper's sinusoidal encoding in float64: PE(pos, col) for model width d.
double PaperPe(int64_t pos, int64_t col, int64_t d);

// Sinusoidal Encode of zeros [batch, seq, d] (so the output is the encoding itself).
v1::EncodeRequest SinusoidalRequest(int64_t batch, int64_t seq, int64_t d,
                                    const std::string& id = "");

std::unique_ptr<v1::PositionalEncoding::Stub> Stub(const ServerProcess& server);

// One blocking call each; `resp` may be null when only the status matters.
constexpr std::chrono::milliseconds kCallDeadline = std::chrono::seconds(30);
grpc::Status Encode(v1::PositionalEncoding::Stub& stub, const v1::EncodeRequest& req,
                    v1::EncodeResponse* resp = nullptr,
                    std::chrono::milliseconds deadline = kCallDeadline);
grpc::Status AttentionBias(v1::PositionalEncoding::Stub& stub, const v1::BiasRequest& req,
                           v1::BiasResponse* resp = nullptr,
                           std::chrono::milliseconds deadline = kCallDeadline);
grpc::Status GraphEncode(v1::PositionalEncoding::Stub& stub, const v1::GraphRequest& req,
                         v1::GraphResponse* resp = nullptr,
                         std::chrono::milliseconds deadline = kCallDeadline);

}  // namespace posenc::testing
