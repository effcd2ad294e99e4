#include "mapped_files.h"

#include <climits>
#include <cstdlib>

#include <atomic>
#include <cstdint>

namespace ngram {
namespace {

constexpr size_t kSlots = 256;
constexpr size_t kPathBytes = 1024;
constexpr uintptr_t kClaimed = 1;  // a slot being written: no mapping starts at address 1

struct Slot {
  std::atomic<uintptr_t> begin{0};  // 0 free, kClaimed being written, else the mapping's first byte
  std::atomic<uintptr_t> end{0};
  char path[kPathBytes];
};

Slot slots[kSlots];
static_assert(std::atomic<uintptr_t>::is_always_lock_free, "the SIGBUS handler reads the slots without locks");

}  // namespace

void note_mapping(const void* base, size_t bytes, const std::string& given) {
  // Absolute, so that the handler's line names the file wherever the server was started.
  char resolved[PATH_MAX];
  const std::string path = ::realpath(given.c_str(), resolved) ? std::string(resolved) : given;
  for (Slot& s : slots) {
    uintptr_t free_slot = 0;
    if (!s.begin.compare_exchange_strong(free_slot, kClaimed, std::memory_order_acquire)) continue;
    const size_t n = path.size() < kPathBytes - 1 ? path.size() : kPathBytes - 1;
    for (size_t i = 0; i < n; ++i) s.path[i] = path[i];
    s.path[n] = '\0';
    s.end.store(reinterpret_cast<uintptr_t>(base) + bytes, std::memory_order_relaxed);
    s.begin.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    return;
  }
}

void forget_mapping(const void* base) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(base);
  for (Slot& s : slots) {
    uintptr_t expected = b;
    if (s.begin.compare_exchange_strong(expected, kClaimed, std::memory_order_acquire)) {
      s.end.store(0, std::memory_order_relaxed);
      s.begin.store(0, std::memory_order_release);
      return;
    }
  }
}

bool mapped_file_at(const void* addr, char* out, size_t cap) {
  if (cap == 0) return false;
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  for (Slot& s : slots) {
    const uintptr_t b = s.begin.load(std::memory_order_acquire);
    if (b <= kClaimed || a < b || a >= s.end.load(std::memory_order_relaxed)) continue;
    size_t n = 0;
    while (n + 1 < cap && s.path[n]) {
      out[n] = s.path[n];
      ++n;
    }
    out[n] = '\0';
    std::atomic_thread_fence(std::memory_order_acquire);  // the copy above happens before the re-check
    if (s.begin.load(std::memory_order_relaxed) == b) return true;  // not forgotten while copied
  }
  return false;
}

}  // namespace ngram
