// A structure-aware mutation for the protobuf targets: half the time, the input is parsed
// and one field is changed through reflection (a scalar set to an edge value: 0, -1, 2^40,
// 2^62, INT64_MAX, inf, NaN, 1e-300, an unknown enum value; a repeated field grown or
// shrunk; an unset message created), then serialized again; otherwise libFuzzer's own byte
// mutation. Byte mutation alone rarely turns a varint into 2^62 or a double into a NaN.
//
//   POSENC_FUZZ_PROTO_MUTATOR(posenc::v1::BiasRequest)   // in the target's .cc
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace posenc::fuzz {

// One place a mutation can go: field `field` of `message`, element `index` (-1: singular,
// or "add an element" for a repeated field).
struct FieldSlot {
  google::protobuf::Message* message;
  const google::protobuf::FieldDescriptor* field;
  int index;
};

void CollectSlots(google::protobuf::Message* message, std::vector<FieldSlot>& slots);
// Changes the field at `slot`; `rng` picks the new value.
void MutateSlot(const FieldSlot& slot, std::minstd_rand& rng);

template <typename Message>
size_t MutateProto(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
  std::minstd_rand rng(seed);
  Message message;
  if (rng() % 2 == 0 || !message.ParseFromArray(data, static_cast<int>(size))) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  std::vector<FieldSlot> slots;
  CollectSlots(&message, slots);
  if (slots.empty()) return LLVMFuzzerMutate(data, size, max_size);
  MutateSlot(slots[rng() % slots.size()], rng);
  const std::string bytes = message.SerializeAsString();
  if (bytes.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, bytes.data(), bytes.size());
  return bytes.size();
}

}  // namespace posenc::fuzz

#define POSENC_FUZZ_PROTO_MUTATOR(Message)                                               \
  extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, \
                                            unsigned seed) {                             \
    return posenc::fuzz::MutateProto<Message>(data, size, max_size, seed);               \
  }
