#include "server/shm/fault_guard.h"

#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <mutex>

namespace posenc::fault_guard {
namespace {

// A slot's life: kFree -> kClaiming -> kGuarded [-> kZeroing -> kZeroed | kBroken] -> kFree.
enum State : int { kFree, kClaiming, kGuarded, kZeroing, kZeroed, kBroken };

struct Slot {
  std::atomic<int> state{kFree};
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
};

static_assert(std::atomic<int>::is_always_lock_free);
static_assert(std::atomic<uintptr_t>::is_always_lock_free);

Slot g_slots[kMaxRanges];
std::atomic<int> g_slots_used{0};  // high-water mark: the handler scans slots below it
std::atomic<uint64_t> g_faults{0};
struct sigaction g_previous;  // written once, before the handler is installed
std::once_flag g_install_once;

// The previous disposition handles what is not ours. For the default (or ignore, which
// the kernel does not honour for a real fault) restore it and re-raise: SIGBUS is blocked
// while we run, so it is delivered, with the default action, as soon as we return.
void ChainToPrevious(int sig, siginfo_t* info, void* context) {
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) return g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(sig);
  }
  struct sigaction fallback = {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(sig, &fallback, nullptr);
  raise(sig);
}

// The fault is in `slot`. The first thread maps zero pages over the range; a thread that
// faults while another does so just returns and retries its access. Returns false when
// the range cannot be made readable (mmap failed): then the fault is fatal.
bool AbsorbFault(Slot& slot, uintptr_t begin, uintptr_t end) {
  int expected = kGuarded;
  if (!slot.state.compare_exchange_strong(expected, kZeroing, std::memory_order_acq_rel)) {
    return expected == kZeroing || expected == kZeroed;
  }
  void* mapped = mmap(reinterpret_cast<void*>(begin), end - begin, PROT_READ | PROT_WRITE,
                      MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  const bool ok = mapped != MAP_FAILED;
  if (ok) g_faults.fetch_add(1, std::memory_order_relaxed);
  slot.state.store(ok ? kZeroed : kBroken, std::memory_order_release);
  return ok;
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  // si_code > 0: raised by the kernel for a fault (not by kill or sigqueue).
  if (info != nullptr && info->si_code > 0) {
    const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
    const int used = g_slots_used.load(std::memory_order_acquire);
    for (int i = 0; i < used; ++i) {
      Slot& slot = g_slots[i];
      const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
      const uintptr_t end = slot.end.load(std::memory_order_acquire);
      if (address < begin || address >= end) continue;
      if (AbsorbFault(slot, begin, end)) {
        errno = saved_errno;
        return;
      }
      break;
    }
  }
  errno = saved_errno;
  ChainToPrevious(sig, info, context);
}

void InstallHandler() {
  struct sigaction action = {};
  action.sa_sigaction = OnSigbus;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, nullptr, &g_previous);
  sigaction(SIGBUS, &action, nullptr);
}

}  // namespace

int Claim(void* base, size_t length) {
  std::call_once(g_install_once, InstallHandler);
  for (int i = 0; i < kMaxRanges; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kClaiming)) continue;
    const auto begin = reinterpret_cast<uintptr_t>(base);
    g_slots[i].begin.store(begin, std::memory_order_release);
    g_slots[i].end.store(begin + length, std::memory_order_release);
    g_slots[i].state.store(kGuarded, std::memory_order_release);
    int used = g_slots_used.load();
    while (used < i + 1 && !g_slots_used.compare_exchange_weak(used, i + 1)) {
    }
    return i;
  }
  return -1;
}

void Release(int slot) {
  if (slot < 0 || slot >= kMaxRanges) return;
  g_slots[slot].end.store(0, std::memory_order_release);
  g_slots[slot].begin.store(0, std::memory_order_release);
  g_slots[slot].state.store(kFree, std::memory_order_release);
}

bool Faulted(int slot) {
  if (slot < 0 || slot >= kMaxRanges) return false;
  const int state = g_slots[slot].state.load(std::memory_order_acquire);
  return state == kZeroing || state == kZeroed || state == kBroken;
}

uint64_t FaultCount() { return g_faults.load(std::memory_order_relaxed); }

}  // namespace posenc::fault_guard
