#include "server/common/port_in_use.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace posenc {
namespace {

// Whether binding host:port fails with EADDRINUSE. SO_REUSEADDR as servers set it, so a
// connection in TIME_WAIT does not count as the port being held.
bool BindFailsInUse(const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found) != 0) {
    return false;
  }
  bool in_use = false;
  for (addrinfo* a = found; a != nullptr && !in_use; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    in_use = bind(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EADDRINUSE;
    close(fd);
  }
  freeaddrinfo(found);
  return in_use;
}

}  // namespace

std::string PortInUseMessage(absl::string_view address, absl::string_view flag) {
  if (absl::StartsWith(address, "unix")) return "";
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return "";
  std::string host(address.substr(0, colon));
  const std::string port(address.substr(colon + 1));
  if (port.empty() || port == "0" || port.find_first_not_of("0123456789") != std::string::npos) {
    return "";
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (!BindFailsInUse(host, port)) return "";
  return absl::StrCat("port ", port, " on ", host.empty() ? "*" : host, " is in use (", flag, ")");
}

}  // namespace posenc
