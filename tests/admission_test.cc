// Admission: the budget and call slots are accounted exactly under concurrent admit and
// release, a refusal is immediate (RESOURCE_EXHAUSTED naming the flag), and a ticket
// returns what it holds exactly once.
#include "server/service/admission.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace posenc {
namespace {

using ::posenc::testing::IsOk;
using ::posenc::testing::StatusIs;
using ::testing::HasSubstr;

TEST(AdmissionTest, TicketHoldsBytesAndASlotUntilDestroyed) {
  Admission admission(AdmissionLimits{1000, 4});
  {
    absl::StatusOr<Admission::Ticket> a = admission.Admit(600);
    ASSERT_THAT(a.status(), IsOk());
    EXPECT_EQ(a->bytes(), 600u);
    EXPECT_EQ(admission.inflight_bytes(), 600u);
    EXPECT_EQ(admission.inflight_calls(), 1);
    EXPECT_THAT(admission.Admit(401).status(),
                StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("--max_inflight_bytes")));
    // A refusal takes nothing.
    EXPECT_EQ(admission.inflight_bytes(), 600u);
    EXPECT_EQ(admission.inflight_calls(), 1);
    absl::StatusOr<Admission::Ticket> b = admission.Admit(400);
    ASSERT_THAT(b.status(), IsOk());
    EXPECT_EQ(admission.inflight_bytes(), 1000u);
  }
  EXPECT_EQ(admission.inflight_bytes(), 0u);
  EXPECT_EQ(admission.inflight_calls(), 0);
}

TEST(AdmissionTest, MoreThanTheWholeBudgetCanNeverRun) {
  Admission admission(AdmissionLimits{1000, 4});
  EXPECT_THAT(admission.Admit(1001).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("smaller parts")));
  EXPECT_FALSE(IsRetryableRefusal(admission.Admit(1001).status()));
  EXPECT_EQ(admission.inflight_calls(), 0);
}

TEST(AdmissionTest, OnlyBusyRefusalsAreRetryable) {
  Admission admission(AdmissionLimits{1000, 1});
  absl::StatusOr<Admission::Ticket> held = admission.Admit(600);
  ASSERT_THAT(held.status(), IsOk());
  EXPECT_TRUE(IsRetryableRefusal(admission.Admit(0).status()));           // no call slot free
  EXPECT_TRUE(IsRetryableRefusal(admission.AdmitBytes(500).status()));    // budget busy
  EXPECT_FALSE(IsRetryableRefusal(admission.AdmitBytes(1001).status()));  // never fits
  EXPECT_FALSE(IsRetryableRefusal(absl::ResourceExhaustedError("some other limit")));
  EXPECT_FALSE(IsRetryableRefusal(absl::OkStatus()));
}

TEST(AdmissionTest, CallSlotsAreBounded) {
  Admission admission(AdmissionLimits{1000, 2});
  absl::StatusOr<Admission::Ticket> a = admission.Admit(0);
  absl::StatusOr<Admission::Ticket> b = admission.Admit(0);
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_THAT(admission.Admit(0).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("--max_concurrent_calls")));
  EXPECT_EQ(admission.inflight_calls(), 2);
  *a = Admission::Ticket();  // released by assignment
  EXPECT_EQ(admission.inflight_calls(), 1);
  EXPECT_THAT(admission.Admit(0).status(), IsOk());  // released again at once: a temporary
  EXPECT_EQ(admission.inflight_calls(), 1);
}

TEST(AdmissionTest, AMovedTicketReleasesOnce) {
  Admission admission(AdmissionLimits{1000, 4});
  absl::StatusOr<Admission::Ticket> a = admission.Admit(100);
  ASSERT_THAT(a.status(), IsOk());
  {
    Admission::Ticket moved(std::move(*a));
    EXPECT_EQ(moved.bytes(), 100u);
    EXPECT_EQ(a->bytes(), 0u);
    EXPECT_EQ(admission.inflight_bytes(), 100u);
    Admission::Ticket again;
    again = std::move(moved);
    EXPECT_EQ(admission.inflight_bytes(), 100u);
  }
  EXPECT_EQ(admission.inflight_bytes(), 0u);
  EXPECT_EQ(admission.inflight_calls(), 0);
  a = absl::StatusOr<Admission::Ticket>(Admission::Ticket());  // the moved-from one: nothing
  EXPECT_EQ(admission.inflight_calls(), 0);
}

// Many threads admit and release; what is held never exceeds the limits, every refusal is
// RESOURCE_EXHAUSTED, and everything returns.
TEST(AdmissionTest, ConcurrentAdmitAndReleaseKeepTheBudget) {
  constexpr uint64_t kBudget = 10000;
  constexpr int64_t kSlots = 6;
  Admission admission(AdmissionLimits{kBudget, kSlots});
  std::atomic<int> admitted{0}, refused{0}, wrong{0};
  std::atomic<bool> over{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        const uint64_t bytes = static_cast<uint64_t>((t * 7919 + i * 104729) % 3000);
        absl::StatusOr<Admission::Ticket> ticket = admission.Admit(bytes);
        if (ticket.ok()) {
          ++admitted;
          if (admission.inflight_bytes() > kBudget || admission.inflight_calls() > kSlots) {
            over = true;
          }
        } else if (ticket.status().code() == absl::StatusCode::kResourceExhausted) {
          ++refused;
        } else {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(over.load());
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(admitted.load(), 0);
  EXPECT_EQ(admitted.load() + refused.load(), 8 * 20000);
  EXPECT_EQ(admission.inflight_bytes(), 0u);
  EXPECT_EQ(admission.inflight_calls(), 0);
}

}  // namespace
}  // namespace posenc
