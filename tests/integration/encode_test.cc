// Encode against the real posenc-server on port 0: each absolute scheme (sinusoidal,
// learned from .npy and .safetensors, hierarchical, continuous) and RoPE against values
// written directly here, and every refusal with its code and the field it names.
#include <signal.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <future>
#include <limits>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/tensor/dtype.h"
#include "tests/integration/v1_helpers.h"
#include "tests/support/npy_writer.h"
#include "tests/support/status_matchers.h"

namespace posenc::testing {
namespace {

using absl::StatusCode;
using ::testing::AllOf;
using ::testing::HasSubstr;
using v1::EncodeRequest;
using v1::EncodeResponse;

TEST(Encode, SinusoidalMatchesFloat64Reference) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  const int64_t b = 2, s = 6, d = 16;
  EncodeRequest req = SinusoidalRequest(b, s, d, "r1");
  req.mutable_positions()->add_offsets(100);
  req.mutable_positions()->add_offsets(0);
  EncodeResponse resp;
  ASSERT_THAT(Encode(*Stub(server), req, &resp), IsOk());
  EXPECT_EQ(resp.request_id(), "r1");
  ASSERT_EQ(resp.output().shape_size(), 3);
  const auto out = Floats(resp.output());
  for (int64_t r = 0; r < b; ++r)
    for (int64_t t = 0; t < s; ++t)
      for (int64_t c = 0; c < d; ++c)
        ASSERT_NEAR(out[(r * s + t) * d + c], PaperPe((r == 0 ? 100 : 0) + t, c, d), 1.2e-7);
}

TEST(Encode, ErrorsCarryTheRightCodeAndNameTheField) {
  ServerProcess server({"--max_message_bytes=1048576"});
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  {
    EncodeRequest req = SinusoidalRequest(2, 3, 4, "bad-size");
    req.mutable_input()->mutable_data()->resize(95);
    EXPECT_THAT(Encode(*stub, req),
                StatusIs(StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("input.data has 95 bytes; shape [2,3,4] FLOAT32 needs 96"),
                               HasSubstr("bad-size"))));
  }
  {
    EncodeRequest req = SinusoidalRequest(1, 1, 4, "huge");
    req.mutable_input()->clear_shape();
    req.mutable_input()->add_shape(int64_t{1} << 40);
    req.mutable_input()->add_shape(int64_t{1} << 40);
    req.mutable_input()->add_shape(16);
    EXPECT_THAT(Encode(*stub, req),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr("input.shape")));
  }
  {
    EncodeRequest req = SinusoidalRequest(1, 2, 4, "unset");
    req.clear_sinusoidal();
    EXPECT_THAT(Encode(*stub, req), StatusIs(StatusCode::kInvalidArgument, HasSubstr("scheme")));
  }
  {
    EncodeRequest req = SinusoidalRequest(1, 2, 4, "neg");
    req.mutable_positions()->add_offsets(-5);
    EXPECT_THAT(Encode(*stub, req),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr("positions.offsets[0]")));
  }
  {
    EncodeRequest req = SinusoidalRequest(1, 2, 4, "nf");
    req.mutable_learned()->set_table("nope");
    EXPECT_THAT(Encode(*stub, req),
                StatusIs(StatusCode::kNotFound, HasSubstr("learned.table 'nope'")));
  }
  {
    EncodeRequest req = SinusoidalRequest(1, 1024, 512, "big");  // 2 MiB > 1 MiB limit
    EXPECT_THAT(Encode(*stub, req), StatusIs(StatusCode::kResourceExhausted));
  }
  {
    EncodeRequest req = SinusoidalRequest(1, 256, 256, "concat");  // 256 KiB in
    req.mutable_sinusoidal()->set_fusion(v1::CONCAT);
    req.mutable_sinusoidal()->set_pe_dim(1 << 20);  // output far over the limit
    EXPECT_THAT(Encode(*stub, req),
                StatusIs(StatusCode::kResourceExhausted, HasSubstr("sinusoidal.pe_dim")));
  }
  EXPECT_THAT(Encode(*stub, SinusoidalRequest(1, 2, 4, "late"), nullptr,
                     std::chrono::milliseconds(-1000)),
              StatusIs(StatusCode::kDeadlineExceeded));
  // After all of that the server still answers correctly.
  EncodeResponse resp;
  ASSERT_THAT(Encode(*stub, SinusoidalRequest(1, 2, 4, "ok"), &resp), IsOk());
  EXPECT_NEAR(Floats(resp.output())[5], PaperPe(1, 1, 4), 1.2e-7);
}

