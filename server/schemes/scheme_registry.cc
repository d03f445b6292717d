#include "server/schemes/scheme_registry.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"

namespace posenc {

// Each scheme's descriptor, defined next to its scheme (*_descriptor(s).cc).
SchemeDescriptor SinusoidalScheme();
SchemeDescriptor LearnedScheme();
SchemeDescriptor RopeScheme();
SchemeDescriptor HierarchicalScheme();
SchemeDescriptor ContinuousScheme();
SchemeDescriptor Sinusoidal2DScheme();
SchemeDescriptor FourierScheme();
SchemeDescriptor AlibiScheme();
SchemeDescriptor T5Scheme();
SchemeDescriptor ShawScheme();
SchemeDescriptor DebertaScheme();
SchemeDescriptor GraphLaplacianScheme();
SchemeDescriptor GraphRandomWalkScheme();
SchemeDescriptor GraphShortestPathScheme();
SchemeDescriptor TreeScheme();

namespace {

// The registry: one line per scheme, in ListSchemes order.
std::vector<SchemeDescriptor> Register() {
  std::vector<SchemeDescriptor> schemes = {
      SinusoidalScheme(),
      LearnedScheme(),
      RopeScheme(),
      HierarchicalScheme(),
      ContinuousScheme(),
      Sinusoidal2DScheme(),
      FourierScheme(),
      AlibiScheme(),
      T5Scheme(),
      ShawScheme(),
      DebertaScheme(),
      GraphLaplacianScheme(),
      GraphRandomWalkScheme(),
      GraphShortestPathScheme(),
      TreeScheme(),
  };
  for (size_t i = 0; i < schemes.size(); ++i) schemes[i].label = static_cast<SchemeLabel>(i + 1);
  return schemes;
}

template <typename Match>
const SchemeDescriptor* Find(Match match) {
  for (const SchemeDescriptor& s : Schemes()) {
    if (match(s)) return &s;
  }
  return nullptr;
}

// The message for a request whose oneof `scheme` selects no registered scheme.
absl::Status Unknown(const google::protobuf::Message& request, int set_case,
                     const std::string& names) {
  if (set_case == 0) {
    return absl::InvalidArgumentError(absl::StrCat("scheme is not set; set one of ", names));
  }
  const google::protobuf::FieldDescriptor* field =
      request.GetDescriptor()->FindFieldByNumber(set_case);
  return absl::InvalidArgumentError(
      absl::StrCat("scheme is ", field ? field->name() : std::to_string(set_case),
                   ", which this server does not serve; set one of ", names));
}

}  // namespace

const char* FamilyName(SchemeFamily family) {
  switch (family) {
    case SchemeFamily::kAdditive: return "additive";
    case SchemeFamily::kTable: return "table";
    case SchemeFamily::kRotary: return "rotary";
    case SchemeFamily::kBias: return "bias";
    case SchemeFamily::kGraph: return "graph";
  }
  return "unknown";
}

const std::vector<SchemeDescriptor>& Schemes() {
  static const std::vector<SchemeDescriptor>* const schemes =
      new std::vector<SchemeDescriptor>(Register());
  return *schemes;
}

namespace {

// The oneof member `scheme_case` of a Request, set. The request type's descriptor and
// reflection are looked up once: through a message's virtual GetDescriptor() and
// GetReflection() they cost more than the member's creation itself, on every OIP call.
template <typename Request>
google::protobuf::Message* MutableSchemeMember(Request& request, int scheme_case) {
  static const google::protobuf::Descriptor* const descriptor = Request::GetDescriptor();
  static const google::protobuf::Reflection* const reflection = Request::GetReflection();
  if (scheme_case == 0) return nullptr;
  const google::protobuf::FieldDescriptor* field = descriptor->FindFieldByNumber(scheme_case);
  if (field == nullptr || field->containing_oneof() == nullptr ||
      field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
    return nullptr;
  }
  return reflection->MutableMessage(&request, field);
}

}  // namespace

google::protobuf::Message* MutableSchemeMessage(v1::EncodeRequest& request, int scheme_case) {
  return MutableSchemeMember(request, scheme_case);
}

google::protobuf::Message* MutableSchemeMessage(v1::BiasRequest& request, int scheme_case) {
  return MutableSchemeMember(request, scheme_case);
}

const SchemeDescriptor* FindScheme(absl::string_view name) {
  return Find([&](const SchemeDescriptor& s) { return s.name == name; });
}

const SchemeDescriptor* SchemeOf(const v1::EncodeRequest& r) {
  if (r.scheme_case() == v1::EncodeRequest::SCHEME_NOT_SET) return nullptr;
  return Find([&](const SchemeDescriptor& s) { return s.encode_case == r.scheme_case(); });
}

const SchemeDescriptor* SchemeOf(const v1::BiasRequest& r) {
  if (r.scheme_case() == v1::BiasRequest::SCHEME_NOT_SET) return nullptr;
  return Find([&](const SchemeDescriptor& s) { return s.bias_case == r.scheme_case(); });
}

const SchemeDescriptor* SchemeOf(const v1::GraphRequest& r) {
  const int encoding = GraphEncodingOf(r);
  return Find([&](const SchemeDescriptor& s) {
    return s.family == SchemeFamily::kGraph && s.graph_encoding == encoding;
  });
}

const SchemeDescriptor* SchemeOf(const v1::TableRequest& r) {
  if (r.scheme_case() == v1::TableRequest::SCHEME_NOT_SET) return nullptr;
  return Find([&](const SchemeDescriptor& s) { return s.table_case == r.scheme_case(); });
}

const SchemeDescriptor* SchemeOfLabel(SchemeLabel label) {
  if (label < 1 || label > static_cast<SchemeLabel>(Schemes().size())) return nullptr;
  return &Schemes()[static_cast<size_t>(label - 1)];
}

const char* LabelName(SchemeLabel label) {
  const SchemeDescriptor* s = SchemeOfLabel(label);
  return s ? s->name.c_str() : "none";
}

int GraphEncodingOf(const v1::GraphRequest& r) { return r.encoding(); }
void SetGraphEncoding(int encoding, v1::GraphRequest& r) {
  r.set_encoding(static_cast<v1::GraphEncoding>(encoding));
}

absl::Status UnknownScheme(const v1::EncodeRequest& r) {
  return Unknown(r, r.scheme_case(),
                 SchemeNames([](const SchemeDescriptor& s) { return s.encode_case != 0; }));
}

absl::Status UnknownScheme(const v1::BiasRequest& r) {
  return Unknown(r, r.scheme_case(),
                 SchemeNames([](const SchemeDescriptor& s) { return s.bias_case != 0; }));
}

absl::Status UnknownScheme(const v1::GraphRequest& r) {
  const int encoding = GraphEncodingOf(r);
  const google::protobuf::EnumValueDescriptor* value =
      v1::GraphEncoding_descriptor()->FindValueByNumber(encoding);
  std::string served;
  for (const SchemeDescriptor& s : Schemes()) {
    if (s.family != SchemeFamily::kGraph) continue;
    const google::protobuf::EnumValueDescriptor* v =
        v1::GraphEncoding_descriptor()->FindValueByNumber(s.graph_encoding);
    absl::StrAppend(&served, served.empty() ? "" : ", ", v ? v->name() : "?", " (", s.name, ")");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("encoding is ", value ? value->name() : std::to_string(encoding),
                   ", which this server does not serve; set one of ", served));
}

absl::Status UnknownScheme(const v1::TableRequest& r) {
  return Unknown(r, r.scheme_case(),
                 SchemeNames([](const SchemeDescriptor& s) { return s.table_case != 0; }));
}

}  // namespace posenc
