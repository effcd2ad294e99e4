#include "queries.h"

#include <algorithm>
#include <cstring>
#include <queue>
#include <type_traits>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "errors.h"
#include "lookup_v2.h"
#include "search_simd.h"

namespace ngram {

namespace {

template <class Id>
void check_ids(const TrieIndex& t, const Id* toks, uint64_t n, const char* field) {
  const int64_t v = static_cast<int64_t>(t.vocab_size());
  // The largest id read as unsigned (a negative id wraps above any
  // vocabulary), with no early exit, so that the compiler vectorizes it;
  // only a batch with a bad id looks for the first one. (The limit is at
  // most 2^(bits-1), where the negative ids start.)
  using U = std::make_unsigned_t<Id>;
  const U limit = static_cast<U>(std::min<uint64_t>(static_cast<uint64_t>(v), uint64_t{1} << (8 * sizeof(Id) - 1)));
  U largest = 0;
  for (uint64_t i = 0; i < n; ++i) largest = std::max(largest, static_cast<U>(toks[i]));
  if (n == 0 || largest < limit) return;
  for (uint64_t i = 0; i < n; ++i) {
    if (toks[i] < 0 || toks[i] >= v)
      throw InvalidArgument(std::string(field) + "[" + std::to_string(i) + "] = " +
                            std::to_string(toks[i]) + " is not a token id: must be in [0, " +
                            std::to_string(v) + ")");
  }
}

}  // namespace

void check_tokens(const TrieIndex& t, const int64_t* toks, uint64_t n, const char* field) {
  check_ids(t, toks, n, field);
}
void check_tokens(const TrieIndex& t, const int32_t* toks, uint64_t n, const char* field) {
  check_ids(t, toks, n, field);
}

namespace {

// Narrows int64 ids (already validated) to the engine's int32 for lookups.
template <class Id>
void narrow(const Id* in, uint32_t n, int32_t* out) {
  for (uint32_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(in[i]);
}

}  // namespace

uint64_t count_ngram(const TrieIndex& t, const int64_t* toks, uint64_t len) {
  if (len < 1 || len > t.order())
    throw InvalidArgument("ngram has " + std::to_string(len) + " tokens: must be 1.." +
                          std::to_string(t.order()) + " (the trie's order)");
  check_tokens(t, toks, len, "ngram");
  int32_t buf[kMaxOrder];
  narrow(toks, static_cast<uint32_t>(len), buf);
  uint64_t idx;
  if (!t.find(buf, static_cast<uint32_t>(len), &idx)) return 0;
  return t.level(static_cast<uint32_t>(len)).count(idx);
}

namespace {

// For each set bit i of hits (candidate idx[i] found at pos[i] of `next`;
// idx null: candidate i): p = its count / the context's, m = len. Returns
// how many. Walking the set bits, not testing each: hits are a coin toss
// for the predictor.
// Inlined into each caller, so that the idx test folds away.
inline __attribute__((always_inline)) uint32_t record_hits(const Level& next, uint64_t hits, const uint64_t* pos,
                                                           const uint32_t* idx, float inv, uint32_t len, float* p,
                                                           int32_t* m) {
  uint32_t found = 0;
  for (; hits != 0; hits &= hits - 1, ++found) {
    const uint32_t i = static_cast<uint32_t>(__builtin_ctzll(hits));
    const uint32_t j = idx ? idx[i] : i;
    p[j] = static_cast<float>(next.count_v1(pos[i])) * inv;
    m[j] = static_cast<int32_t>(len);
  }
  return found;
}

// Bit j set for each of the k <= 64 candidates not matched yet (m[j] == 0):
// four compares at once, where a loop of shifts costs a few instructions
// per candidate on every run a lookup reads.
inline uint64_t unmatched_mask(const int32_t* m, uint32_t k) {
  uint64_t mask = 0;
  uint32_t j = 0;
#ifdef __SSE2__
  const __m128i zero = _mm_setzero_si128();
  for (; j + 4 <= k; j += 4) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(m + j));
    mask |= static_cast<uint64_t>(_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(x, zero)))) << j;
  }