TEST(Encode, LearnedPastTheTableIsOutOfRange) {
  const std::string npy = WriteNpyF32(::testing::TempDir(), "small.npy", 2, 2, {1, 2, 3, 4});
  ServerProcess server({"--table=small=" + npy});
  ASSERT_TRUE(server.started());
  EncodeRequest req;
  *req.mutable_input() = FloatTensor({1, 3, 2}, std::vector<float>(6, 0.0f));
  req.mutable_learned()->set_table("small");
  EXPECT_THAT(Encode(*Stub(server), req), StatusIs(StatusCode::kOutOfRange, HasSubstr("small")));
}

TEST(Encode, LearnedFromSafetensorsBFloat16Table) {
  const std::string path = ::testing::TempDir() + "/t.safetensors";
  {
    // Two tensors; the second is BF16 [2, 2] = 1, 2, -0.5, 0.25.
    const uint16_t bf16[4] = {0x3f80, 0x4000, 0xbf00, 0x3e80};
    std::string header = R"({"other":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("pos.weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[4,12]}})";
    std::ofstream f(path, std::ios::binary);
    const uint64_t len = header.size();
    f.write(reinterpret_cast<const char*>(&len), 8);
    f << header;
    const float other = 9;
    f.write(reinterpret_cast<const char*>(&other), 4);
    f.write(reinterpret_cast<const char*>(bf16), 8);
  }
  ServerProcess server({"--table=pos=" + path + ":pos.weight"});
  ASSERT_TRUE(server.started());
  EncodeRequest req;
  *req.mutable_input() = FloatTensor({1, 2, 2}, {0, 0, 0, 0});
  req.mutable_learned()->set_table("pos");
  EncodeResponse out;
  ASSERT_THAT(Encode(*Stub(server), req, &out), IsOk());
  EXPECT_EQ(Floats(out.output()), (std::vector<float>{1, 2, -0.5f, 0.25f}));
}

// HF's rotate_half RoPE in float64, written directly: x [seq, heads, dim] at positions
// offset + t.
std::vector<double> RopeReference(const std::vector<float>& x, int64_t seq, int64_t heads,
                                  int64_t dim, int64_t offset, double base) {
  std::vector<double> out(x.begin(), x.end());
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < dim / 2; ++i) {
        const double angle = static_cast<double>(offset + t) * std::pow(base, -2.0 * i / dim);
        const int64_t a = (t * heads + h) * dim + i, b = a + dim / 2;
        out[a] = x[a] * std::cos(angle) - x[b] * std::sin(angle);
        out[b] = x[b] * std::cos(angle) + x[a] * std::sin(angle);
      }
  return out;
}

