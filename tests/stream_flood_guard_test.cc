// The rapid-reset guard's rule on channelz samples (well-behaved unary and streaming
// traffic never trips it; streams ended or reset without a message beyond the burst and
// rate do, once), and the end of a real TCP connection of this process by its peer.
#include "server/service/stream_flood_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace posenc {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kTick{100};

struct Connection {
  ConnectionCounters counters;
  explicit Connection(int64_t id) {
    counters.socket_id = id;
    counters.peer = "ipv4:10.0.0." + std::to_string(id) + ":4000";
  }
  void Start(int64_t n) { counters.streams_started += n; }
  void Message(int64_t n) { counters.messages_received += n; }
  void End(int64_t n) { counters.streams_ended += n; }
};

// Samples `connections` every tick for `ticks` ticks, `step` changing them before each;
// returns the socket ids flagged, in order.
template <typename Step>
std::vector<int64_t> Sample(StreamFloodGuard& guard, std::vector<Connection>& connections,
                            int ticks, Step step, Clock::time_point& now) {
  std::vector<int64_t> flagged;
  for (int t = 0; t < ticks; ++t) {
    step(t);
    std::vector<ConnectionCounters> sample;
    for (const Connection& c : connections) sample.push_back(c.counters);
    now += kTick;
    for (const FloodingConnection& over : guard.Observe(sample, {}, now)) {
      flagged.push_back(over.counters.socket_id);
    }
  }
  return flagged;
}

TEST(StreamFloodGuard, UnaryCallsWhoseEndsLagTheirMessagesNeverTrip) {
  StreamFloodGuard guard;
  std::vector<Connection> c = {Connection(1)};
  Clock::time_point now{};
  // 2,000 calls a tick: their messages are counted a tick before their streams end, and the
  // streams of the next tick are already open without a message when sampled.
  const auto flagged = Sample(
      guard, c, 100,
      [&](int t) {
        c[0].Start(2000);
        c[0].Message(2000);
        if (t > 0) c[0].End(2000);
      },
      now);
  EXPECT_TRUE(flagged.empty());
}

TEST(StreamFloodGuard, UploadsInProgressAreNotCharged) {
  StreamFloodGuard guard;
  std::vector<Connection> c = {Connection(1)};
  Clock::time_point now{};
  // 128 streams open and uploading for 10 s, then all deliver and end.
  auto flagged = Sample(
      guard, c, 100,
      [&](int t) {
        if (t == 0) c[0].Start(128);
      },
      now);
  flagged = Sample(
      guard, c, 1,
      [&](int) {
        c[0].Message(128);
        c[0].End(128);
      },
      now);
  EXPECT_TRUE(flagged.empty());
}

TEST(StreamFloodGuard, RapidResetIsFlaggedOnceEvenWhileEndsLag) {
  StreamFloodGuard guard;
  std::vector<Connection> c = {Connection(1), Connection(2)};
  Clock::time_point now{};
  // Connection 1 resets 2,000 streams a tick that gRPC has not yet recorded as ended;
  // connection 2 makes ordinary calls beside it.
  const auto flagged = Sample(
      guard, c, 20,
      [&](int) {
        c[0].Start(2000);
        c[1].Start(50);
        c[1].Message(50);
        c[1].End(50);
      },
      now);
  EXPECT_EQ(flagged, std::vector<int64_t>{1});
}

TEST(StreamFloodGuard, BurstThenRate) {
  const StreamFloodLimits limits{/*burst=*/500, /*per_second=*/100};
  {
    StreamFloodGuard guard(limits);
    std::vector<Connection> c = {Connection(1)};
    Clock::time_point now{};
    // 500 at once, then 90 a second (9 a tick, ended): within the bucket for a minute.
    auto flagged = Sample(
        guard, c, 1, [&](int) { c[0].Start(500), c[0].End(500); }, now);
    flagged = Sample(
        guard, c, 600, [&](int) { c[0].Start(9), c[0].End(9); }, now);
    EXPECT_TRUE(flagged.empty());
  }
  {
    StreamFloodGuard guard(limits);
    std::vector<Connection> c = {Connection(1)};
    Clock::time_point now{};
    // 120 a second: the burst is gone after ~25 s.
    const auto flagged = Sample(
        guard, c, 600, [&](int) { c[0].Start(12), c[0].End(12); }, now);
    EXPECT_EQ(flagged, std::vector<int64_t>{1});
  }
}

TEST(StreamFloodGuard, MessagesBankedAheadAreCapped) {
  StreamFloodGuard guard;
  std::vector<Connection> c = {Connection(1)};
  Clock::time_point now{};
  // A long stream delivers 100,000 messages; then the connection resets 300 streams a tick.
  // The banked messages pay for 128 of them, not for 100,000.
  auto flagged = Sample(
      guard, c, 1,
      [&](int) {
        c[0].Start(1);
        c[0].Message(100000);
      },
      now);
  EXPECT_TRUE(flagged.empty());
  flagged = Sample(
      guard, c, 3, [&](int) { c[0].Start(300), c[0].End(300); }, now);
  EXPECT_EQ(flagged, std::vector<int64_t>{1}) << "128 + 500 of the 900 resets are allowed";
}