#endif
  for (; j < k; ++j) mask |= static_cast<uint64_t>(m[j] == 0) << j;
  return mask;
}

// Searches every unmatched candidate in the run [lo, hi) of `next`.
uint32_t search_run(const Level& next, uint64_t lo, uint64_t hi, uint32_t len, float inv, const int32_t* w,
                    uint32_t k, float* p, int32_t* m) {
  uint32_t found = 0;
  // The first lookup of a query (nothing matched yet, the common case in
  // tree pruning) searches the candidates where they lie.
  if (k != 0 && k <= Level::kMaxBatch && unmatched_mask(m, k) == (~uint64_t{0} >> (64 - k))) {
    uint64_t pos[Level::kMaxBatch];
    const uint64_t hits = next.find_many(lo, hi, reinterpret_cast<const uint32_t*>(w), k, pos);
    return record_hits(next, hits, pos, nullptr, inv, len, p, m);
  }
  // Unmatched candidates, searched in lockstep batches.
  for (uint32_t start = 0; start < k;) {
    uint32_t idx[Level::kMaxBatch], tok[Level::kMaxBatch];
    uint64_t pos[Level::kMaxBatch];
    uint32_t n = 0;
    for (; start < k && n < Level::kMaxBatch; ++start) {
      if (m[start] != 0) continue;
      idx[n] = start;
      tok[n++] = static_cast<uint32_t>(w[start]);
    }
    found += record_hits(next, next.find_many(lo, hi, tok, n, pos), pos, idx, inv, len, p, m);
  }
  return found;
}

}  // namespace

void find_runs(const TrieIndex& t, const int32_t* const* suffixes, uint32_t n, uint32_t len, Run* runs,
               uint8_t* found) {
  for (uint32_t done = 0; done < n; done += Level::kMaxBatch) {
    const uint32_t m = std::min(n - done, Level::kMaxBatch);
    uint64_t node[Level::kMaxBatch];
    bool ok[Level::kMaxBatch];
    t.find_many(suffixes + done, m, len, node, ok);
    const Level& last = t.level(len);
    for (uint32_t i = 0; i < m; ++i) {
      Run& r = runs[done + i];
      r = Run{};
      if (ok[i]) t.children(len, node[i], &r.lo, &r.hi);
      r.suffix = suffixes[done + i];
      found[done + i] = ok[i] && r.lo < r.hi;
    }
    for (uint32_t i = 0; i < m; ++i)
      if (found[done + i]) runs[done + i].inv = 1.0f / static_cast<float>(last.count(node[i]));
  }
}

void CandidateTable::hash() const {
  const int32_t* w = tokens;
  const uint32_t k = count;
  hashed = true;
  uint32_t bits = 2;
  while ((1u << bits) < 4 * k) ++bits;  // load factor at most 1/4: most probes end at once
  shift = 64 - bits;
  key.assign(1u << bits, kEmpty);
  index.assign(1u << bits, 0);
  for (uint32_t j = 0; j < k; ++j) {
    uint32_t s = slot(static_cast<uint32_t>(w[j]));
    while (key[s] != kEmpty) s = (s + 1) & (static_cast<uint32_t>(key.size()) - 1);
    key[s] = static_cast<uint32_t>(w[j]);
    index[s] = j;
  }
}

