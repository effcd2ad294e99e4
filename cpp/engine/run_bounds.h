// RunBounds: for every run of children in an open trie, the largest
// probability one of its continuations has after the run's context:
// count(most frequent child) / count(context), as proposals score it
// (propose.h). A proposal bounds a node's continuations by it before it
// reads the node's runs; the value is filled the first time a proposal
// needs it and kept while the trie is open, so that a later bound is one
// 2-byte read instead of the run's offsets, counts and children.
//
// A slot is 16 bits: the float ratio rounded up to bfloat16 (the float's
// upper 16 bits), so that it is never below the ratio it stands for. The
// slots lie in anonymous memory: pages are resident only where proposals
// have been. Threads fill slots without a lock: each writes the same value.
// Levels are covered from level 1 up while their slots fit kBudgetBytes, or
// the bytes $NGRAM_RUN_BOUNDS_BYTES names (read when a trie's slots are
// allocated); a corpus-scale trie's larger levels would otherwise cost up
// to 2 bytes per entry in RAM. A bound on a level not covered is computed
// each time.
#pragma once
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "anonymous_memory.h"

namespace ngram {

class RunBounds {
 public:
  static constexpr uint64_t kBudgetBytes = uint64_t{64} << 20;
  static constexpr uint16_t kUnknown = 0;      // not computed yet
  static constexpr uint16_t kNoRun = 0x8000;   // -0.0: no children, adds nothing to a bound

  // A slot's value for a run whose ratio is `ratio` (>= 0, finite).
  static uint16_t encode(float ratio) {
    if (!(ratio > 0.0f)) return kNoRun;
    uint32_t bits;
    std::memcpy(&bits, &ratio, 4);
    if (bits & 0xFFFFu) bits += 0x10000u;  // rounds up: positive floats order as their bits
    return static_cast<uint16_t>(bits >> 16);
  }
  static float decode(uint16_t slot) {
    const uint32_t bits = uint32_t{slot} << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }

  // Whether level k has slots (after reserve).
  bool covers(uint32_t k) const { return k <= first_.size(); }
  // The slot of entry i of level k (covers(k)): kUnknown until set.
  uint16_t load(uint32_t k, uint64_t i) const {
    return __atomic_load_n(slots(k) + i, __ATOMIC_RELAXED);
  }
  void store(uint32_t k, uint64_t i, uint16_t v) const { __atomic_store_n(slots(k) + i, v, __ATOMIC_RELAXED); }

  // Allocates, on the first call only, the slots of the levels 1..n that
  // fit the budget, for the level sizes sizes() returns (level k:
  // sizes()[k-1] entries).
  template <class Sizes>
  void reserve(Sizes sizes) const {
    std::call_once(once_, [&] { allocate(sizes()); });
  }

 private:
  void allocate(const std::vector<uint64_t>& sizes) const;
  uint16_t* slots(uint32_t k) const { return reinterpret_cast<uint16_t*>(memory_.get()) + first_[k - 1]; }

  mutable std::once_flag once_;
  mutable AnonymousMemory memory_{nullptr, AnonymousMemoryDeleter{0}};
  mutable std::vector<uint64_t> first_;  // by level - 1: its first slot
};

}  // namespace ngram
