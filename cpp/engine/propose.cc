#include "propose.h"

#include <algorithm>
#include <functional>
#include <sstream>
#include <string>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "errors.h"
#include "parallel_batch.h"
#include "queries.h"

namespace ngram {

namespace {

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

void check_range(int64_t v, int64_t lo, int64_t hi, const char* field) {
  if (v < lo || v > hi)
    throw InvalidArgument(std::string(field) + " = " + std::to_string(v) + ": must be in " + std::to_string(lo) +
                          ".." + std::to_string(hi));
}

void check_unit(float v, const char* field) {
  if (!(v >= 0.0f && v <= 1.0f))  // NaN fails too
    throw InvalidArgument(std::string(field) + " = " + number(v) + ": must be in [0, 1]");
}

// No trie: nothing stored and no suffix to condition on (order 1), so that
// the search proposes from the document alone (propose_lookup).
struct NoTrie {
  uint32_t order() const { return 1; }
  bool find(const int32_t*, uint32_t, uint64_t*) const { return false; }
  void children(uint32_t, uint64_t, uint64_t* lo, uint64_t* hi) const { *lo = *hi = 0; }
  uint64_t count(uint32_t, uint64_t) const { return 0; }
  void run_tokens(const int32_t*, uint32_t, uint64_t, uint64_t, int32_t*) const {}
};

using Node = ProposeWorkspace::Node;
using Candidate = ProposeWorkspace::Candidate;
using Child = ProposeWorkspace::Child;
using RunRead = ProposeWorkspace::RunRead;
constexpr uint64_t kAbsent = ProposeWorkspace::kAbsent;
constexpr uint64_t kUnknown = ProposeWorkspace::kUnknown;
constexpr uint64_t kInTop = ProposeWorkspace::kInTop;
constexpr uint64_t kPerChild = kUnknown - 1;  // shared_hint's answer only, never stored
constexpr uint32_t kFamilyRow = ProposeWorkspace::kFamilyRow;
bool in_top(uint64_t position) { return (position >> 62) == 1; }

// Puts c into the frontier, sorted worst first: after every candidate it
// beats. The best-first order is higher path probability first, ties by
// smaller depth, then the earlier chosen parent, then the smaller token;
// but no two candidates in the frontier share a parent (a family offers its
// next only once its last is chosen), so their ranks differ and decide.
// By insertion from the best end: most offers land near it (a node is
// expanded when its best child about beats the frontier's best), so that
// few candidates move.
void frontier_insert(std::vector<Candidate>& frontier, const Candidate& c) {
  frontier.push_back(c);
  Candidate* f = frontier.data();
  size_t i = frontier.size() - 1;
  for (; i > 0 && f[i - 1].rank > c.rank; --i) f[i] = f[i - 1];
  f[i] = c;
}

// Count order within one source: more frequent first, ties by smaller token.
bool more_frequent(uint64_t ca, int32_t ta, uint64_t cb, int32_t tb) { return ca != cb ? ca > cb : ta < tb; }

// Keeps the `cap` most frequent of the offered (count, token) pairs, sorted,
// in counts/tokens (size *n).
inline void offer_top(uint64_t c, int32_t tok, uint32_t cap, uint64_t* counts, int32_t* tokens, uint32_t* n) {
  if (c == 0) return;
  uint32_t i = *n;
  if (i == cap) {
    if (!more_frequent(c, tok, counts[cap - 1], tokens[cap - 1])) return;
    --i;
  } else {
    ++*n;
  }
  while (i > 0 && more_frequent(c, tok, counts[i - 1], tokens[i - 1])) {
    counts[i] = counts[i - 1];
    tokens[i] = tokens[i - 1];
    --i;
  }
  counts[i] = c;
  tokens[i] = tok;
}

// The order of a node's continuations: higher score first, ties by the
// smaller token. true when (sa, ta) comes before (sb, tb).
inline bool better(float sa, int32_t ta, float sb, int32_t tb) { return sa != sb ? sa > sb : ta < tb; }

static_assert(ProposeLimits::kMaxBranch % 8 == 0, "the kept tokens are compared 8 at a time");

// The index of tok among the first n of tokens (an array of kMaxBranch), n if none.
// Branch-free within 8: a scan's exit, mispredicted about every other
// offer, cost more than the comparisons.
inline uint32_t find_token(const int32_t* tokens, uint32_t n, int32_t tok) {
  for (uint32_t k0 = 0; k0 < n; k0 += 8) {
#if defined(__SSE2__)
    const __m128i t = _mm_set1_epi32(tok);
    const __m128i lo = _mm_cmpeq_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tokens + k0)), t);
    const __m128i hi = _mm_cmpeq_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tokens + k0 + 4)), t);
    uint32_t hits = static_cast<uint32_t>(_mm_movemask_ps(_mm_castsi128_ps(lo)) |
                                          (_mm_movemask_ps(_mm_castsi128_ps(hi)) << 4));
