// The scheme registry is consistent: names and selectors unique, every family's steps
// present, every oneof member of the wire requests registered, lookups that find what the
// list holds and refuse what it does not.
#include "server/schemes/scheme_registry.h"

#include <memory>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "server/kernels/threads.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::posenc::testing::IsOk;
using ::posenc::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

TEST(SchemeRegistryTest, NamesAndLabelsAreUnique) {
  std::set<std::string> names;
  for (size_t i = 0; i < Schemes().size(); ++i) {
    const SchemeDescriptor& s = Schemes()[i];
    EXPECT_THAT(s.name, Not(IsEmpty()));
    EXPECT_TRUE(names.insert(s.name).second) << "two schemes are called " << s.name;
    EXPECT_EQ(s.label, static_cast<SchemeLabel>(i + 1)) << s.name;
    EXPECT_EQ(SchemeOfLabel(s.label), &s);
    EXPECT_EQ(FindScheme(s.name), &s);
    EXPECT_STREQ(LabelName(s.label), s.name.c_str());
  }
  EXPECT_EQ(SchemeOfLabel(kNoScheme), nullptr);
  EXPECT_EQ(SchemeOfLabel(static_cast<SchemeLabel>(Schemes().size() + 1)), nullptr);
  EXPECT_STREQ(LabelName(kNoScheme), "none");
  EXPECT_EQ(FindScheme("no_such_scheme"), nullptr);
}

TEST(SchemeRegistryTest, EveryFamilyHasItsSteps) {
  for (const SchemeDescriptor& s : Schemes()) {
    SCOPED_TRACE(s.name);
    switch (s.family) {
      case SchemeFamily::kAdditive:
      case SchemeFamily::kTable:
        EXPECT_NE(s.encode_case, 0);
        EXPECT_NE(s.add, nullptr);
        EXPECT_EQ(s.rotate, nullptr);
        EXPECT_NE(MutableSchemeMessage(*std::make_unique<v1::EncodeRequest>(), s.encode_case),
                  nullptr);
        EXPECT_NE(s.encode_cost, nullptr);
        break;
      case SchemeFamily::kRotary:
        EXPECT_NE(s.encode_case, 0);
        EXPECT_NE(s.rotate, nullptr);
        EXPECT_EQ(s.add, nullptr);
        EXPECT_NE(MutableSchemeMessage(*std::make_unique<v1::EncodeRequest>(), s.encode_case),
                  nullptr);
        EXPECT_NE(s.encode_cost, nullptr);
        break;
      case SchemeFamily::kBias:
        EXPECT_NE(s.bias_case, 0);
        EXPECT_NE(MutableSchemeMessage(*std::make_unique<v1::BiasRequest>(), s.bias_case), nullptr);
        EXPECT_NE(s.bias_spec, nullptr);
        EXPECT_NE(s.bias_heads, nullptr);
        break;
      case SchemeFamily::kGraph:
        EXPECT_GE(s.graph_encoding, 0);
        EXPECT_NE(s.graph, nullptr);
        EXPECT_NE(s.graph_cost, nullptr);
        break;
    }
    EXPECT_EQ(s.table_case != 0, s.check_table != nullptr);
    EXPECT_EQ(s.table_case != 0, s.table_rows != nullptr);
    EXPECT_THAT(s.model.inputs, Not(IsEmpty()));
    EXPECT_THAT(s.model.outputs, Not(IsEmpty()));
    for (const ModelTensor& t : s.model.inputs) EXPECT_THAT(t.datatypes, Not(IsEmpty()));
    for (const ModelTensor& t : s.model.outputs) EXPECT_THAT(t.datatypes, Not(IsEmpty()));
  }
}

// Wire selectors (oneof members, GraphEncoding values) the proto defines whose schemes are
// still being written. Registering one of them means removing it here: the tests below
// fail both for a selector that is neither registered nor listed, and for one listed here
// that is registered.
const std::set<std::string>& AwaitingRegistration() {
  static const std::set<std::string>* const names = new std::set<std::string>{};
  return *names;
}

// Each member of a request's `oneof scheme` selects exactly one registered scheme, whose
// mutable_* sets that member.
template <typename Request>
void ExpectOneofRegistered(int SchemeDescriptor::*selector) {
  const google::protobuf::OneofDescriptor* oneof = Request::descriptor()->FindOneofByName("scheme");
  ASSERT_NE(oneof, nullptr);
  for (int i = 0; i < oneof->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = oneof->field(i);
    const std::string name = Request::descriptor()->name() + "." + field->name();
    SCOPED_TRACE(name);
    int matches = 0;
    for (const SchemeDescriptor& s : Schemes()) matches += s.*selector == field->number();
    Request request;
    request.GetReflection()->MutableMessage(&request, field);
    if (AwaitingRegistration().count(name) != 0) {
      EXPECT_EQ(matches, 0) << name << " is registered: remove it from AwaitingRegistration";
      EXPECT_EQ(SchemeOf(request), nullptr);
      EXPECT_THAT(UnknownScheme(request),
                  StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(field->name())));
      continue;
    }
    EXPECT_EQ(matches, 1) << name << " must be registered by exactly one scheme";
    const SchemeDescriptor* s = SchemeOf(request);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->*selector, field->number());
  }
}

