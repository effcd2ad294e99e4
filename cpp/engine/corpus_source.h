// A proposal's corpus source: a node's continuations from the trie, by
// interpolated absolute discounting. With L = min(order - 1, length of the
// node's sequence), the stored suffixes s of length l = L, L-1, ..., 1 that
// have continuations are read longest first; each gives each of its run's
// `width` most frequent continuations w the score k * max(count(s+w) - d, 0)
// / count(s) times its weight, and the next shorter suffix 1 - k * (1 - d *
// N(s) / count(s)) of its own weight (N(s): s's distinct continuations; k:
// order_weight where l >= 2, else 1); the longest's weight is 1. w's score
// is the sum of what it is given. docs/PROPOSALS.md is the specification.
//
// The source also places each node's suffixes in the trie (a row of
// entries per node, `positions[row + len]`), as far as its parent's runs
// place them, so that a chosen node finds its own by searching at most one
// run (or none). Representations differ in how a run is read and how a
// suffix one token longer is found; each says so in its own methods
// (for_each_in_run, find_next). Engine-internal: included by the proposal
// search only.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "continuation_scores.h"
#include "run_bounds.h"
#include "run_top_cache.h"
#include "trie_format.h"
#include "trie_index.h"

namespace ngram {

// The corpus source's scratch, reused across proposals (one per thread).
struct CorpusScratch {
  std::vector<uint64_t> positions;     // the nodes' rows of suffix entries
  // How the node being expanded read its run after each suffix length,
  // and so where its children's entries after that suffix are found.
  enum class RunRead : uint8_t {
    kNone,     // no run: no child follows that suffix (kAbsent)
    kCopied,   // a short run copied whole into run_tokens: searched there
    kTop,      // a long run's RunTop (run_top): looked up in it
    kLater,    // not kept: a chosen child searches the trie (kUnknown)
  };
  std::vector<int32_t> run_tokens[kMaxOrder];  // the short runs copied at this node, by suffix length
  uint64_t run_lo[kMaxOrder];
  RunRead run_read[kMaxOrder];
  const RunTop* run_top[kMaxOrder];
  uint64_t run_top_ref[kMaxOrder];     // kInTop | its index in top_refs, or kUnknown for a list not kept
  std::vector<const RunTop*> top_refs;  // the kept lists this tree's hints point into
  RunTop local_top[kMaxOrder];         // a long run's list when the cache is full, by suffix length
  std::vector<int32_t> run_next;       // a long run's tokens, read whole once
  std::vector<uint64_t> run_counts, run_counts_sorted;  // and its counts
  // The lists this thread has found in a trie's RunTopCache (whose entries
  // never move), direct-mapped by key: most nodes read the same few long
  // runs, and the cache's lock costs more than the rest of the read.
  static constexpr uint32_t kMemoBits = 14;  // 256 KiB a thread
  static constexpr uint32_t kMemoSlots = 1u << kMemoBits;
  uint64_t memo_cache = 0;             // the RunTopCache::id the memo holds lists of
  std::vector<std::pair<uint64_t, const RunTop*>> memo;
};

template <class Trie>
class CorpusSource {
 public:
  // A position: an entry of a level, or one of these. Entries of a level
  // are below 2^62; kAbsent and kUnknown have both top bits set.
  static constexpr uint64_t kAbsent = ~uint64_t{0};  // a suffix that is not stored
  static constexpr uint64_t kUnknown = kAbsent - 1;  // not yet looked up
  // Or kInTop | r: if anywhere, among the entries of top_refs[r] (a kept
  // RunTop), looked up there once the node is chosen.
  static constexpr uint64_t kInTop = uint64_t{1} << 62;
  // A candidate's hints (its suffixes' entries as far as known): the row of
  // its own, or with kFamilyRow set its family's row, which holds the first
  // child's token.
  static constexpr uint32_t kFamilyRow = uint32_t{1} << 31;

