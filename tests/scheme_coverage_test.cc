// Every registered scheme is covered: docs/architecture.md's "Scheme coverage" table has
// its row, naming a reference test that exists, a fuzz seed that selects the scheme, and a
// documentation file that names it; docs/protocols.md's Open Inference Protocol model table
// has a row for its model. Data-driven: a new scheme passes by adding its row and files, never by
// editing this test.
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/schemes/scheme_registry.h"

namespace posenc {
namespace {

// The repository root: $POSENC_SOURCE_DIR when ctest sets it, else this file's parent.
std::string SourcePath(const std::string& relative) {
  if (const char* root = std::getenv("POSENC_SOURCE_DIR"))
    return std::string(root) + "/" + relative;
  std::string here = __FILE__;  // .../tests/scheme_coverage_test.cc
  here = here.substr(0, here.rfind('/'));
  return here.substr(0, here.rfind('/')) + "/" + relative;
}

bool Read(const std::string& relative, std::string* text) {
  std::ifstream in(SourcePath(relative), std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *text = s.str();
  return true;
}

// `a` `b` -> {a, b}: the backquoted words of a table cell.
std::vector<std::string> Quoted(absl::string_view cell) {
  std::vector<std::string> out;
  std::vector<std::string> parts = absl::StrSplit(cell, '`');
  for (size_t i = 1; i < parts.size(); i += 2) out.push_back(parts[i]);
  return out;
}

// The table rows whose first cell is one backquoted word, by that word; each row's cells.
std::map<std::string, std::vector<std::string>> CoverageRows(const std::string& doc) {
  std::map<std::string, std::vector<std::string>> rows;
  const size_t start = doc.find("## Scheme coverage");
  if (start == std::string::npos) return rows;
  std::istringstream in(doc.substr(start));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells = absl::StrSplit(line, '|');
    // "| a | b |" splits into "", " a ", " b ", "".
    if (cells.size() < 6) continue;
    const std::vector<std::string> name = Quoted(cells[1]);
    if (name.size() != 1) continue;
    rows[name[0]] = {cells[2], cells[3], cells[4]};
  }
  return rows;
}

// Whether the seed file parses as the request of its corpus target and selects `scheme`.
testing::AssertionResult SeedSelects(const std::string& path, const SchemeDescriptor& scheme) {
  std::string bytes;
  if (!Read(path, &bytes)) return testing::AssertionFailure() << path << " cannot be read";
  const SchemeDescriptor* selected = nullptr;
  if (path.find("/corpus/encode/") != std::string::npos) {
    v1::EncodeRequest r;
    if (!r.ParseFromString(bytes))
      return testing::AssertionFailure() << path << " is no EncodeRequest";
    selected = SchemeOf(r);
  } else if (path.find("/corpus/bias/") != std::string::npos) {
    v1::BiasRequest r;
    if (!r.ParseFromString(bytes))
      return testing::AssertionFailure() << path << " is no BiasRequest";
    selected = SchemeOf(r);
  } else if (path.find("/corpus/graph/") != std::string::npos) {
    v1::GraphRequest r;
    if (!r.ParseFromString(bytes))
      return testing::AssertionFailure() << path << " is no GraphRequest";
    selected = SchemeOf(r);
  } else {
    return testing::AssertionFailure()
           << path << " is not in tests/fuzz/corpus/{encode,bias,graph}";
  }
  if (selected != &scheme) {
    return testing::AssertionFailure()
           << path << " selects " << (selected ? selected->name : "no scheme") << ", not "
           << scheme.name;
  }
  return testing::AssertionSuccess();
}

TEST(SchemeCoverageTest, EveryRegisteredSchemeHasAReferenceTestSeedAndDocumentation) {
  std::string doc;
  ASSERT_TRUE(Read("docs/architecture.md", &doc));
  const auto rows = CoverageRows(doc);
  ASSERT_FALSE(rows.empty()) << "docs/architecture.md has no Scheme coverage table";
  for (const SchemeDescriptor& s : Schemes()) {
    SCOPED_TRACE(s.name);
    auto it = rows.find(s.name);
    if (it == rows.end()) {
      ADD_FAILURE() << s.name << " has no row in docs/architecture.md's Scheme coverage table";
      continue;
    }
    const std::vector<std::string> reference = Quoted(it->second[0]);
    ASSERT_EQ(reference.size(), 2u) << "reference test cell: `file` `TestName`";
    std::string test_source;
    ASSERT_TRUE(Read(reference[0], &test_source)) << reference[0] << " cannot be read";
    EXPECT_NE(test_source.find(reference[1]), std::string::npos)
        << reference[0] << " has no test " << reference[1];
    const std::vector<std::string> seed = Quoted(it->second[1]);
    ASSERT_EQ(seed.size(), 1u) << "fuzz seed cell: `tests/fuzz/corpus/<target>/<file>`";
    EXPECT_TRUE(SeedSelects(seed[0], s));
    const std::vector<std::string> docs = Quoted(it->second[2]);
    ASSERT_EQ(docs.size(), 1u) << "documentation cell: `file`";
    std::string doc_text;
    ASSERT_TRUE(Read(docs[0], &doc_text)) << docs[0] << " cannot be read";
    EXPECT_NE(doc_text.find("`" + s.name + "`"), std::string::npos)
        << docs[0] << " does not name `" << s.name << "`";
  }
}

TEST(SchemeCoverageTest, EveryRegisteredSchemeHasAnOipModelRow) {
  std::string readme;
  ASSERT_TRUE(Read("docs/protocols.md", &readme));
  for (const SchemeDescriptor& s : Schemes()) {
    SCOPED_TRACE(s.name);
    ASSERT_FALSE(s.model.outputs.empty());
    const std::string output = "`" + s.model.outputs.front().name + "`";
    bool found = false;
    std::istringstream in(readme);
    for (std::string line; std::getline(in, line) && !found;) {
      if (line.rfind("| ", 0) != 0) continue;
      std::vector<std::string> cells = absl::StrSplit(line, '|');
      if (cells.size() < 3) continue;
      const std::vector<std::string> names = Quoted(cells[1]);
      found = std::find(names.begin(), names.end(), s.name) != names.end() &&
              line.find(output) != std::string::npos;
    }
    EXPECT_TRUE(found)
        << "docs/protocols.md's Open Inference Protocol model table has no row naming `" << s.name
        << "` and its output " << output;
  }
}

}  // namespace
}  // namespace posenc