#else
    uint32_t hits = 0;
    for (uint32_t k = 0; k < 8; ++k) hits |= static_cast<uint32_t>(tokens[k0 + k] == tok) << k;
#endif
    if (n - k0 < 8) hits &= (1u << (n - k0)) - 1;  // the rest are stale
    if (hits != 0) return k0 + static_cast<uint32_t>(__builtin_ctz(hits));
  }
  return n;
}

// Adds a continuation's score from one source to the node's best `cap`
// (ws.best_*): a token scored twice keeps the larger score. Keeping only the
// best as they come leaves the same ones as scoring all and choosing after:
// a score that cannot enter is below `cap` others, which only rise. Returns
// false when the score is below all `cap` kept, as is every lower score.
inline bool offer_score(ProposeWorkspace& ws, uint32_t cap, int32_t tok, float score) {
  int32_t* tokens = ws.best_token;
  float* scores = ws.best_score;
  const uint32_t n = ws.best_size;
  uint32_t i = find_token(tokens, n, tok);
  if (i < n) {
    if (!(score > scores[i])) return true;
  } else if (n == cap) {
    if (!better(score, tok, scores[cap - 1], tokens[cap - 1])) return !(score < scores[cap - 1]);
    i = cap - 1;
  } else {
    ws.best_size = n + 1;
  }
  for (; i > 0 && better(score, tok, scores[i - 1], tokens[i - 1]); --i) {
    scores[i] = scores[i - 1];
    tokens[i] = tokens[i - 1];
  }
  scores[i] = score;
  tokens[i] = tok;
  return true;
}

// One proposal's search over the representation Trie.
template <class Trie>
class Grower {
 public:
  // index: the owner of the trie's RunTopCache and RunBounds (nullptr for
  // NoTrie, which has no runs).
  Grower(const Trie& trie, const TrieIndex* index, const int64_t* context, uint64_t n, const ProposeParams& p,
         ProposeWorkspace& ws, const Interrupt& stop)
      : trie_(trie), index_(index), bounds_(index ? &index->run_bounds() : nullptr), ctx_(context), n_(n), p_(p),
        ws_(ws), stop_(stop), max_len_(trie.order() - 1), branch_(static_cast<uint32_t>(p.max_branch)) {}

  void run(ProposedTree& out);

 private:
  void start();
  void expand(uint32_t v);
  void offer(uint32_t v, uint32_t j);
  uint32_t fill_tail(uint32_t v);
  void prepare(uint32_t v);
  uint64_t find_suffix(uint32_t v, uint32_t len, const int32_t* suffix) const;
  float bound(uint32_t v);
  float run_ratio(uint32_t len, uint64_t at, const int32_t* suffix);
  void find_occurrences(uint32_t v);
  void score_corpus(uint32_t v, uint32_t L);
  void score_document(uint32_t v);
  template <class F>
  void for_each_next_token(const Node& node, F f);
  const RunTop& long_run_top(uint32_t len, uint64_t node, uint64_t lo, uint64_t hi, const int32_t* suffix);
  uint64_t shared_hint(uint32_t len) const;
  uint64_t hint_for(int32_t tok, uint32_t len) const;
  uint32_t own_row(uint32_t hints, int32_t token);
  uint32_t suffix_len(uint32_t depth) const {
    return static_cast<uint32_t>(std::min<uint64_t>(max_len_, n_ + depth));
  }
  // The suffix length the corpus source conditions on at a depth (0 without it).
  uint32_t corpus_len(uint32_t depth) const { return p_.corpus ? suffix_len(depth) : 0; }
  void write(ProposedTree& out);

  const Trie& trie_;
  const TrieIndex* index_;
  const RunBounds* bounds_;  // index_'s (nullptr for NoTrie)
  const int64_t* ctx_;
  const uint64_t n_;
  const ProposeParams& p_;
  ProposeWorkspace& ws_;
  const Interrupt& stop_;
  const uint32_t max_len_;  // the longest suffix the trie conditions on
  const uint32_t branch_;
};