namespace {

// One run of lookup_in_runs, alone: short runs scanned, long ones searched.
uint32_t lookup_in_run(const TrieIndex& t, uint32_t len, const Run& run, const CandidateTable& table, float* p,
                       int32_t* m) {
  const uint64_t lo = run.lo, hi = run.hi;
  const float inv = run.inv;
  const Level& next = t.level(len + 1);
  if (hi - lo > kScanFactor * uint64_t{table.count})
    return search_run(next, lo, hi, len, inv, table.tokens, table.count, p, m);
  if (table.count <= Level::kMaxBatch && simd_search() != SimdSearch::kNone) {
    uint64_t pos[Level::kMaxBatch];
    const uint64_t unmatched = unmatched_mask(m, table.count);
    const uint64_t hits = scan_run_simd(next, lo, hi, reinterpret_cast<const uint32_t*>(table.tokens), table.count, pos);
    return record_hits(next, hits & unmatched, pos, nullptr, inv, len, p, m);
  }
  // A short run: read each continuation once and look it up among the
  // candidates, instead of a binary search per candidate.
  if (!table.hashed) table.hash();
  const uint32_t mask = static_cast<uint32_t>(table.key.size()) - 1;
  uint32_t found = 0;
  for (uint64_t i = lo; i < hi; ++i) {
    const uint32_t tok = static_cast<uint32_t>(next.token(i));
    for (uint32_t s = table.slot(tok); table.key[s] != CandidateTable::kEmpty; s = (s + 1) & mask) {
      if (table.key[s] != tok) continue;
      const uint32_t j = table.index[s];
      if (m[j] == 0) {
        p[j] = static_cast<float>(next.count_v1(i)) * inv;
        m[j] = static_cast<int32_t>(len);
        ++found;
      }
    }
  }
  return found;
}

}  // namespace

void lookup_in_runs(const TrieIndex& t, uint32_t len, const Run* runs, uint32_t n,
                    const CandidateTable* const* tables, float* const* p, int32_t* const* m, uint32_t* matched) {
  if (t.version() == kFormatVersion2) return lookup_in_runs_v2(t, len, runs, n, tables, p, m, matched);
  const Level& next = t.level(len + 1);
  // Runs searched (not scanned) go two at a time in lockstep, each for all
  // its candidates (a hit of one already matched is dropped), so that the
  // cache misses of one overlap those of the other.
  auto searched = [&](uint32_t i) {
    const uint32_t k = tables[i]->count;
    return k >= 8 && k <= Level::kMaxBatch &&
           runs[i].hi - runs[i].lo > std::max<uint64_t>(kScanFactor * uint64_t{k}, 2 * kSampleEvery);
  };
  auto search_pair = [&](uint32_t a, uint32_t b) {
    const uint32_t k = tables[a]->count;
    const uint32_t pair[2] = {a, b};
    uint64_t lo[2] = {runs[a].lo, runs[b].lo}, hi[2] = {runs[a].hi, runs[b].hi}, hits[2];
    uint64_t pos[2 * Level::kMaxBatch];
    // One list of candidates when the runs share it, else both side by side.
    uint32_t v[2 * Level::kMaxBatch];
    uint32_t stride = 0;
    std::memcpy(v, tables[a]->tokens, k * sizeof(uint32_t));
    if (tables[b]->tokens != tables[a]->tokens) {
      std::memcpy(v + k, tables[b]->tokens, k * sizeof(uint32_t));
      stride = k;
    }
    if (simd_search() == SimdSearch::kNone || !find_many_runs_simd(next, 2, lo, hi, v, k, pos, hits, stride))
      for (uint32_t r = 0; r < 2; ++r) hits[r] = next.find_many(lo[r], hi[r], v + r * stride, k, pos + r * k);
    for (uint32_t r = 0; r < 2; ++r) {
      const uint32_t i = pair[r];
      const uint64_t unmatched = unmatched_mask(m[i], k);
      matched[i] = record_hits(next, hits[r] & unmatched, pos + r * k, nullptr, runs[i].inv, len, p[i], m[i]);
    }
  };
  for (uint32_t i = 0; i < n; ++i) next.prefetch_run(runs[i].lo, runs[i].hi);
  uint32_t waiting = n;  // a searched run without its partner yet; n: none
  for (uint32_t i = 0; i < n; ++i) {
    if (!searched(i)) {
      matched[i] = lookup_in_run(t, len, runs[i], *tables[i], p[i], m[i]);
    } else if (waiting == n) {
      waiting = i;
    } else if (tables[waiting]->count != tables[i]->count) {
      matched[waiting] = lookup_in_run(t, len, runs[waiting], *tables[waiting], p[waiting], m[waiting]);
      waiting = i;
    } else {
      search_pair(waiting, i);
      waiting = n;
    }
  }
  if (waiting != n) matched[waiting] = lookup_in_run(t, len, runs[waiting], *tables[waiting], p[waiting], m[waiting]);
}

