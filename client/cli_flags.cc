#include "client/cli_flags.h"

#include "absl/strings/match.h"
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

absl::StatusOr<CommandLine> SplitCommandLine(const std::vector<std::string>& words) {
  CommandLine line;
  std::vector<std::string> leading;
  size_t i = 0;
  for (; i < words.size() && absl::StartsWith(words[i], "--"); ++i) {
    const std::string& word = words[i];
    const size_t eq = word.find('=');
    std::string name = word.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    for (char& c : name) c = c == '_' ? '-' : c;
    if (name == "help" || !kConnectionFlags.count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(word,
                       " comes before the command; only the connection flags (--target, --timeout, "
                       "--tls...) may, the others follow it"));
    }
    leading.push_back(word);
    if (eq == std::string::npos && name != "tls") {  // --target ADDR: the value is next
      if (i + 1 >= words.size())
        return absl::InvalidArgumentError(absl::StrCat(word, " needs a value"));
      leading.push_back(words[++i]);
    }
  }
  if (i >= words.size())
    return absl::InvalidArgumentError("no command (posenc-client --help lists them)");
  line.command = words[i];
  line.args.assign(words.begin() + i + 1, words.end());
  line.args.insert(line.args.end(), leading.begin(), leading.end());
  return line;
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
