#include "tests/integration/v1_helpers.h"

#include <cmath>
#include <cstring>

namespace posenc::testing {

v1::Tensor MakeTensor(const std::vector<int64_t>& shape, v1::DType dtype, std::string bytes) {
  v1::Tensor t;
  for (int64_t d : shape) t.add_shape(d);
  t.set_dtype(dtype);
  t.set_data(std::move(bytes));
  return t;
}

v1::Tensor FloatTensor(const std::vector<int64_t>& shape, const std::vector<float>& values) {
  return MakeTensor(shape, v1::FLOAT32, Bytes(values));
}

std::vector<float> Floats(const v1::Tensor& t) {
  std::vector<float> out(t.data().size() / 4);
  std::memcpy(out.data(), t.data().data(), out.size() * 4);
  return out;
}

double PaperPe(int64_t pos, int64_t col, int64_t d) {
  const double angle = static_cast<double>(pos) / std::pow(10000.0, 2.0 * (col / 2) / d);
  return col % 2 == 0 ? std::sin(angle) : std::cos(angle);
}

v1::EncodeRequest SinusoidalRequest(int64_t batch, int64_t seq, int64_t d, const std::string& id) {
  v1::EncodeRequest req;
  req.set_request_id(id);
  *req.mutable_input() = FloatTensor({batch, seq, d}, std::vector<float>(batch * seq * d, 0.0f));
  req.mutable_sinusoidal();
  return req;
}

std::unique_ptr<v1::PositionalEncoding::Stub> Stub(const ServerProcess& server) {
  return v1::PositionalEncoding::NewStub(server.Channel());
}

namespace {

// One blocking unary call of `method` with `deadline`, into `resp` or a local response.
template <typename Request, typename Response, typename Method>
grpc::Status Call(v1::PositionalEncoding::Stub& stub, Method method, const Request& req,
                  Response* resp, std::chrono::milliseconds deadline) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  Response local;
  return (stub.*method)(&ctx, req, resp ? resp : &local);
}

}  // namespace

grpc::Status Encode(v1::PositionalEncoding::Stub& stub, const v1::EncodeRequest& req,
                    v1::EncodeResponse* resp, std::chrono::milliseconds deadline) {
  return Call(stub, &v1::PositionalEncoding::Stub::Encode, req, resp, deadline);
}

grpc::Status AttentionBias(v1::PositionalEncoding::Stub& stub, const v1::BiasRequest& req,
                           v1::BiasResponse* resp, std::chrono::milliseconds deadline) {
  return Call(stub, &v1::PositionalEncoding::Stub::AttentionBias, req, resp, deadline);
}

grpc::Status GraphEncode(v1::PositionalEncoding::Stub& stub, const v1::GraphRequest& req,
                         v1::GraphResponse* resp, std::chrono::milliseconds deadline) {
  return Call(stub, &v1::PositionalEncoding::Stub::GraphEncode, req, resp, deadline);
}

}  // namespace posenc::testing
