// What gRPC's channelz knows that the service cannot see: calls the transport holds before
// any handler runs. Thread-safe (channelz is).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace posenc {

// One client connection of this process's gRPC servers, as channelz counts it.
struct ConnectionCounters {
  int64_t socket_id = 0;  // channelz's id: unique while the process runs
  std::string peer;       // as grpc::ServerContext::peer() spells it
  int64_t streams_started = 0;
  int64_t streams_ended = 0;  // succeeded or failed (a reset stream fails)
  int64_t messages_received = 0;
  // Streams open now (channelz records an end a little after it happens: never negative).
  int64_t open_streams() const {
    return streams_started > streams_ended ? streams_started - streams_ended : 0;
  }
};
// Every client connection of every gRPC server of the process; empty when channelz cannot say.
std::vector<ConnectionCounters> ServerConnections();

// How many HTTP/2 streams each client connection has open right now, by peer address as
// grpc::ServerContext::peer() spells it ("ipv4:127.0.0.1:41234"). The drain needs it: gRPC
// hands a unary call to the service only once its whole message has arrived, so a call
// still uploading at SIGTERM is invisible except as an open stream.
// Every connection appears, with 0 when it has no stream open.
std::map<std::string, int64_t> OpenStreamsByPeer();
// The same of `connections` (ServerConnections()).
std::map<std::string, int64_t> OpenStreamsByPeer(
    const std::vector<ConnectionCounters>& connections);

// The peers of every client connection of this process's gRPC servers, spelled as
// OpenStreamsByPeer spells them; nullopt when channelz cannot say (no server found).
std::optional<std::set<std::string>> ConnectedPeers();

// Calls gRPC's servers in this process have started, and streams open now on
// `connections` (ServerConnections()). With the calls
// the tracker saw arrive, they tell how many the transport ended before any handler saw them
// (a message over the size limit is refused as it arrives, and channelz counts it as
// started, never as failed).
struct ServerCalls {
  int64_t started = 0;
  int64_t open_streams = 0;
};
ServerCalls CountServerCalls(const std::vector<ConnectionCounters>& connections);

}  // namespace posenc
