#include "queries.h"

#include <algorithm>
#include <queue>

#include "errors.h"

namespace ngram {

void check_tokens(const TrieIndex& t, const int64_t* toks, uint64_t n, const char* field) {
  const int64_t v = static_cast<int64_t>(t.vocab_size());
  for (uint64_t i = 0; i < n; ++i) {
    if (toks[i] < 0 || toks[i] >= v)
      throw InvalidArgument(std::string(field) + "[" + std::to_string(i) + "] = " +
                            std::to_string(toks[i]) + " is not a token id: must be in [0, " +
                            std::to_string(v) + ")");
  }
}

namespace {

// Narrows int64 ids (already validated) to the engine's int32 for lookups.
void narrow(const int64_t* in, uint32_t n, int32_t* out) {
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
    p[j] = static_cast<float>(next.count(pos[i])) * inv;
    m[j] = static_cast<int32_t>(len);
  }
  return found;
}

// Searches every unmatched candidate in the run [lo, hi) of `next`.
uint32_t search_run(const Level& next, uint64_t lo, uint64_t hi, uint32_t len, float inv, const int32_t* w,
                    uint32_t k, float* p, int32_t* m) {
  uint32_t found = 0;
  // The first lookup of a query (nothing matched yet, the common case in
  // tree pruning) searches the candidates where they lie.
  bool fresh = k <= Level::kMaxBatch;
  for (uint32_t j = 0; j < k && fresh; ++j) fresh = m[j] == 0;
  if (fresh) {
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

bool find_run(const TrieIndex& t, const int32_t* suffix, uint32_t len, Run* run) {
  uint64_t node;
  if (!t.find(suffix, len, &node)) return false;
  t.children(len, node, &run->lo, &run->hi);
  if (run->lo == run->hi) return false;
  run->inv = 1.0f / static_cast<float>(t.level(len).count(node));
  return true;
}

void find_runs(const TrieIndex& t, const int32_t* const* suffixes, uint32_t n, uint32_t len, Run* runs,
               uint8_t* found) {
  for (uint32_t done = 0; done < n; done += Level::kMaxBatch) {
    const uint32_t m = std::min(n - done, Level::kMaxBatch);
    const int32_t* const* sfx = suffixes + done;
    uint64_t node[Level::kMaxBatch], lo[Level::kMaxBatch], hi[Level::kMaxBatch], pos[Level::kMaxBatch];
    uint32_t v[Level::kMaxBatch];
    bool ok[Level::kMaxBatch];
    const Level& first = t.level(1);
    for (uint32_t i = 0; i < m; ++i) {
      node[i] = static_cast<uint32_t>(sfx[i][0]);
      ok[i] = node[i] < first.size && first.count(node[i]) != 0;
    }
    for (uint32_t k = 1; k < len; ++k) {
      for (uint32_t i = 0; i < m; ++i) {
        lo[i] = hi[i] = 0;
        if (ok[i]) t.children(k, node[i], &lo[i], &hi[i]);
        v[i] = static_cast<uint32_t>(sfx[i][k]);
      }
      const Level& next = t.level(k + 1);
      next.lower_bound_runs(lo, hi, v, m, pos);
      for (uint32_t i = 0; i < m; ++i) {
        ok[i] = ok[i] && pos[i] < hi[i] && next.tokens[pos[i]] == v[i];
        node[i] = pos[i];
      }
    }
    const Level& last = t.level(len);
    for (uint32_t i = 0; i < m; ++i) {
      Run& r = runs[done + i];
      r = Run{};
      if (ok[i]) t.children(len, node[i], &r.lo, &r.hi);
      found[done + i] = ok[i] && r.lo < r.hi;
    }
    for (uint32_t i = 0; i < m; ++i)
      if (found[done + i]) runs[done + i].inv = 1.0f / static_cast<float>(last.count(node[i]));
  }
}

uint32_t lookup_suffix(const TrieIndex& t, const int32_t* suffix, uint32_t len, const int32_t* w, uint32_t k,
                       float* p, int32_t* m) {
  Run run;
  if (!find_run(t, suffix, len, &run)) return 0;
  return search_run(t.level(len + 1), run.lo, run.hi, len, run.inv, w, k, p, m);
}

void CandidateTable::build(const int32_t* w, uint32_t k) {
  tokens = w;
  count = k;
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

uint32_t lookup_in_run(const TrieIndex& t, uint32_t len, const Run& run, const CandidateTable& table, float* p,
                       int32_t* m) {
  const uint64_t lo = run.lo, hi = run.hi;
  const float inv = run.inv;
  const Level& next = t.level(len + 1);
  if (hi - lo > kScanFactor * uint64_t{table.count})
    return search_run(next, lo, hi, len, inv, table.tokens, table.count, p, m);
  // A short run: read each continuation once and look it up among the
  // candidates, instead of a binary search per candidate.
  const uint32_t mask = static_cast<uint32_t>(table.key.size()) - 1;
  uint32_t found = 0;
  for (uint64_t i = lo; i < hi; ++i) {
    const uint32_t tok = static_cast<uint32_t>(next.tokens[i]);
    for (uint32_t s = table.slot(tok); table.key[s] != CandidateTable::kEmpty; s = (s + 1) & mask) {
      if (table.key[s] != tok) continue;
      const uint32_t j = table.index[s];
      if (m[j] == 0) {
        p[j] = static_cast<float>(next.count(i)) * inv;
        m[j] = static_cast<int32_t>(len);
        ++found;
      }
    }
  }
  return found;
}

void lookup_in_runs(const TrieIndex& t, uint32_t len, const Run* runs, uint32_t n, const CandidateTable& table,
                    float* const* p, int32_t* const* m, uint32_t* matched) {
  const Level& next = t.level(len + 1);
  const uint32_t k = table.count;
  // Searched (not scanned), nothing matched yet: such runs go in groups.
  auto groupable = [&](uint32_t i) {
    if (runs[i].hi - runs[i].lo <= std::max<uint64_t>(kScanFactor * uint64_t{k}, 2 * kSampleEvery) ||
        k > Level::kMaxBatch)
      return false;
    for (uint32_t j = 0; j < k; ++j)
      if (m[i][j] != 0) return false;
    return true;
  };
  uint32_t group[Level::kMaxRuns];
  uint32_t grouped = 0;
  auto search_group = [&]() {
    uint64_t lo[Level::kMaxRuns], hi[Level::kMaxRuns], hits[Level::kMaxRuns];
    uint64_t pos[Level::kMaxRuns * Level::kMaxBatch];
    for (uint32_t r = 0; r < grouped; ++r) lo[r] = runs[group[r]].lo, hi[r] = runs[group[r]].hi;
    next.find_many_runs(grouped, lo, hi, reinterpret_cast<const uint32_t*>(table.tokens), k, pos, hits);
    for (uint32_t r = 0; r < grouped; ++r) {
      const uint32_t i = group[r];
      matched[i] = record_hits(next, hits[r], pos + r * k, nullptr, runs[i].inv, len, p[i], m[i]);
    }
    grouped = 0;
  };
  for (uint32_t i = 0; i < n; ++i) {
    if (!groupable(i)) {
      matched[i] = lookup_in_run(t, len, runs[i], table, p[i], m[i]);
      continue;
    }
    group[grouped++] = i;
    if (grouped == Level::kMaxRuns) search_group();
  }
  if (grouped > 0) search_group();
}

void conditional_probs_one(const TrieIndex& t, const int32_t* context, uint32_t ctx_len,
                           const int32_t* w, uint32_t k, float* p, int32_t* m) {
  std::fill(p, p + k, 0.0f);
  std::fill(m, m + k, 0);
  const uint32_t max_len = std::min<uint32_t>(t.order() - 1, ctx_len);
  const int32_t* ctx = context + ctx_len - max_len;
  uint32_t left = k;
  for (uint32_t len = max_len; len >= 1 && left > 0; --len)
    left -= lookup_suffix(t, ctx + (max_len - len), len, w, k, p, m);
}

void conditional_probs(const TrieIndex& t, const int64_t* contexts, uint64_t batch, uint64_t ctx_len,
                       const int64_t* candidates, uint64_t k, float* probs, int32_t* matched) {
  if (ctx_len < 1) throw InvalidArgument("contexts: need at least one context token per query");
  if (k > (1u << 20)) throw InvalidArgument("candidates: " + std::to_string(k) + " per query, limit 1048576");
  check_tokens(t, contexts, batch * ctx_len, "contexts");
  check_tokens(t, candidates, batch * k, "candidates");
  const uint32_t max_len = static_cast<uint32_t>(std::min<uint64_t>(t.order() - 1, ctx_len));
  int32_t ctx[kMaxOrder];
  std::vector<int32_t> cand(k);
  for (uint64_t q = 0; q < batch; ++q) {
    narrow(contexts + q * ctx_len + ctx_len - max_len, max_len, ctx);
    narrow(candidates + q * k, static_cast<uint32_t>(k), cand.data());
    conditional_probs_one(t, ctx, max_len, cand.data(), static_cast<uint32_t>(k), probs + q * k, matched + q * k);
  }
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
    for (uint64_t i = lo; i < hi; ++i) offer(next.count(i), static_cast<int64_t>(next.tokens[i]));
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