template <class Trie>
void Grower<Trie>::start() {
  ProposeWorkspace& ws = ws_;
  ws.nodes.clear();
  ws.frontier.clear();
  ws.children.clear();
  ws.family_end.clear();
  ws.unexpanded.clear();
  ws.positions.clear();
  ws.occurrences.clear();
  ws.top_refs.clear();
  ws.weights[0] = 1.0f;
  for (uint32_t d = 1; d < kMaxOrder; ++d) ws.weights[d] = ws.weights[d - 1] * p_.backoff;
  // The root: the context's last token; its suffixes looked up in full.
  const uint32_t L = suffix_len(0);
  Node root{};
  root.token = static_cast<int32_t>(ctx_[n_ - 1]);
  root.parent = -1;
  root.prob = 1.0f;
  root.pos = static_cast<uint32_t>(ws.positions.size());
  ws.positions.assign(max_len_ + 1, kAbsent);
  if (p_.corpus) {
    int32_t tail[kMaxOrder];
    for (uint32_t i = 0; i < L; ++i) tail[i] = static_cast<int32_t>(ctx_[n_ - L + i]);
    for (uint32_t len = 1; len <= L; ++len) {
      uint64_t idx;
      if (trie_.find(tail + (L - len), len, &idx)) ws.positions[root.pos + len] = idx;
    }
  }
  root.occ_begin = 0;
  root.occ_size = 0;
  ws.nodes.push_back(root);
  ws.family_end.push_back(0);
  if (p_.lookup) find_occurrences(0);
  stop_.check();  // the scan above reads the whole context
}

// The document source's state at node v: the positions i of the context
// where the longest match of the sequence's suffix ends (followed by a
// token, so i <= n-2). The root measures every match; a child keeps the
// matches of its parent that its token continues.
template <class Trie>
void Grower<Trie>::find_occurrences(uint32_t v) {
  ProposeWorkspace& ws = ws_;
  Node& node = ws.nodes[v];
  node.occ_begin = static_cast<uint32_t>(ws.occurrences.size());
  node.occ_size = 0;
  if (n_ < 2) return;
  if (v == 0) {
    // A match ends only where the last token stands: the positions that
    // hold it and their match lengths, in context order.
    uint32_t best = 0;
    std::vector<uint32_t>& at = ws.match_at;
    std::vector<uint32_t>& lens = ws.match_lens;
    at.clear();
    lens.clear();
    const int64_t last = ctx_[n_ - 1];
    for (uint64_t i = 0; i + 1 < n_; ++i) {
      // Most positions do not hold the last token: skip 8 at a time, with
      // no branch inside the 8, so that the compiler vectorizes the test.
      while (i + 9 < n_) {
        bool any = false;
        for (uint32_t k = 0; k < 8; ++k) any |= ctx_[i + k] == last;
        if (any) break;
        i += 8;
      }
      if (ctx_[i] != last) continue;
      uint32_t l = 1;
      while (l < ProposeLimits::kMaxMatch && l <= i && ctx_[i - l] == ctx_[n_ - 1 - l]) ++l;
      at.push_back(static_cast<uint32_t>(i));
      lens.push_back(l);
      best = std::max(best, l);
    }
    if (best < static_cast<uint32_t>(p_.lookup_min_match)) return;
    uint32_t kept = 0;
    for (size_t k = at.size(); k-- > 0 && kept < ProposeLimits::kMaxOccurrences;)
      if (lens[k] == best) {
        ws.occurrences.push_back(at[k]);
        ++kept;
      }
    std::reverse(ws.occurrences.begin() + node.occ_begin, ws.occurrences.end());
    node.occ_size = kept;
    return;
  }
  const Node& parent = ws.nodes[node.parent];
  for (uint32_t k = 0; k < parent.occ_size; ++k) {
    const uint64_t i = ws.occurrences[parent.occ_begin + k] + uint64_t{1};
    if (i + 1 < n_ && ctx_[i] == node.token) ws.occurrences.push_back(static_cast<uint32_t>(i));
  }
  ws.nodes[v].occ_size = static_cast<uint32_t>(ws.occurrences.size()) - ws.nodes[v].occ_begin;
}

// A long run's most frequent continuations: from the trie's cache, else read
// whole (and kept when the cache has room).
template <class Trie>
const RunTop& Grower<Trie>::long_run_top(uint32_t len, uint64_t node, uint64_t lo, uint64_t hi,
                                          const int32_t* suffix) {
  RunTopCache& cache = index_->run_tops();
  ProposeWorkspace& ws = ws_;
  if (ws.memo_cache != cache.id()) {
    ws.memo.assign(ProposeWorkspace::kMemoSlots, {~uint64_t{0}, nullptr});
    ws.memo_cache = cache.id();
  }
  const uint64_t key = RunTopCache::key(len, node);
  auto& slot = ws.memo[(key * 0x9E3779B97F4A7C15ull) >> (64 - ProposeWorkspace::kMemoBits)];
  if (slot.first == key) return *slot.second;
  if (const RunTop* kept = cache.find(len, node)) {
    slot = {key, kept};
    return *kept;
  }
  RunTop& top = ws_.local_top[len];
  const uint64_t m = hi - lo;
  std::vector<int32_t>& toks = ws_.next_tokens;
  std::vector<uint64_t>& counts = ws_.run_counts;
  toks.resize(m);
  counts.resize(m);
  trie_.run_tokens(suffix, len, lo, hi, toks.data());
  for (uint64_t i = 0; i < m; ++i) counts[i] = trie_.count(len + 1, lo + i);
  // The kTop-th largest count bounds the list: every entry above it is in,
  // and of those equal to it the first in token order (the run's order).
  std::vector<uint64_t>& sorted = ws_.run_counts_sorted;
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
  const float inv = 1.0f / static_cast<float>(trie_.count(len, node));
  top.size = n;
  top.lo = lo;
  for (uint32_t j = 0; j < n; ++j) {
    top.entries[j] = {toks[picked[j]], static_cast<float>(counts[picked[j]]) * inv};
    top.offset[j] = picked[j];
  }
  if (const RunTop* kept = cache.insert(len, node, top)) {
    slot = {key, kept};
    return *kept;
  }
  return top;
}

