// Shared-memory tensors against a real posenc-server --shm: every scheme family by
// reference equals the inline answer bit for bit; slices are bounds-checked; regions are
// refused when their key is not the client's to give; unregister and truncation while
// requests run leave the server serving; register/unregister cycles leak nothing.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dirent.h>
#include <atomic>
#include <cstring>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/shm_region.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel_posix.h"
#include "gtest/gtest.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/tensor/dtype.h"
#include "tests/integration/v1_helpers.h"
#include "tests/support/npy_writer.h"
#include "tests/support/random_values.h"
#include "tests/support/status_matchers.h"

namespace posenc::testing {
namespace {

using ::testing::HasSubstr;

using client::ShmRegion;

std::string Key(const std::string& what) {
  static std::atomic<int> n{0};
  return "/posenc_test_" + std::to_string(getpid()) + "_" + what + "_" + std::to_string(n++);
}

class ShmTest : public ::testing::Test {
 protected:
  ShmTest() : server_({"--shm"}), stub_(v1::PositionalEncoding::NewStub(server_.Channel())) {}

  grpc::Status Register(const std::string& name, const std::string& key, uint64_t offset,
                        uint64_t size) {
    v1::RegisterSharedMemoryRequest req;
    req.set_name(name);
    req.set_key(key);
    req.set_offset(offset);
    req.set_byte_size(size);
    grpc::ClientContext ctx;
    v1::RegisterSharedMemoryResponse resp;
    return stub_->RegisterSharedMemory(&ctx, req, &resp);
  }
  grpc::Status Unregister(const std::string& name) {
    v1::UnregisterSharedMemoryRequest req;
    req.set_name(name);
    grpc::ClientContext ctx;
    v1::UnregisterSharedMemoryResponse resp;
    return stub_->UnregisterSharedMemory(&ctx, req, &resp);
  }
  grpc::Status Encode(const v1::EncodeRequest& req, v1::EncodeResponse* resp) {
    return posenc::testing::Encode(*stub_, req, resp);
  }
  grpc::Status Bias(const v1::BiasRequest& req, v1::BiasResponse* resp) {
    return AttentionBias(*stub_, req, resp);
  }