TEST(SchemeRegistryTest, EveryOneofMemberIsRegistered) {
  ExpectOneofRegistered<v1::EncodeRequest>(&SchemeDescriptor::encode_case);
  ExpectOneofRegistered<v1::BiasRequest>(&SchemeDescriptor::bias_case);
  ExpectOneofRegistered<v1::TableRequest>(&SchemeDescriptor::table_case);
}

TEST(SchemeRegistryTest, EveryGraphEncodingIsRegistered) {
  const google::protobuf::EnumDescriptor* encodings = v1::GraphEncoding_descriptor();
  for (int i = 0; i < encodings->value_count(); ++i) {
    const google::protobuf::EnumValueDescriptor* value = encodings->value(i);
    const std::string name = "GraphEncoding." + value->name();
    SCOPED_TRACE(name);
    int matches = 0;
    for (const SchemeDescriptor& s : Schemes()) {
      matches += s.family == SchemeFamily::kGraph && s.graph_encoding == value->number();
    }
    v1::GraphRequest request;
    SetGraphEncoding(value->number(), request);
    if (AwaitingRegistration().count(name) != 0) {
      EXPECT_EQ(matches, 0) << name << " is registered: remove it from AwaitingRegistration";
      EXPECT_THAT(UnknownScheme(request),
                  StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(value->name())));
      continue;
    }
    EXPECT_EQ(matches, 1) << name << " must be registered by exactly one graph scheme";
    ASSERT_NE(SchemeOf(request), nullptr);
  }
}

TEST(SchemeRegistryTest, MutableMessageSelectsItsScheme) {
  for (const SchemeDescriptor& s : Schemes()) {
    SCOPED_TRACE(s.name);
    if (s.encode_case != 0) {
      v1::EncodeRequest r;
      ASSERT_NE(MutableSchemeMessage(r, s.encode_case), nullptr);
      EXPECT_EQ(SchemeOf(r), &s);
    }
    if (s.bias_case != 0) {
      v1::BiasRequest r;
      ASSERT_NE(MutableSchemeMessage(r, s.bias_case), nullptr);
      EXPECT_EQ(SchemeOf(r), &s);
    }
    if (s.family == SchemeFamily::kGraph) {
      v1::GraphRequest r;
      SetGraphEncoding(s.graph_encoding, r);
      EXPECT_EQ(SchemeOf(r), &s);
    }
  }
}

TEST(SchemeRegistryTest, UnsetSchemeIsRefusedListingTheRegisteredNames) {
  EXPECT_EQ(SchemeOf(v1::EncodeRequest()), nullptr);
  EXPECT_EQ(SchemeOf(v1::BiasRequest()), nullptr);
  EXPECT_EQ(SchemeOf(v1::TableRequest()), nullptr);
  const std::string encode_names =
      SchemeNames([](const SchemeDescriptor& s) { return s.encode_case != 0; });
  EXPECT_THAT(UnknownScheme(v1::EncodeRequest()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("scheme is not set; set one of " + encode_names)));
  for (const SchemeDescriptor& s : Schemes()) {
    if (s.encode_case != 0) {
      EXPECT_THAT(encode_names, HasSubstr(s.name));
    }
  }
  EXPECT_THAT(UnknownScheme(v1::BiasRequest()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("scheme is not set")));
  EXPECT_THAT(UnknownScheme(v1::TableRequest()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("scheme is not set")));
}

// The structural solvers split their work across the kernel threads, each with its own
// scratch (a random walk's ball, a shortest-path block): the cost counts every thread's.
TEST(SchemeRegistryTest, GraphCostsCountEveryKernelThreadsScratch) {
  v1::GraphRequest r;
  r.set_num_nodes(100000);
  for (int64_t v = 0; v + 1 < 100000; ++v) r.add_edges(v), r.add_edges(v + 1);
  r.set_walk_length(8);
  for (int64_t a = 0; a < 32; ++a) r.add_anchors(a);
  const struct {
    const char* name;
    uint64_t thread_bytes;  // what each thread adds
  } solvers[] = {{"graph_random_walk", 100000 * 88 + 2 * 99999 * 8},
                 {"graph_shortest_path", 100000 * 4 * 17}};
  for (const auto& solver : solvers) {
    SCOPED_TRACE(solver.name);
    const SchemeDescriptor* s = FindScheme(solver.name);
    ASSERT_NE(s, nullptr);
    SetKernelThreads(1);
    const absl::StatusOr<SchemeCost> one = s->graph_cost(r);
    SetKernelThreads(16);
    const absl::StatusOr<SchemeCost> sixteen = s->graph_cost(r);
    SetKernelThreads(0);
    ASSERT_THAT(one, IsOk());
    ASSERT_THAT(sixteen, IsOk());
    EXPECT_EQ(sixteen->bytes - one->bytes, 15 * solver.thread_bytes);
  }
}

}  // namespace
}  // namespace posenc