  // index: the owner of the trie's RunTopCache and RunBounds (nullptr for a
  // trie that has no runs).
  CorpusSource(const Trie& trie, const TrieIndex* index, float discount, float order_weight, CorpusScratch& s)
      : trie_(trie), index_(index), bounds_(index ? &index->run_bounds() : nullptr), s_(s),
        max_len_(trie.order() - 1), discount_(discount), order_weight_(order_weight) {
    s_.positions.clear();
    s_.top_refs.clear();
  }

  // The longest suffix the trie conditions on.
  uint32_t max_len() const { return max_len_; }

  // The root's row, its suffixes (tail[L - len, L) for len 1..L; L = 0
  // without the corpus source) looked up in full.
  uint32_t root(const int32_t* tail, uint32_t L) {
    const uint32_t row = static_cast<uint32_t>(s_.positions.size());
    s_.positions.resize(row + max_len_ + 1, kAbsent);
    for (uint32_t len = 1; len <= L; ++len) {
      uint64_t idx;
      if (trie_.find(tail + (L - len), len, &idx)) s_.positions[row + len] = idx;
    }
    return row;
  }

  // A chosen node's suffixes placed in the trie, those its parent's runs did
  // not place: what its bound and its expansion read. tail: its sequence's
  // last L tokens; parent_row: its parent's row (ignored for the root).
  void prepare(uint32_t row, bool is_root, uint32_t parent_row, int32_t token, const int32_t* tail, uint32_t L) {
    for (uint32_t len = 1; len <= L; ++len) {
      uint64_t& at = s_.positions[row + len];
      if (in_top(at)) at = find_in_top(*s_.top_refs[at & (kInTop - 1)], token);
      if (at == kUnknown) at = find_suffix(is_root, parent_row, len, tail + (L - len));
    }
  }

  // A bound of every continuation's corpus score at a prepared node: the
  // sum, in the scores' order and by their float operations, of each stored
  // suffix's weight times its kept share times its run's largest
  // continuation probability (the largest child count over the suffix's
  // count, rounded up in RunBounds).
  float bound(uint32_t row, const int32_t* tail, uint32_t L) {
    float b = 0.0f, weight = 1.0f;
    for (uint32_t len = L; len >= 1; --len) {
      const uint64_t at = s_.positions[row + len];
      if (at == kAbsent) continue;
      uint64_t lo, hi;
      trie_.children(len, at, &lo, &hi);
      if (lo >= hi) continue;
      const float inv = 1.0f / static_cast<float>(trie_.count(len, at));
      float ratio;
      if (bounds_->covers(len)) {
        uint16_t slot = bounds_->load(len, at);
        if (slot == RunBounds::kUnknown) {
          slot = RunBounds::encode(run_ratio(len, at, lo, hi, inv, tail + (L - len)));
          bounds_->store(len, at, slot);
        }
        ratio = RunBounds::decode(slot);
      } else {
        ratio = run_ratio(len, at, lo, hi, inv, tail + (L - len));
      }
      b += weight * (kept(len) * ratio);
      weight *= shorter_weight(len, lo, hi, inv);
    }
    return b;
  }

  // Scores a prepared node's continuations into scores (L >= 1), each
  // suffix's `width` most frequent, and notes how each run was read, for
  // its children's hints (family_hints).
  void score(uint32_t row, const int32_t* tail, uint32_t L, uint32_t width, ContinuationScores& scores);

  // The hints of the family of children children[first, end) (their
  // tokens set, best first) of the node just scored with suffix length L;
  // child_len: the children's own suffix length. Where every child's
  // entries are the same but for its token, one row of the family, which a
  // child copies once chosen (own_row); else a row of each child's.
  template <class Child>
  void family_hints(Child* children, uint32_t first, uint32_t end, uint32_t L, uint32_t child_len);

  // The row of a chosen node's suffix entries, from its candidate's hints:
  // its own row, or a copy of its family's with its token.
  uint32_t own_row(uint32_t hints, int32_t token) {
    if ((hints & kFamilyRow) == 0) return hints;
    std::vector<uint64_t>& positions = s_.positions;
    const uint32_t family = hints & ~kFamilyRow;
    const uint32_t row = static_cast<uint32_t>(positions.size());
    for (uint32_t len = 0; len <= max_len_; ++len) positions.push_back(positions[family + len]);
    if (max_len_ >= 1 && positions[family + 1] != kAbsent) positions[row + 1] = static_cast<uint64_t>(token);
    return row;
  }