  ServerProcess server_;
  std::unique_ptr<v1::PositionalEncoding::Stub> stub_;
};

// `n` bytes of floats in [-2, 2) (the last n % 4 bytes zero).
std::string RandomBytes(size_t n, uint32_t seed) {
  std::string out = Bytes(RandomFloats(n / 4, seed, -2.0f, 2.0f));
  out.resize(n, '\0');
  return out;
}

// `n` bytes of `dtype` values in [-2, 2): FLOAT32 as RandomBytes, BFLOAT16 rounded from them
// (random bytes read as bfloat16 would hold infinities and NaNs, which posenc refuses).
std::string RandomValues(size_t n, uint32_t seed, v1::DType dtype) {
  if (dtype != v1::BFLOAT16) return RandomBytes(n, seed);
  std::string out;
  for (float v : RandomFloats(n / 2, seed, -2.0f, 2.0f)) {
    const uint16_t b = FloatToBFloat16(v);
    out.append(reinterpret_cast<const char*>(&b), 2);
  }
  return out;
}

// The same tensor by reference: its bytes copied into `region` at `offset`.
v1::Tensor ByRef(const v1::Tensor& inline_tensor, ShmRegion& region, const std::string& name,
                 uint64_t offset) {
  v1::Tensor t = inline_tensor;
  std::memcpy(region.bytes().data() + offset, t.data().data(), t.data().size());
  *t.mutable_shm() = ShmRegion::Ref(name, offset, t.data().size());
  t.clear_data();
  return t;
}

std::string SliceBytes(const ShmRegion& region, const v1::SharedMemoryRef& ref) {
  return std::string(reinterpret_cast<const char*>(region.bytes().data()) + ref.offset(),
                     ref.byte_size());
}

// A client on a connection of its own (as another process would be).
std::unique_ptr<v1::PositionalEncoding::Stub> OtherClient(const ServerProcess& server) {
  grpc::ChannelArguments own_connection;
  own_connection.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return v1::PositionalEncoding::NewStub(grpc::CreateCustomChannel(
      server.grpc_address(), grpc::InsecureChannelCredentials(), own_connection));
}

grpc::Status StatusOf(v1::PositionalEncoding::Stub& stub, const std::string& name,
                      v1::SharedMemoryStatusResponse* resp) {
  v1::SharedMemoryStatusRequest req;
  req.set_name(name);
  grpc::ClientContext ctx;
  return stub.SharedMemoryStatus(&ctx, req, resp);
}

// A region belongs to the connection that registered it: another client cannot list, use,
// replace or unregister it, nor map its object under a name of its own; one client's
// registrations are bounded; a closed connection's regions are released.
TEST_F(ShmTest, RegionsBelongToTheConnectionThatRegisteredThem) {
  ASSERT_TRUE(server_.started());
  auto region = ShmRegion::Create(Key("own"), 1 << 16);
  ASSERT_THAT(region, IsOk());
  ASSERT_THAT(Register("in0", region->key(), 0, region->byte_size()), IsOk());
  auto other = OtherClient(server_);
  v1::SharedMemoryStatusResponse listed;
  ASSERT_THAT(StatusOf(*other, "", &listed), IsOk());
  EXPECT_EQ(listed.regions_size(), 0);
  EXPECT_THAT(StatusOf(*other, "in0", &listed), StatusIs(absl::StatusCode::kNotFound));
  v1::EncodeRequest req;
  req.mutable_sinusoidal()->set_pe_scale(0);
  for (int64_t d : {1, 16, 64}) req.mutable_input()->add_shape(d);
  req.mutable_input()->set_dtype(v1::FLOAT32);
  *req.mutable_input()->mutable_shm() = ShmRegion::Ref("in0", 0, 16 * 64 * 4);
  EXPECT_THAT(posenc::testing::Encode(*other, req), StatusIs(absl::StatusCode::kNotFound));
  {  // Unregister("") drops only the caller's regions
    v1::UnregisterSharedMemoryRequest all;
    grpc::ClientContext ctx;
    v1::UnregisterSharedMemoryResponse resp;
    EXPECT_THAT(other->UnregisterSharedMemory(&ctx, all, &resp), IsOk());
  }
  {  // the app's object under another name is refused
    v1::RegisterSharedMemoryRequest steal;
    steal.set_name("mine");
    steal.set_key(region->key());
    steal.set_byte_size(region->byte_size());
    grpc::ClientContext ctx;
    v1::RegisterSharedMemoryResponse resp;
    EXPECT_THAT(other->RegisterSharedMemory(&ctx, steal, &resp),
                StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("another client")));
  }
  ASSERT_THAT(StatusOf(*stub_, "", &listed), IsOk());
  ASSERT_EQ(listed.regions_size(), 1);
  EXPECT_EQ(listed.regions(0).name(), "in0");
  EXPECT_THAT(Encode(req, nullptr), IsOk());  // the owner still uses it

  // One client holds at most 64 regions; the others keep room.
  auto many = ShmRegion::Create(Key("many"), 4096);
  ASSERT_THAT(many, IsOk());
  auto greedy = OtherClient(server_);
  grpc::Status last;
  int registered = 0;
  for (int i = 0; i < 80 && last.ok(); ++i) {
    v1::RegisterSharedMemoryRequest r;
    r.set_name("g" + std::to_string(i));
    r.set_key(many->key());
    r.set_byte_size(4096);
    grpc::ClientContext ctx;
    v1::RegisterSharedMemoryResponse resp;
    last = greedy->RegisterSharedMemory(&ctx, r, &resp);
    registered += last.ok();
  }
  EXPECT_EQ(registered, 64);
  EXPECT_THAT(last, StatusIs(absl::StatusCode::kResourceExhausted));
  auto second = ShmRegion::Create(Key("second"), 4096);
  ASSERT_THAT(second, IsOk());
  EXPECT_THAT(Register("in1", second->key(), 0, 4096), IsOk());

