#include "lookup_v2.h"

#include <algorithm>
#include <vector>

namespace ngram {
namespace {

// The entry of level k holding rank x in the run [lo, hi) (false if none):
// the run's values start at S[lo - 1] + 1 (0 for the first entry).
bool find_rank(const Level& L, uint64_t lo, uint64_t hi, uint64_t x, uint64_t* pos) {
  if (lo >= hi) return false;
  const uint64_t base = lo == 0 ? 0 : L.token_ranks[lo - 1] + 1;
  const uint64_t at = L.token_ranks.lower_bound(lo, hi, base + x);
  if (at >= hi || L.token_ranks[at] != base + x) return false;
  *pos = at;
  return true;
}

// The runs of the continuations of the last j tokens of suffix[0..len), in
// level j + 1, for j = 1..len - 1 (lo[j], hi[j]); false when one is not
// stored (then neither is the longer suffix).
bool chain(const TrieIndex& t, const int32_t* suffix, uint32_t len, uint64_t* lo, uint64_t* hi) {
  for (uint32_t j = 1; j < len; ++j) {
    uint64_t node;
    if (!find_v2(t, suffix + (len - j), j, &node)) return false;
    t.children(j, node, &lo[j], &hi[j]);
  }
  return true;
}

// Follows token w down the chain: its rank among the tokens that occur,
// then its entry in each run lo[1..top] of levels 2..top+1. The entry in
// level top + 1, if every step finds it.
bool descend(const TrieIndex& t, uint64_t w, const uint64_t* lo, const uint64_t* hi, uint32_t top, uint64_t* pos) {
  uint64_t x;
  if (!t.used_rank(w, &x)) return false;
  for (uint32_t j = 1; j <= top; ++j) {
    if (!find_rank(t.level(j + 1), lo[j], hi[j], x, pos)) return false;
    x = *pos - lo[j];
  }
  return true;
}

// The token of entry e of level k (k >= 2) in the run [lo[k-1], hi[k-1]).
uint64_t token_at(const TrieIndex& t, uint32_t k, uint64_t e, const uint64_t* lo) {
  const Level& L = t.level(k);
  const uint64_t base = lo[k - 1] == 0 ? 0 : L.token_ranks[lo[k - 1] - 1] + 1;
  const uint64_t x = L.token_ranks[e] - base;
  if (k == 2) return t.used_token(x);
  return token_at(t, k - 1, lo[k - 2] + x, lo);
}

}  // namespace

bool find_v2(const TrieIndex& t, const int32_t* toks, uint32_t len, uint64_t* index) {
  if (len == 0 || len > t.order()) return false;
  const uint64_t w0 = static_cast<uint32_t>(toks[0]);
  if (len == 1) {
    *index = w0;
    return w0 < t.level(1).size && t.level(1).count(w0) != 0;
  }
  // The prefix's entry, then the last token down the chain of the rest.
  uint64_t lo[kMaxOrder + 1], hi[kMaxOrder + 1], prefix;
  if (!find_v2(t, toks, len - 1, &prefix)) return false;
  if (!chain(t, toks, len - 1, lo, hi)) return false;
  t.children(len - 1, prefix, &lo[len - 1], &hi[len - 1]);
  return descend(t, static_cast<uint32_t>(toks[len - 1]), lo, hi, len - 1, index);
}

void run_tokens_v2(const TrieIndex& t, const int32_t* suffix, uint32_t len, uint64_t lo, uint64_t hi,
                   int32_t* out) {
  uint64_t clo[kMaxOrder + 1], chi[kMaxOrder + 1];
  if (!chain(t, suffix, len, clo, chi)) {
    std::fill(out, out + (hi - lo), -1);
    return;
  }
  clo[len] = lo;
  chi[len] = hi;
  for (uint64_t e = lo; e < hi; ++e) out[e - lo] = static_cast<int32_t>(token_at(t, len + 1, e, clo));
}

void lookup_in_runs_v2(const TrieIndex& t, uint32_t len, const Run* runs, uint32_t n,
                       const CandidateTable* const* tables, float* const* p, int32_t* const* m, uint32_t* matched) {
  const Level& next = t.level(len + 1);
  uint64_t lo[kMaxOrder + 1], hi[kMaxOrder + 1];
  for (uint32_t i = 0; i < n; ++i) {
    matched[i] = 0;
    if (!chain(t, runs[i].suffix, len, lo, hi)) continue;
    lo[len] = runs[i].lo;
    hi[len] = runs[i].hi;
    const CandidateTable& table = *tables[i];
    for (uint32_t j = 0; j < table.count; ++j) {
      if (m[i][j] != 0) continue;
      uint64_t pos;
      if (!descend(t, static_cast<uint32_t>(table.tokens[j]), lo, hi, len, &pos)) continue;
      p[i][j] = static_cast<float>(next.count(pos)) * runs[i].inv;
      m[i][j] = static_cast<int32_t>(len);
      ++matched[i];
    }
  }
}

}  // namespace ngram
