// Why a TCP listener could not bind, in words a user can act on.
#ifndef POSENC_SERVER_COMMON_PORT_IN_USE_H_
#define POSENC_SERVER_COMMON_PORT_IN_USE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace posenc {

// "port N on HOST is in use (FLAG)" when another socket holds the port of `address`
// (HOST:PORT or [V6]:PORT; found by trying to bind it), else "" (a unix socket, port 0, a
// host that is not this machine's, a port that is free again). Call it after a bind failed.
std::string PortInUseMessage(absl::string_view address, absl::string_view flag);

}  // namespace posenc

#endif  // POSENC_SERVER_COMMON_PORT_IN_USE_H_