 private:
  using RunRead = CorpusScratch::RunRead;
  static constexpr uint64_t kPerChild = kUnknown - 1;  // shared_hint's answer only, never stored
  static bool in_top(uint64_t position) { return (position >> 62) == 1; }

  // The entry of tok in a run's list, kUnknown when the list does not hold it.
  static uint64_t find_in_top(const RunTop& top, int32_t tok) {
    for (uint32_t j = 0; j < top.size; ++j)
      if (top.entries[j].token == tok) return top.lo + top.offset[j];
    return kUnknown;
  }

  // The entry of a node's suffix of length len (suffix[0..len)), or
  // kAbsent: its parent's suffix of length len - 1 followed by its token,
  // found from the parent's entry as the representation finds it.
  uint64_t find_suffix(bool is_root, uint32_t parent_row, uint32_t len, const int32_t* suffix) const {
    uint64_t idx;
    if (len >= 2 && !is_root) {
      // Resolved when the parent was prepared: an entry or kAbsent.
      const uint64_t up = s_.positions[parent_row + len - 1];
      if (up == kAbsent) return kAbsent;
      return trie_.find_next(len - 1, up, suffix, &idx) ? idx : kAbsent;
    }
    return trie_.find(suffix, len, &idx) ? idx : kAbsent;
  }

  const RunTop& long_run_top(uint32_t len, uint64_t node, uint64_t lo, uint64_t hi, const int32_t* suffix);
  float run_ratio(uint32_t len, uint64_t at, uint64_t lo, uint64_t hi, float inv, const int32_t* suffix);
  // The share of its discounted probabilities a suffix of len tokens keeps:
  // order_weight, or all for a single token (none is shorter).
  float kept(uint32_t len) const { return len >= 2 ? order_weight_ : 1.0f; }
  // The share a suffix of len tokens with children [lo, hi) and 1 / count
  // `inv` leaves to the next shorter one: 1 - kept * (1 - d * N / count).
  float shorter_weight(uint32_t len, uint64_t lo, uint64_t hi, float inv) const {
    return 1.0f - kept(len) * (1.0f - discount_ * static_cast<float>(hi - lo) * inv);
  }
  // A continuation's own score at a suffix: max(count - d, 0) / count(s).
  float discounted(float count, float inv) const { return count > discount_ ? (count - discount_) * inv : 0.0f; }
  uint64_t shared_hint(uint32_t len) const;
  uint64_t hint_for(int32_t tok, uint32_t len) const;

