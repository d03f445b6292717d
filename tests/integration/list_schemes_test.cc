// ListSchemes against the real posenc-server: every scheme and the loaded tables with their
// shape and dtype (and the table serves Encode), over TCP and over a Unix socket.
#include <unistd.h>

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/v1_helpers.h"
#include "tests/support/npy_writer.h"
#include "tests/support/status_matchers.h"

namespace posenc::testing {
namespace {

grpc::Status ListSchemes(v1::PositionalEncoding::Stub& stub, v1::ListSchemesResponse* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  ctx.set_wait_for_ready(true);
  return stub.ListSchemes(&ctx, {}, resp);
}

TEST(ListSchemes, NamesEverySchemeAndLoadedTables) {
  const std::string npy = WriteNpyF32(::testing::TempDir(), "wpe.npy", 3, 2, {1, 2, 3, 4, 5, 6});
  ServerProcess server({"--table=wpe=" + npy});
  ASSERT_TRUE(server.started());
  auto stub = Stub(server);
  v1::ListSchemesResponse resp;
  ASSERT_THAT(ListSchemes(*stub, &resp), IsOk());
  std::set<std::string> names(resp.schemes().begin(), resp.schemes().end());
  for (const char* s : {"sinusoidal", "learned", "rope", "hierarchical", "continuous", "alibi",
                        "t5", "shaw", "deberta", "graph_laplacian", "graph_random_walk",
                        "graph_shortest_path", "tree", "sinusoidal_2d", "fourier"}) {
    EXPECT_TRUE(names.count(s)) << s;
  }
  ASSERT_EQ(resp.tables_size(), 1);
  EXPECT_EQ(resp.tables(0).name(), "wpe");
  EXPECT_EQ(std::vector<int64_t>(resp.tables(0).shape().begin(), resp.tables(0).shape().end()),
            (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(resp.tables(0).dtype(), v1::FLOAT32);

  // Learned with that table, positions 2, 0 -> rows [5,6], [1,2].
  v1::EncodeRequest req;
  *req.mutable_input() = FloatTensor({2, 2}, {0.5f, 0.5f, 0, 0});
  req.mutable_positions()->add_ids(2);
  req.mutable_positions()->add_ids(0);
  req.mutable_learned()->set_table("wpe");
  v1::EncodeResponse out;
  ASSERT_THAT(Encode(*stub, req, &out), IsOk());
  EXPECT_EQ(Floats(out.output()), (std::vector<float>{5.5f, 6.5f, 1, 2}));
}

TEST(ListSchemes, AnswersOverAUnixSocket) {
  const std::string sock = ::testing::TempDir() + "/posenc-" + std::to_string(getpid()) + ".sock";
  ServerProcess server({"--listen=unix:" + sock});
  ASSERT_TRUE(server.started());
  EXPECT_EQ(server.grpc_address(), "unix:" + sock);
  // The start line names the socket, not a port, so talk to it directly.
  auto stub = v1::PositionalEncoding::NewStub(
      grpc::CreateChannel("unix:" + sock, grpc::InsecureChannelCredentials()));
  v1::ListSchemesResponse resp;
  EXPECT_THAT(ListSchemes(*stub, &resp), IsOk());
  EXPECT_GE(resp.schemes_size(), 8);
}

}  // namespace
}  // namespace posenc::testing
