// Admission control: the one place every front (posenc.v1, the Open Inference Protocol over
// gRPC and HTTP) asks before it allocates for a call. A call is admitted when its cost (output
// plus scratch bytes, computed from the request alone) fits the remaining byte budget and a
// call slot is free; otherwise it is refused at once with RESOURCE_EXHAUSTED and nothing
// was allocated. An admitted call holds a Ticket; the budget returns when it is destroyed.
// Thread-safe (atomics only).
//
//   ASSIGN_OR_RETURN(Admission::Ticket ticket, admission.Admit(cost_bytes));
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"

namespace posenc {

struct AdmissionLimits {
  uint64_t max_inflight_bytes = uint64_t{4} << 30;
  int64_t max_concurrent_calls = 64;
};

class Admission {
 public:
  explicit Admission(const AdmissionLimits& limits) : limits_(limits) {}
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // Holds one call slot and `bytes` of the budget until destroyed. Move-only.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept { *this = std::move(other); }
    Ticket& operator=(Ticket&& other) noexcept;
    ~Ticket() { Release(); }
    uint64_t bytes() const { return bytes_; }

   private:
    friend class Admission;
    Ticket(Admission* owner, uint64_t bytes, bool slot)
        : owner_(owner), bytes_(bytes), slot_(slot) {}
    void Release();
    Admission* owner_ = nullptr;
    uint64_t bytes_ = 0;
    bool slot_ = false;  // holds a --max_concurrent_calls slot
  };

  // RESOURCE_EXHAUSTED (naming the limit's flag and with a retry hint) when `bytes` does not
  // fit what is left of --max_inflight_bytes or every --max_concurrent_calls slot is taken.
  // A cost larger than the whole budget can never run and says so.
  absl::StatusOr<Ticket> Admit(uint64_t bytes);
  // The bytes alone, for one message of a stream that already holds its call slot (a stream
  // takes a slot for its whole life with Admit(0), and each message's cost with this).
  absl::StatusOr<Ticket> AdmitBytes(uint64_t bytes);

  uint64_t inflight_bytes() const { return bytes_.load(std::memory_order_relaxed); }
  int64_t inflight_calls() const { return calls_.load(std::memory_order_relaxed); }
  const AdmissionLimits& limits() const { return limits_; }

 private:
  absl::StatusOr<Ticket> AdmitImpl(uint64_t bytes, bool slot);

  const AdmissionLimits limits_;
  std::atomic<uint64_t> bytes_{0};
  std::atomic<int64_t> calls_{0};
};

// The default --max_inflight_bytes: a quarter of the memory this process may use (the
// cgroup limit when there is one, else physical memory).
uint64_t DefaultMaxInflightBytes();

// True for a refusal from Admit/AdmitBytes that may succeed later (the budget or the call
// slots are busy now); false for every other status, including a cost larger than the whole
// --max_inflight_bytes, which can never run. Fronts send retry advice (HTTP 429 with
// Retry-After) only when this is true, and 413 otherwise.
bool IsRetryableRefusal(const absl::Status& status);
// The default --max_concurrent_calls: 32 per core, at least 64 (a pool of a few dozen
// connections calling at once is not refused; memory is bounded by the bytes budget).
int64_t DefaultMaxConcurrentCalls();

}  // namespace posenc