  // The greedy client goes: its 64 regions are released (the app's 2 stay).
  greedy.reset();
  double regions = 0;
  for (int i = 0; i < 100; ++i) {
    regions = ScrapeMetric(server_, "posenc_shm_regions", {});
    if (regions == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(regions, 2);
}

// A connection from local port `port` (0: any) on a socket of our own, handed to gRPC; it
// ends with a reset (SO_LINGER 0), leaving the port free at once. The port it got in `port`;
// null when it cannot bind or connect.
std::shared_ptr<grpc::Channel> ChannelFromPort(const ServerProcess& server, uint16_t& port) {
  const std::string& address = server.grpc_address();  // "127.0.0.1:PORT"
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const linger reset{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_port = htons(port);
  local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sockaddr_in remote = local;
  remote.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) != 0) {
    close(fd);
    return nullptr;
  }
  socklen_t length = sizeof(local);
  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length);
  port = ntohs(local.sin_port);
  return grpc::CreateInsecureChannelFromFd(address, fd);
}

// A region belongs to the connection, not to the client's address: once the client's
// connection is reset, another connection from the very same source port (as any local
// process may bind it) inherits none of its regions.
TEST_F(ShmTest, AConnectionFromAReusedPortInheritsNoRegion) {
  ASSERT_TRUE(server_.started());
  auto region = ShmRegion::Create(Key("reuse"), 4096);
  ASSERT_THAT(region, IsOk());
  uint16_t port = 0;
  std::shared_ptr<grpc::Channel> victim_channel = ChannelFromPort(server_, port);
  ASSERT_NE(victim_channel, nullptr);
  auto victim = v1::PositionalEncoding::NewStub(std::move(victim_channel));
  {
    v1::RegisterSharedMemoryRequest r;
    r.set_name("victim");
    r.set_key(region->key());
    r.set_byte_size(4096);
    grpc::ClientContext ctx;
    v1::RegisterSharedMemoryResponse resp;
    ASSERT_THAT(victim->RegisterSharedMemory(&ctx, r, &resp), IsOk());
  }
  v1::SharedMemoryStatusResponse listed;
  ASSERT_THAT(StatusOf(*victim, "", &listed), IsOk());
  ASSERT_EQ(listed.regions_size(), 1);
  victim.reset();  // the channel's socket goes, with a reset
  // At once, well inside the second in which the server notices a gone connection.
  std::shared_ptr<grpc::Channel> channel;
  for (int i = 0; i < 200 && channel == nullptr; ++i) {
    uint16_t same = port;
    channel = ChannelFromPort(server_, same);
    if (channel == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_NE(channel, nullptr) << "port " << port << " did not come free";
  auto thief = v1::PositionalEncoding::NewStub(channel);
  ASSERT_THAT(StatusOf(*thief, "", &listed), IsOk());
  EXPECT_EQ(listed.regions_size(), 0) << "a connection from the same port saw the regions";
  EXPECT_THAT(StatusOf(*thief, "victim", &listed), StatusIs(absl::StatusCode::kNotFound));
  v1::EncodeRequest req;
  req.mutable_sinusoidal();
  for (int64_t d : {1, 4, 64}) req.mutable_input()->add_shape(d);
  req.mutable_input()->set_dtype(v1::FLOAT32);
  *req.mutable_input()->mutable_shm() = ShmRegion::Ref("victim", 0, 4 * 64 * 4);
  EXPECT_THAT(posenc::testing::Encode(*thief, req), StatusIs(absl::StatusCode::kNotFound));
}

// Every Encode family: by reference, in place, equal bit for bit to the inline answer.
TEST_F(ShmTest, EveryEncodeSchemeByReferenceEqualsInline) {
  ASSERT_TRUE(server_.started());
  auto region = ShmRegion::Create(Key("enc"), 8 << 20);
  ASSERT_THAT(region, IsOk());
  ASSERT_THAT(Register("r", region->key(), 0, region->byte_size()), IsOk());
  std::vector<v1::EncodeRequest> requests(5);
  requests[0].mutable_sinusoidal();
  requests[1].mutable_sinusoidal()->set_layout(v1::CONCATENATED);
  requests[2].mutable_continuous();
  for (int i = 0; i < 16; ++i) requests[2].mutable_positions()->add_values(0.25 * i);
  auto* level = requests[3].mutable_hierarchical()->add_levels();
  for (int i = 0; i < 16; ++i) level->add_ids(i / 4);
  requests[4].mutable_rope();
  for (size_t i = 0; i < requests.size(); ++i) {
    for (v1::DType dtype : {v1::FLOAT32, v1::BFLOAT16}) {
      v1::EncodeRequest inline_req = requests[i];
      const bool rope = inline_req.has_rope();
      const std::vector<int64_t> shape =
          rope ? std::vector<int64_t>{2, 16, 4, 32} : std::vector<int64_t>{2, 16, 64};
      const size_t elem = dtype == v1::FLOAT32 ? 4 : 2;
      const size_t bytes = (rope ? 2 * 16 * 4 * 32 : 2 * 16 * 64) * elem;
      *inline_req.mutable_input() = MakeTensor(shape, dtype, RandomValues(bytes, i, dtype));
      if (rope) {
        *inline_req.mutable_key() =
            MakeTensor({2, 16, 2, 32}, dtype, RandomValues(bytes / 2, 99, dtype));
      }
      v1::EncodeResponse inline_resp, ref_resp;
      ASSERT_THAT(Encode(inline_req, &inline_resp), IsOk()) << i;
      v1::EncodeRequest ref_req = inline_req;
      *ref_req.mutable_input() = ByRef(inline_req.input(), *region, "r", 0);
      if (rope) *ref_req.mutable_key() = ByRef(inline_req.key(), *region, "r", 1 << 20);
      const grpc::Status st = Encode(ref_req, &ref_resp);
      ASSERT_THAT(st, IsOk()) << i << " " << st.error_message();
      EXPECT_TRUE(ref_resp.output().data().empty());
      ASSERT_EQ(ref_resp.output().shm().region(), "r");
      EXPECT_EQ(SliceBytes(*region, ref_resp.output().shm()), inline_resp.output().data()) << i;
      if (rope) {
        EXPECT_EQ(SliceBytes(*region, ref_resp.key_output().shm()),
                  inline_resp.key_output().data());
      }
    }
  }
}

TEST_F(ShmTest, MetricsCountRegionsAndBytesByTransport) {
  ASSERT_TRUE(server_.started());
  auto region = ShmRegion::Create(Key("metrics"), 1 << 20);
  ASSERT_THAT(region, IsOk());
  // The gauges follow a registration as soon as it is answered.
  auto other = ShmRegion::Create(Key("metrics2"), 8192);
  ASSERT_THAT(other, IsOk());
  ASSERT_THAT(Register("m2", other->key(), 0, other->byte_size()), IsOk());
  EXPECT_EQ(ScrapeMetric(server_, "posenc_shm_regions", {}), 1);
  EXPECT_EQ(ScrapeMetric(server_, "posenc_shm_mapped_bytes", {}), 8192);
  ASSERT_THAT(Unregister("m2"), IsOk());
  EXPECT_EQ(ScrapeMetric(server_, "posenc_shm_regions", {}), 0);
  EXPECT_EQ(ScrapeMetric(server_, "posenc_shm_mapped_bytes", {}), 0);
  ASSERT_THAT(Register("m", region->key(), 0, region->byte_size()), IsOk());
  v1::EncodeRequest req;
  req.mutable_sinusoidal();
  *req.mutable_input() =
      ByRef(MakeTensor({1, 16, 64}, v1::FLOAT32, RandomBytes(4096, 3)), *region, "m", 0);
  v1::EncodeResponse resp;
  ASSERT_THAT(Encode(req, &resp), IsOk());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the gauges' next update
  const std::string text = HttpGet(server_.metrics_port(), "/metrics");
  EXPECT_NE(text.find("posenc_shm_regions 1"), std::string::npos) << text;
  EXPECT_NE(text.find("posenc_shm_mapped_bytes 1048576"), std::string::npos);
  EXPECT_NE(text.find("posenc_processed_bytes_total{direction=\"in\",transport=\"shm\"} 4096"),
            std::string::npos);
  EXPECT_NE(text.find("posenc_processed_bytes_total{direction=\"out\",transport=\"shm\"} 4096"),
            std::string::npos);
}

TEST_F(ShmTest, ConcatAndOutputSlices) {
  ASSERT_TRUE(server_.started());
  auto region = ShmRegion::Create(Key("cat"), 1 << 20);
  ASSERT_THAT(region, IsOk());
  ASSERT_THAT(Register("r", region->key(), 0, region->byte_size()), IsOk());
  v1::EncodeRequest req;
  req.mutable_sinusoidal()->set_fusion(v1::CONCAT);
  req.mutable_sinusoidal()->set_pe_dim(16);
  *req.mutable_input() = MakeTensor({1, 8, 32}, v1::FLOAT32, RandomBytes(8 * 32 * 4, 5));
  v1::EncodeResponse inline_resp, ref_resp;
  ASSERT_THAT(Encode(req, &inline_resp), IsOk());
  v1::EncodeRequest ref_req = req;
  *ref_req.mutable_input() = ByRef(req.input(), *region, "r", 0);
  *ref_req.mutable_output_shm() = ShmRegion::Ref("r", 65536, 8 * 48 * 4);
  ASSERT_THAT(Encode(ref_req, &ref_resp), IsOk());
  EXPECT_EQ(SliceBytes(*region, ref_resp.output().shm()), inline_resp.output().data());
  // The input slice is untouched when the output goes elsewhere.
  EXPECT_EQ(SliceBytes(*region, ref_req.input().shm()), req.input().data());
  // CONCAT by reference without output_shm answers inline.
  ref_req.clear_output_shm();
  ASSERT_THAT(Encode(ref_req, &ref_resp), IsOk());
  EXPECT_EQ(ref_resp.output().data(), inline_resp.output().data());
  // An inline input with output_shm: the answer is written to the slice.
  v1::EncodeRequest add = req;
  add.mutable_sinusoidal()->clear_fusion();
  add.mutable_sinusoidal()->clear_pe_dim();
  ASSERT_THAT(Encode(add, &inline_resp), IsOk());
  *add.mutable_output_shm() = ShmRegion::Ref("r", 131072, 8 * 32 * 4);
  ASSERT_THAT(Encode(add, &ref_resp), IsOk());
  EXPECT_EQ(SliceBytes(*region, ref_resp.output().shm()), inline_resp.output().data());
}

TEST_F(ShmTest, BiasesByReferenceEqualInline) {
  ASSERT_TRUE(server_.started());
  auto region = ShmRegion::Create(Key("bias"), 1 << 20);
  ASSERT_THAT(region, IsOk());
  ASSERT_THAT(Register("r", region->key(), 0, region->byte_size()), IsOk());
  v1::BiasRequest req;
  req.set_query_length(16);
  req.set_key_length(32);
  req.mutable_alibi()->set_num_heads(4);
  *req.mutable_scores() =
      MakeTensor({2, 4, 16, 32}, v1::FLOAT32, RandomBytes(2 * 4 * 16 * 32 * 4, 7));
  v1::BiasResponse inline_resp, ref_resp;
  ASSERT_THAT(Bias(req, &inline_resp), IsOk());
  v1::BiasRequest ref_req = req;
  *ref_req.mutable_scores() = ByRef(req.scores(), *region, "r", 0);
  ASSERT_THAT(Bias(ref_req, &ref_resp), IsOk());
  EXPECT_EQ(SliceBytes(*region, ref_resp.output().shm()), inline_resp.output().data());
  // A bias built without scores into output_shm.
  v1::BiasRequest build = req;
  build.clear_scores();
  ASSERT_THAT(Bias(build, &inline_resp), IsOk());
  *build.mutable_output_shm() = ShmRegion::Ref("r", 262144, 4 * 16 * 32 * 4);
  ASSERT_THAT(Bias(build, &ref_resp), IsOk());
  EXPECT_EQ(SliceBytes(*region, ref_resp.output().shm()), inline_resp.output().data());
  // T5 bucket ids (INT32) too.
  v1::BiasRequest t5 = build;
  t5.mutable_t5()->set_bidirectional(true);
  t5.clear_output_shm();
  ASSERT_THAT(Bias(t5, &inline_resp), IsOk());
  *t5.mutable_output_shm() = ShmRegion::Ref("r", 524288, 16 * 32 * 4);
  ASSERT_THAT(Bias(t5, &ref_resp), IsOk());
  EXPECT_EQ(SliceBytes(*region, ref_resp.output().shm()), inline_resp.output().data());
}

TEST_F(ShmTest, BadReferencesGetTheirCodesAndNeverTheKey) {
  ASSERT_TRUE(server_.started());
  auto region = ShmRegion::Create(Key("bad"), 65536);
  ASSERT_THAT(region, IsOk());
  ASSERT_THAT(Register("r", region->key(), 0, region->byte_size()), IsOk());
  EXPECT_THAT(Register("r", region->key(), 0, 4096),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       "shared memory region 'r' is already registered"));
  v1::EncodeRequest req;
  req.mutable_sinusoidal();
  *req.mutable_input() = MakeTensor({1, 4, 16}, v1::FLOAT32, RandomBytes(256, 1));
  auto with_ref = [&](uint64_t offset, uint64_t size, const std::string& name = "r") {
    v1::EncodeRequest r = req;
    r.mutable_input()->clear_data();
    *r.mutable_input()->mutable_shm() = ShmRegion::Ref(name, offset, size);
    v1::EncodeResponse resp;
    return Encode(r, &resp);
  };
  const std::vector<std::pair<grpc::Status, grpc::StatusCode>> cases = {
      {with_ref(65536, 256), grpc::StatusCode::INVALID_ARGUMENT},              // past the end
      {with_ref(~uint64_t{0} - 31, 256), grpc::StatusCode::INVALID_ARGUMENT},  // 2^64-32
      {with_ref(0, 255), grpc::StatusCode::INVALID_ARGUMENT},                  // size mismatch
      {with_ref(0, 256, "nope"), grpc::StatusCode::NOT_FOUND},
  };
  for (const auto& [status, code] : cases) {
    EXPECT_EQ(status.error_code(), code) << status.error_message();
    EXPECT_EQ(status.error_message().find(region->key()), std::string::npos);
  }
  {  // both data and shm
    v1::EncodeRequest r = req;
    *r.mutable_input()->mutable_shm() = ShmRegion::Ref("r", 0, 256);
    v1::EncodeResponse resp;
    EXPECT_THAT(Encode(r, &resp), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("input has both data and shm")));
  }
  {  // an output slice overlapping a different input (the key)
    v1::EncodeRequest r;
    r.mutable_rope();
    *r.mutable_input() = MakeTensor({1, 4, 1, 16}, v1::FLOAT32, RandomBytes(256, 2));
    *r.mutable_key() =
        ByRef(MakeTensor({1, 4, 1, 16}, v1::FLOAT32, RandomBytes(256, 3)), *region, "r", 0);
    *r.mutable_output_shm() = ShmRegion::Ref("r", 128, 256);
    v1::EncodeResponse resp;
    const grpc::Status st = Encode(r, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("overlaps"), std::string::npos) << st.error_message();
  }
  // Keys the server must refuse.
  EXPECT_THAT(Register("a", "/other_prefix", 0, 4096),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("does not start with the server's --shm_key_prefix")));
  EXPECT_THAT(Register("a", "/posenc_a/b", 0, 4096),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("the key has a '/' after its first character")));
  const std::string link = Key("link");
  ASSERT_EQ(symlink(("/dev/shm" + region->key()).c_str(), ("/dev/shm" + link).c_str()), 0);
  const grpc::Status symlinked = Register("a", link, 0, 4096);
  unlink(("/dev/shm" + link).c_str());
  EXPECT_THAT(symlinked,
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("it is a symbolic link")));
  if (geteuid() == 0) {  // an object owned by another uid
    auto other = ShmRegion::Create(Key("other"), 4096);
    ASSERT_THAT(other, IsOk());
    ASSERT_EQ(chown(("/dev/shm" + other->key()).c_str(), 65534, 65534), 0);
    EXPECT_THAT(Register("a", other->key(), 0, 4096),
                StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("owned by another user")));
  }
}