  const Trie& trie_;
  const TrieIndex* index_;
  const RunBounds* bounds_;  // index_'s (nullptr without one)
  CorpusScratch& s_;
  const uint32_t max_len_;
  const float discount_;
  const float order_weight_;
};

// A long run's most frequent continuations: from the trie's cache, else read
// whole (and kept when the cache has room).
template <class Trie>
const RunTop& CorpusSource<Trie>::long_run_top(uint32_t len, uint64_t node, uint64_t lo, uint64_t hi,
                                                const int32_t* suffix) {
  RunTopCache& cache = index_->run_tops();
  CorpusScratch& s = s_;
  if (s.memo_cache != cache.id()) {
    s.memo.assign(CorpusScratch::kMemoSlots, {~uint64_t{0}, nullptr});
    s.memo_cache = cache.id();
  }
  const uint64_t key = RunTopCache::key(len, node);
  auto& slot = s.memo[(key * 0x9E3779B97F4A7C15ull) >> (64 - CorpusScratch::kMemoBits)];
  if (slot.first == key) return *slot.second;
  if (const RunTop* kept = cache.find(len, node)) {
    slot = {key, kept};
    return *kept;
  }
  RunTop& top = s.local_top[len];
  const uint64_t m = hi - lo;
  std::vector<int32_t>& toks = s.run_next;
  std::vector<uint64_t>& counts = s.run_counts;
  toks.resize(m);
  counts.resize(m);
  trie_.run_tokens(suffix, len, lo, hi, toks.data());
  for (uint64_t i = 0; i < m; ++i) counts[i] = trie_.count(len + 1, lo + i);
  // The kTop-th largest count bounds the list: every entry above it is in,
  // and of those equal to it the first in token order (the run's order).
  std::vector<uint64_t>& sorted = s.run_counts_sorted;
  sorted.assign(counts.begin(), counts.end());
  const uint64_t k = std::min<uint64_t>(RunTop::kTop, m);
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<uint64_t>());
  const uint64_t bound = std::max<uint64_t>(sorted[k - 1], 1);
  uint32_t above = 0;
  for (uint64_t i = 0; i < m; ++i) above += counts[i] > bound;
  uint32_t at_bound = static_cast<uint32_t>(k) - above, n = 0;
  uint32_t picked[RunTop::kTop];  // offsets in the run
  for (uint64_t i = 0; i < m; ++i) {
    if (counts[i] < bound || (counts[i] == bound && at_bound == 0)) continue;
    if (counts[i] == bound) --at_bound;
    picked[n++] = static_cast<uint32_t>(i);
  }
  std::sort(picked, picked + n, [&](uint32_t a, uint32_t b) {
    return more_frequent(counts[a], toks[a], counts[b], toks[b]);
  });
  top.size = n;
  top.lo = lo;
  for (uint32_t j = 0; j < n; ++j) {
    top.entries[j] = {toks[picked[j]], static_cast<float>(counts[picked[j]])};
    top.offset[j] = picked[j];
  }
  if (const RunTop* kept = cache.insert(len, node, top)) {
    slot = {key, kept};
    return *kept;
  }
  return top;
}

template <class Trie>
void CorpusSource<Trie>::score(uint32_t row, const int32_t* tail, uint32_t L, uint32_t width,
                               ContinuationScores& scores) {
  CorpusScratch& s = s_;
  float weight = 1.0f;
  for (uint32_t len = L; len >= 1; --len) {
    s.run_read[len] = RunRead::kNone;
    const uint64_t at = s.positions[row + len];
    if (at == kAbsent) continue;
    uint64_t lo, hi;
    trie_.children(len, at, &lo, &hi);
    if (lo >= hi) continue;
    // A weight of 0 (a discount of 0 with an order_weight of 1 gives one) leaves nothing to the
    // shorter suffixes: their runs are not read.
    if (weight == 0.0f) {
      for (uint32_t l = len; l >= 1; --l) s.run_read[l] = RunRead::kLater;
      return;
    }
    const float inv = 1.0f / static_cast<float>(trie_.count(len, at));
    const float keep = kept(len);
    const int32_t* suffix = tail + (L - len);
    if (hi - lo < RunTopCache::kMinRun) {
      TopCounts top;
      const bool copied = trie_.for_each_in_run(suffix, len, lo, hi, s.run_tokens[len],
                                                [&](int32_t tok, uint64_t c) { top.offer(c, tok, width); });
      if (copied) {  // a chosen child finds its entry in the copy
        s.run_read[len] = RunRead::kCopied;
        s.run_lo[len] = lo;
      } else {       // a chosen child searches the run again (find_next)
        s.run_read[len] = RunRead::kLater;
      }
      for (uint32_t j = 0; j < top.size; ++j)
        scores.add_corpus(top.tokens[j], weight * (keep * discounted(static_cast<float>(top.counts[j]), inv)));
    } else {
      const RunTop& top = long_run_top(len, at, lo, hi, suffix);
      s.run_read[len] = RunRead::kTop;
      s.run_top[len] = &top;
      // A kept list never moves: the children's hints point into it and are
      // looked up only for the children chosen (about a quarter of them).
      s.run_top_ref[len] = kUnknown;
      if (&top != &s.local_top[len]) {
        s.run_top_ref[len] = kInTop | s.top_refs.size();
        s.top_refs.push_back(&top);
      }
      const uint32_t n = std::min(top.size, width);
      for (uint32_t j = 0; j < n; ++j)
        scores.add_corpus(top.entries[j].token, weight * (keep * discounted(top.entries[j].count, inv)));
    }
    weight *= shorter_weight(len, lo, hi, inv);
  }
}

