#include "queries.h"

#include <algorithm>
#include <cstring>
#include <queue>
#include <type_traits>

#include "checks.h"
#include "errors.h"
#include "lookup_steps.h"
#include "no_trie.h"

namespace ngram {

void check_tokens(const TrieIndex& t, const int64_t* toks, uint64_t n, const char* field) {
  check_token_ids(t.vocab_size(), toks, n, field);
}
void check_tokens(const TrieIndex& t, const int32_t* toks, uint64_t n, const char* field) {
  check_token_ids(t.vocab_size(), toks, n, field);
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
  return t.visit([&](const auto& trie) -> uint64_t {
    uint64_t idx;
    if (!trie.find(buf, static_cast<uint32_t>(len), &idx)) return 0;
    return trie.count(static_cast<uint32_t>(len), idx);
  });
}

// Suffixes found at once: as many as a lookup step runs in lockstep.
constexpr uint32_t kFindBatch = LevelV1::kMaxBatch;

template <class Trie>
void find_runs(const Trie& t, const int32_t* const* suffixes, uint32_t n, uint32_t len, Run* runs, uint8_t* found) {
  for (uint32_t done = 0; done < n; done += kFindBatch) {
    const uint32_t m = std::min(n - done, kFindBatch);
    uint64_t node[kFindBatch];
    bool ok[kFindBatch];
    t.find_many(suffixes + done, m, len, node, ok);
    for (uint32_t i = 0; i < m; ++i) {
      Run& r = runs[done + i];
      r = Run{};
      if (ok[i]) t.children(len, node[i], &r.lo, &r.hi);
      r.suffix = suffixes[done + i];
      found[done + i] = ok[i] && r.lo < r.hi;
    }
    for (uint32_t i = 0; i < m; ++i)
      if (found[done + i]) runs[done + i].inv = 1.0f / static_cast<float>(t.count(len, node[i]));
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

template <class Trie>
void conditional_probs_many(const Trie& t, const int32_t* contexts, uint32_t n, uint32_t ctx_len,
                            const int32_t* candidates, uint32_t k, float* probs, int32_t* matched,
                            ProbsScratch& s) {
  std::fill(probs, probs + size_t{n} * k, 0.0f);
  std::fill(matched, matched + size_t{n} * k, 0);
  const uint32_t max_len = std::min<uint32_t>(t.order() - 1, ctx_len);
  if (max_len == 0 || k == 0 || n == 0) return;
  if (s.tables.size() < n) s.tables.resize(n);
  s.left.assign(n, k);
  s.steps.reserve(n);
  for (uint32_t q = 0; q < n; ++q) s.tables[q].build(candidates + size_t{q} * k, k);
  lookup_lengths(
      t, max_len, 1, n, k,
      [&](uint32_t q, uint32_t len) { return contexts + size_t{q} * ctx_len + (ctx_len - len); },
      [&](uint32_t q) { return &s.tables[q]; }, probs, matched, s.left.data(), s.steps);
}

// Each representation's instances (trie_index.h).
#define NGRAM_LOOKUP_STEPS(Trie)                                                                                 \
  template void find_runs<Trie>(const Trie&, const int32_t* const*, uint32_t, uint32_t, Run*, uint8_t*);        \
  template void conditional_probs_many<Trie>(const Trie&, const int32_t*, uint32_t, uint32_t, const int32_t*,   \
                                             uint32_t, float*, int32_t*, ProbsScratch&);
NGRAM_LOOKUP_STEPS(TrieV1)
NGRAM_LOOKUP_STEPS(TrieV1Ram)
NGRAM_LOOKUP_STEPS(TrieV2)
#undef NGRAM_LOOKUP_STEPS
template void find_runs<NoTrie>(const NoTrie&, const int32_t* const*, uint32_t, uint32_t, Run*, uint8_t*);

namespace {

template <class Id>
void conditional_probs_of(const TrieIndex& t, const Id* contexts, uint64_t batch, uint64_t ctx_len,
                          const Id* candidates, uint64_t k, float* probs, int32_t* matched, const Interrupt& stop) {
  if (ctx_len < 1) throw InvalidArgument("contexts: need at least one context token per query");
  if (k > (1u << 20)) throw InvalidArgument("candidates: " + std::to_string(k) + " per query, limit 1048576");
  check_tokens(t, contexts, batch * ctx_len, "contexts");
  check_tokens(t, candidates, batch * k, "candidates");
  const uint32_t max_len = static_cast<uint32_t>(std::min<uint64_t>(t.order() - 1, ctx_len));
  // Queries a step runs over at once: enough for their memory reads to
  // overlap, few enough for their candidate tables to stay in cache.
  const uint64_t chunk = std::clamp<uint64_t>(4096 / std::max<uint64_t>(k, 1), 1, kFindBatch);
  thread_local ProbsScratch scratch;
  thread_local std::vector<int32_t> ctx, cand;
  t.visit([&](const auto& trie) {
    for (uint64_t q0 = 0; q0 < batch; q0 += chunk) {
      stop.check();
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
      conditional_probs_many(trie, c, n, max_len, w, static_cast<uint32_t>(k), probs + q0 * k, matched + q0 * k,
                             scratch);
    }
  });
}

}  // namespace

void conditional_probs(const TrieIndex& t, const int64_t* contexts, uint64_t batch, uint64_t ctx_len,
                       const int64_t* candidates, uint64_t k, float* probs, int32_t* matched, const Interrupt& stop) {
  conditional_probs_of(t, contexts, batch, ctx_len, candidates, k, probs, matched, stop);
}

void conditional_probs(const TrieIndex& t, const int32_t* contexts, uint64_t batch, uint64_t ctx_len,
                       const int32_t* candidates, uint64_t k, float* probs, int32_t* matched, const Interrupt& stop) {
  conditional_probs_of(t, contexts, batch, ctx_len, candidates, k, probs, matched, stop);
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
  t.visit([&](const auto& trie) {
    for (uint32_t len = max_len; len >= 1; --len) {
      uint64_t node, lo, hi;
      if (!trie.find(ctx + (max_len - len), len, &node)) continue;
      trie.children(len, node, &lo, &hi);
      if (lo == hi) continue;
      std::vector<int32_t> toks(hi - lo);
      trie.run_tokens(ctx + (max_len - len), len, lo, hi, toks.data());
      for (uint64_t i = lo; i < hi; ++i) offer(trie.count(len + 1, i), toks[i - lo]);
      denom = trie.count(len, node);
      out.matched = static_cast<int32_t>(len);
      return;
    }
    for (uint64_t i = 0; i < trie.size(1); ++i) offer(trie.count(1, i), static_cast<int64_t>(i));
    denom = t.total_tokens();
  });
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
