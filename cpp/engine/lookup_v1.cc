// TrieV1's reads: the searches in runs of sorted tokens and the lookups
// made of them.
#include "trie_v1.h"

#include <algorithm>
#include <cstring>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "search_simd.h"

namespace ngram {

namespace {

// Per lane j, a branch-free bisection of the sorted values at(base[j]) ..
// at(base[j] + n[j] - 1) towards v[j], all lanes in lockstep until each has
// one candidate left; lanes already at n[j] <= 1 add zero.
template <typename At>
void bisect_lanes(At at, const uint32_t* v, uint32_t m, uint64_t* base, uint64_t* n) {
  for (bool more = true; more;) {
    more = false;
    for (uint32_t j = 0; j < m; ++j) {
      const uint64_t half = n[j] / 2;
      base[j] += half & -static_cast<uint64_t>(at(base[j] + half) < v[j]);
      n[j] -= half;
      more |= n[j] > 1;
    }
  }
}

// Samples before index a are below v, the one at a (if any) is not: the
// answer lies in ((a-1) * S, a * S] clipped to the run [lo, hi) (min/max,
// not branches: at the run's first sample the lower end falls below lo, past
// its last the upper end above hi).
void sample_block(uint64_t lo, uint64_t hi, uint64_t a, uint64_t* b_lo, uint64_t* b_hi) {
  const uint64_t top = a * kSampleEvery + 1;
  *b_lo = std::max(lo, top - std::min(top, kSampleEvery));
  *b_hi = std::min(hi, top);
}

}  // namespace

// Below 8 tokens the vector search's spare lanes cost more than it saves.
uint64_t LevelV1::find_many(uint64_t lo, uint64_t hi, const uint32_t* v, uint32_t m, uint64_t* out) const {
  uint64_t hits = 0;
  if (m >= 8 && hi > lo && simd_search() != SimdSearch::kNone && find_many_simd(*this, lo, hi, v, m, out, &hits))
    return hits;
  lower_bound_many_portable(lo, hi, v, m, out);
  // tokens[hi] is in bounds (the packed section's trailing word).
  for (uint32_t j = 0; j < m; ++j) hits |= static_cast<uint64_t>((out[j] < hi) & (token(out[j]) == v[j])) << j;
  return hits;
}

void LevelV1::find_many_runs(uint32_t runs, const uint64_t* lo, const uint64_t* hi, const uint32_t* v, uint32_t m,
                           uint64_t* out, uint64_t* hits) const {
  if (runs > 1 && m >= 8 && simd_search() != SimdSearch::kNone &&
      find_many_runs_simd(*this, runs, lo, hi, v, m, out, hits))
    return;
  for (uint32_t r = 0; r < runs; ++r) hits[r] = find_many(lo[r], hi[r], v, m, out + r * m);
}

void LevelV1::lower_bound_many_portable(uint64_t lo, uint64_t hi, const uint32_t* v, uint32_t m, uint64_t* out) const {
  if (lo >= hi) {
    for (uint32_t j = 0; j < m; ++j) out[j] = lo;
    return;
  }
  if (hi - lo <= 2 * kSampleEvery) {
    for (uint32_t j = 0; j < m; ++j) out[j] = lo;
    for (uint64_t n = hi - lo; n > 1;) {
      const uint64_t half = n / 2;
      for (uint32_t j = 0; j < m; ++j) out[j] += half & -static_cast<uint64_t>(token(out[j] + half) < v[j]);
      n -= half;
    }
    for (uint32_t j = 0; j < m; ++j) out[j] += token(out[j]) < v[j];
    return;
  }
  // Samples inside the run: indices [s_lo, s_hi); at least two, as the run
  // is longer than 2 * kSampleEvery.
  const uint64_t s_lo = (lo + kSampleEvery - 1) / kSampleEvery;
  uint64_t s_hi = (hi - 1) / kSampleEvery + 1;
  if (s_hi > sample_count) s_hi = sample_count;  // only in a corrupted file
  if (s_hi <= s_lo) {
    for (uint32_t j = 0; j < m; ++j) out[j] = lower_bound_token(lo, hi, v[j]);
    return;
  }
  uint64_t a[kMaxBatch];  // per token: the first sample index >= v[j] (s_hi if none)
  for (uint32_t j = 0; j < m; ++j) a[j] = s_lo;
  for (uint64_t n = s_hi - s_lo; n > 1;) {
    const uint64_t half = n / 2;
    for (uint32_t j = 0; j < m; ++j) a[j] += half & -static_cast<uint64_t>(token_samples[a[j] + half] < v[j]);
    n -= half;
  }
  for (uint32_t j = 0; j < m; ++j) {
    a[j] += token_samples[a[j]] < v[j];
    uint64_t b_lo, b_hi;
    sample_block(lo, hi, a[j], &b_lo, &b_hi);
    out[j] = lower_bound_token(b_lo, b_hi, v[j]);
  }
}

void LevelV1::lower_bound_runs(const uint64_t* lo, const uint64_t* hi, const uint32_t* v, uint32_t m,
                             uint64_t* out) const {
  // Long runs first narrow to one block of kSampleEvery through the samples
  // (the bisection of lower_bound_many_portable, each lane its own range;
  // a lane whose range is down to one sample adds zero).
  uint64_t base[kMaxBatch], n[kMaxBatch];
  bool is_long[kMaxBatch];
  bool any_long = false;
  for (uint32_t j = 0; j < m; ++j) {
    const uint64_t s_lo = (lo[j] + kSampleEvery - 1) / kSampleEvery;
    const uint64_t s_hi = std::min((hi[j] - (hi[j] > 0)) / kSampleEvery + 1, sample_count);
    const bool long_run = hi[j] > lo[j] && hi[j] - lo[j] > 2 * kSampleEvery && s_hi > s_lo;
    base[j] = long_run ? s_lo : 0;
    n[j] = long_run ? s_hi - s_lo : 1;
    is_long[j] = long_run;
    any_long |= long_run;
  }
  if (any_long) {
    bisect_lanes([this](uint64_t i) { return uint64_t{token_samples[i]}; }, v, m, base, n);
  }
  for (uint32_t j = 0; j < m; ++j) {
    uint64_t b_lo = lo[j], b_hi = std::max(lo[j], hi[j]);
    if (is_long[j]) {
      sample_block(lo[j], hi[j], base[j] + (token_samples[base[j]] < v[j]), &b_lo, &b_hi);
    }
    base[j] = b_lo;
    n[j] = b_hi - b_lo;
  }
  // Then a bisection of the tokens of each lane's block (or short run).
  bisect_lanes([this](uint64_t i) { return token(i); }, v, m, base, n);
  // tokens[base] is in bounds also when a run is empty (base <= size, and
  // the packed section ends with a spare word).
  for (uint32_t j = 0; j < m; ++j) out[j] = base[j] + ((n[j] > 0) & (token(base[j]) < v[j]));
}

bool TrieV1::find(const int32_t* toks, uint32_t len, uint64_t* index) const {
  bool found;
  find_many(&toks, 1, len, index, &found);
  return found;
}

void TrieV1::find_many(const int32_t* const* toks, uint32_t n, uint32_t len, uint64_t* index, bool* found) const {
  for (uint32_t done = 0; done < n; done += LevelV1::kMaxBatch) {
    const uint32_t m = std::min(n - done, LevelV1::kMaxBatch);
    const int32_t* const* tk = toks + done;
    uint64_t* node = index + done;
    bool* ok = found + done;
    if (len == 0 || len > order()) {
      std::fill(ok, ok + m, false);
      continue;
    }
    const LevelV1& first = levels_[0];
    for (uint32_t i = 0; i < m; ++i) {
      node[i] = static_cast<uint32_t>(tk[i][0]);
      ok[i] = node[i] < first.size && first.count(node[i]) != 0;
    }
    uint64_t lo[LevelV1::kMaxBatch], hi[LevelV1::kMaxBatch], pos[LevelV1::kMaxBatch];
    uint32_t v[LevelV1::kMaxBatch];
    for (uint32_t k = 1; k < len; ++k) {
      for (uint32_t i = 0; i < m; ++i) {
        lo[i] = hi[i] = 0;
        if (ok[i]) children(k, node[i], &lo[i], &hi[i]);
        v[i] = static_cast<uint32_t>(tk[i][k]);
      }
      const LevelV1& next = levels_[k];
      next.lower_bound_runs(lo, hi, v, m, pos);
      for (uint32_t i = 0; i < m; ++i) {
        ok[i] = ok[i] && pos[i] < hi[i] && next.token(pos[i]) == v[i];
        node[i] = pos[i];
      }
    }
  }
}

void TrieV1::run_tokens(const int32_t* /*suffix*/, uint32_t len, uint64_t lo, uint64_t hi, int32_t* out) const {
  const LevelV1& next = levels_[len];
  for (uint64_t i = lo; i < hi; ++i) out[i - lo] = static_cast<int32_t>(next.token(i));
}

namespace {

// For each set bit i of hits (candidate idx[i] found at pos[i] of `next`;
// idx null: candidate i): p = its count / the context's, m = len. Returns
// how many. Walking the set bits, not testing each: hits are a coin toss
// for the predictor.
// Inlined into each caller, so that the idx test folds away.
inline __attribute__((always_inline)) uint32_t record_hits(const LevelV1& next, uint64_t hits, const uint64_t* pos,
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
uint32_t search_run(const LevelV1& next, uint64_t lo, uint64_t hi, uint32_t len, float inv, const int32_t* w,
                    uint32_t k, float* p, int32_t* m) {
  uint32_t found = 0;
  // The first lookup of a query (nothing matched yet, the common case in
  // tree pruning) searches the candidates where they lie.
  if (k != 0 && k <= LevelV1::kMaxBatch && unmatched_mask(m, k) == (~uint64_t{0} >> (64 - k))) {
    uint64_t pos[LevelV1::kMaxBatch];
    const uint64_t hits = next.find_many(lo, hi, reinterpret_cast<const uint32_t*>(w), k, pos);
    return record_hits(next, hits, pos, nullptr, inv, len, p, m);
  }
  // Unmatched candidates, searched in lockstep batches.
  for (uint32_t start = 0; start < k;) {
    uint32_t idx[LevelV1::kMaxBatch], tok[LevelV1::kMaxBatch];
    uint64_t pos[LevelV1::kMaxBatch];
    uint32_t n = 0;
    for (; start < k && n < LevelV1::kMaxBatch; ++start) {
      if (m[start] != 0) continue;
      idx[n] = start;
      tok[n++] = static_cast<uint32_t>(w[start]);
    }
    found += record_hits(next, next.find_many(lo, hi, tok, n, pos), pos, idx, inv, len, p, m);
  }
  return found;
}

// One run of lookup_in_runs, alone: short runs scanned, long ones searched.
uint32_t lookup_in_run(const LevelV1& next, uint32_t len, const Run& run, const CandidateTable& table, float* p,
                       int32_t* m) {
  const uint64_t lo = run.lo, hi = run.hi;
  const float inv = run.inv;
  if (hi - lo > TrieV1::kScanFactor * uint64_t{table.count})
    return search_run(next, lo, hi, len, inv, table.tokens, table.count, p, m);
  if (table.count <= LevelV1::kMaxBatch && simd_search() != SimdSearch::kNone) {
    uint64_t pos[LevelV1::kMaxBatch];
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
        p[j] = static_cast<float>(next.count(i)) * inv;
        m[j] = static_cast<int32_t>(len);
        ++found;
      }
    }
  }
  return found;
}

}  // namespace

