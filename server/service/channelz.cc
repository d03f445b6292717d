#include "server/service/channelz.h"

#include <grpc/grpc.h>
#include <grpc/support/alloc.h>

#include "nlohmann/json.hpp"

namespace posenc {
namespace {

// Parses one channelz answer (a malloc'd JSON string, freed here); null JSON on failure.
nlohmann::json Channelz(char* text) {
  if (text == nullptr) return nullptr;
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  gpr_free(text);
  return json.is_discarded() ? nlohmann::json() : json;
}

// channelz writes int64 counters as strings and leaves out the zero ones.
int64_t Counter(const nlohmann::json& data, const char* name) {
  auto it = data.find(name);
  if (it == data.end()) return 0;
  if (it->is_string()) return std::stoll(it->get<std::string>());
  return it->is_number() ? it->get<int64_t>() : 0;
}

void AddServerSockets(intptr_t server_id, std::vector<ConnectionCounters>& out) {
  for (intptr_t start = 0;;) {
    nlohmann::json page = Channelz(grpc_channelz_get_server_sockets(server_id, start, 100));
    if (!page.is_object()) return;
    for (const auto& ref : page.value("socketRef", nlohmann::json::array())) {
      const intptr_t id = std::stoll(ref.value("socketId", "0"));
      start = std::max(start, id + 1);
      nlohmann::json socket = Channelz(grpc_channelz_get_socket(id));
      if (!socket.is_object() || !socket.contains("socket")) continue;
      const nlohmann::json& s = socket["socket"];
      const nlohmann::json data = s.value("data", nlohmann::json::object());
      ConnectionCounters counters;
      counters.socket_id = id;
      // The socket's name is "chttp2 " and then the peer.
      counters.peer = s.value("ref", nlohmann::json::object()).value("name", "");
      if (const size_t space = counters.peer.find(' '); space != std::string::npos) {
        counters.peer.erase(0, space + 1);
      }
      counters.streams_started = Counter(data, "streamsStarted");
      counters.streams_ended = Counter(data, "streamsSucceeded") + Counter(data, "streamsFailed");
      counters.messages_received = Counter(data, "messagesReceived");
      out.push_back(std::move(counters));
    }
    if (page.value("end", true)) return;
  }
}

// Calls `visit(server JSON)` for every gRPC server of the process.
template <typename Visit>
void ForEachServer(Visit visit) {
  try {
    nlohmann::json servers = Channelz(grpc_channelz_get_servers(0));
    if (!servers.is_object()) return;
    for (const auto& server : servers.value("server", nlohmann::json::array())) visit(server);
  } catch (const std::exception&) {
    // An unexpected channelz shape costs only what is derived from it, never the server.
  }
}

}  // namespace

std::vector<ConnectionCounters> ServerConnections() {
  std::vector<ConnectionCounters> connections;
  ForEachServer([&](const nlohmann::json& server) {
    const auto& ref = server.value("ref", nlohmann::json::object());
    AddServerSockets(std::stoll(ref.value("serverId", "0")), connections);
  });
  return connections;
}

ServerCalls CountServerCalls(const std::vector<ConnectionCounters>& connections) {
  int64_t started = 0;
  ForEachServer([&](const nlohmann::json& server) {
    started += Counter(server.value("data", nlohmann::json::object()), "callsStarted");
  });
  int64_t open = 0;
  for (const ConnectionCounters& c : connections) open += c.open_streams();
  return {started, open};
}

std::map<std::string, int64_t> OpenStreamsByPeer(
    const std::vector<ConnectionCounters>& connections) {
  std::map<std::string, int64_t> open;
  for (const ConnectionCounters& c : connections) open[c.peer] += c.open_streams();
  return open;
}

std::map<std::string, int64_t> OpenStreamsByPeer() {
  return OpenStreamsByPeer(ServerConnections());
}

std::optional<std::set<std::string>> ConnectedPeers() {
  bool found_server = false;
  std::vector<ConnectionCounters> connections;
  ForEachServer([&](const nlohmann::json& server) {
    found_server = true;
    const auto& ref = server.value("ref", nlohmann::json::object());
    AddServerSockets(std::stoll(ref.value("serverId", "0")), connections);
  });
  if (!found_server) return std::nullopt;
  std::set<std::string> peers;
  for (const ConnectionCounters& c : connections) peers.insert(c.peer);
  return peers;
}

}  // namespace posenc
