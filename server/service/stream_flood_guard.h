// Rapid reset (CVE-2023-44487) straight at the gRPC port: a client that opens HTTP/2 streams
// and resets them before sending a message. gRPC 1.51 has no counter for such streams: it
// builds a call for each one (about 27 KiB) and frees it only after its surface has seen
// it, which on 2 cores keeps pace with a few thousand a second; one client sending tens of
// thousands a second grows the server by gigabytes and starves every other client.
//
// The guard watches each connection's channelz counters and ends the connection of a
// client whose streams end without a message faster than a token bucket allows (the rule
// nghttp2 1.57 applies to RST_STREAM frames): a burst, then a sustained rate per second.
// A well-behaved client's unary calls each deliver their message before they end, and its
// streams deliver messages, so they never draw on the bucket.
//
// Uploads that never finish: gRPC 1.51 lets each stream buffer about a MiB of a message it
// has not finished (its flow-control window), and once the transport's memory quota is
// under pressure its reclaimer closes idle connections and cancels streams, well-behaved
// clients' among them. So while more uploads are in progress server-wide than the server
// could ever run at once (a multiple of its call slots), the guard ends every connection
// that holds many of them (half a connection's stream limit) and has finished none for a
// while (stalled), those with the most first. A client whose uploads finish, or that holds
// few, is never ended. Uploads spread thinner than that (a few dozen on each of a few
// connections) are ended by memory instead: while the server's heap outside admitted calls
// is over its limit (the caller's judgement, `memory_pressure`), the stalled connections
// holding the most uploads (at least half as many as the most any holds) are ended, then
// none for `stall` (the memory they held takes that long to show as freed).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/service/channelz.h"

namespace posenc {

struct StreamFloodLimits {
  // Streams a connection may end without a message at once, and then per second.
  double burst = 500;
  double per_second = 100;
  // Uploads in progress server-wide above which stalled connections are ended; a
  // connection is stalled when it holds at least `stalled_uploads` uploads and no message
  // of it has arrived for `stall`.
  int64_t max_uploads = 128;
  int64_t stalled_uploads = 64;
  std::chrono::milliseconds stall{200};
};

// A connection the guard ends, and why.
struct FloodingConnection {
  ConnectionCounters counters;
  int64_t uploads = 0;  // uploads it had in progress
  // "streams_reset_without_message", "stalled_uploads" or "stalled_uploads_memory"
  const char* reason = "";
};

class StreamFloodGuard {
 public:
  explicit StreamFloodGuard(StreamFloodLimits limits = {}) : limits_(limits) {}

  // One sample of every connection, taken at `now`, with the uploads in progress of each
  // peer (CallTracker::UploadsByPeer) and whether the server's memory outside admitted
  // calls is over its limit. Returns the connections to end, each once. Connections gone
  // from `connections` are forgotten. Not thread-safe: one caller samples.
  std::vector<FloodingConnection> Observe(const std::vector<ConnectionCounters>& connections,
                                          const std::map<std::string, int64_t>& uploads,
                                          std::chrono::steady_clock::time_point now,
                                          bool memory_pressure = false);

 private:
  // Messages a connection may bank ahead of the streams they belong to, and streams open
  // without a message yet that are not charged: one per HTTP/2 stream slot, so that a long
  // stream's many messages cannot pay for resets.
  static constexpr int64_t kMessageCreditCap = 128;

  struct Track {
    ConnectionCounters last;
    std::chrono::steady_clock::time_point at;
    double tokens = 0;
    int64_t message_credit = 0;
    std::chrono::steady_clock::time_point message_at;  // when a message last arrived
    bool flagged = false;
  };
  // The stalled connections to end while the uploads are over the limit, or while memory
  // is under pressure.
  void EndStalledUploads(const std::map<std::string, int64_t>& uploads,
                         std::chrono::steady_clock::time_point now, bool memory_pressure,
                         std::vector<FloodingConnection>& out);
  // Streams that ended, or are taken to have ended, without a message between `track.last`
  // and `now`.
  static int64_t StreamsWithoutMessage(Track& track, const ConnectionCounters& now);

  StreamFloodLimits limits_;
  std::map<int64_t, Track> tracks_;  // by channelz socket id
  std::chrono::steady_clock::time_point ended_for_memory_at_{};
};

// Ends the server's side of the TCP connection whose client is `peer` ("ipv4:10.0.0.7:41234",
// as gRPC names it) on local port `local_port`: shutdown(2) of this process's socket of it,
// so that gRPC sees the connection end and cancels its streams. False when `peer` is not a
// TCP address or this process holds no such socket (already gone).
bool EndTcpConnection(absl::string_view peer, int local_port);

}  // namespace posenc