// The largest probability a continuation of the stored suffix (entry at of
// level len, children [lo, hi), 1 / its count inv) has: its most frequent
// child's count times inv, as score computes a score.
template <class Trie>
float CorpusSource<Trie>::run_ratio(uint32_t len, uint64_t at, uint64_t lo, uint64_t hi, float inv,
                                    const int32_t* suffix) {
  if (hi - lo >= RunTopCache::kMinRun) {
    const RunTop& top = long_run_top(len, at, lo, hi, suffix);  // what an expansion reads
    return top.size > 0 ? top.entries[0].count * inv : 0.0f;
  }
  uint64_t m = 0;
  for (uint64_t i = lo; i < hi; ++i) m = std::max<uint64_t>(m, trie_.count(len + 1, i));
  return static_cast<float>(m) * inv;
}

// Where the continuations of the node just scored lie in level len + 1,
// when all share the answer: kAbsent when none follows its suffix of length
// len, kUnknown when that run was not kept, kInTop | r when it is to be
// looked up in a kept list; kPerChild when each child's is its own
// (hint_for).
template <class Trie>
uint64_t CorpusSource<Trie>::shared_hint(uint32_t len) const {
  switch (s_.run_read[len]) {
    case RunRead::kCopied:
      return kPerChild;
    case RunRead::kTop:
      return s_.run_top_ref[len] != kUnknown ? s_.run_top_ref[len] : kPerChild;
    case RunRead::kLater:
      return kUnknown;
    case RunRead::kNone:
      break;
  }
  return kAbsent;
}

// Where the continuation tok lies in level len + 1 where shared_hint is
// kPerChild: searched in the copied run or the list not kept.
template <class Trie>
uint64_t CorpusSource<Trie>::hint_for(int32_t tok, uint32_t len) const {
  if (s_.run_read[len] == RunRead::kTop) return find_in_top(*s_.run_top[len], tok);
  const std::vector<int32_t>& toks = s_.run_tokens[len];
  auto it = std::lower_bound(toks.begin(), toks.end(), tok);
  return it != toks.end() && *it == tok ? s_.run_lo[len] + static_cast<uint64_t>(it - toks.begin()) : kAbsent;
}

template <class Trie>
template <class Child>
void CorpusSource<Trie>::family_hints(Child* children, uint32_t first, uint32_t end, uint32_t L,
                                      uint32_t child_len) {
  uint64_t shared[kMaxOrder];
  bool per_child = false;
  for (uint32_t len = 1; len + 1 <= child_len; ++len) {
    shared[len] = len <= L ? shared_hint(len) : kUnknown;
    per_child |= shared[len] == kPerChild;
  }
  std::vector<uint64_t>& positions = s_.positions;
  const auto append_row = [&](int32_t tok) {
    const uint32_t row = static_cast<uint32_t>(positions.size());
    positions.push_back(kAbsent);
    for (uint32_t len = 1; len <= max_len_; ++len) {
      uint64_t at = kAbsent;
      if (len == 1) {
        if (child_len >= 1) at = static_cast<uint64_t>(tok);  // level 1 is indexed by token
      } else if (len <= child_len) {
        at = shared[len - 1] != kPerChild ? shared[len - 1] : hint_for(tok, len - 1);
      }
      positions.push_back(at);
    }
    return row;
  };
  if (!per_child) {
    const uint32_t row = append_row(children[first].token) | kFamilyRow;
    for (uint32_t j = first; j < end; ++j) children[j].hints = row;
  } else {
    for (uint32_t j = first; j < end; ++j) children[j].hints = append_row(children[j].token);
  }
}

}  // namespace ngram