// The corpus source at a node whose sequence ends in tail (L tokens): every
// stored suffix s of length len (L down to 1) scores its continuations w as
// backoff^(L-len) * count(s+w) / count(s); a continuation takes its best
// score over the lengths. Only each run's branch_ most frequent can be among
// the node's branch_ best, and a length whose best possible score cannot
// reach them is not read.
template <class Trie>
void Grower<Trie>::score_corpus(uint32_t v, uint32_t L) {
  ProposeWorkspace& ws = ws_;
  const Node& node = ws.nodes[v];
  const int32_t* tail = ws.tail.data();
  for (uint32_t len = L; len >= 1; --len) {
    ws.run_read[len] = RunRead::kNone;
    const uint64_t at = ws.positions[node.pos + len];
    if (at == kAbsent) continue;
    uint64_t lo, hi;
    trie_.children(len, at, &lo, &hi);
    if (lo >= hi) continue;
    const float w = ws.weights[L - len];
    // No score of this suffix or a shorter one exceeds w: once all the
    // kept best do, none of theirs can enter.
    if (ws.best_size == branch_ && ws.best_score[branch_ - 1] > w) {
      for (uint32_t l = len; l >= 1; --l) ws.run_read[l] = RunRead::kLater;  // not read
      return;
    }
    const int32_t* suffix = tail + (L - len);
    if (hi - lo < RunTopCache::kMinRun) {
      const float inv = 1.0f / static_cast<float>(trie_.count(len, at));
      uint64_t counts[ProposeLimits::kMaxBranch];
      int32_t tokens[ProposeLimits::kMaxBranch];
      uint32_t n = 0;
      if constexpr (std::is_base_of_v<TrieV1, Trie>) {
        // Read where it lies: a chosen child searches this run again
        // (find_suffix), which costs less than copying it for every child.
        const LevelV1& next = trie_.level(len + 1);
        for (uint64_t i = lo; i < hi; ++i)
          offer_top(next.count(i), static_cast<int32_t>(next.token(i)), branch_, counts, tokens, &n);
        ws.run_read[len] = RunRead::kLater;
      } else {
        std::vector<int32_t>& toks = ws.run_tokens[len];
        toks.resize(hi - lo);
        trie_.run_tokens(suffix, len, lo, hi, toks.data());
        ws.run_read[len] = RunRead::kCopied;
        ws.run_lo[len] = lo;
        for (uint64_t i = lo; i < hi; ++i)
          offer_top(trie_.count(len + 1, i), toks[i - lo], branch_, counts, tokens, &n);
      }
      for (uint32_t j = 0; j < n; ++j) offer_score(ws, branch_, tokens[j], static_cast<float>(counts[j]) * inv * w);
    } else {
      const RunTop& top = long_run_top(len, at, lo, hi, suffix);
      ws.run_read[len] = RunRead::kTop;
      ws.run_top[len] = &top;
      // A kept list never moves: the children's hints point into it and are
      // looked up only for the children chosen (about a quarter of them).
      ws.run_top_ref[len] = kUnknown;
      if (&top != &ws.local_top[len]) {
        ws.run_top_ref[len] = kInTop | ws.top_refs.size();
        ws.top_refs.push_back(&top);
      }
      const uint32_t n = std::min(top.size, branch_);
      for (uint32_t j = 0; j < n; ++j)
        if (!offer_score(ws, branch_, top.entries[j].token, top.entries[j].ratio * w)) break;  // sorted
    }
  }
}