// Learned tables and T5 table biases need --table: their own server.
TEST(ShmTables, LearnedAndT5TableByReferenceEqualInline) {
  std::vector<float> wpe(64 * 32), t5(32 * 4);
  for (size_t i = 0; i < wpe.size(); ++i) wpe[i] = 0.01f * static_cast<float>(i % 97);
  for (size_t i = 0; i < t5.size(); ++i) t5[i] = 0.1f * static_cast<float>(i % 13) - 0.5f;
  const std::string dir = ::testing::TempDir();
  std::vector<float> shaw(5 * 8);  // k = 2, d = 8
  for (size_t i = 0; i < shaw.size(); ++i) shaw[i] = 0.125f * static_cast<float>(i % 9) - 0.5f;
  ServerProcess server({"--shm", "--table=wpe=" + WriteNpyF32(dir, "shm_wpe.npy", 64, 32, wpe),
                        "--table=rel=" + WriteNpyF32(dir, "shm_t5.npy", 32, 4, t5),
                        "--table=shaw=" + WriteNpyF32(dir, "shm_shaw.npy", 5, 8, shaw)});
  ASSERT_TRUE(server.started());
  auto stub = v1::PositionalEncoding::NewStub(server.Channel());
  auto region = ShmRegion::Create(Key("tables"), 1 << 20);
  ASSERT_THAT(region, IsOk());
  {
    v1::RegisterSharedMemoryRequest reg = region->RegisterRequest("r");
    grpc::ClientContext ctx;
    v1::RegisterSharedMemoryResponse resp;
    ASSERT_THAT(stub->RegisterSharedMemory(&ctx, reg, &resp), IsOk());
  }
  v1::EncodeRequest enc;
  enc.mutable_learned()->set_table("wpe");
  *enc.mutable_input() = MakeTensor({2, 16, 32}, v1::FLOAT32, RandomBytes(2 * 16 * 32 * 4, 11));
  v1::EncodeResponse inline_enc, ref_enc;
  ASSERT_THAT(Encode(*stub, enc, &inline_enc), IsOk());
  *enc.mutable_input() = ByRef(enc.input(), *region, "r", 0);
  ASSERT_THAT(Encode(*stub, enc, &ref_enc), IsOk());
  EXPECT_EQ(SliceBytes(*region, ref_enc.output().shm()), inline_enc.output().data());
  v1::BiasRequest bias;
  bias.set_query_length(8);
  bias.set_key_length(8);
  bias.mutable_t5()->set_table("rel");
  *bias.mutable_scores() = MakeTensor({1, 4, 8, 8}, v1::FLOAT32, RandomBytes(4 * 64 * 4, 12));
  v1::BiasResponse inline_bias, ref_bias;
  ASSERT_THAT(AttentionBias(*stub, bias, &inline_bias), IsOk());
  *bias.mutable_scores() = ByRef(bias.scores(), *region, "r", 65536);
  ASSERT_THAT(AttentionBias(*stub, bias, &ref_bias), IsOk());
  EXPECT_EQ(SliceBytes(*region, ref_bias.output().shm()), inline_bias.output().data());

  // Shaw's query term: the query read from its slice, the term added to scores in theirs.
  std::vector<float> query(2 * 8 * 8), scores(2 * 8 * 8);
  for (size_t i = 0; i < query.size(); ++i) query[i] = 0.25f * static_cast<float>(i % 7) - 0.75f;
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = static_cast<float>(i % 5);
  v1::BiasRequest shaw_req;
  shaw_req.set_query_length(8);
  shaw_req.set_key_length(8);
  shaw_req.mutable_shaw()->set_max_relative_position(2);
  shaw_req.mutable_shaw()->set_table("shaw");
  *shaw_req.mutable_query() = FloatTensor({1, 2, 8, 8}, query);
  *shaw_req.mutable_scores() = FloatTensor({1, 2, 8, 8}, scores);
  v1::BiasResponse inline_shaw, ref_shaw;
  ASSERT_THAT(AttentionBias(*stub, shaw_req, &inline_shaw), IsOk());
  *shaw_req.mutable_query() = ByRef(shaw_req.query(), *region, "r", 131072);
  *shaw_req.mutable_scores() = ByRef(shaw_req.scores(), *region, "r", 196608);
  ASSERT_THAT(AttentionBias(*stub, shaw_req, &ref_shaw), IsOk());
  EXPECT_EQ(SliceBytes(*region, ref_shaw.output().shm()), inline_shaw.output().data());
}