void conditional_probs_many(const TrieIndex& t, const int32_t* contexts, uint32_t n, uint32_t ctx_len,
                            const int32_t* candidates, uint32_t k, float* probs, int32_t* matched,
                            ProbsScratch& s) {
  std::fill(probs, probs + size_t{n} * k, 0.0f);
  std::fill(matched, matched + size_t{n} * k, 0);
  const uint32_t max_len = std::min<uint32_t>(t.order() - 1, ctx_len);
  if (max_len == 0 || k == 0 || n == 0) return;
  if (s.tables.size() < n) s.tables.resize(n);
  s.left.assign(n, k);
  for (auto* v : {&s.rows, &s.matched}) v->resize(n);
  s.run_tables.resize(n);
  s.suffixes.resize(n);
  s.runs.resize(n);
  s.found.resize(n);
  s.p.resize(n);
  s.m.resize(n);
  for (uint32_t q = 0; q < n; ++q) s.tables[q].build(candidates + size_t{q} * k, k);
  for (uint32_t len = max_len; len >= 1; --len) {
    uint32_t asked = 0;
    for (uint32_t q = 0; q < n; ++q) {
      if (s.left[q] == 0) continue;
      s.suffixes[asked] = contexts + size_t{q} * ctx_len + (ctx_len - len);
      s.rows[asked++] = q;
    }
    if (asked == 0) break;
    find_runs(t, s.suffixes.data(), asked, len, s.runs.data(), s.found.data());
    uint32_t searched = 0;
    for (uint32_t i = 0; i < asked; ++i) {
      if (!s.found[i]) continue;
      const uint32_t q = s.rows[i];
      s.runs[searched] = s.runs[i];
      s.rows[searched] = q;
      s.run_tables[searched] = &s.tables[q];
      s.p[searched] = probs + size_t{q} * k;
      s.m[searched++] = matched + size_t{q} * k;
    }
    lookup_in_runs(t, len, s.runs.data(), searched, s.run_tables.data(), s.p.data(), s.m.data(), s.matched.data());
    for (uint32_t i = 0; i < searched; ++i) s.left[s.rows[i]] -= s.matched[i];
  }
}

namespace {

template <class Id>
void conditional_probs_of(const TrieIndex& t, const Id* contexts, uint64_t batch, uint64_t ctx_len,
                          const Id* candidates, uint64_t k, float* probs, int32_t* matched) {
  if (ctx_len < 1) throw InvalidArgument("contexts: need at least one context token per query");
  if (k > (1u << 20)) throw InvalidArgument("candidates: " + std::to_string(k) + " per query, limit 1048576");
  check_tokens(t, contexts, batch * ctx_len, "contexts");
  check_tokens(t, candidates, batch * k, "candidates");
  const uint32_t max_len = static_cast<uint32_t>(std::min<uint64_t>(t.order() - 1, ctx_len));
  // Queries a step runs over at once: enough for their memory reads to
  // overlap, few enough for their candidate tables to stay in cache.
  const uint64_t chunk = std::clamp<uint64_t>(4096 / std::max<uint64_t>(k, 1), 1, Level::kMaxBatch);
  thread_local ProbsScratch scratch;
  thread_local std::vector<int32_t> ctx, cand;
  for (uint64_t q0 = 0; q0 < batch; q0 += chunk) {
    const uint32_t n = static_cast<uint32_t>(std::min(chunk, batch - q0));
    // int32 ids are read where they lie when no context needs cutting.
    const int32_t* c = nullptr;
    const int32_t* w = nullptr;
    if constexpr (std::is_same_v<Id, int32_t>) {
      if (max_len == ctx_len) c = contexts + q0 * ctx_len;
      w = candidates + q0 * k;
    }
    if (!c) {
      ctx.resize(size_t{n} * max_len);
      for (uint32_t q = 0; q < n; ++q)
        narrow(contexts + (q0 + q) * ctx_len + ctx_len - max_len, max_len, ctx.data() + size_t{q} * max_len);
      c = ctx.data();
    }
    if (!w) {
      cand.resize(size_t{n} * k);
      narrow(candidates + q0 * k, static_cast<uint32_t>(n * k), cand.data());
      w = cand.data();
    }
    conditional_probs_many(t, c, n, max_len, w, static_cast<uint32_t>(k), probs + q0 * k, matched + q0 * k,
                           scratch);
  }
}

}  // namespace

