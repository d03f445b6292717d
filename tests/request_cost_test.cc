// Where a ModelStreamInfer message runs, judged before it is converted (PlacementOf): a
// large graph goes to the bulk lane however its num_nodes is carried, so that a solve never
// holds a cheap-lane worker; small tensors run inline, large ones in the bulk lane.
#include "server/service/request_cost.h"

#include <string>

#include "gtest/gtest.h"

namespace posenc {
namespace {

using inference::ModelInferRequest;

ModelInferRequest GraphRequest() {
  ModelInferRequest r;
  r.set_model_name("graph_laplacian");
  auto* edges = r.add_inputs();
  edges->set_name("edges");
  edges->set_datatype("INT64");
  edges->add_shape(1);
  edges->add_shape(2);
  r.add_raw_input_contents(std::string(16, '\0'));
  return r;
}

ModelInferRequest SinusoidalRequest(size_t bytes) {
  ModelInferRequest r;
  r.set_model_name("sinusoidal");
  auto* input = r.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  input->add_shape(1);
  input->add_shape(static_cast<int64_t>(bytes / 64));
  input->add_shape(16);
  r.add_raw_input_contents(std::string(bytes, '\0'));
  return r;
}

TEST(PlacementOf, LargeGraphGoesToTheBulkLaneAsUint64Param) {
  ModelInferRequest r = GraphRequest();
  (*r.mutable_parameters())["num_nodes"].set_uint64_param(kCheapGraphNodes + 1);
  EXPECT_EQ(PlacementOf(r).lane, Lane::kBulk);
  EXPECT_FALSE(PlacementOf(r).run_inline);
}

TEST(PlacementOf, LargeGraphGoesToTheBulkLaneAsInt64Param) {
  ModelInferRequest r = GraphRequest();
  (*r.mutable_parameters())["num_nodes"].set_int64_param(kCheapGraphNodes + 1);
  EXPECT_EQ(PlacementOf(r).lane, Lane::kBulk);
}

TEST(PlacementOf, SmallGraphStaysCheapButNeverRunsInline) {
  for (const bool as_uint64 : {false, true}) {
    ModelInferRequest r = GraphRequest();
    auto& nodes = (*r.mutable_parameters())["num_nodes"];
    if (as_uint64) {
      nodes.set_uint64_param(kCheapGraphNodes);
    } else {
      nodes.set_int64_param(kCheapGraphNodes);
    }
    EXPECT_EQ(PlacementOf(r).lane, Lane::kCheap) << "uint64: " << as_uint64;
    EXPECT_FALSE(PlacementOf(r).run_inline) << "uint64: " << as_uint64;
  }
}

TEST(PlacementOf, UnparseableNumNodesIsLeftToTheConversion) {
  ModelInferRequest r = GraphRequest();
  (*r.mutable_parameters())["num_nodes"].set_uint64_param(~uint64_t{0});  // over INT64_MAX
  EXPECT_EQ(PlacementOf(r).lane, Lane::kCheap);
}

TEST(PlacementOf, TensorsRunInlineOnlyWhenSmallAndInTheMessage) {
  const CallCost small = PlacementOf(SinusoidalRequest(64 << 10));
  EXPECT_EQ(small.lane, Lane::kCheap);
  EXPECT_TRUE(small.run_inline);
  EXPECT_EQ(small.bytes, 0u);

  const CallCost medium = PlacementOf(SinusoidalRequest(kInlineCallBytes / 2));
  EXPECT_EQ(medium.lane, Lane::kCheap);
  EXPECT_FALSE(medium.run_inline);

  const CallCost large = PlacementOf(SinusoidalRequest(kCheapCallBytes + 64));
  EXPECT_EQ(large.lane, Lane::kBulk);
  EXPECT_FALSE(large.run_inline);

  ModelInferRequest shm = SinusoidalRequest(0);
  (*shm.mutable_inputs(0)->mutable_parameters())["shared_memory_region"].set_string_param("r");
  EXPECT_FALSE(PlacementOf(shm).run_inline);
}

}  // namespace
}  // namespace posenc
