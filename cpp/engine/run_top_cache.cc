#include "run_top_cache.h"

#include "env_bytes.h"

namespace ngram {

uint64_t RunTopCache::budget_bytes() { return bytes_from_env("NGRAM_RUN_TOPS_BYTES", kBudgetBytes); }

uint64_t RunTopCache::next_id() {
  static std::atomic<uint64_t> last{0};
  return ++last;
}

const RunTop* RunTopCache::find(uint32_t len, uint64_t node) const {
  const uint64_t k = key(len, node);
  Shard& s = shard(k);
  std::lock_guard<std::mutex> g(s.mu);
  auto it = s.map.find(k);
  return it == s.map.end() ? nullptr : it->second.get();
}

const RunTop* RunTopCache::insert(uint32_t len, uint64_t node, const RunTop& top) {
  const uint64_t k = key(len, node);
  Shard& s = shard(k);
  std::lock_guard<std::mutex> g(s.mu);
  auto it = s.map.find(k);
  if (it != s.map.end()) return it->second.get();
  // An entry's cost: the list and about as much for the map's node.
  constexpr uint64_t kEntryBytes = sizeof(RunTop) + 64;
  if (bytes_.load(std::memory_order_relaxed) + kEntryBytes > budget_) return nullptr;
  bytes_.fetch_add(kEntryBytes, std::memory_order_relaxed);
  auto& slot = s.map[k];
  slot = std::make_unique<RunTop>(top);
  return slot.get();
}

}  // namespace ngram
