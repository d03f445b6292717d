// posenc-client encode and stream: one Encode call (optionally with the tensors passed
// through POSIX shared memory, --shm), or --count copies down one EncodeStream.
#pragma once

#include "client/cli_flags.h"

namespace posenc::client {

// `f` holds the encode flags (client/request_builders.h). Exit code: 0 ok, 1 the call
// failed, 2 usage or a local file error.
int RunEncode(const Flags& f, bool stream);

}  // namespace posenc::client
