#include "tests/fuzz/proto_mutator.h"

#include <algorithm>

namespace posenc::fuzz {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

int64_t EdgeInt(std::minstd_rand& rng) {
  static const int64_t kValues[] = {0,
                                    1,
                                    -1,
                                    2,
                                    3,
                                    4,
                                    7,
                                    8,
                                    16,
                                    31,
                                    32,
                                    64,
                                    255,
                                    4096,
                                    int64_t{1} << 20,
                                    int64_t{1} << 31,
                                    (int64_t{1} << 40) - 1,
                                    int64_t{1} << 40,
                                    (int64_t{1} << 40) + 1,
                                    int64_t{1} << 62,
                                    std::numeric_limits<int64_t>::max(),
                                    std::numeric_limits<int64_t>::min()};
  if (rng() % 4 == 0) return static_cast<int64_t>(rng() % 100);
  return kValues[rng() % (sizeof(kValues) / sizeof(kValues[0]))];
}

double EdgeDouble(std::minstd_rand& rng) {
  static const double kValues[] = {0.0,
                                   -0.0,
                                   1.0,
                                   -1.0,
                                   0.5,
                                   2.0,
                                   1e-6,
                                   1e6,
                                   1e4,
                                   3e38,
                                   1e-300,
                                   5e-324,
                                   1e300,
                                   1.7e308,
                                   std::numeric_limits<double>::infinity(),
                                   -std::numeric_limits<double>::infinity(),
                                   std::numeric_limits<double>::quiet_NaN()};
  return kValues[rng() % (sizeof(kValues) / sizeof(kValues[0]))];
}

std::string EdgeString(const FieldDescriptor* field, const std::string& old,
                       std::minstd_rand& rng) {
  if (field->type() == FieldDescriptor::TYPE_STRING) {
    static const char* kNames[] = {"", "pos", "t5", "missing", "seed"};
    return kNames[rng() % 5];
  }
  // Tensor bytes: a size off by a little, halved, doubled or empty.
  const size_t sizes[] = {0,
                          1,
                          2,
                          4,
                          old.size() + 2,
                          old.size() / 2,
                          old.size() * 2,
                          old.size() > 2 ? old.size() - 2 : 0};
  std::string s = old;
  s.resize(std::min<size_t>(sizes[rng() % 8], 4096), '\x3c');
  return s;
}

// Sets singular field `f`, or element `index` of repeated `f` (index -1: adds one).
void SetScalar(Message* m, const FieldDescriptor* f, int index, std::minstd_rand& rng) {
  const Reflection* r = m->GetReflection();
  const bool add = f->is_repeated() && index < 0;
  const bool set = !f->is_repeated();
  switch (f->cpp_type()) {
#define POSENC_CASE(CPP, Type, value)          \
  case FieldDescriptor::CPPTYPE_##CPP: {       \
    const auto v = value;                      \
    if (set) r->Set##Type(m, f, v);            \
    else if (add) r->Add##Type(m, f, v);       \
    else r->SetRepeated##Type(m, f, index, v); \
    break;                                     \
  }
    POSENC_CASE(INT64, Int64, EdgeInt(rng))
    POSENC_CASE(UINT64, UInt64, static_cast<uint64_t>(EdgeInt(rng)))
    POSENC_CASE(INT32, Int32, static_cast<int32_t>(EdgeInt(rng)))
    POSENC_CASE(UINT32, UInt32, static_cast<uint32_t>(EdgeInt(rng)))
    POSENC_CASE(DOUBLE, Double, EdgeDouble(rng))
    POSENC_CASE(FLOAT, Float, static_cast<float>(EdgeDouble(rng)))
    POSENC_CASE(BOOL, Bool, rng() % 2 == 0)
    // Known values and a few that no enum has (proto3 enums are open).
    POSENC_CASE(ENUM, EnumValue, static_cast<int>(rng() % 8 == 0 ? 99 : rng() % 7))
#undef POSENC_CASE
    case FieldDescriptor::CPPTYPE_STRING: {
      const std::string old =
          set || add ? (set ? r->GetString(*m, f) : "") : r->GetRepeatedString(*m, f, index);
      const std::string v = EdgeString(f, old, rng);
      if (set) r->SetString(m, f, v);
      else if (add) r->AddString(m, f, v);
      else r->SetRepeatedString(m, f, index, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE: break;
  }
}

}  // namespace

void CollectSlots(Message* message, std::vector<FieldSlot>& slots) {
  const Reflection* r = message->GetReflection();
  const auto* d = message->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (f->is_repeated()) {
        for (int j = 0; j < r->FieldSize(*message, f); ++j) {
          CollectSlots(r->MutableRepeatedMessage(message, f, j), slots);
        }
        slots.push_back({message, f, -1});
      } else if (r->HasField(*message, f)) {
        CollectSlots(r->MutableMessage(message, f), slots);
      } else {
        slots.push_back({message, f, -1});  // creates it (also switches a oneof)
      }
      continue;
    }
    if (!f->is_repeated()) {
      slots.push_back({message, f, -1});
      continue;
    }
    const int n = r->FieldSize(*message, f);
    for (int j = 0; j < n; ++j) slots.push_back({message, f, j});
    slots.push_back({message, f, -1});
    if (n > 0) slots.push_back({message, f, -2});  // removes the last element
  }
}

void MutateSlot(const FieldSlot& slot, std::minstd_rand& rng) {
  const Reflection* r = slot.message->GetReflection();
  if (slot.index == -2) {
    r->RemoveLast(slot.message, slot.field);
  } else if (slot.field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    if (slot.field->is_repeated()) {
      r->AddMessage(slot.message, slot.field);
    } else {
      r->MutableMessage(slot.message, slot.field);
    }
  } else {
    SetScalar(slot.message, slot.field, slot.index, rng);
  }
}

}  // namespace posenc::fuzz