TEST(Encode, RopeRotatesQueriesAndGqaKeysInPlace) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  const int64_t seq = 5, qh = 4, kh = 2, dim = 16;
  std::vector<float> q(seq * qh * dim), k(seq * kh * dim);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37 * i);
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.11 * i);
  EncodeRequest req;
  req.set_request_id("rope");
  *req.mutable_input() = FloatTensor({1, seq, qh, dim}, q);
  *req.mutable_key() = FloatTensor({1, seq, kh, dim}, k);
  req.mutable_positions()->add_offsets(1000);
  req.mutable_rope()->set_base(500000.0);
  EncodeResponse resp;
  ASSERT_THAT(Encode(*stub, req, &resp), IsOk());
  const auto q_ref = RopeReference(q, seq, qh, dim, 1000, 500000.0);
  const auto k_ref = RopeReference(k, seq, kh, dim, 1000, 500000.0);
  const auto q_out = Floats(resp.output()), k_out = Floats(resp.key_output());
  ASSERT_EQ(q_out.size(), q.size());
  ASSERT_EQ(k_out.size(), k.size());
  for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(q_out[i], q_ref[i], 2e-6) << i;
  for (size_t i = 0; i < k.size(); ++i) ASSERT_NEAR(k_out[i], k_ref[i], 2e-6) << i;
  EXPECT_EQ(resp.key_output().shape(2), kh);

  // An odd head_dim is refused, naming the field.
  EncodeRequest bad;
  *bad.mutable_input() = FloatTensor({1, 1, 1, 15}, std::vector<float>(15));
  bad.mutable_rope();
  EXPECT_THAT(Encode(*stub, bad), StatusIs(StatusCode::kInvalidArgument, HasSubstr("rotary_dim")));
}

// A result that is not finite is an error, never an answer: an inf or NaN in the input or
// the key, or scales that overflow the dtype. The server answers the next request as before.
TEST(Encode, ResultsThatAreNotFiniteAreRefused) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  const float inf = std::numeric_limits<float>::infinity();
  {
    EncodeRequest req = SinusoidalRequest(1, 2, 8, "overflow");
    req.mutable_input()->set_dtype(v1::FLOAT16);
    std::string halves;
    for (int i = 0; i < 16; ++i) {
      const uint16_t h = FloatToHalf(60000.0f);
      halves.append(reinterpret_cast<const char*>(&h), 2);
    }
    req.mutable_input()->set_data(halves);
    req.mutable_sinusoidal()->set_input_scale(2.0f);  // 120000 > FLOAT16's 65504
    EXPECT_THAT(Encode(*stub, req),
                StatusIs(StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("input gives a result that is not finite"),
                               HasSubstr("element 0 of the FLOAT16 result [1,2,8]"))));
  }
  for (v1::Fusion fusion : {v1::ADD, v1::CONCAT, v1::MULTIPLY}) {
    std::vector<float> x(2 * 3 * 8, 0.5f);
    x[13] = std::nanf("");
    EncodeRequest req = SinusoidalRequest(2, 3, 8, "nan");
    *req.mutable_input() = FloatTensor({2, 3, 8}, x);
    req.mutable_sinusoidal()->set_fusion(fusion);
    EXPECT_THAT(Encode(*stub, req),
                StatusIs(StatusCode::kInvalidArgument,
                         HasSubstr("input gives a result that is not finite (element ")))
        << fusion;
  }
  {
    EncodeRequest req;
    std::vector<float> k(1 * 2 * 1 * 8, 1.0f);
    k[9] = -inf;
    *req.mutable_input() = FloatTensor({1, 2, 2, 8}, std::vector<float>(32, 1.0f));
    *req.mutable_key() = FloatTensor({1, 2, 1, 8}, k);
    req.mutable_rope();
    EXPECT_THAT(Encode(*stub, req),
                StatusIs(StatusCode::kInvalidArgument,
                         HasSubstr("key gives a result that is not finite (element 9 ")));
  }
  EncodeResponse resp;
  ASSERT_THAT(Encode(*stub, SinusoidalRequest(1, 2, 4, "ok"), &resp), IsOk());
  EXPECT_NEAR(Floats(resp.output())[5], PaperPe(1, 1, 4), 1.2e-7);
}

