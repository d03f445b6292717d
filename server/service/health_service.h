// grpc.health.v1.Health, served by posenc itself instead of gRPC's default service, so that
// a drain can answer Check with NOT_SERVING while calls finish, and end every open Watch at
// once (the default service keeps Watch streams open, which holds shutdown for the whole
// grace period). Services: "" and posenc.v1.PositionalEncoding report readiness (NOT_SERVING
// while draining or while the service cannot make progress); "liveness" stays SERVING until
// the process stops, for a liveness probe that must not restart a busy replica.
// Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"

namespace posenc {

// The health service name of the process's liveness.
inline constexpr char kLivenessService[] = "liveness";

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  HealthService();
  ~HealthService() override;

  // Sets one service's status ("" is the whole server); open Watches of it are told.
  void Set(const std::string& service, bool serving);
  // NOT_SERVING for every service but "liveness", and every open Watch ends (status OK)
  // after saying its status. Later Watches get their status and end at once.
  void Shutdown();

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override;

  class WatchReactor;

 private:
  friend class WatchReactor;
  ServingStatus StatusLocked(const std::string& service) const;  // REQUIRES: mu_ held
  void Forget(WatchReactor* watch);

  // Recursive: gRPC may run a reactor's OnDone (which calls Forget) inline in Finish.
  std::recursive_mutex mu_;
  std::map<std::string, ServingStatus> statuses_;
  std::set<WatchReactor*> watches_;
  bool shut_down_ = false;
};

}  // namespace posenc