TEST(StreamFloodGuard, ConnectionsGoneAreForgotten) {
  StreamFloodGuard guard;
  Clock::time_point now{};
  std::vector<Connection> c = {Connection(1)};
  EXPECT_EQ(Sample(
                guard, c, 1, [&](int) { c[0].Start(600), c[0].End(600); }, now),
            std::vector<int64_t>{1});
  std::vector<Connection> none;
  EXPECT_TRUE(Sample(
                  guard, none, 1, [](int) {}, now)
                  .empty());
  // A new connection (a new socket id) starts with a full bucket.
  std::vector<Connection> fresh = {Connection(2)};
  EXPECT_TRUE(Sample(
                  guard, fresh, 1, [&](int) { fresh[0].Start(400), fresh[0].End(400); }, now)
                  .empty());
}

// Uploads in progress: connections 1 and 2 hold 40 and 30 and stop finishing messages at
// tick 5, 3 keeps finishing them with 20 open, 4 stalls with 10 (a few slow uploads).
TEST(StreamFloodGuard, StalledConnectionsHoldingManyAreEndedWhileOverTheLimit) {
  StreamFloodLimits limits;
  limits.max_uploads = 64;
  limits.stalled_uploads = 16;
  limits.stall = std::chrono::milliseconds(500);
  StreamFloodGuard guard(limits);
  std::vector<Connection> c = {Connection(1), Connection(2), Connection(3), Connection(4)};
  const std::map<std::string, int64_t> uploads = {{c[0].counters.peer, 40},
                                                  {c[1].counters.peer, 30},
                                                  {c[2].counters.peer, 20},
                                                  {c[3].counters.peer, 10}};
  c[0].Start(40), c[1].Start(30), c[2].Start(20), c[3].Start(10);
  Clock::time_point now{};
  std::vector<std::pair<int64_t, std::string>> ended;
  for (int t = 0; t < 20; ++t) {
    c[2].Start(5), c[2].Message(5), c[2].End(5);
    if (t < 5)
      c[0].Start(1), c[0].Message(1), c[0].End(1), c[1].Start(1), c[1].Message(1), c[1].End(1);
    std::vector<ConnectionCounters> sample;
    for (const Connection& x : c) sample.push_back(x.counters);
    now += kTick;
    for (const FloodingConnection& f : guard.Observe(sample, uploads, now)) {
      ended.emplace_back(f.counters.socket_id, f.reason);
    }
    if (t < 9) EXPECT_TRUE(ended.empty()) << "progressing, or within the stall, at tick " << t;
  }
  // 100 uploads: both stalled connections holding 16 or more, the larger first; not the one
  // finishing messages, not the one holding few.
  const std::vector<std::pair<int64_t, std::string>> want = {{1, "stalled_uploads"},
                                                             {2, "stalled_uploads"}};
  EXPECT_EQ(ended, want);
}

TEST(StreamFloodGuard, StalledUploadsWithinTheLimitAreLeftAlone) {
  StreamFloodLimits limits;
  limits.max_uploads = 128;
  limits.stalled_uploads = 16;
  StreamFloodGuard guard(limits);
  std::vector<Connection> c = {Connection(1), Connection(2)};
  c[0].Start(100), c[1].Start(28);
  const std::map<std::string, int64_t> uploads = {{c[0].counters.peer, 100},
                                                  {c[1].counters.peer, 28}};
  Clock::time_point now{};
  for (int t = 0; t < 100; ++t) {
    std::vector<ConnectionCounters> sample;
    for (const Connection& x : c) sample.push_back(x.counters);
    now += kTick;
    EXPECT_TRUE(guard.Observe(sample, uploads, now).empty());
  }
}

TEST(StreamFloodGuard, ABurstOfUploadsOnANewConnectionWaitsOutTheStall) {
  StreamFloodLimits limits;
  limits.max_uploads = 64;
  limits.stalled_uploads = 64;
  limits.stall = std::chrono::milliseconds(200);
  StreamFloodGuard guard(limits);
  Connection c(1);
  c.Start(128);
  const std::map<std::string, int64_t> uploads = {{c.counters.peer, 128}};
  Clock::time_point now{};
  // Seen first at tick 1; stalled from tick 3 (200 ms later) unless a message arrives.
  EXPECT_TRUE(guard.Observe({c.counters}, uploads, now + kTick).empty());
  EXPECT_TRUE(guard.Observe({c.counters}, uploads, now + 2 * kTick).empty());
  const auto ended = guard.Observe({c.counters}, uploads, now + 3 * kTick);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_STREQ(ended[0].reason, "stalled_uploads");
  // The same burst finishing a message within the stall is left alone.
  StreamFloodGuard other(limits);
  Connection d(2);
  d.Start(128);
  EXPECT_TRUE(other.Observe({d.counters}, {{d.counters.peer, 128}}, now + kTick).empty());
  d.Message(1);
  EXPECT_TRUE(other.Observe({d.counters}, {{d.counters.peer, 127}}, now + 2 * kTick).empty());
  EXPECT_TRUE(other.Observe({d.counters}, {{d.counters.peer, 127}}, now + 3 * kTick).empty());
}

