// Tables loaded at start with --table (learned position tables, T5 bias tables), by name.
// Filled before the server starts, read-only afterwards: reads need no lock. Tables are
// shared_ptr<const Table>, float32 in memory whatever the file held; a float64 file's values
// are also kept as they were, for the schemes that compute in float64 (Fourier frequencies).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/tables/table_cache.h"
#include "server/tensor/dtype.h"

namespace posenc {

struct NamedTable {
  std::string name;
  std::shared_ptr<const Table> table;
  DType source_dtype = DType::kFloat32;  // as stored in the file
  // The file's values when it held float64 (row-major, as `table`); empty otherwise.
  std::shared_ptr<const std::vector<double>> float64_values;
};

class NamedTables {
 public:
  // ALREADY_EXISTS when the name is taken.
  absl::Status Add(NamedTable table);
  // nullptr when not loaded.
  const NamedTable* Find(const std::string& name) const;
  const std::map<std::string, NamedTable>& all() const { return tables_; }

 private:
  std::map<std::string, NamedTable> tables_;
};

}  // namespace posenc
