// Who a TCP client of this process is, from the kernel's socket tables of the server's
// network namespace (asked by sock_diag netlink, which filters in the kernel and never
// skips a socket; /proc/net/tcp, read page by page, misses rows while other sockets come
// and go): the identity that shared-memory regions belong to.
//
// A peer address ("ipv4:127.0.0.1:41234", as gRPC names it) can be taken over: once the
// client's connection is gone, any local process may bind the same source port and
// connect again. The server's own socket of a connection cannot: its inode is unique for
// as long as the socket lives, and a new connection gets a new one. So a region belongs
// to "tcp:<inode of the server's socket>", and a client whose connection closes and comes
// back (same port or not) is a new owner.
//
// Thread-safe (asks the kernel afresh on every call).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace posenc {

// One end of a TCP connection; IPv4 addresses as IPv4-mapped IPv6 (::ffff:a.b.c.d).
struct TcpEndpoint {
  std::array<uint8_t, 16> address{};
  uint16_t port = 0;
  bool operator==(const TcpEndpoint& other) const {
    return port == other.port && address == other.address;
  }
};

// "ipv4:127.0.0.1:41234", "ipv6:[::1]:41234" or "ipv6:%5B::1%5D:41234"; nullopt for
// anything else (unix sockets among them).
std::optional<TcpEndpoint> ParsePeerAddress(absl::string_view peer);

// One established TCP socket of this network namespace.
struct TcpSocketRow {
  TcpEndpoint local;
  TcpEndpoint remote;
  int state = 0;  // 1 = ESTABLISHED
  uint32_t uid = 0;
  uint64_t inode = 0;
};

// Which end of a socket a query names.
enum class SocketEnd { kLocal, kRemote };

// The established TCP sockets (IPv4 and IPv6, IPv4-mapped ones included) whose `which` end
// is `end`; empty when the kernel cannot be asked.
std::vector<TcpSocketRow> QueryTcpSockets(const TcpEndpoint& end, SocketEnd which);

// The owner name of the connection whose client end is `peer` in `rows`: "tcp:<inode>" of
// the established socket whose remote end is `peer` (the server's side of it). nullopt when
// the peer is not a TCP address or no such socket is found.
std::optional<std::string> ConnectionOwner(absl::string_view peer,
                                           const std::vector<TcpSocketRow>& rows);

// The same, asking the kernel now.
std::optional<std::string> ConnectionOwner(absl::string_view peer);

// The uid of the process side of `peer` when that client runs in this network namespace
// (its own socket is in `rows`, local end `peer`); nullopt for a client elsewhere.
std::optional<uint32_t> LocalPeerUid(const TcpEndpoint& peer,
                                     const std::vector<TcpSocketRow>& rows);

// Whose shared-memory regions a call may see and use, named when first asked: asking the
// kernel costs a few microseconds, so a call that uses no shared memory never
// pays it. Copies share the name (a stream's messages ask once). Thread-safe.
class ShmOwner {
 public:
  // The owner "" (the registry's default).
  ShmOwner() = default;
  // The gRPC client at peer `peer`: ConnectionOwner(peer), or `peer` itself when the tables
  // do not show its connection (not TCP: "unix:" names every client of a unix socket).
  static ShmOwner OfPeer(std::string peer);
  // The HTTP client at `endpoint` ("127.0.0.1:41234", "[::1]:41234"): "http:uid:<uid>" for a
  // client process on this host (its uid from the tables: every HTTP connection of one user
  // is one owner, as tritonclient.http spreads its calls over a pool of connections), and
  // kHttpRemoteOwner for any other, which may not register.
  static ShmOwner OfHttpPeer(std::string endpoint);
  // An owner by name.
  static ShmOwner Named(std::string name);

  const std::string& name() const;

 private:
  struct State {
    std::function<std::string()> resolve;
    std::once_flag once;
    std::string name;
  };
  std::shared_ptr<State> state_;
};

// The owner name of HTTP clients not on this host.
inline constexpr char kHttpRemoteOwner[] = "http:remote";

}  // namespace posenc