TEST(Encode, HierarchicalAndContinuous) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  const int64_t s = 3, d = 4;
  EncodeRequest req;
  *req.mutable_input() = FloatTensor({1, s, d}, std::vector<float>(s * d, 0.0f));
  v1::Level* word = req.mutable_hierarchical()->add_levels();
  for (int64_t id : {0, 1, 0}) word->add_ids(id);
  v1::Level* sentence = req.mutable_hierarchical()->add_levels();
  for (int64_t id : {0, 0, 1}) sentence->add_ids(id);
  sentence->set_scale(0.5f);
  EncodeResponse resp;
  ASSERT_THAT(Encode(*stub, req, &resp), IsOk());
  auto out = Floats(resp.output());
  const int64_t w[] = {0, 1, 0}, p[] = {0, 0, 1};
  for (int64_t t = 0; t < s; ++t)
    for (int64_t c = 0; c < d; ++c)
      EXPECT_NEAR(out[t * d + c], PaperPe(w[t], c, d) + 0.5 * PaperPe(p[t], c, d), 2.5e-7);

  EncodeRequest cont;
  *cont.mutable_input() = FloatTensor({s, d}, std::vector<float>(s * d, 1.0f));
  for (double v : {0.0, 0.5, 2.0}) cont.mutable_positions()->add_values(v);
  cont.mutable_continuous()->set_value_scale(10.0);
  ASSERT_THAT(Encode(*stub, cont, &resp), IsOk());
  out = Floats(resp.output());
  const double pos[] = {0.0, 5.0, 20.0};
  for (int64_t t = 0; t < s; ++t)
    for (int64_t c = 0; c < d; ++c) {
      const double angle = pos[t] / std::pow(10000.0, 2.0 * (c / 2) / d);
      EXPECT_NEAR(out[t * d + c], 1.0 + (c % 2 ? std::cos(angle) : std::sin(angle)), 2.5e-7);
    }
  // values are only for continuous
  EncodeRequest wrong = cont;
  wrong.mutable_sinusoidal();
  EXPECT_THAT(Encode(*stub, wrong),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("positions.values")));
}

// Answers are handed to gRPC as slices that own the tensor's bytes (wire_format.h): calls
// the client gives up on, by deadline at every stage (before the work, during it, while the
// 8 MiB answer is being written) and by cancelling, must leave nothing behind. The server
// answers correctly afterwards and exits 0 (in the sanitizer build: no leak, no use after
// free of an answer's bytes).
TEST(Encode, AnswersOfAbandonedCallsAreFreedSafely) {
  ServerProcess server({"--threads=1"});
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  const EncodeRequest big = SinusoidalRequest(1, 2048, 1024);  // 8 MiB of float32
  struct Call {
    grpc::ClientContext ctx;
    EncodeResponse resp;
    std::promise<grpc::Status> done;
  };
  std::vector<std::unique_ptr<Call>> calls;
  std::vector<std::future<grpc::Status>> results;
  for (int i = 0; i < 24; ++i) {
    calls.push_back(std::make_unique<Call>());
    Call* c = calls.back().get();
    c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(2 + 4 * i));
    results.push_back(c->done.get_future());
    stub->async()->Encode(&c->ctx, &big, &c->resp,
                          [c](grpc::Status s) { c->done.set_value(std::move(s)); });
    if (i % 5 == 4) c->ctx.TryCancel();
  }
  for (auto& r : results) {
    const grpc::StatusCode code = r.get().error_code();
    EXPECT_TRUE(code == grpc::StatusCode::OK || code == grpc::StatusCode::DEADLINE_EXCEEDED ||
                code == grpc::StatusCode::CANCELLED)
        << code;
  }
  EncodeResponse resp;
  ASSERT_THAT(Encode(*stub, SinusoidalRequest(1, 3, 8), &resp), IsOk());
  const auto out = Floats(resp.output());
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t c = 0; c < 8; ++c) ASSERT_NEAR(out[t * 8 + c], PaperPe(t, c, 8), 1.2e-7);
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(), 0);
}

}  // namespace
}  // namespace posenc::testing