void conditional_probs(const TrieIndex& t, const int64_t* contexts, uint64_t batch, uint64_t ctx_len,
                       const int64_t* candidates, uint64_t k, float* probs, int32_t* matched) {
  conditional_probs_of(t, contexts, batch, ctx_len, candidates, k, probs, matched);
}

void conditional_probs(const TrieIndex& t, const int32_t* contexts, uint64_t batch, uint64_t ctx_len,
                       const int32_t* candidates, uint64_t k, float* probs, int32_t* matched) {
  conditional_probs_of(t, contexts, batch, ctx_len, candidates, k, probs, matched);
}

TopK topk(const TrieIndex& t, const int64_t* context, uint64_t ctx_len, int64_t k_wanted) {
  if (k_wanted < 0) throw InvalidArgument("k must be >= 0, got " + std::to_string(k_wanted));
  check_tokens(t, context, ctx_len, "context");
  const uint64_t k = static_cast<uint64_t>(k_wanted);
  TopK out;
  if (k == 0) return out;
  const uint32_t max_len = static_cast<uint32_t>(std::min<uint64_t>(t.order() - 1, ctx_len));
  int32_t ctx[kMaxOrder];
  narrow(context + ctx_len - max_len, max_len, ctx);

  // (count, token) pairs; the heap keeps the k best with the worst on top.
  using Item = std::pair<uint64_t, int64_t>;
  auto better = [](const Item& a, const Item& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  std::priority_queue<Item, std::vector<Item>, decltype(better)> heap(better);
  auto offer = [&](uint64_t count, int64_t tok) {
    if (count == 0) return;
    Item it{count, tok};
    if (heap.size() < k) {
      heap.push(it);
    } else if (better(it, heap.top())) {
      heap.pop();
      heap.push(it);
    }
  };

  uint64_t denom = 0;
  for (uint32_t len = max_len; len >= 1; --len) {
    uint64_t node, lo, hi;
    if (!t.find(ctx + (max_len - len), len, &node)) continue;
    t.children(len, node, &lo, &hi);
    if (lo == hi) continue;
    const Level& next = t.level(len + 1);
    std::vector<int32_t> toks(hi - lo);
    t.run_tokens(ctx + (max_len - len), len, lo, hi, toks.data());
    for (uint64_t i = lo; i < hi; ++i) offer(next.count(i), toks[i - lo]);
    denom = t.level(len).count(node);
    out.matched = static_cast<int32_t>(len);
    break;
  }
  if (out.matched == 0) {
    const Level& uni = t.level(1);
    for (uint64_t i = 0; i < uni.size; ++i) offer(uni.count(i), static_cast<int64_t>(i));
    denom = t.total_tokens();
  }
  std::vector<Item> items;
  while (!heap.empty()) {
    items.push_back(heap.top());
    heap.pop();
  }
  std::reverse(items.begin(), items.end());
  const float inv = denom ? 1.0f / static_cast<float>(denom) : 0.0f;
  for (const Item& it : items) {
    out.tokens.push_back(static_cast<int32_t>(it.second));
    out.counts.push_back(it.first);
    out.probs.push_back(static_cast<float>(it.first) * inv);
  }
  return out;
}

}  // namespace ngram