// f(token, count) for each distinct token that follows a node's document
// occurrences, in token order.
template <class Trie>
template <class F>
void Grower<Trie>::for_each_next_token(const Node& node, F f) {
  std::vector<int32_t>& next = ws_.next_tokens;
  next.resize(node.occ_size);
  for (uint32_t k = 0; k < node.occ_size; ++k)
    next[k] = static_cast<int32_t>(ctx_[ws_.occurrences[node.occ_begin + k] + 1]);
  std::sort(next.begin(), next.end());
  for (size_t i = 0; i < next.size();) {
    size_t j = i + 1;
    while (j < next.size() && next[j] == next[i]) ++j;
    f(next[i], static_cast<uint64_t>(j - i));
    i = j;
  }
}

// The document source: the tokens that follow the node's occurrences,
// each scored lookup_weight * (its occurrences) / (all occurrences).
template <class Trie>
void Grower<Trie>::score_document(uint32_t v) {
  ProposeWorkspace& ws = ws_;
  const Node& node = ws.nodes[v];
  if (node.occ_size == 0) return;
  uint64_t counts[ProposeLimits::kMaxBranch];
  int32_t tokens[ProposeLimits::kMaxBranch];
  uint32_t n = 0;
  for_each_next_token(node, [&](int32_t tok, uint64_t c) { offer_top(c, tok, branch_, counts, tokens, &n); });
  const float inv = 1.0f / static_cast<float>(node.occ_size);
  for (uint32_t j = 0; j < n; ++j)
    offer_score(ws, branch_, tokens[j], static_cast<float>(counts[j]) * inv * p_.lookup_weight);
}

// The entry of tok in a run's list, kUnknown when the list does not hold it.
uint64_t find_in_top(const RunTop& top, int32_t tok) {
  for (uint32_t j = 0; j < top.size; ++j)
    if (top.entries[j].token == tok) return top.lo + top.offset[j];
  return kUnknown;
}

