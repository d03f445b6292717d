#include "server/service/admission.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace posenc {

Admission::Ticket& Admission::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    Release();
    owner_ = other.owner_;
    bytes_ = other.bytes_;
    slot_ = other.slot_;
    other.owner_ = nullptr;
    other.bytes_ = 0;
    other.slot_ = false;
  }
  return *this;
}

void Admission::Ticket::Release() {
  if (owner_ == nullptr) return;
  owner_->bytes_.fetch_sub(bytes_, std::memory_order_relaxed);
  if (slot_) owner_->calls_.fetch_sub(1, std::memory_order_relaxed);
  owner_ = nullptr;
  bytes_ = 0;
  slot_ = false;
}

namespace {

// The payload that marks a refusal as "busy now": its presence, not its value, is read.
constexpr absl::string_view kRetryablePayload = "posenc.dev/admission-busy";

absl::Status Busy(std::string message) {
  absl::Status status = absl::ResourceExhaustedError(std::move(message));
  status.SetPayload(kRetryablePayload, absl::Cord("1"));
  return status;
}

}  // namespace

bool IsRetryableRefusal(const absl::Status& status) {
  return absl::IsResourceExhausted(status) && status.GetPayload(kRetryablePayload).has_value();
}

absl::StatusOr<Admission::Ticket> Admission::Admit(uint64_t bytes) {
  return AdmitImpl(bytes, /*slot=*/true);
}

absl::StatusOr<Admission::Ticket> Admission::AdmitBytes(uint64_t bytes) {
  return AdmitImpl(bytes, /*slot=*/false);
}

absl::StatusOr<Admission::Ticket> Admission::AdmitImpl(uint64_t bytes, bool slot) {
  if (bytes > limits_.max_inflight_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this call needs ", bytes, " bytes of working memory, more than --max_inflight_bytes (",
        limits_.max_inflight_bytes, "); send it in smaller parts"));
  }
  // Compare-and-swap rather than add-then-undo, so inflight_calls() never shows more calls
  // than the limit, even for an instant.
  if (slot) {
    int64_t calls = calls_.load(std::memory_order_relaxed);
    do {
      if (calls >= limits_.max_concurrent_calls) {
        return Busy(absl::StrCat(
            "server busy: ", limits_.max_concurrent_calls,
            " calls in progress (--max_concurrent_calls); retry after 50 ms or on another "
            "replica"));
      }
    } while (!calls_.compare_exchange_weak(calls, calls + 1, std::memory_order_relaxed));
  }
  uint64_t used = bytes_.load(std::memory_order_relaxed);
  do {
    if (used + bytes > limits_.max_inflight_bytes) {
      if (slot) calls_.fetch_sub(1, std::memory_order_relaxed);
      return Busy(absl::StrCat(
          "server busy: this call needs ", bytes, " bytes and ", limits_.max_inflight_bytes - used,
          " of --max_inflight_bytes are free; retry after 100 ms or on another replica"));
    }
  } while (!bytes_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return Ticket(this, bytes, slot);
}

namespace {

// memory.max of this process's cgroup (v2), if it sets one.
uint64_t CgroupMemoryLimit() {
  std::ifstream in("/sys/fs/cgroup/memory.max");
  std::string text;
  uint64_t limit = 0;
  if (in >> text && absl::SimpleAtoi(text, &limit)) return limit;
  return 0;  // "max" or no cgroup v2
}

}  // namespace

uint64_t DefaultMaxInflightBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  uint64_t memory =
      pages > 0 && page_size > 0 ? uint64_t(pages) * uint64_t(page_size) : uint64_t{4} << 30;
  if (const uint64_t cgroup = CgroupMemoryLimit(); cgroup > 0) memory = std::min(memory, cgroup);
  return std::max<uint64_t>(memory / 4, uint64_t{64} << 20);
}

int64_t DefaultMaxConcurrentCalls() {
  return std::max<int64_t>(64, 32 * int64_t(std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace posenc
