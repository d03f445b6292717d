// posenc-client's requests built from a command's flags: the scheme messages (Sinusoidal,
// Rope with --hf-config underneath the explicit flags, ...) and one request per command.
// Their errors are usage errors (exit 2); no network.
#pragma once

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cli_flags.h"
#include "client/hf_config.h"
#include "posenc/v1/posenc.pb.h"

namespace posenc::client {

// --base --layout --timescale --input-scale --pe-scale --fusion --pe-dim.
absl::Status FillSinusoidal(const Flags& f, v1::Sinusoidal* s);

// A Rope from --hf-config, then the explicit flags on top. `hf` receives the config.
absl::Status FillRope(const Flags& f, v1::Rope* rope, std::optional<HfRopeConfig>* hf);

// encode / stream: the scheme, the input (and rope's key), the positions.
absl::StatusOr<v1::EncodeRequest> BuildEncodeRequest(const Flags& f);
// bias: alibi, t5, shaw or deberta over --query-length x --key-length, with --scores (and
// --query for shaw) if given.
absl::StatusOr<v1::BiasRequest> BuildBiasRequest(const Flags& f);
// graph: --nodes, --edges, --k, and --input if given.
absl::StatusOr<v1::GraphRequest> BuildGraphRequest(const Flags& f);
// table: sinusoidal or rope rows; --length and --dim default from --hf-config.
absl::StatusOr<v1::TableRequest> BuildTableRequest(const Flags& f);

}  // namespace posenc::client
