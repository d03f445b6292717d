#include "server/shm/peer_identity.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace posenc {
namespace {

constexpr int kEstablished = 1;

// How many times a lookup of a connection that must exist asks the kernel.
constexpr int kQueryAttempts = 3;

// The 16-byte form of an address the kernel reports in `family`.
TcpEndpoint EndpointOf(int family, const uint32_t* words, uint16_t port_be) {
  TcpEndpoint out;
  out.port = ntohs(port_be);
  if (family == AF_INET) {
    out.address[10] = out.address[11] = 0xff;
    std::memcpy(out.address.data() + 12, words, 4);
  } else {
    std::memcpy(out.address.data(), words, 16);
  }
  return out;
}

bool IsV4Mapped(const TcpEndpoint& end) {
  static constexpr std::array<uint8_t, 12> kPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::equal(kPrefix.begin(), kPrefix.end(), end.address.begin());
}

// A sock_diag dump request for the established TCP sockets of `family` with one end at
// `end`, as a bytecode filter (one host condition: a match jumps to the end, accept; no
// match jumps past it, reject), so the kernel walks its tables once and sends back only
// the matches.
std::vector<char> DiagRequest(int family, const TcpEndpoint& end, SocketEnd which) {
  const bool v4 = IsV4Mapped(end);
  const size_t address_bytes = v4 ? 4 : 16;
  const size_t filter_bytes = sizeof(inet_diag_bc_op) + sizeof(inet_diag_hostcond) + address_bytes;
  const size_t request_at = NLMSG_HDRLEN;
  const size_t attribute_at = request_at + NLMSG_ALIGN(sizeof(inet_diag_req_v2));
  const size_t op_at = attribute_at + NLA_HDRLEN;
  std::vector<char> bytes(NLMSG_ALIGN(op_at + filter_bytes), 0);

  nlmsghdr header{};
  header.nlmsg_len = static_cast<uint32_t>(bytes.size());
  header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  inet_diag_req_v2 request{};
  request.sdiag_family = static_cast<uint8_t>(family);
  request.sdiag_protocol = IPPROTO_TCP;
  request.idiag_states = 1u << kEstablished;
  nlattr attribute{};
  attribute.nla_len = static_cast<uint16_t>(NLA_HDRLEN + filter_bytes);
  attribute.nla_type = INET_DIAG_REQ_BYTECODE;
  inet_diag_bc_op op{};
  op.code = which == SocketEnd::kLocal ? INET_DIAG_BC_S_COND : INET_DIAG_BC_D_COND;
  op.yes = static_cast<uint8_t>(filter_bytes);
  op.no = static_cast<uint16_t>(filter_bytes + 4);
  inet_diag_hostcond cond{};
  cond.family = static_cast<uint8_t>(v4 ? AF_INET : AF_INET6);
  cond.prefix_len = static_cast<uint8_t>(address_bytes * 8);
  cond.port = end.port;

  std::memcpy(bytes.data(), &header, sizeof(header));
  std::memcpy(bytes.data() + request_at, &request, sizeof(request));
  std::memcpy(bytes.data() + attribute_at, &attribute, sizeof(attribute));
  std::memcpy(bytes.data() + op_at, &op, sizeof(op));
  std::memcpy(bytes.data() + op_at + sizeof(op), &cond, sizeof(cond));
  std::memcpy(bytes.data() + op_at + sizeof(op) + sizeof(cond), end.address.data() + (v4 ? 12 : 0),
              address_bytes);
  return bytes;
}

// Appends the sockets of one dump's reply; false when the kernel refused the request.
bool ReadDiagReply(int fd, std::vector<TcpSocketRow>& rows) {
  alignas(nlmsghdr) char buffer[16384];
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    int left = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buffer); NLMSG_OK(h, left);
         h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE) return true;
      if (h->nlmsg_type == NLMSG_ERROR) return false;
      const auto* msg = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      TcpSocketRow row;
      row.local = EndpointOf(msg->idiag_family, msg->id.idiag_src, msg->id.idiag_sport);
      row.remote = EndpointOf(msg->idiag_family, msg->id.idiag_dst, msg->id.idiag_dport);
      row.state = msg->idiag_state;
      row.uid = msg->idiag_uid;
      row.inode = msg->idiag_inode;
      rows.push_back(row);
    }
  }
}

}  // namespace

