// How many HTTP/2 streams each client connection has open right now, by peer address as
// grpc::ServerContext::peer() spells it ("ipv4:127.0.0.1:41234"), read from gRPC's channelz.
// The drain needs it: gRPC hands a unary call to the service only once its whole message
// has arrived, so a call still uploading at SIGTERM is invisible except as an open stream.
// Thread-safe (channelz is).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace posenc {

std::map<std::string, int64_t> OpenStreamsByPeer();

}  // namespace posenc