TEST(ShmOff, FlagOffIsFailedPreconditionNamingTheFlag) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  auto stub = v1::PositionalEncoding::NewStub(server.Channel());
  v1::RegisterSharedMemoryRequest req;
  req.set_name("r");
  req.set_key("/posenc_x");
  req.set_byte_size(4096);
  grpc::ClientContext ctx;
  v1::RegisterSharedMemoryResponse resp;
  const grpc::Status st = stub->RegisterSharedMemory(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("--shm"), std::string::npos);
}

// Lines of a /proc maps file, all of them or those containing `fragment`.
int CountLines(const std::string& path, const std::string& fragment = "") {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(fragment) != std::string::npos;
  return n;
}

int CountFds(pid_t pid) {
  int n = 0;
  DIR* dir = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (dir == nullptr) return -1;
  while (readdir(dir) != nullptr) ++n;
  closedir(dir);
  return n;
}

TEST_F(ShmTest, TenThousandRegisterCyclesLeakNoMappingOrDescriptor) {
  ASSERT_TRUE(server_.started());
  auto region = ShmRegion::Create(Key("cycle"), 65536);
  ASSERT_THAT(region, IsOk());
  const std::string maps = "/proc/" + std::to_string(server_.pid()) + "/maps";
  ASSERT_THAT(Register("warm", region->key(), 0, 4096), IsOk());
  ASSERT_THAT(Unregister("warm"), IsOk());
  const int maps_before = CountLines(maps), fds_before = CountFds(server_.pid());
  const int shm_maps_before = CountLines(maps, "/dev/shm/");
  for (int i = 0; i < 10000; ++i) {
    ASSERT_THAT(Register("c", region->key(), 0, 65536), IsOk()) << i;
    ASSERT_THAT(Unregister("c"), IsOk()) << i;
  }
  EXPECT_EQ(CountLines(maps, "/dev/shm/"), shm_maps_before);
  // gRPC may start a thread or two over 20,000 calls; 10,000 leaked mappings would show.
  EXPECT_LE(CountLines(maps), maps_before + 16);
  EXPECT_EQ(CountFds(server_.pid()), fds_before);
}

