// posenc-client's flags: every command parses with the one parser (server/common/flags.h),
// names folded to '-' (--tls_ca == --tls-ca), the connection flags shared by all commands,
// and proto enum values by name. Usage errors print one line and exit 2 (kExitUsage).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/posenc_client.h"
#include "google/protobuf/descriptor.h"
#include "server/common/flags.h"

namespace posenc::client {

using Flags = posenc::CommandFlags;

inline constexpr int kExitOk = 0;
inline constexpr int kExitRpc = 1;
inline constexpr int kExitUsage = 2;

// --target, --timeout, --tls, --tls-ca, --tls-cert, --tls-key, --tls-server-name, --help.
extern const std::set<std::string> kConnectionFlags;

// Parses a command's flags: the connection flags plus `extra`; --tls, --help and `booleans`
// may stand alone.
absl::StatusOr<Flags> ParseCommandFlags(const std::vector<std::string>& args,
                                        const std::set<std::string>& extra,
                                        const std::set<std::string>& booleans = {});

// A command line split into the command and its arguments. The connection flags (but --help)
// may come before the command as well as after it: `posenc-client --target=X health` is
// `posenc-client health --target=X`; those before it are passed on after the command's own.
struct CommandLine {
  std::string command;
  std::vector<std::string> args;
};
// `words` is argv without the program name. A flag before the command that is not a
// connection flag, or no command at all, is INVALID_ARGUMENT.
absl::StatusOr<CommandLine> SplitCommandLine(const std::vector<std::string>& words);

// The connection flags as ClientOptions; --timeout in (0, 24h], default 30s.
absl::StatusOr<ClientOptions> ClientOptionsFromFlags(const Flags& f);

// A proto enum value by case-insensitive name ('-' for '_'), e.g. --layout concatenated.
template <typename E>
absl::StatusOr<std::optional<E>> EnumFlag(const Flags& f, const std::string& name,
                                          bool (*parse)(const std::string&, E*),
                                          const google::protobuf::EnumDescriptor* descriptor) {
  if (!f.Has(name)) return std::optional<E>();
  std::string upper = absl::AsciiStrToUpper(f.Str(name));
  for (char& c : upper) c = c == '-' ? '_' : c;
  E value;
  if (parse(upper, &value)) return std::optional<E>(value);
  std::vector<std::string> names;
  for (int i = 0; i < descriptor->value_count(); ++i) {
    names.push_back(absl::AsciiStrToLower(descriptor->value(i)->name()));
  }
  return f.Bad(name, absl::StrCat("one of ", absl::StrJoin(names, ", ")));
}

}  // namespace posenc::client