// Where the continuations of the node just scored lie in level len + 1,
// when all share the answer: kAbsent when none follows its suffix of length
// len, kUnknown when that run was not kept, kInTop | r when it is to be
// looked up in a kept list; kPerChild when each child's is its own
// (hint_for).
template <class Trie>
uint64_t Grower<Trie>::shared_hint(uint32_t len) const {
  switch (ws_.run_read[len]) {
    case RunRead::kCopied:
      return kPerChild;
    case RunRead::kTop:
      return ws_.run_top_ref[len] != kUnknown ? ws_.run_top_ref[len] : kPerChild;
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
uint64_t Grower<Trie>::hint_for(int32_t tok, uint32_t len) const {
  if (ws_.run_read[len] == RunRead::kTop) return find_in_top(*ws_.run_top[len], tok);
  const std::vector<int32_t>& toks = ws_.run_tokens[len];
  auto it = std::lower_bound(toks.begin(), toks.end(), tok);
  return it != toks.end() && *it == tok ? ws_.run_lo[len] + static_cast<uint64_t>(it - toks.begin()) : kAbsent;
}

// ws.tail = the sequence's last L tokens at node v, L the suffix length the
// corpus source conditions on there (returned): the path up to the root,
// then the context.
template <class Trie>
uint32_t Grower<Trie>::fill_tail(uint32_t v) {
  ProposeWorkspace& ws = ws_;
  const uint32_t L = corpus_len(ws.nodes[v].depth);
  ws.tail.resize(std::max<uint32_t>(L, 1));
  uint32_t i = L;
  uint32_t u = v;
  while (i > 0 && u != 0) {
    ws.tail[--i] = ws.nodes[u].token;
    u = static_cast<uint32_t>(ws.nodes[u].parent);
  }
  for (uint64_t c = n_; i > 0;) ws.tail[--i] = static_cast<int32_t>(ctx_[--c]);
  return L;
}

// The entry of node v's suffix of length len (suffix[0..len)), or kAbsent.
// It is its parent's suffix of length len - 1 followed by v's token: where
// the representation can search one run (version 1), only that run is
// searched, else the trie from its first level.
template <class Trie>
uint64_t Grower<Trie>::find_suffix(uint32_t v, uint32_t len, const int32_t* suffix) const {
  if constexpr (std::is_base_of_v<TrieV1, Trie>) {
    const Node& node = ws_.nodes[v];
    if (len >= 2 && v != 0) {
      // Resolved when the parent was prepared: an entry or kAbsent.
      const uint64_t up = ws_.positions[ws_.nodes[node.parent].pos + len - 1];
      if (up == kAbsent) return kAbsent;
      uint64_t lo, hi;
      trie_.children(len - 1, up, &lo, &hi);
      const LevelV1& level = trie_.level(len);
      const uint64_t tok = static_cast<uint32_t>(node.token);
      const uint64_t i = level.lower_bound_token(lo, hi, tok);
      return i < hi && level.token(i) == tok ? i : kAbsent;
    }
  }
  uint64_t idx;
  return trie_.find(suffix, len, &idx) ? idx : kAbsent;
}

// A chosen node's suffixes placed in the trie (those its parent's runs did
// not place) and its document occurrences: what its bound and its expansion
// read. Leaves ws.tail filled for it.
template <class Trie>
void Grower<Trie>::prepare(uint32_t v) {
  ProposeWorkspace& ws = ws_;
  const uint32_t L = fill_tail(v);
  const uint32_t pos = ws.nodes[v].pos;
  for (uint32_t len = 1; len <= L; ++len) {
    uint64_t& at = ws.positions[pos + len];
    if (in_top(at)) at = find_in_top(*ws.top_refs[at & (kInTop - 1)], ws.nodes[v].token);
    if (at == kUnknown) at = find_suffix(v, len, ws.tail.data() + (L - len));
  }
  if (p_.lookup && v != 0) find_occurrences(v);
}

// The largest probability a continuation of the stored suffix (entry at of
// level len, the last len tokens of ws.tail) has: its most frequent child's
// count times 1 / its count, as score_corpus computes a score; 0 without
// children.
template <class Trie>
float Grower<Trie>::run_ratio(uint32_t len, uint64_t at, const int32_t* suffix) {
  uint64_t lo, hi;
  trie_.children(len, at, &lo, &hi);
  if (lo >= hi) return 0.0f;
  if (hi - lo >= RunTopCache::kMinRun) {
    const RunTop& top = long_run_top(len, at, lo, hi, suffix);  // what an expansion reads
    return top.size > 0 ? top.entries[0].ratio : 0.0f;
  }
  uint64_t m = 0;
  for (uint64_t i = lo; i < hi; ++i) m = std::max<uint64_t>(m, trie_.count(len + 1, i));
  return static_cast<float>(m) * (1.0f / static_cast<float>(trie_.count(len, at)));
}

// A bound of every continuation's score at node v (after prepare(v)): for
// each stored suffix, its run's largest continuation probability (the
// largest child count over the suffix's count, by the float operations
// that score it, rounded up in RunBounds) times the suffix's weight as
// score_corpus weighs it; for the document, its most frequent next
// token's share.
template <class Trie>
float Grower<Trie>::bound(uint32_t v) {
  ProposeWorkspace& ws = ws_;
  const Node& node = ws.nodes[v];
  float b = 0.0f;
  const uint32_t L = corpus_len(node.depth);
  for (uint32_t len = L; len >= 1; --len) {
    const uint64_t at = ws.positions[node.pos + len];
    if (at == kAbsent) continue;
    float ratio;
    if (bounds_->covers(len)) {
      uint16_t slot = bounds_->load(len, at);
      if (slot == RunBounds::kUnknown) {
        slot = RunBounds::encode(run_ratio(len, at, ws.tail.data() + (L - len)));
        bounds_->store(len, at, slot);
      }
      ratio = RunBounds::decode(slot);
    } else {
      ratio = run_ratio(len, at, ws.tail.data() + (L - len));
    }
    b = std::max(b, ratio * ws.weights[L - len]);
  }
  if (p_.lookup && node.occ_size > 0) {
    uint64_t most = 0;
    for_each_next_token(node, [&](int32_t, uint64_t c) { most = std::max(most, c); });
    const float inv = 1.0f / static_cast<float>(node.occ_size);
    b = std::max(b, static_cast<float>(most) * inv * p_.lookup_weight);
  }
  return b;
}

template <class Trie>
void Grower<Trie>::expand(uint32_t v) {
  ProposeWorkspace& ws = ws_;
  const uint32_t depth = ws.nodes[v].depth;
  const uint32_t L = fill_tail(v);

  ws.best_size = 0;
  if (L > 0) score_corpus(v, L);
  if (p_.lookup) score_document(v);
  const float prob = ws.nodes[v].prob;
  const uint32_t child_len = corpus_len(depth + 1);
  const uint32_t first = static_cast<uint32_t>(ws.children.size());
  for (uint32_t j = 0; j < ws.best_size; ++j) {
    const float child = prob * ws.best_score[j];
    if (!(child >= p_.min_prob) || child <= 0.0f) break;  // the rest score no higher
    ws.children.push_back({ws.best_token[j], child, 0});
  }
  const uint32_t end = static_cast<uint32_t>(ws.children.size());
  if (first == end) return;
  // The family in the frontier's order: by path probability, ties by the
  // smaller token. The scores' order already is that but where two scores'
  // products round to one probability.
  Child* family = ws.children.data();
  for (uint32_t j = first + 1; j < end; ++j) {
    if (family[j - 1].prob != family[j].prob || family[j - 1].token < family[j].token) continue;  // in order
    const Child x = family[j];
    uint32_t i = j;
    for (; i > first && family[i - 1].prob == x.prob && family[i - 1].token > x.token; --i) family[i] = family[i - 1];
    family[i] = x;
  }
  // Their suffixes' entries, as far as this node's runs place them, in
  // rows of max_len_ + 1 (entry 0 unused): where every child's are the same
  // but for its token, one row of the family, which a child copies once
  // chosen (own_row); else a row of each child's.
  uint64_t shared[kMaxOrder];
  bool per_child = false;
  for (uint32_t len = 1; len + 1 <= child_len; ++len) {
    shared[len] = len <= L ? shared_hint(len) : kUnknown;
    per_child |= shared[len] == kPerChild;
  }
  std::vector<uint64_t>& positions = ws.positions;
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
    const uint32_t row = append_row(ws.children[first].token) | kFamilyRow;
    for (uint32_t j = first; j < end; ++j) ws.children[j].hints = row;
  } else {
    for (uint32_t j = first; j < end; ++j) ws.children[j].hints = append_row(ws.children[j].token);
  }
  ws.family_end[v] = end;
  offer(v, first);
}

// The row of a chosen node's suffixes' entries (Node::pos), from its
// candidate's hints: its own row, or a copy of its family's with its token.
template <class Trie>
uint32_t Grower<Trie>::own_row(uint32_t hints, int32_t token) {
  if ((hints & kFamilyRow) == 0) return hints;
  std::vector<uint64_t>& positions = ws_.positions;
  const uint32_t family = hints & ~kFamilyRow;
  const uint32_t row = static_cast<uint32_t>(positions.size());
  for (uint32_t len = 0; len <= max_len_; ++len) positions.push_back(positions[family + len]);
  if (max_len_ >= 1 && positions[family + 1] != kAbsent) positions[row + 1] = static_cast<uint64_t>(token);
  return row;
}

// Puts the continuation children[j] of node v into the frontier.
template <class Trie>
void Grower<Trie>::offer(uint32_t v, uint32_t j) {
  ProposeWorkspace& ws = ws_;
  const Child& child = ws.children[j];
  Candidate c;
  c.rank = Candidate::make_rank(child.prob, ws.nodes[v].depth + 1, v);
  c.token = child.token;
  c.hints = child.hints;
  c.next = j + 1;
  frontier_insert(ws.frontier, c);
}

template <class Trie>
void Grower<Trie>::run(ProposedTree& out) {
  ProposeWorkspace& ws = ws_;
  start();
  const uint32_t max_nodes = static_cast<uint32_t>(p_.max_nodes);
  const uint32_t max_depth = static_cast<uint32_t>(p_.max_depth);
  ws.expand_key.clear();
  auto lower_prob = [&](uint32_t a, uint32_t b) {
    const float pa = ws.expand_key[a], pb = ws.expand_key[b];
    return pa != pb ? pa < pb : a > b;
  };
  ws.expand_key.resize(1);
  prepare(0);
  ws.expand_key[0] = ws.nodes[0].prob * bound(0);
  if (max_depth > 0 && max_nodes > 0 && ws.expand_key[0] > 0.0f) ws.unexpanded.push_back(0);
  while (ws.nodes.size() - 1 < max_nodes) {
    // One node is chosen per turn, and at most one expanded per node chosen
    // (each reading one run per suffix length), so that a check every 32
    // turns bounds the work past a stop; the counter is the tree's size.
    if ((ws.nodes.size() & 31) == 0) stop_.check();
    // A chosen node is expanded once the best candidate no longer beats
    // the bound of its children's probabilities.
    while (!ws.unexpanded.empty() &&
           (ws.frontier.empty() || ws.expand_key[ws.unexpanded.front()] >= ws.frontier.back().prob())) {
      std::pop_heap(ws.unexpanded.begin(), ws.unexpanded.end(), lower_prob);
      const uint32_t v = ws.unexpanded.back();
      ws.unexpanded.pop_back();
      expand(v);
    }
    if (ws.frontier.empty()) break;
    const Candidate c = ws.frontier.back();
    ws.frontier.pop_back();
    const uint32_t parent = c.parent();
    if (c.next < ws.family_end[parent]) offer(parent, c.next);
    Node node{};
    node.token = c.token;
    node.parent = static_cast<int32_t>(parent);
    node.depth = c.depth();
    node.prob = c.prob();
    node.pos = own_row(c.hints, c.token);
    ws.nodes.push_back(node);
    const uint32_t v = static_cast<uint32_t>(ws.nodes.size() - 1);
    ws.expand_key.push_back(0.0f);  // expand_key[v]
    ws.family_end.push_back(0);     // family_end[v], set if v is expanded
    if (node.depth < max_depth) {
      prepare(v);
      ws.expand_key[v] = node.prob * bound(v);
      if (ws.expand_key[v] > 0.0f) {
        ws.unexpanded.push_back(v);
        std::push_heap(ws.unexpanded.begin(), ws.unexpanded.end(), lower_prob);
      }
    }
  }
  stop_.check();  // once more before `out` is written: a stopped call leaves it as it was
  write(out);
}

// The chosen nodes by depth, within one depth in the order chosen.
template <class Trie>
void Grower<Trie>::write(ProposedTree& out) {
  ProposeWorkspace& ws = ws_;
  const uint32_t n = static_cast<uint32_t>(ws.nodes.size());
  // A counting sort by depth keeps the chosen order within a depth.
  uint32_t first[ProposeLimits::kMaxDepth + 2] = {};
  for (uint32_t i = 0; i < n; ++i) ++first[ws.nodes[i].depth + 1];
  for (uint32_t d = 1; d <= ProposeLimits::kMaxDepth + 1; ++d) first[d] += first[d - 1];
  std::vector<uint32_t>& order = ws.order;
  std::vector<int32_t>& place = ws.encode.dfs_stack;  // chosen index -> output index
  order.resize(n);
  place.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t at = first[ws.nodes[i].depth]++;
    order[at] = i;
    place[i] = static_cast<int32_t>(at);
  }
  out.tokens.resize(n);
  out.parents.resize(n);
  out.scores.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    const Node& node = ws.nodes[order[i]];
    out.tokens[i] = node.token;
    out.parents[i] = node.parent < 0 ? -1 : place[node.parent];
    out.scores[i] = node.prob;
  }
  encode_tree(out, ws.encode);
}

}  // namespace

