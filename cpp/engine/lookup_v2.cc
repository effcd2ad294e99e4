#include "lookup_v2.h"

#include <algorithm>
#include <vector>

namespace ngram {
namespace {

// The first i < k with r[i] >= v in the sorted r[0..k) (k if none),
// without branches on the data: the lanes' targets are unpredictable.
uint64_t lower_bound_branchless(const uint64_t* r, uint64_t k, uint64_t v) {
  if (k == 0) return 0;
  const uint64_t* f = r;
  for (uint64_t n = k; n > 1;) {
    const uint64_t half = n / 2;
    f += f[half - 1] < v ? half : 0;
    n -= half;
  }
  return static_cast<uint64_t>(f - r) + (*f < v);
}

// The first value of the run starting at entry lo: S[lo - 1] + 1 (0 for the first entry).
uint64_t run_base(const Level& L, uint64_t lo) { return lo == 0 ? 0 : L.token_ranks[lo - 1] + 1; }

// The entry of level L holding rank x in the run [lo, hi) whose values start at base.
bool find_rank(const Level& L, uint64_t lo, uint64_t hi, uint64_t base, uint64_t x, uint64_t* pos) {
  if (lo >= hi) return false;
  uint64_t value;
  const uint64_t at = L.token_ranks.lower_bound(lo, hi, base + x, &value);
  *pos = at;
  return at < hi && value == base + x;
}

// The runs of the continuations of the last j tokens of suffix[0..len), in
// level j + 1, for j = 1..len - 1 (lo[j], hi[j]), and those suffixes'
// entries (node[j], in level j); false when one is not stored (then neither
// is the longer suffix).
bool chain(const TrieIndex& t, const int32_t* suffix, uint32_t len, uint64_t* lo, uint64_t* hi,
           uint64_t* node = nullptr) {
  for (uint32_t j = 1; j < len; ++j) {
    uint64_t at;
    if (!find_v2(t, suffix + (len - j), j, &at)) return false;
    t.children(j, at, &lo[j], &hi[j]);
    if (node) node[j] = at;
  }
  return true;
}

// The first values of the runs lo[1..top] (run j in level j + 1).
void chain_bases(const TrieIndex& t, const uint64_t* lo, const uint64_t* hi, uint32_t top, uint64_t* base) {
  for (uint32_t j = 1; j <= top; ++j) base[j] = lo[j] < hi[j] ? run_base(t.level(j + 1), lo[j]) : 0;
}

// Follows token w down the chain: its rank among the tokens that occur,
// then its entry in each run lo[1..top] of levels 2..top+1. The entry in
// level top + 1, if every step finds it.
bool descend(const TrieIndex& t, uint64_t w, const uint64_t* lo, const uint64_t* hi, const uint64_t* base,
             uint32_t top, uint64_t* pos) {
  uint64_t x;
  if (!t.used_rank(w, &x)) return false;
  for (uint32_t j = 1; j <= top; ++j) {
    if (!find_rank(t.level(j + 1), lo[j], hi[j], base[j], x, pos)) return false;
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
  uint64_t base[kMaxOrder + 1];
  chain_bases(t, lo, hi, len - 1, base);
  return descend(t, static_cast<uint32_t>(toks[len - 1]), lo, hi, base, len - 1, index);
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
  constexpr uint32_t kLanes = ChunkedEliasFanoView::kMaxLanes;
  // A run is decoded once (then bisected in memory) rather than searched
  // per candidate when it holds at most kDecodePerLane values per candidate
  // to look up: decoding a value costs a small fraction of a search.
  constexpr uint64_t kDecodePerLane = 4, kDecodeMin = 32, kDecodeMax = 1024;
  uint64_t lo[kMaxOrder + 1], hi[kMaxOrder + 1], node[kMaxOrder + 1], base[kMaxOrder + 1];
  float inv[kMaxOrder + 1];
  thread_local std::vector<uint64_t> run_values[kMaxOrder + 1];
  bool decoded[kMaxOrder + 1];
  // Per lane (one candidate): its index, its rank in the next run, and the
  // deepest entry found so far (at, in level deepest + 1).
  uint32_t cand[kLanes], deepest[kLanes], alive[kLanes];
  uint64_t x[kLanes], at[kLanes], target[kLanes], pos[kLanes], value[kLanes];
  for (uint32_t i = 0; i < n; ++i) {
    matched[i] = 0;
    if (!chain(t, runs[i].suffix, len, lo, hi, node)) continue;
    lo[len] = runs[i].lo;
    hi[len] = runs[i].hi;
    chain_bases(t, lo, hi, len, base);
    for (uint32_t j = 1; j < len; ++j) inv[j] = 1.0f / static_cast<float>(t.level(j).count(node[j]));
    inv[len] = runs[i].inv;
    std::fill(decoded, decoded + len + 1, false);
    const CandidateTable& table = *tables[i];
    for (uint32_t from = 0; from < table.count;) {
      // Up to kLanes unmatched candidates that occur at all.
      uint32_t lanes = 0;
      for (; from < table.count && lanes < kLanes; ++from) {
        if (m[i][from] != 0) continue;
        ++matched[i];  // resolved here, found or not (see lookup_v2.h)
        if (!t.used_rank(static_cast<uint32_t>(table.tokens[from]), &x[lanes])) continue;
        cand[lanes] = from;
        deepest[lanes] = 0;
        ++lanes;
      }
      // Down the chain, all lanes a level at a time: each candidate's answer
      // is at the longest suffix that has it (the shorter lengths' steps
      // would find the same), or nowhere.
      uint32_t live = lanes;
      for (uint32_t l = 0; l < lanes; ++l) alive[l] = l;
      for (uint32_t j = 1; j <= len && live > 0; ++j) {
        const uint64_t k = hi[j] - lo[j];
        if (!decoded[j] && k <= kDecodeMax && k <= std::max(kDecodeMin, kDecodePerLane * live)) {
          run_values[j].resize(k);
          t.level(j + 1).token_ranks.decode(lo[j], hi[j], run_values[j].data());
          decoded[j] = true;
        }
        if (decoded[j]) {
          const uint64_t* r = run_values[j].data();
          for (uint32_t a = 0; a < live; ++a) {
            const uint64_t f = lower_bound_branchless(r, k, base[j] + x[alive[a]]);
            pos[a] = lo[j] + f;
            value[a] = f == k ? UINT64_MAX : r[f];
          }
        } else {
          for (uint32_t a = 0; a < live; ++a) target[a] = base[j] + x[alive[a]];
          t.level(j + 1).token_ranks.lower_bound_many(lo[j], hi[j], target, live, pos, value);
        }
        uint32_t still = 0;
        for (uint32_t a = 0; a < live; ++a) {
          const uint32_t l = alive[a];
          if (pos[a] >= hi[j] || value[a] != base[j] + x[l]) continue;
          deepest[l] = j;
          at[l] = pos[a];
          x[l] = pos[a] - lo[j];
          alive[still++] = l;
        }
        live = still;
      }
      for (uint32_t l = 0; l < lanes; ++l) {
        if (deepest[l] == 0) continue;
        const uint32_t c = cand[l];
        p[i][c] = static_cast<float>(t.level(deepest[l] + 1).count(at[l])) * inv[deepest[l]];
        m[i][c] = static_cast<int32_t>(deepest[l]);
      }
    }
  }
}

}  // namespace ngram