void TrieV1::lookup_in_runs(uint32_t len, const Run* runs, uint32_t n, const CandidateTable* const* tables,
                            float* const* p, int32_t* const* m, uint32_t* matched) const {
  const LevelV1& next = levels_[len];
  // Runs searched (not scanned) go two at a time in lockstep, each for all
  // its candidates (a hit of one already matched is dropped), so that the
  // cache misses of one overlap those of the other.
  auto searched = [&](uint32_t i) {
    const uint32_t k = tables[i]->count;
    return k >= 8 && k <= LevelV1::kMaxBatch &&
           runs[i].hi - runs[i].lo > std::max<uint64_t>(kScanFactor * uint64_t{k}, 2 * kSampleEvery);
  };
  auto search_pair = [&](uint32_t a, uint32_t b) {
    const uint32_t k = tables[a]->count;
    const uint32_t pair[2] = {a, b};
    uint64_t lo[2] = {runs[a].lo, runs[b].lo}, hi[2] = {runs[a].hi, runs[b].hi}, hits[2];
    uint64_t pos[2 * LevelV1::kMaxBatch];
    // One list of candidates when the runs share it, else both side by side.
    uint32_t v[2 * LevelV1::kMaxBatch];
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
      matched[i] = lookup_in_run(next, len, runs[i], *tables[i], p[i], m[i]);
    } else if (waiting == n) {
      waiting = i;
    } else if (tables[waiting]->count != tables[i]->count) {
      matched[waiting] = lookup_in_run(next, len, runs[waiting], *tables[waiting], p[waiting], m[waiting]);
      waiting = i;
    } else {
      search_pair(waiting, i);
      waiting = n;
    }
  }
  if (waiting != n) matched[waiting] = lookup_in_run(next, len, runs[waiting], *tables[waiting], p[waiting], m[waiting]);
}

}  // namespace ngram
