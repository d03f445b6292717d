#include "server/service/stream_flood_guard.h"

#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/shm/peer_identity.h"

namespace posenc {
namespace {

constexpr int kEstablished = 1;

// This process's descriptor of the socket with inode `inode`, or -1.
int DescriptorOfSocket(uint64_t inode) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  const std::string target = absl::StrCat("socket:[", inode, "]");
  int found = -1;
  char link[64];
  while (const dirent* entry = readdir(dir)) {
    int fd = 0;
    if (!absl::SimpleAtoi(entry->d_name, &fd)) continue;
    const std::string path = absl::StrCat("/proc/self/fd/", entry->d_name);
    const ssize_t n = readlink(path.c_str(), link, sizeof(link));
    if (n > 0 && absl::string_view(link, static_cast<size_t>(n)) == target) {
      found = fd;
      break;
    }
  }
  closedir(dir);
  return found;
}

}  // namespace

int64_t StreamFloodGuard::StreamsWithoutMessage(Track& track, const ConnectionCounters& now) {
  // Counted from the streams started, not from those ended: under a flood gRPC records a
  // stream's end only once it has worked through its call, seconds later. A stream still
  // open may yet send its message (an upload in progress), up to one per stream slot.
  const auto pending = [](const ConnectionCounters& c) {
    return std::min<int64_t>(c.open_streams(), kMessageCreditCap);
  };
  const int64_t started = std::max<int64_t>(0, now.streams_started - track.last.streams_started);
  const int64_t messages =
      std::max<int64_t>(0, now.messages_received - track.last.messages_received);
  const int64_t without = started - messages - (pending(now) - pending(track.last));
  // A unary call's message may be counted a sample before its stream ends: messages over
  // what the started streams need are banked (up to the cap) for the streams to come.
  track.message_credit = std::min(track.message_credit - without, kMessageCreditCap);
  if (track.message_credit >= 0) return 0;
  const int64_t charged = -track.message_credit;
  track.message_credit = 0;
  return charged;
}

std::vector<FloodingConnection> StreamFloodGuard::Observe(
    const std::vector<ConnectionCounters>& connections,
    const std::map<std::string, int64_t>& uploads, std::chrono::steady_clock::time_point now,
    bool memory_pressure) {
  std::vector<FloodingConnection> out;
  std::map<int64_t, Track> seen;
  for (const ConnectionCounters& c : connections) {
    auto it = tracks_.find(c.socket_id);
    Track track;
    if (it == tracks_.end()) {
      // First seen: what it did before this sample is judged against a full bucket, and its
      // stall is counted from now.
      track.last = c;
      track.last.streams_started = track.last.streams_ended = track.last.messages_received = 0;
      track.at = track.message_at = now;
      track.tokens = limits_.burst;
    } else {
      track = it->second;
    }
    const double seconds = std::chrono::duration<double>(now - track.at).count();
    track.tokens = std::min(limits_.burst, track.tokens + seconds * limits_.per_second);
    track.tokens -= static_cast<double>(StreamsWithoutMessage(track, c));
    if (c.messages_received != track.last.messages_received) track.message_at = now;
    track.last = c;
    track.at = now;
    if (track.tokens < 0 && !track.flagged) {
      track.flagged = true;
      const auto u = uploads.find(c.peer);
      out.push_back({c, u == uploads.end() ? 0 : u->second, "streams_reset_without_message"});
    }
    seen.emplace(c.socket_id, track);
  }
  tracks_ = std::move(seen);
  EndStalledUploads(uploads, now, memory_pressure, out);
  return out;
}

void StreamFloodGuard::EndStalledUploads(const std::map<std::string, int64_t>& uploads,
                                         std::chrono::steady_clock::time_point now,
                                         bool memory_pressure,
                                         std::vector<FloodingConnection>& out) {
  // A connection already ended may show for a sample or two more: its uploads are gone.
  int64_t total = 0;
  for (const auto& [peer, n] : uploads) total += std::max<int64_t>(n, 0);
  for (const auto& [id, track] : tracks_) {
    const auto u = uploads.find(track.last.peer);
    if (track.flagged && u != uploads.end()) total -= std::max<int64_t>(u->second, 0);
  }
  const bool over = total > limits_.max_uploads;
  // What connections ended for memory held is freed over the next samples.
  memory_pressure = memory_pressure && now - ended_for_memory_at_ >= limits_.stall;
  if (!over && !memory_pressure) return;
  std::vector<std::pair<int64_t, Track*>> stalled;  // (uploads, its track)
  int64_t most = 0;
  for (auto& [id, track] : tracks_) {
    const auto u = uploads.find(track.last.peer);
    if (track.flagged || u == uploads.end() || u->second < 1) continue;
    // Only stalled ones: a burst of uploads from a new connection, or from a client whose
    // calls take turns finishing, looks the same as a flood until its messages arrive.
    if (now - track.message_at < limits_.stall) continue;
    stalled.emplace_back(u->second, &track);
    most = std::max(most, u->second);
  }
  // Over the limit: those holding many. Under memory pressure: those holding the most
  // (a client with one call stalled beside attackers holding dozens is left alone).
  int64_t least = over ? limits_.stalled_uploads : std::numeric_limits<int64_t>::max();
  if (memory_pressure) least = std::min(least, std::max<int64_t>(1, (most + 1) / 2));
  std::stable_sort(stalled.begin(), stalled.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto& [n, track] : stalled) {
    if (n < least) break;
    track->flagged = true;
    const bool by_count = over && n >= limits_.stalled_uploads;
    if (!by_count) ended_for_memory_at_ = now;
    out.push_back({track->last, n, by_count ? "stalled_uploads" : "stalled_uploads_memory"});
  }
}

bool EndTcpConnection(absl::string_view peer, int local_port) {
  const std::optional<TcpEndpoint> client = ParsePeerAddress(peer);
  if (!client) return false;
  for (const TcpSocketRow& row : QueryTcpSockets(*client, SocketEnd::kRemote)) {
    if (row.state != kEstablished || row.local.port != local_port || row.inode == 0) continue;
    const int fd = DescriptorOfSocket(row.inode);
    if (fd < 0) continue;
    // The descriptor may have been closed and reused since it was found: only the socket of
    // that inode is shut down.
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_ino != row.inode) continue;
    return shutdown(fd, SHUT_RDWR) == 0;
  }
  return false;
}

}  // namespace posenc