namespace {

void check_params(const ProposeParams& p) {  check_range(p.max_nodes, 0, ProposeLimits::kMaxNodes, "max_nodes");
  check_range(p.max_depth, 0, ProposeLimits::kMaxDepth, "max_depth");
  check_range(p.max_branch, 1, ProposeLimits::kMaxBranch, "max_branch");
  check_range(p.lookup_min_match, 1, ProposeLimits::kMaxMatch, "lookup_min_match");
  check_unit(p.min_prob, "min_prob");
  check_unit(p.backoff, "backoff");
  check_unit(p.lookup_weight, "lookup_weight");
}

void check_length(uint64_t n) {
  if (n == 0) throw InvalidArgument("context: empty; its last token is the tree's root");
  if (n > ProposeLimits::kMaxContext)
    throw InvalidArgument("context: " + std::to_string(n) + " tokens, limit " +
                          std::to_string(ProposeLimits::kMaxContext));
}

}  // namespace

void validate_propose(const TrieIndex& t, const int64_t* context, uint64_t n, const ProposeParams& p) {
  check_length(n);
  check_tokens(t, context, n, "context");
  check_params(p);
}

void propose_tree(const TrieIndex& t, const int64_t* context, uint64_t n, const ProposeParams& params,
                  ProposeWorkspace& ws, ProposedTree& out, const Interrupt& stop) {
  validate_propose(t, context, n, params);
  t.visit([&](const auto& trie) {
    using Trie = std::decay_t<decltype(trie)>;
    Grower<Trie>(trie, &t, context, n, params, ws, stop).run(out);
  });
}