std::optional<TcpEndpoint> ParsePeerAddress(absl::string_view peer) {
  TcpEndpoint out;
  std::string text;
  int family = 0;
  if (absl::ConsumePrefix(&peer, "ipv4:")) {
    family = AF_INET;
    text = std::string(peer);
  } else if (absl::ConsumePrefix(&peer, "ipv6:")) {
    family = AF_INET6;
    text = std::string(peer);  // "[::1]:41234", its brackets maybe percent-encoded
    for (auto [from, to] : {std::pair{"%5B", "["}, std::pair{"%5D", "]"}, std::pair{"%25", "%"}}) {
      for (size_t at; (at = text.find(from)) != std::string::npos;) text.replace(at, 3, to);
    }
  } else {
    return std::nullopt;
  }
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  uint32_t port = 0;
  if (!absl::SimpleAtoi(absl::string_view(text).substr(colon + 1), &port) || port > 0xffff) {
    return std::nullopt;
  }
  out.port = static_cast<uint16_t>(port);
  std::string host = text.substr(0, colon);
  if (family == AF_INET) {
    out.address[10] = out.address[11] = 0xff;
    if (inet_pton(AF_INET, host.c_str(), out.address.data() + 12) != 1) return std::nullopt;
    return out;
  }
  if (host.size() < 2 || host.front() != '[' || host.back() != ']') return std::nullopt;
  host = host.substr(1, host.size() - 2);
  host = host.substr(0, host.find('%'));  // a zone ("fe80::1%eth0") is not part of it
  if (inet_pton(AF_INET6, host.c_str(), out.address.data()) != 1) return std::nullopt;
  return out;
}

std::vector<TcpSocketRow> QueryTcpSockets(const TcpEndpoint& end, SocketEnd which) {
  std::vector<TcpSocketRow> rows;
  const int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return rows;
  for (int family : {AF_INET, AF_INET6}) {
    const std::vector<char> request = DiagRequest(family, end, which);
    if (send(fd, request.data(), request.size(), 0) < 0 || !ReadDiagReply(fd, rows)) break;
  }
  close(fd);
  return rows;
}

std::optional<std::string> ConnectionOwner(absl::string_view peer,
                                           const std::vector<TcpSocketRow>& rows) {
  const std::optional<TcpEndpoint> end = ParsePeerAddress(peer);
  if (!end) return std::nullopt;
  for (const TcpSocketRow& row : rows) {
    if (row.state == kEstablished && row.remote == *end && row.inode != 0) {
      return absl::StrCat("tcp:", row.inode);
    }
  }
  return std::nullopt;
}

std::optional<std::string> ConnectionOwner(absl::string_view peer) {
  const std::optional<TcpEndpoint> end = ParsePeerAddress(peer);
  if (!end) return std::nullopt;
  // A call's connection is open while the call runs, so a miss is the query failing (the
  // kernel out of buffers for the dump, a signal): asked again before the caller falls back
  // to the peer string, an owner that the connection's other calls would not share.
  for (int attempt = 0; attempt < kQueryAttempts; ++attempt) {
    if (std::optional<std::string> owner =
            ConnectionOwner(peer, QueryTcpSockets(*end, SocketEnd::kRemote))) {
      return owner;
    }
  }
  return std::nullopt;
}

std::optional<uint32_t> LocalPeerUid(const TcpEndpoint& peer,
                                     const std::vector<TcpSocketRow>& rows) {
  for (const TcpSocketRow& row : rows) {
    if (row.state == kEstablished && row.local == peer) return row.uid;
  }
  return std::nullopt;
}

ShmOwner ShmOwner::OfPeer(std::string peer) {
  ShmOwner owner;
  owner.state_ = std::make_shared<State>();
  owner.state_->resolve = [peer = std::move(peer)] { return ConnectionOwner(peer).value_or(peer); };
  return owner;
}

ShmOwner ShmOwner::OfHttpPeer(std::string endpoint) {
  ShmOwner owner;
  owner.state_ = std::make_shared<State>();
  owner.state_->resolve = [endpoint = std::move(endpoint)]() -> std::string {
    const bool v6 = !endpoint.empty() && endpoint[0] == '[';
    const std::optional<TcpEndpoint> end =
        ParsePeerAddress(absl::StrCat(v6 ? "ipv6:" : "ipv4:", endpoint));
    std::optional<uint32_t> uid;
    for (int attempt = 0; end && !uid && attempt < kQueryAttempts; ++attempt) {
      uid = LocalPeerUid(*end, QueryTcpSockets(*end, SocketEnd::kLocal));
    }
    return uid ? absl::StrCat("http:uid:", *uid) : std::string(kHttpRemoteOwner);
  };
  return owner;
}

ShmOwner ShmOwner::Named(std::string name) {
  ShmOwner owner;
  owner.state_ = std::make_shared<State>();
  owner.state_->name = std::move(name);
  return owner;
}

const std::string& ShmOwner::name() const {
  static const std::string kNone;
  if (state_ == nullptr) return kNone;
  State& s = *state_;
  std::call_once(s.once, [&s] {
    if (s.resolve) s.name = s.resolve();
  });
  return s.name;
}

}  // namespace posenc