TEST_F(ShmTest, UnregisterAndTruncateWhileRequestsRunKeepTheServerServing) {
  ASSERT_TRUE(server_.started());
  constexpr size_t kBytes = 1 << 24;  // [1, 4096, 1024] float32
  auto region = ShmRegion::Create(Key("trunc"), kBytes);
  ASSERT_THAT(region, IsOk());
  ASSERT_THAT(Register("t", region->key(), 0, kBytes), IsOk());
  v1::EncodeRequest req;
  req.mutable_sinusoidal();
  for (int64_t d : {1, 4096, 1024}) req.mutable_input()->add_shape(d);
  req.mutable_input()->set_dtype(v1::FLOAT32);
  *req.mutable_input()->mutable_shm() = ShmRegion::Ref("t", 0, kBytes);
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed_cleanly{0}, other{0};
  std::mutex other_mu;
  std::string other_seen;  // the last unexpected status, guarded by other_mu
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&] {
      auto stub = v1::PositionalEncoding::NewStub(server_.Channel());
      while (!stop.load()) {
        grpc::ClientContext ctx;
        v1::EncodeResponse resp;
        const grpc::Status st = stub->Encode(&ctx, req, &resp);
        if (st.ok()) {
          ++ok;
        } else if (st.error_code() == grpc::StatusCode::DATA_LOSS ||
                   st.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
                   st.error_code() == grpc::StatusCode::NOT_FOUND) {
          ++failed_cleanly;
        } else {
          ++other;
          std::lock_guard<std::mutex> lock(other_mu);
          other_seen = absl::StrCat(st.error_code(), " ", st.error_message());
        }
      }
    });
  }
  // Requests run (at least one answered; the first builds the table) before the object shrinks.
  for (int i = 0; i < 200 && ok.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // Shrink the object under the server's mapping while requests use it.
  const int fd = shm_open(region->key().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_THAT(Unregister("t"), IsOk());  // while requests still hold it
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_GT(ok.load(), 0);
  EXPECT_GT(failed_cleanly.load(), 0);
  EXPECT_EQ(other.load(), 0) << other_seen;
  // Still serving, inline and by reference on a fresh region.
  v1::EncodeRequest small;
  small.mutable_sinusoidal();
  *small.mutable_input() = MakeTensor({1, 4, 16}, v1::FLOAT32, RandomBytes(256, 9));
  v1::EncodeResponse resp;
  EXPECT_THAT(Encode(small, &resp), IsOk());
}

}  // namespace
}  // namespace posenc::testing