void propose_lookup(uint64_t vocab_size, const int64_t* context, uint64_t n, const ProposeParams& params,
                    ProposeWorkspace& ws, ProposedTree& out, const Interrupt& stop) {
  if (vocab_size == 0 || vocab_size > (uint64_t{1} << 31))
    throw InvalidArgument("vocab_size = " + std::to_string(vocab_size) + ": must be in 1..2147483648");
  check_length(n);
  for (uint64_t i = 0; i < n; ++i)
    if (context[i] < 0 || static_cast<uint64_t>(context[i]) >= vocab_size)
      throw InvalidArgument("context[" + std::to_string(i) + "] = " + std::to_string(context[i]) +
                            " is not a token id: must be in [0, " + std::to_string(vocab_size) + ")");
  check_params(params);
  ProposeParams lookup = params;
  lookup.corpus = false;
  Grower<NoTrie>(NoTrie{}, nullptr, context, n, lookup, ws, stop).run(out);
}

void propose_batch(const TrieIndex& t, const std::vector<ProposeInput>& in, const ProposeParams& params,
                   uint32_t threads, std::vector<ProposedTree>& out, const Interrupt& stop) {
  out.resize(in.size());
  run_batch<ProposeWorkspace>(
      in.size(), threads, "contexts",
      [&](size_t i, ProposeWorkspace& ws) { propose_tree(t, in[i].context, in[i].size, params, ws, out[i], stop); },
      stop);
}

}  // namespace ngram
