// posenc-client's one-call commands besides encode: bias (AttentionBias), graph
// (GraphEncode), table (GetTable into an .npy), list (ListSchemes) and health
// (grpc.health.v1 Check). Each takes its parsed flags and returns the exit code: 0 ok,
// 1 the call failed (health: or not SERVING), 2 usage or a local file error.
#pragma once

#include "client/cli_flags.h"

namespace posenc::client {

int RunBias(const Flags& f);
int RunGraph(const Flags& f);
int RunTable(const Flags& f);
int RunList(const Flags& f);
int RunHealth(const Flags& f);

}  // namespace posenc::client
