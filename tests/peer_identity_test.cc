// The socket lookups behind shared-memory ownership: peer addresses as gRPC spells them,
// owners picked from socket rows, and live connections of this test process found by
// their peer through sock_diag, also while other connections come and go by the thousand.
#include "server/shm/peer_identity.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace posenc {
namespace {

TcpEndpoint V4(const char* address, uint16_t port) {
  TcpEndpoint e;
  e.address[10] = e.address[11] = 0xff;
  inet_pton(AF_INET, address, e.address.data() + 12);
  e.port = port;
  return e;
}

TEST(PeerIdentity, ParsesGrpcPeerAddresses) {
  EXPECT_EQ(ParsePeerAddress("ipv4:127.0.0.1:41234"), V4("127.0.0.1", 41234));
  TcpEndpoint loop6;
  loop6.address[15] = 1;
  loop6.port = 8000;
  EXPECT_EQ(ParsePeerAddress("ipv6:[::1]:8000"), loop6);
  EXPECT_EQ(ParsePeerAddress("ipv6:%5B::1%5D:8000"), loop6);
  EXPECT_EQ(ParsePeerAddress("ipv6:%5Bfe80::1%25eth0%5D:8000")->port, 8000);
  for (const char* bad : {"unix:", "unix:/tmp/s", "ipv4:127.0.0.1", "ipv4:1.2.3:80",
                          "ipv4:127.0.0.1:65536", "ipv6:::1:80", "ipv6:[::1]", "", "tcp:5"}) {
    EXPECT_FALSE(ParsePeerAddress(bad).has_value()) << bad;
  }
}

TEST(PeerIdentity, PicksTheServersSideAndTheClientsUid) {
  TcpSocketRow client{V4("127.0.0.1", 41138), V4("127.0.0.1", 50051), 1, 1000, 4242};
  TcpSocketRow server{V4("127.0.0.1", 50051), V4("127.0.0.1", 41138), 1, 0, 77};
  TcpSocketRow closing = server;
  closing.state = 8;  // CLOSE_WAIT
  closing.inode = 5;
  const std::vector<TcpSocketRow> rows = {closing, client, server};
  EXPECT_EQ(ConnectionOwner("ipv4:127.0.0.1:41138", rows), "tcp:77");
  EXPECT_EQ(LocalPeerUid(V4("127.0.0.1", 41138), rows), 1000u);
  EXPECT_FALSE(ConnectionOwner("ipv4:127.0.0.1:1", rows).has_value());
  EXPECT_FALSE(ConnectionOwner("unix:", rows).has_value());
}

// A loopback listener and one connection to it, closed with the fixture.
struct Loopback {
  Loopback() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    listen(listener, 1024);
    socklen_t length = sizeof(address);
    getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
    server_address = address;
    client = socket(AF_INET, SOCK_STREAM, 0);
    connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    server = accept(listener, nullptr, nullptr);
    sockaddr_in client_end{};
    length = sizeof(client_end);
    getsockname(client, reinterpret_cast<sockaddr*>(&client_end), &length);
    client_port = ntohs(client_end.sin_port);
  }
  ~Loopback() {
    close(server);
    close(client);
    close(listener);
  }
  std::string Peer() const { return "ipv4:127.0.0.1:" + std::to_string(client_port); }
  int listener = -1, client = -1, server = -1;
  sockaddr_in server_address{};
  uint16_t client_port = 0;
};

// Thousands of connections opened and closed beside a live one (their TIME_WAIT sockets
// fill the tables) never hide it: every lookup finds it.
TEST(PeerIdentity, FindsALiveConnectionWhileOthersComeAndGo) {
  Loopback live;
  std::atomic<bool> stop{false};
  std::thread acceptor([&] {
    while (!stop) {
      const int s = accept(live.listener, nullptr, nullptr);
      if (s >= 0) close(s);
    }
  });
  std::thread churn([&] {
    while (!stop) {
      const int s = socket(AF_INET, SOCK_STREAM, 0);
      connect(s, reinterpret_cast<const sockaddr*>(&live.server_address),
              sizeof(live.server_address));
      close(s);
    }
  });
  const std::optional<std::string> want = ConnectionOwner(live.Peer());
  ASSERT_TRUE(want.has_value());
  int found = 0, uids = 0;
  for (int i = 0; i < 300; ++i) {
    found += ConnectionOwner(live.Peer()) == want;
    uids += LocalPeerUid(V4("127.0.0.1", live.client_port),
                         QueryTcpSockets(V4("127.0.0.1", live.client_port), SocketEnd::kLocal)) ==
            getuid();
  }
  stop = true;
  const int wake = socket(AF_INET, SOCK_STREAM, 0);  // unblocks the acceptor
  connect(wake, reinterpret_cast<const sockaddr*>(&live.server_address),
          sizeof(live.server_address));
  close(wake);
  churn.join();
  acceptor.join();
  EXPECT_EQ(found, 300);
  EXPECT_EQ(uids, 300);
}

// A real loopback connection of this process: both its ends are found.
TEST(PeerIdentity, FindsALiveConnectionAndItsUid) {
  std::string peer;
  std::optional<std::string> owner;
  {
    Loopback live;
    peer = live.Peer();
    owner = ConnectionOwner(peer);
    ASSERT_TRUE(owner.has_value());
    EXPECT_THAT(*owner, ::testing::StartsWith("tcp:"));
    const TcpEndpoint client = V4("127.0.0.1", live.client_port);
    EXPECT_EQ(LocalPeerUid(client, QueryTcpSockets(client, SocketEnd::kLocal)), getuid());
    EXPECT_EQ(ShmOwner::OfPeer(peer).name(), *owner);
  }
  EXPECT_EQ(ShmOwner::OfPeer(peer).name(), peer) << "a gone connection is named by its peer";
  EXPECT_EQ(ShmOwner().name(), "");
  EXPECT_EQ(ShmOwner::Named("http").name(), "http");
}

}  // namespace
}  // namespace posenc
