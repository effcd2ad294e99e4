#include "search_simd.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "trie_index.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define NGRAM_HAVE_AVX2_SEARCH 1
#include <immintrin.h>
#endif

namespace ngram {

#ifdef NGRAM_HAVE_AVX2_SEARCH

bool simd_search_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("NGRAM_ENGINE_SIMD");
    return __builtin_cpu_supports("avx2") && !(env && std::strcmp(env, "0") == 0);
  }();
  return enabled;
}

namespace {

// Tokens of at most this many bits sit, with the bit offset of their first
// byte (0..7), inside one 32-bit load: a gather of 32-bit lanes reads them.
constexpr uint32_t kMaxWidth = 25;
static_assert(kSampleEvery == 16, "the block arithmetic below shifts by 4");
constexpr uint32_t kLanes = 8;
constexpr uint32_t kMaxVectors = (Level::kMaxBatch + kLanes - 1) / kLanes;

// The packed tokens at run positions pos (8 lanes).
struct RunTokens {
  const int* base;  // the run's first byte
  __m256i bit0, width, seven, mask;
  RunTokens() = default;
  __attribute__((target("avx2"))) RunTokens(const uint8_t* run_bytes, uint32_t first_bit, uint32_t w)
      : base(reinterpret_cast<const int*>(run_bytes)),
        bit0(_mm256_set1_epi32(static_cast<int>(first_bit))),
        width(_mm256_set1_epi32(static_cast<int>(w))),
        seven(_mm256_set1_epi32(7)),
        mask(_mm256_set1_epi32(static_cast<int>((1u << w) - 1))) {}
  __attribute__((target("avx2"))) __m256i at(__m256i pos) const {
    const __m256i bit = _mm256_add_epi32(_mm256_mullo_epi32(pos, width), bit0);
    const __m256i word = _mm256_i32gather_epi32(base, _mm256_srli_epi32(bit, 3), 1);
    return _mm256_and_si256(_mm256_srlv_epi32(word, _mm256_and_si256(bit, seven)), mask);
  }
};

// A run's samples at sample positions pos (8 lanes), read as RunTokens
// reads tokens.
struct RunSamples {
  const int* base;  // the run's first sample
  __attribute__((target("avx2"))) __m256i at(__m256i pos) const { return _mm256_i32gather_epi32(base, pos, 4); }
};

// Per lane: how many of the entries at positions first, first + 1, ...,
// first + 2 * top_step - 2 (each position clamped to `last`, which repeats
// the last entry and so keeps the sequence sorted) are below v. A
// branch-free binary search of steps top_step, ..., 2, 1 over n vectors,
// vector x reading through run[x]; they advance in lockstep so that their
// gathers overlap.
template <uint32_t n, class Run>
__attribute__((target("avx2"), always_inline)) inline void count_below(const Run* const* run, const __m256i* first,
                                                                      const __m256i* last, const __m256i* v,
                                                                      uint32_t top_step, __m256i* count) {
  for (uint32_t x = 0; x < n; ++x) count[x] = _mm256_setzero_si256();
  for (uint32_t step = top_step; step >= 1; step >>= 1) {
    const __m256i st = _mm256_set1_epi32(static_cast<int>(step));
    const __m256i ahead = _mm256_set1_epi32(static_cast<int>(step - 1));
    for (uint32_t x = 0; x < n; ++x) {
      const __m256i pos = _mm256_min_epu32(_mm256_add_epi32(_mm256_add_epi32(first[x], count[x]), ahead), last[x]);
      count[x] = _mm256_add_epi32(count[x], _mm256_and_si256(_mm256_cmpgt_epi32(v[x], run[x]->at(pos)), st));
    }
  }
}

// The smallest power of two p with 2p - 1 >= n.
uint32_t steps_covering(uint32_t n) {
  uint32_t p = 1;
  while (2 * p - 1 < n) p *= 2;
  return p;
}

// find_many_avx2 for `runs` runs and m <= vectors * 8 tokens, the same in
// every run; out[r * m + j], hits[r]. Compile-time counts keep the lanes'
// state in registers. Several runs advance in lockstep so that the memory
// reads of one overlap those of the others: each search is a chain of
// dependent reads, most of them cache misses. With more than one run, every
// run must be longer than 2 * kSampleEvery.
template <uint32_t vectors, uint32_t runs>
__attribute__((target("avx2"))) bool find_vectors(const Level& level, const uint64_t* lo, const uint64_t* hi,
                                                  const uint32_t* v, uint32_t m, uint64_t* out, uint64_t* hits) {
  constexpr uint32_t n = vectors * runs;  // vector x searches run x / vectors
  const uint32_t width = level.tokens.width();

  // Tokens as lanes; every stored token is below 2**width <= 2**25, so
  // capping v there keeps the signed compares exact. Spare lanes repeat the
  // last token and are not written back.
  alignas(32) uint32_t lanes[vectors * kLanes];
  for (uint32_t j = 0; j < vectors * kLanes; ++j) lanes[j] = std::min(v[j < m ? j : m - 1], 1u << kMaxWidth);
  __m256i vv[n], first[n], last[n], count[n], result[n], end[n];
  for (uint32_t x = 0; x < n; ++x) vv[x] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes) + x % vectors);

  RunTokens tokens[runs];
  const RunTokens* tokens_of[n];
  const __m256i one = _mm256_set1_epi32(1);
  for (uint32_t r = 0; r < runs; ++r) {
    const uint64_t first_bit = lo[r] * width;
    tokens[r] = RunTokens(level.tokens.data() + (first_bit >> 3), static_cast<uint32_t>(first_bit & 7), width);
    for (uint32_t i = 0; i < vectors; ++i) {
      tokens_of[r * vectors + i] = &tokens[r];
      end[r * vectors + i] = _mm256_set1_epi32(static_cast<int>(hi[r] - lo[r]));
    }
  }

  if (runs == 1 && hi[0] - lo[0] <= 2 * kSampleEvery) {
    // A short run: one search over all of it.
    const uint32_t n_run = static_cast<uint32_t>(hi[0] - lo[0]);
    for (uint32_t x = 0; x < n; ++x) {
      first[x] = _mm256_setzero_si256();
      last[x] = _mm256_sub_epi32(end[x], one);
    }
    count_below<n, RunTokens>(tokens_of, first, last, vv, steps_covering(n_run), count);
    for (uint32_t x = 0; x < n; ++x) result[x] = _mm256_min_epu32(count[x], end[x]);
  } else {
    // Samples inside each run: [s_lo, s_hi), at least two (as in the
    // portable search). a = how many of them are below v.
    RunSamples samples[runs];
    const RunSamples* samples_of[n];
    __m256i a[n], n_samples[n], d1[n];
    uint32_t top_step = 1;
    for (uint32_t r = 0; r < runs; ++r) {
      if (hi[r] - lo[r] <= 2 * kSampleEvery) return false;
      const uint64_t s_lo = (lo[r] + kSampleEvery - 1) / kSampleEvery;
      const uint64_t s_hi = std::min((hi[r] - 1) / kSampleEvery + 1, level.sample_count);  // less only in a corrupted file
      if (s_hi <= s_lo + 1) return false;
      samples[r] = RunSamples{reinterpret_cast<const int*>(level.token_samples + s_lo)};
      // Fifteen pivots, the samples at g - 1, 2g - 1, ..., 15g - 1 with
      // 16g > ns, split the run's ns samples into 16 groups; how many pivots
      // are below v picks each lane's group. Every lane reads the same
      // pivots, so they are plain loads, not the first four rounds of
      // gathers. Then a search of the group's first g - 1 samples (its last,
      // the next pivot, is not below v). Positions past the last sample
      // repeat it (the sequence stays sorted), hence the min with ns.
      const uint32_t ns = static_cast<uint32_t>(s_hi - s_lo);
      const uint32_t g = ns / 16 + 1;
      top_step = std::max(top_step, steps_covering(g - 1));  // a longer search of a run's group adds nothing
      __m256i* ar = a + r * vectors;
      for (uint32_t i = 0; i < vectors; ++i) ar[i] = _mm256_setzero_si256();
      for (uint32_t j = 1; j < 16; ++j) {
        const __m256i pivot = _mm256_set1_epi32(samples[r].base[std::min(j * g, ns) - 1]);
        for (uint32_t i = 0; i < vectors; ++i) ar[i] = _mm256_sub_epi32(ar[i], _mm256_cmpgt_epi32(vv[i], pivot));
      }
      const __m256i group = _mm256_set1_epi32(static_cast<int>(g));
      for (uint32_t i = 0; i < vectors; ++i) {
        const uint32_t x = r * vectors + i;
        samples_of[x] = &samples[r];
        n_samples[x] = _mm256_set1_epi32(static_cast<int>(ns));
        first[x] = _mm256_mullo_epi32(ar[i], group);
        last[x] = _mm256_set1_epi32(static_cast<int>(ns - 1));
        d1[x] = _mm256_set1_epi32(static_cast<int>(s_lo * kSampleEvery - lo[r] + 1));
      }
    }
    count_below<n, RunSamples>(samples_of, first, last, vv, top_step, count);
    // Samples before a are below v, the one at a (if any) is not: the answer
    // lies in the block ((s_lo + a - 1) * S, (s_lo + a) * S] clipped to the
    // run. In run positions, with d = s_lo * S - lo in [0, S): top = d + a*S + 1,
    // the block is [max(top - S, 0), min(top, run)); its last position is a
    // sample not below v or the run's end, so the 2S - 1 positions a search
    // of top step S/2 covers are enough.
    const __m256i s16 = _mm256_set1_epi32(static_cast<int>(kSampleEvery));
    const __m256i zero = _mm256_setzero_si256();
    __m256i block_end[n];
    for (uint32_t x = 0; x < n; ++x) {
      a[x] = _mm256_min_epu32(_mm256_add_epi32(first[x], count[x]), n_samples[x]);
      const __m256i top = _mm256_add_epi32(d1[x], _mm256_slli_epi32(a[x], 4));
      first[x] = _mm256_max_epi32(_mm256_sub_epi32(top, s16), zero);
      block_end[x] = _mm256_min_epu32(top, end[x]);
      last[x] = _mm256_sub_epi32(block_end[x], one);
    }
    count_below<n, RunTokens>(tokens_of, first, last, vv, kSampleEvery / 2, count);
    for (uint32_t x = 0; x < n; ++x) result[x] = _mm256_min_epu32(_mm256_add_epi32(first[x], count[x]), block_end[x]);
  }
  // Hits: the answer is inside the run and its token is v.
  for (uint32_t r = 0; r < runs; ++r) {
    uint64_t mask = 0;
    alignas(32) uint32_t pos[vectors * kLanes];
    for (uint32_t i = 0; i < vectors; ++i) {
      const uint32_t x = r * vectors + i;
      const __m256i inside = _mm256_cmpgt_epi32(end[x], result[x]);  // both below 2**31: signed is exact
      const __m256i at = _mm256_min_epu32(result[x], _mm256_sub_epi32(end[x], one));
      const __m256i same = _mm256_cmpeq_epi32(tokens[r].at(at), vv[x]);
      const int lanes_hit = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_and_si256(inside, same)));
      mask |= uint64_t{static_cast<uint32_t>(lanes_hit)} << (i * kLanes);
      _mm256_store_si256(reinterpret_cast<__m256i*>(pos) + i, result[x]);
    }
    hits[r] = m == 64 ? mask : mask & ((uint64_t{1} << m) - 1);
    for (uint32_t j = 0; j < m; ++j) out[r * m + j] = lo[r] + pos[j];
  }
  return true;
}

