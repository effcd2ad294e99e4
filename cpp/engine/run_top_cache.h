// RunTopCache: the most frequent continuations of a trie's long runs of
// children, found once per open trie and kept. Proposals (propose.h) need a
// run's few most frequent continuations at every node they grow; a run is
// sorted by token, not by count, so finding them reads the whole run. Short
// runs are cheap to read each time; the longer ones (up to the children of
// frequent short contexts, tens of thousands of entries) recur across nodes
// and calls and are read once here. Entries are never removed, so a pointer
// returned stays valid while the trie is open; past a memory budget
// (kBudgetBytes, or the bytes $NGRAM_RUN_TOPS_BYTES names when the cache is
// made, with its trie) nothing more is kept and callers compute the list
// themselves.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace ngram {

// The first kTop continuations of one run by count descending, then token
// ascending: each one's token and count (as the float proposals score it
// from), and its index in the run's level (lo + offset). The first entries,
// which proposals read most, share a cache line.
struct alignas(64) RunTop {
  static constexpr uint32_t kTop = 32;
  struct Entry {
    int32_t token;
    float count;
  };
  Entry entries[kTop];
  uint32_t size = 0;
  uint64_t lo = 0;
  uint32_t offset[kTop];
};

class RunTopCache {
 public:
  // Runs at least this long are cached; shorter ones are read each time.
  static constexpr uint64_t kMinRun = 16;
  static constexpr uint64_t kBudgetBytes = uint64_t{64} << 20;

  // The list of the run of children of entry `node` of level `len`, or
  // nullptr when it is not kept.
  const RunTop* find(uint32_t len, uint64_t node) const;
  // Keeps `top` for that run unless the budget is spent; returns the kept
  // list (an earlier one if another thread kept it first), or nullptr.
  const RunTop* insert(uint32_t len, uint64_t node, const RunTop& top);
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  // Distinct for every cache made in this process (never reused), so that a
  // thread may remember this cache's lists by (id, key) without locking.
  uint64_t id() const { return id_; }
  static uint64_t key(uint32_t len, uint64_t node) { return (uint64_t{len} << 58) | node; }

 private:
  static constexpr uint32_t kShards = 16;
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<uint64_t, std::unique_ptr<RunTop>> map;
  };
  Shard& shard(uint64_t k) const { return shards_[(k * 0x9E3779B97F4A7C15ull) >> 60]; }

  mutable std::array<Shard, kShards> shards_;
  std::atomic<uint64_t> bytes_{0};
  const uint64_t budget_ = budget_bytes();
  const uint64_t id_ = next_id();
  static uint64_t next_id();
  static uint64_t budget_bytes();  // kBudgetBytes or $NGRAM_RUN_TOPS_BYTES
};

}  // namespace ngram
