// The socket-table reading behind shared-memory ownership: peer addresses as gRPC spells
// them, rows of /proc/net/tcp and tcp6 (IPv4 as IPv4-mapped IPv6), and a live connection
// of this test process found by its peer.
#include "server/shm/peer_identity.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

TEST(PeerIdentity, ParsesBothTables) {
  const char* v4 =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
      "timeout inode\n"
      "   0: 0100007F:A0B2 0100007F:C383 01 00000000:00000000 00:00000000 00000000  1000        "
      "0 4242 1 0000000000000000 20 4 30 10 -1\n"
      "   1: garbage\n";
  const char* v6 =
      "  sl  local_address                         remote_address                        st "
      "tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
      "   0: 0000000000000000FFFF00000100007F:C383 0000000000000000FFFF00000100007F:A0B2 01 "
      "00000000:00000000 00:00000000 00000000     0        0 77 1 0000000000000000 20 4 30 10 "
      "-1\n";
  std::vector<TcpSocketRow> rows = ParseTcpTable(v4);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].local, V4("127.0.0.1", 0xA0B2));
  EXPECT_EQ(rows[0].remote, V4("127.0.0.1", 0xC383));
  EXPECT_EQ(rows[0].uid, 1000u);
  EXPECT_EQ(rows[0].inode, 4242u);
  std::vector<TcpSocketRow> six = ParseTcpTable(v6);
  ASSERT_EQ(six.size(), 1u);
  rows.push_back(six[0]);
  // The server's side of the connection from 127.0.0.1:0xA0B2 is the tcp6 row (inode 77).
  EXPECT_EQ(ConnectionOwner("ipv4:127.0.0.1:41138", rows), "tcp:77");
  EXPECT_EQ(LocalPeerUid(V4("127.0.0.1", 0xA0B2), rows), 1000u);
  EXPECT_FALSE(ConnectionOwner("ipv4:127.0.0.1:1", rows).has_value());
  EXPECT_FALSE(ConnectionOwner("unix:", rows).has_value());
}

// A real loopback connection of this process: both its ends are in the tables.
TEST(PeerIdentity, FindsALiveConnectionAndItsUid) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t length = sizeof(address);
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  const int server = accept(listener, nullptr, nullptr);
  sockaddr_in client_end{};
  length = sizeof(client_end);
  getsockname(client, reinterpret_cast<sockaddr*>(&client_end), &length);
  const uint16_t port = ntohs(client_end.sin_port);
  const std::string peer = "ipv4:127.0.0.1:" + std::to_string(port);
  const std::optional<std::string> owner = ConnectionOwner(peer);
  ASSERT_TRUE(owner.has_value());
  EXPECT_THAT(*owner, ::testing::StartsWith("tcp:"));
  EXPECT_EQ(LocalPeerUid(V4("127.0.0.1", port), ReadTcpTables()), getuid());
  EXPECT_EQ(ShmOwner::OfPeer(peer).name(), *owner);
  close(server);
  close(client);
  close(listener);
  EXPECT_EQ(ShmOwner::OfPeer(peer).name(), peer) << "a gone connection is named by its peer";
  EXPECT_EQ(ShmOwner().name(), "");
  EXPECT_EQ(ShmOwner::Named("http").name(), "http");
}

}  // namespace
}  // namespace posenc
