#include "server/shm/peer_identity.h"

#include <arpa/inet.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace posenc {
namespace {

constexpr int kEstablished = 1;

// 32 hex digits per 32-bit word of the address as the kernel stores it, printed in host
// byte order (x86 and ARM: little endian), then ':' and the port in hex.
std::optional<TcpEndpoint> ParseTableEndpoint(absl::string_view text) {
  const size_t colon = text.find(':');
  if (colon == absl::string_view::npos) return std::nullopt;
  const absl::string_view hex = text.substr(0, colon);
  if (hex.size() != 8 && hex.size() != 32) return std::nullopt;
  uint32_t port = 0;
  if (!absl::SimpleHexAtoi(text.substr(colon + 1), &port) || port > 0xffff) return std::nullopt;
  TcpEndpoint out;
  out.port = static_cast<uint16_t>(port);
  const size_t words = hex.size() / 8;
  const size_t first = words == 1 ? 12 : 0;  // IPv4 goes into ::ffff:a.b.c.d
  if (words == 1) out.address[10] = out.address[11] = 0xff;
  for (size_t w = 0; w < words; ++w) {
    uint32_t word = 0;
    if (!absl::SimpleHexAtoi(hex.substr(w * 8, 8), &word)) return std::nullopt;
    for (size_t b = 0; b < 4; ++b) {
      out.address[first + w * 4 + b] = static_cast<uint8_t>(word >> (8 * b));
    }
  }
  return out;
}

std::optional<TcpSocketRow> ParseRow(absl::string_view line) {
  std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
  // sl local remote st queues timer retrnsmt uid timeout inode ...
  if (f.size() < 10) return std::nullopt;
  std::optional<TcpEndpoint> local = ParseTableEndpoint(f[1]);
  std::optional<TcpEndpoint> remote = ParseTableEndpoint(f[2]);
  uint32_t state = 0;
  TcpSocketRow row;
  if (!local || !remote || !absl::SimpleHexAtoi(f[3], &state) ||
      !absl::SimpleAtoi(f[7], &row.uid) || !absl::SimpleAtoi(f[9], &row.inode)) {
    return std::nullopt;
  }
  row.local = *local;
  row.remote = *remote;
  row.state = static_cast<int>(state);
  return row;
}

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
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

std::vector<TcpSocketRow> ParseTcpTable(absl::string_view text) {
  std::vector<TcpSocketRow> rows;
  bool header = true;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (std::exchange(header, false) || line.empty()) continue;
    if (std::optional<TcpSocketRow> row = ParseRow(line)) rows.push_back(*row);
  }
  return rows;
}

std::vector<TcpSocketRow> ReadTcpTables() {
  std::vector<TcpSocketRow> rows = ParseTcpTable(ReadFile("/proc/net/tcp"));
  std::vector<TcpSocketRow> v6 = ParseTcpTable(ReadFile("/proc/net/tcp6"));
  rows.insert(rows.end(), v6.begin(), v6.end());
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
  if (!ParsePeerAddress(peer)) return std::nullopt;
  return ConnectionOwner(peer, ReadTcpTables());
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
    if (end) uid = LocalPeerUid(*end, ReadTcpTables());
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
