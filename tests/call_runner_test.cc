// CallRunner::Run, the path every call and stream message takes: a cost error or a
// refusal is the outcome at once and runs nothing; an admitted call runs inline or on the
// pool as its cost says; the outcome carries the admission (a call's slot, or a stream
// message's bytes alone) until its holder drops it; a response over the message limit is
// RESOURCE_EXHAUSTED and cleared; a caller that has gone stops the work and names why.
#include "server/service/call_runner.h"

#include <future>
#include <optional>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "posenc/v1/posenc.pb.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::posenc::testing::IsOk;
using ::posenc::testing::StatusIs;
using ::testing::HasSubstr;
using Slot = CallRunner::Slot;

grpc::Status NotStopped() { return grpc::Status::OK; }

class CallRunnerTest : public ::testing::Test {
 protected:
  CallRunnerTest()
      : pool_(1, 1), admission_(AdmissionLimits{1000, 2}), tracker_(nullptr),
        shm_(SharedMemoryRegistry::Options{}),
        runner_(ServiceRuntime{&pool_, &admission_, &tracker_, &shm_}, /*max_message_bytes=*/64,
                /*metrics=*/nullptr) {}

  // Runs `work` under `cost` and waits for its outcome.
  template <typename Stopped, typename Work>
  CallOutcome RunAndWait(const absl::StatusOr<CallCost>& cost, Slot slot, Stopped stopped,
                         Work work) {
    std::promise<CallOutcome> done;
    std::future<CallOutcome> outcome = done.get_future();
    runner_.Run(cost, slot, "r1", stopped, response_, work,
                [&done](CallOutcome o) { done.set_value(std::move(o)); });
    return outcome.get();
  }

  WorkPool pool_;
  Admission admission_;
  CallTracker tracker_;
  SharedMemoryRegistry shm_;
  const CallRunner runner_;
  v1::EncodeResponse response_;
};

CallCost Cost(uint64_t bytes, bool run_inline) {
  CallCost cost;
  cost.bytes = bytes;
  cost.run_inline = run_inline;
  return cost;
}

TEST_F(CallRunnerTest, CostErrorIsTheOutcomeAtOnceNamingTheRequest) {
  bool ran = false;
  std::optional<CallOutcome> outcome;
  runner_.Run(
      absl::StatusOr<CallCost>(absl::InvalidArgumentError("input.shape overflows")), Slot::kCall,
      "r1", NotStopped, response_,
      [&](const CancelCheck&) {
        ran = true;
        return grpc::Status::OK;
      },
      [&](CallOutcome o) { outcome = std::move(o); });
  ASSERT_TRUE(outcome.has_value()) << "the outcome came later than the call";
  EXPECT_FALSE(ran);
  EXPECT_THAT(outcome->status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("r1")));
  EXPECT_FALSE(outcome->refused);
  EXPECT_EQ(admission_.inflight_calls(), 0);
}

TEST_F(CallRunnerTest, OverTheBudgetIsRefusedAtOnceAndRunsNothing) {
  bool ran = false;
  std::optional<CallOutcome> outcome;
  runner_.Run(
      Cost(1001, /*run_inline=*/false), Slot::kCall, "", NotStopped, response_,
      [&](const CancelCheck&) {
        ran = true;
        return grpc::Status::OK;
      },
      [&](CallOutcome o) { outcome = std::move(o); });
  ASSERT_TRUE(outcome.has_value());
  EXPECT_FALSE(ran);
  EXPECT_TRUE(outcome->refused);
  EXPECT_THAT(outcome->status,
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("--max_inflight_bytes")));
  EXPECT_EQ(admission_.inflight_bytes(), 0u);
}

TEST_F(CallRunnerTest, InlineCostRunsOnTheCallingThreadAndOthersOnThePool) {
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  auto work = [&](const CancelCheck&) {
    ran_on = std::this_thread::get_id();
    return grpc::Status::OK;
  };
  EXPECT_THAT(RunAndWait(Cost(10, true), Slot::kCall, NotStopped, work).status, IsOk());
  EXPECT_EQ(ran_on, caller);
  EXPECT_THAT(RunAndWait(Cost(10, false), Slot::kCall, NotStopped, work).status, IsOk());
  EXPECT_NE(ran_on, caller);
}

TEST_F(CallRunnerTest, OutcomeHoldsTheAdmissionUntilDropped) {
  auto work = [](const CancelCheck&) { return grpc::Status::OK; };
  {
    CallOutcome call = RunAndWait(Cost(600, false), Slot::kCall, NotStopped, work);
    EXPECT_THAT(call.status, IsOk());
    EXPECT_EQ(admission_.inflight_bytes(), 600u);
    EXPECT_EQ(admission_.inflight_calls(), 1);
    // A stream's message holds its bytes, not a slot of its own.
    CallOutcome message = RunAndWait(Cost(300, true), Slot::kStreamMessage, NotStopped, work);
    EXPECT_THAT(message.status, IsOk());
    EXPECT_EQ(admission_.inflight_bytes(), 900u);
    EXPECT_EQ(admission_.inflight_calls(), 1);
  }
  EXPECT_EQ(admission_.inflight_bytes(), 0u);
  EXPECT_EQ(admission_.inflight_calls(), 0);
}

TEST_F(CallRunnerTest, ResponseOverTheMessageLimitIsRefusedAndCleared) {
  CallOutcome outcome =
      RunAndWait(Cost(10, true), Slot::kCall, NotStopped, [this](const CancelCheck&) {
        response_.mutable_output()->set_data(std::string(100, 'x'));
        return grpc::Status::OK;
      });
  EXPECT_THAT(outcome.status,
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("--max_message_bytes")));
  EXPECT_EQ(response_.ByteSizeLong(), 0u);
}

TEST_F(CallRunnerTest, StoppedCallRunsNoWorkAndWorkCutShortReportsWhy) {
  const grpc::Status gone(grpc::StatusCode::CANCELLED, "the call was cancelled");
  bool ran = false;
  CallOutcome before = RunAndWait(
      Cost(10, false), Slot::kCall, [&] { return gone; },
      [&](const CancelCheck&) {
        ran = true;
        return grpc::Status::OK;
      });
  EXPECT_FALSE(ran);
  EXPECT_THAT(before.status, StatusIs(absl::StatusCode::kCancelled));

  // The caller goes while the work runs: the work sees it and fails, and the outcome says
  // why the work stopped rather than how.
  bool stopped = false;
  CallOutcome during = RunAndWait(
      Cost(10, false), Slot::kCall, [&] { return stopped ? gone : grpc::Status::OK; },
      [&](const CancelCheck& cancelled) {
        stopped = true;
        EXPECT_TRUE(cancelled());
        return grpc::Status(grpc::StatusCode::INTERNAL, "solver interrupted");
      });
  EXPECT_THAT(during.status, StatusIs(absl::StatusCode::kCancelled));
}

}  // namespace
}  // namespace posenc
