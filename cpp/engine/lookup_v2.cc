// TrieV2's reads (trie_v2.h): each lookup follows a token down the chain
// of its context's suffixes, shortest first.
#include "trie_v2.h"

#include <algorithm>
#include <vector>

namespace ngram {
namespace {

// The first i < k with r[i] >= v in the sorted r[0..k) (k if none),
// without branches on the data: the lanes' targets are unpredictable.
uint64_t lower_bound_branchless(const uint64_t* r, uint64_t k, uint64_t v) {
  if (k == 0) return 0;
  uint64_t f = 0;
  for (uint64_t n = k; n > 1;) {
    const uint64_t half = n / 2;
    f += half & -static_cast<uint64_t>(r[f + half - 1] < v);  // a mask: the compiler made a ternary a branch
    n -= half;
  }
  return f + (r[f] < v);
}

// A run of level k (its entries [lo, hi)) as a search in it needs it:
// one of level 2's bitmaps (dense >= 0), or the values S[s .. s + hi - lo)
// of the level's sequence, whose rank 0 is base.
struct RunRef {
  uint64_t lo = 0, hi = 0;
  int64_t dense = -1;
  uint64_t s = 0, base = 0;
};

RunRef open_run(const LevelV2& L, uint64_t lo, uint64_t hi) {
  RunRef r;
  r.lo = lo;
  r.hi = hi;
  if (lo >= hi) return r;
  r.dense = L.dense.find(lo);
  if (r.dense >= 0) return r;
  r.s = L.dense.sequence_index(lo);
  r.base = r.s == 0 ? 0 : L.token_ranks[r.s - 1] + 1;
  return r;
}

// The entry of level L holding rank x in run r.
bool find_rank(const LevelV2& L, const RunRef& r, uint64_t x, uint64_t* pos) {
  if (r.lo >= r.hi) return false;
  const uint64_t n = r.hi - r.lo;
  if (r.dense >= 0) {
    uint64_t below;
    if (!L.dense.rank(static_cast<uint64_t>(r.dense), x, &below) || below >= n) return false;
    *pos = r.lo + below;
    return true;
  }
  uint64_t at;
  if (!L.token_ranks.find(r.s, r.s + n, r.base + x, &at)) return false;
  *pos = r.lo + (at - r.s);
  return true;
}

// The rank held by entry e of run r of level L.
uint64_t rank_at(const LevelV2& L, const RunRef& r, uint64_t e) {
  if (r.dense >= 0) return L.dense.select(static_cast<uint64_t>(r.dense), e - r.lo);
  return L.token_ranks[r.s + (e - r.lo)] - r.base;
}

// The runs of the continuations of the last j tokens of suffix[0..len), in
// level j + 1, for j = 1..len - 1 (lo[j], hi[j]), and those suffixes'
// entries (node[j], in level j); false when one is not stored (then neither
// is the longer suffix).
bool chain(const TrieV2& t, const int32_t* suffix, uint32_t len, uint64_t* lo, uint64_t* hi,
           uint64_t* node = nullptr) {
  for (uint32_t j = 1; j < len; ++j) {
    uint64_t at;
    if (!t.find(suffix + (len - j), j, &at)) return false;
    t.children(j, at, &lo[j], &hi[j]);
    if (node) node[j] = at;
  }
  return true;
}

// The runs lo[1..top], hi[1..top] (run j in level j + 1), ready to search.
void open_runs(const TrieV2& t, const uint64_t* lo, const uint64_t* hi, uint32_t top, RunRef* run) {
  for (uint32_t j = 1; j <= top; ++j) run[j] = open_run(t.level(j + 1), lo[j], hi[j]);
}

// Follows token w down the chain: its rank among the tokens that occur,
// then its entry in each run run[1..top] of levels 2..top+1. The entry in
// level top + 1, if every step finds it.
bool descend(const TrieV2& t, uint64_t w, const RunRef* run, uint32_t top, uint64_t* pos) {
  uint64_t x;
  if (!t.used_rank(w, &x)) return false;
  for (uint32_t j = 1; j <= top; ++j) {
    if (!find_rank(t.level(j + 1), run[j], x, pos)) return false;
    x = *pos - run[j].lo;
  }
  return true;
}

// The token of entry e of level k (k >= 2) in the run run[k-1].
uint64_t token_at(const TrieV2& t, uint32_t k, uint64_t e, const RunRef* run) {
  const uint64_t x = rank_at(t.level(k), run[k - 1], e);
  if (k == 2) return t.used_token(x);
  return token_at(t, k - 1, run[k - 2].lo + x, run);
}

}  // namespace

bool TrieV2::find(const int32_t* toks, uint32_t len, uint64_t* index) const {
  if (len == 0 || len > order()) return false;
  const uint64_t w0 = static_cast<uint32_t>(toks[0]);
  if (len == 1) {  // a token is stored when it occurs
    uint64_t rank;
    *index = w0;
    return used_rank(w0, &rank);
  }
  // The prefix's entry, then the last token down the chain of the rest.
  uint64_t lo[kMaxOrder + 1], hi[kMaxOrder + 1], prefix;
  if (!find(toks, len - 1, &prefix)) return false;
  if (!chain(*this, toks, len - 1, lo, hi)) return false;
  children(len - 1, prefix, &lo[len - 1], &hi[len - 1]);
  RunRef run[kMaxOrder + 1];
  open_runs(*this, lo, hi, len - 1, run);
  return descend(*this, static_cast<uint32_t>(toks[len - 1]), run, len - 1, index);
}

void TrieV2::run_tokens(const int32_t* suffix, uint32_t len, uint64_t lo, uint64_t hi, int32_t* out) const {
  uint64_t clo[kMaxOrder + 1], chi[kMaxOrder + 1];
  if (!chain(*this, suffix, len, clo, chi)) {
    std::fill(out, out + (hi - lo), -1);
    return;
  }
  clo[len] = lo;
  chi[len] = hi;
  RunRef run[kMaxOrder + 1];
  open_runs(*this, clo, chi, len, run);
  for (uint64_t e = lo; e < hi; ++e) out[e - lo] = static_cast<int32_t>(token_at(*this, len + 1, e, run));
}

void TrieV2::lookup_in_runs(uint32_t len, const Run* runs, uint32_t n, const CandidateTable* const* tables,
                            float* const* p, int32_t* const* m, uint32_t* matched) const {
  constexpr uint32_t kLanes = ChunkedEliasFanoView::kMaxLanes;
  // A run is decoded once (then bisected in memory) rather than searched
  // per candidate when it holds at most kDecodePerLane values per candidate
  // to look up: decoding a value costs a small fraction of a search.
  constexpr uint64_t kDecodePerLane = 4, kDecodeMin = 32, kDecodeMax = 1024;
  uint64_t lo[kMaxOrder + 1], hi[kMaxOrder + 1], node[kMaxOrder + 1];
  RunRef run[kMaxOrder + 1];
  float inv[kMaxOrder + 1];
  thread_local std::vector<uint64_t> run_values[kMaxOrder + 1];
  bool decoded[kMaxOrder + 1];
  // Per lane (one candidate): its index, its rank in the next run, and the
  // deepest entry found so far (at, in level deepest + 1).
  uint32_t cand[kLanes], deepest[kLanes], alive[kLanes];
  uint64_t x[kLanes], at[kLanes], target[kLanes], pos[kLanes];
  bool hit[kLanes];
  for (uint32_t i = 0; i < n; ++i) {
    matched[i] = 0;
    if (!chain(*this, runs[i].suffix, len, lo, hi, node)) continue;
    lo[len] = runs[i].lo;
    hi[len] = runs[i].hi;
    open_runs(*this, lo, hi, len, run);
    for (uint32_t j = 1; j < len; ++j) inv[j] = 1.0f / static_cast<float>(count(j, node[j]));
    inv[len] = runs[i].inv;
    std::fill(decoded, decoded + len + 1, false);
    const CandidateTable& table = *tables[i];
    for (uint32_t from = 0; from < table.count;) {
      // Up to kLanes unmatched candidates that occur at all.
      uint32_t lanes = 0;
      for (; from < table.count && lanes < kLanes; ++from) {
        if (m[i][from] != 0) continue;
        ++matched[i];  // resolved here, found or not (see TrieV2::lookup_in_runs)
        if (!used_rank(static_cast<uint32_t>(table.tokens[from]), &x[lanes])) continue;
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
        const RunRef& r = run[j];
        const LevelV2& L = level(j + 1);
        const uint64_t k = r.hi - r.lo;
        // Each live lane's entry in the run: pos[a] (an entry), hit[a].
        if (r.dense >= 0) {
          const uint64_t d = static_cast<uint64_t>(r.dense);
          for (uint32_t a = 0; a < live; ++a) {
            uint64_t below = 0;
            hit[a] = L.dense.rank(d, x[alive[a]], &below) && below < k;
            pos[a] = r.lo + below;
          }
        } else {
          if (!decoded[j] && k <= kDecodeMax && k <= std::max(kDecodeMin, kDecodePerLane * live)) {
            run_values[j].resize(k);
            L.token_ranks.decode(r.s, r.s + k, run_values[j].data());
            decoded[j] = true;
          }
          if (decoded[j]) {
            const uint64_t* v = run_values[j].data();
            for (uint32_t a = 0; a < live; ++a) {
              const uint64_t f = lower_bound_branchless(v, k, r.base + x[alive[a]]);
              pos[a] = r.lo + f;
              hit[a] = f < k && v[f] == r.base + x[alive[a]];
            }
          } else {
            for (uint32_t a = 0; a < live; ++a) target[a] = r.base + x[alive[a]];
            L.token_ranks.find_many(r.s, r.s + k, target, live, pos, hit);
            for (uint32_t a = 0; a < live; ++a) pos[a] = r.lo + (pos[a] - r.s);
          }
        }
        // The lanes that hit go on (selects, not branches: a hit is a coin
        // toss for the predictor).
        uint32_t still = 0;
        for (uint32_t a = 0; a < live; ++a) {
          const uint32_t l = alive[a];
          deepest[l] = hit[a] ? j : deepest[l];
          at[l] = hit[a] ? pos[a] : at[l];
          x[l] = pos[a] - r.lo;
          alive[still] = l;
          still += hit[a];
        }
        live = still;
      }
      uint32_t found = 0;
      for (uint32_t l = 0; l < lanes; ++l) {
        alive[found] = l;
        found += deepest[l] != 0;
      }
      for (uint32_t f = 0; f < found; ++f) {
        const uint32_t l = alive[f], c = cand[l];
        p[i][c] = static_cast<float>(count(deepest[l] + 1, at[l])) * inv[deepest[l]];
        m[i][c] = static_cast<int32_t>(deepest[l]);
      }
    }
  }
}

}  // namespace ngram
