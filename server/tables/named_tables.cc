#include "server/tables/named_tables.h"

#include "absl/strings/str_cat.h"

namespace posenc {

absl::Status NamedTables::Add(NamedTable table) {
  const std::string name = table.name;
  if (!tables_.emplace(name, std::move(table)).second) {
    return absl::AlreadyExistsError(absl::StrCat("--table: the name '", name, "' is given twice"));
  }
  return absl::OkStatus();
}

const NamedTable* NamedTables::Find(const std::string& name) const {
  auto it = tables_.find(name);
  return it == tables_.end() ? nullptr : &it->second;
}

}  // namespace posenc