template <uint32_t runs>
__attribute__((target("avx2"))) bool find_dispatch(const Level& level, const uint64_t* lo, const uint64_t* hi,
                                                   const uint32_t* v, uint32_t m, uint64_t* out, uint64_t* hits) {
  // Bit offsets relative to a run's first byte stay below 2**31.
  if (level.tokens.width() > kMaxWidth || m == 0 || m > Level::kMaxBatch) return false;
  for (uint32_t r = 0; r < runs; ++r)
    if (hi[r] - lo[r] > (uint64_t{1} << 31) / 32) return false;
  switch ((m + kLanes - 1) / kLanes) {
    case 1: return find_vectors<1, runs>(level, lo, hi, v, m, out, hits);
    case 2: return find_vectors<2, runs>(level, lo, hi, v, m, out, hits);
    case 3: return find_vectors<3, runs>(level, lo, hi, v, m, out, hits);
    case 4: return find_vectors<4, runs>(level, lo, hi, v, m, out, hits);
    case 5: return find_vectors<5, runs>(level, lo, hi, v, m, out, hits);
    case 6: return find_vectors<6, runs>(level, lo, hi, v, m, out, hits);
    case 7: return find_vectors<7, runs>(level, lo, hi, v, m, out, hits);
    default: return find_vectors<8, runs>(level, lo, hi, v, m, out, hits);
  }
}

}  // namespace

bool find_many_avx2(const Level& level, uint64_t lo, uint64_t hi, const uint32_t* v, uint32_t m, uint64_t* out,
                    uint64_t* hits) {
  return find_dispatch<1>(level, &lo, &hi, v, m, out, hits);
}

bool find_many_runs_avx2(const Level& level, uint32_t runs, const uint64_t* lo, const uint64_t* hi, const uint32_t* v,
                         uint32_t m, uint64_t* out, uint64_t* hits) {
  static_assert(Level::kMaxRuns == 2, "one instance per run count");
  return runs == 2 && find_dispatch<2>(level, lo, hi, v, m, out, hits);
}

#else  // no AVX2 search on this platform

bool simd_search_enabled() { return false; }
bool find_many_avx2(const Level&, uint64_t, uint64_t, const uint32_t*, uint32_t, uint64_t*, uint64_t*) { return false; }
bool find_many_runs_avx2(const Level&, uint32_t, const uint64_t*, const uint64_t*, const uint32_t*, uint32_t,
                         uint64_t*, uint64_t*) {
  return false;
}

#endif

}  // namespace ngram
