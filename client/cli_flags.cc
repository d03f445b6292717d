#include "client/cli_flags.h"

#include "server/common/status_macros.h"

namespace posenc::client {

const std::set<std::string> kConnectionFlags = {
    "target", "timeout", "tls", "tls-ca", "tls-cert", "tls-key", "tls-server-name", "help"};

absl::StatusOr<Flags> ParseCommandFlags(const std::vector<std::string>& args,
                                        const std::set<std::string>& extra,
                                        const std::set<std::string>& booleans) {
  Flags::Options options;
  options.known = kConnectionFlags;
  options.known.insert(extra.begin(), extra.end());
  options.booleans = {"tls", "help"};
  options.booleans.insert(booleans.begin(), booleans.end());
  options.separator = '-';
  return Flags::Parse(args, options);
}

absl::StatusOr<ClientOptions> ClientOptionsFromFlags(const Flags& f) {
  ClientOptions options;
  options.target = f.Str("target", options.target);
  ASSIGN_OR_RETURN(options.timeout, f.Duration("timeout", options.timeout, absl::ZeroDuration(),
                                               absl::Hours(24), /*lo_exclusive=*/true));
  ASSIGN_OR_RETURN(options.tls, f.Bool("tls"));
  options.tls_ca_file = f.Str("tls-ca");
  options.tls_cert_file = f.Str("tls-cert");
  options.tls_key_file = f.Str("tls-key");
  options.tls_server_name = f.Str("tls-server-name");
  return options;
}

}  // namespace posenc::client