// Uploads spread below the count limits (4 x 25 of 128): left alone until the server's
// memory is under pressure, then the stalled connections holding the most (at least half
// the most any holds) are ended; a client with one stalled call beside them and a client
// whose messages keep arriving are not. While the pressure lasts, the next holders are
// judged once the stall has passed (the memory of those ended takes that long to free).
TEST(StreamFloodGuard, UnderMemoryPressureStalledConnectionsHoldingTheMostAreEnded) {
  StreamFloodLimits limits;
  limits.max_uploads = 128;
  limits.stalled_uploads = 64;
  limits.stall = std::chrono::milliseconds(200);
  StreamFloodGuard guard(limits);
  std::vector<Connection> c = {Connection(1), Connection(2), Connection(3),
                               Connection(4), Connection(5), Connection(6)};
  std::map<std::string, int64_t> uploads;
  for (int i = 0; i < 4; ++i) {
    c[i].Start(25);
    uploads[c[i].counters.peer] = i == 3 ? 12 : 25;  // the fourth holds 12 (half of 25: kept)
  }
  c[4].Start(1), uploads[c[4].counters.peer] = 1;    // one slow call
  c[5].Start(30), uploads[c[5].counters.peer] = 30;  // busy, finishing messages
  Clock::time_point now{};
  std::vector<std::pair<int64_t, std::string>> ended;
  for (int t = 0; t < 10; ++t) {
    c[5].Start(1), c[5].Message(1), c[5].End(1);
    std::vector<ConnectionCounters> sample;
    for (const Connection& x : c) sample.push_back(x.counters);
    now += kTick;
    const bool pressure = t >= 5 && t != 7;
    for (const FloodingConnection& f : guard.Observe(sample, uploads, now, pressure)) {
      ended.emplace_back(f.counters.socket_id, f.reason);
      EXPECT_EQ(t, f.counters.socket_id == 4 ? 8 : 5) << "connection " << f.counters.socket_id;
    }
    if (t < 5) EXPECT_TRUE(ended.empty()) << "no pressure yet at tick " << t;
  }
  const std::vector<std::pair<int64_t, std::string>> want = {{1, "stalled_uploads_memory"},
                                                             {2, "stalled_uploads_memory"},
                                                             {3, "stalled_uploads_memory"},
                                                             {4, "stalled_uploads_memory"}};
  EXPECT_EQ(ended, want);
}

int Listener(uint16_t* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(listen(fd, 4), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

TEST(EndTcpConnection, ShutsDownTheServersSocketOfThatPeerOnly) {
  uint16_t server_port = 0;
  const int listener = Listener(&server_port);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(server_port);
  int clients[2];
  int accepted[2];
  uint16_t client_ports[2];
  for (int i = 0; i < 2; ++i) {
    clients[i] = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(connect(clients[i], reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
    accepted[i] = accept(listener, nullptr, nullptr);
    sockaddr_in self{};
    socklen_t len = sizeof(self);
    getsockname(clients[i], reinterpret_cast<sockaddr*>(&self), &len);
    client_ports[i] = ntohs(self.sin_port);
  }
  const std::string peer = "ipv4:127.0.0.1:" + std::to_string(client_ports[0]);
  EXPECT_FALSE(EndTcpConnection(peer, server_port + 1)) << "another local port";
  EXPECT_TRUE(EndTcpConnection(peer, server_port));
  char byte = 0;
  EXPECT_EQ(recv(clients[0], &byte, 1, 0), 0) << "the client sees the connection end";
  // The other connection still carries data both ways.
  ASSERT_EQ(send(clients[1], "x", 1, 0), 1);
  ASSERT_EQ(recv(accepted[1], &byte, 1, 0), 1);
  ASSERT_EQ(send(accepted[1], "y", 1, 0), 1);
  ASSERT_EQ(recv(clients[1], &byte, 1, 0), 1);
  EXPECT_EQ(byte, 'y');
  EXPECT_FALSE(EndTcpConnection("unix:/tmp/posenc.sock", server_port));
  EXPECT_FALSE(EndTcpConnection("ipv4:127.0.0.1:1", server_port)) << "no such connection";
  for (int fd : {clients[0], clients[1], accepted[0], accepted[1], listener}) close(fd);
}

}  // namespace
}  // namespace posenc
