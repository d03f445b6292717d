// ParsePositionsJson against protobuf's JsonStringToMessage, its reference: the same
// acceptance and the same message for the common decode-step shapes, for spellings the
// direct reading leaves to protobuf, and for a few thousand random near-misses.
#include "server/service/positions_json.h"

#include <random>
#include <string>
#include <vector>

#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace posenc {
namespace {

// Both readings of `json` agree: both accept it with equal messages, or both refuse it.
void ExpectSameAsProtobuf(const std::string& json) {
  v1::Positions reference;
  const bool reference_ok = google::protobuf::util::JsonStringToMessage(json, &reference).ok();
  v1::Positions positions;
  positions.add_offsets(99);  // whatever was there before is replaced
  const absl::Status status = ParsePositionsJson(json, positions);
  ASSERT_EQ(status.ok(), reference_ok) << json << ": " << status;
  if (reference_ok) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(positions, reference))
        << json << "\n got " << positions.ShortDebugString() << "\n want "
        << reference.ShortDebugString();
  } else {
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << json;
    EXPECT_FALSE(status.message().empty()) << json;
  }
}

TEST(PositionsJson, CommonShapesReadAsProtobufReadsThem) {
  for (const char* json : {
           R"({"offsets": [1000]})",
           R"({"offsets": ["1000"]})",
           R"({"offsets": ["1000", "1001", 1002, -3, "-4", 0, "-0"]})",
           R"({"ids": [0, 1, 2, 3]})",
           R"({"offsets": [7], "ids": ["5", 6]})",
           R"({"offsets": []})",
           R"({})",
           R"( { "offsets" : [ 1 , 2 ] } )",
           R"({"offsets": [9223372036854775807, "-9223372036854775808"]})",
           "{\t\"offsets\":\r\n[ 1,\n\t2 ]\n}\n",
           R"({"ids": [], "offsets": [-1]})",
       }) {
    ExpectSameAsProtobuf(json);
    EXPECT_TRUE(positions_json_internal::ReadsDirectly(json)) << json;
  }
}

TEST(PositionsJson, OtherSpellingsAreProtobufs) {
  for (const char* json : {
           R"({"offsets": [1e3]})",
           R"({"offsets": [1000.0]})",
           R"({"offsets": [1.5]})",
           R"({"offsets": ["007"]})",
           R"({"offsets": ["+5"]})",
           R"({"offsets": [" 5"]})",
           R"({"offsets": [9223372036854775808]})",
           R"({"offsets": ["9223372036854775808"]})",
           R"({"offsets": [-9223372036854775809]})",
           R"({"offsets": null})",
           R"({"offsets": [null]})",
           R"({"offsets": 5})",
           R"({"offsets": [true]})",
           R"({"offsets": [1], "offsets": [2]})",
           R"({"\u006fffsets": [1]})",
           R"({"Offsets": [1]})",
           R"({"axisIds": [0, 1]})",
           R"({"axis_ids": [0, 1]})",
           R"({"values": [0.5, 1.5]})",
           R"({"offsets": [1], "values": [2.5]})",
           R"({"unknown": 1})",
           R"([1, 2])",
           R"("offsets")",
           R"({"offsets": [1])",
           R"()",
           R"({"offsets": [1]} trailing)",
           R"({"offsets": [[1]]})",
       }) {
    ExpectSameAsProtobuf(json);
    EXPECT_FALSE(positions_json_internal::ReadsDirectly(json)) << json;
  }
}

TEST(PositionsJson, RandomNearMissesAgree) {
  std::mt19937 random(11);
  const std::vector<std::string> keys = {"\"offsets\"", "\"ids\"", "\"values\"", "\"off\"",
                                         "\"axisIds\""};
  const std::vector<std::string> values = {"0",
                                           "1",
                                           "-1",
                                           "1000",
                                           "\"1000\"",
                                           "\"-7\"",
                                           "1e2",
                                           "2.0",
                                           "\"01\"",
                                           "null",
                                           "true",
                                           "9223372036854775807",
                                           "9223372036854775808",
                                           "\"x\"",
                                           "[]",
                                           "-0",
                                           "\"-0\"",
                                           "1.5"};
  for (int i = 0; i < 3000; ++i) {
    std::string json = "{";
    const int fields = static_cast<int>(random() % 3);
    for (int f = 0; f < fields; ++f) {
      if (f) json += ",";
      json += keys[random() % keys.size()] + ":";
      if (random() % 8 == 0) {
        json += values[random() % values.size()];
        continue;
      }
      json += "[";
      const int n = static_cast<int>(random() % 4);
      for (int k = 0; k < n; ++k) json += (k ? "," : "") + values[random() % values.size()];
      json += "]";
    }
    json += random() % 16 == 0 ? "" : "}";
    ExpectSameAsProtobuf(json);
  }
}

}  // namespace
}  // namespace posenc
