#include "search_simd.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "trie_v1.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define NGRAM_HAVE_SIMD_SEARCH 1
#include <immintrin.h>
#endif

namespace ngram {

const char* simd_search_name(SimdSearch s) {
  return s == SimdSearch::kAvx512 ? "avx512" : s == SimdSearch::kAvx2 ? "avx2" : "none";
}

#ifdef NGRAM_HAVE_SIMD_SEARCH

// The default is AVX2, and AVX-512 only on AMD's CPUs: there its
// sixteen-lane gathers beat two of eight lanes, on Intel's they cost more
// (CHANGELOG.md has the measurements).
SimdSearch simd_search() {
  static const SimdSearch chosen = [] {
    const char* env = std::getenv("NGRAM_ENGINE_SIMD");
    const std::string want = env ? env : "";
    if (want == "0" || !__builtin_cpu_supports("avx2")) return SimdSearch::kNone;
    const bool avx512 = __builtin_cpu_supports("avx512f");
    if (want == "avx2") return SimdSearch::kAvx2;
    if (want == "avx512") return avx512 ? SimdSearch::kAvx512 : SimdSearch::kAvx2;
    return avx512 && __builtin_cpu_is("amd") ? SimdSearch::kAvx512 : SimdSearch::kAvx2;
  }();
  return chosen;
}

namespace {

// Tokens of at most this many bits sit, with the bit offset of their first
// byte (0..7), inside one 32-bit load: a gather of 32-bit lanes reads them.
constexpr uint32_t kMaxWidth = 25;
static_assert(kSampleEvery == 16, "the block arithmetic shifts by 4");

// The smallest power of two p with 2p - 1 >= n.
uint32_t steps_covering(uint32_t n) {
  uint32_t p = 1;
  while (2 * p - 1 < n) p *= 2;
  return p;
}

#define NGRAM_OP __attribute__((target("avx2"), always_inline)) static inline
struct Avx2Ops {
  using V = __m256i;
  static constexpr uint32_t kLanes = 8;
  NGRAM_OP V set1(int x) { return _mm256_set1_epi32(x); }
  NGRAM_OP V zero() { return _mm256_setzero_si256(); }
  NGRAM_OP V loadu(const uint32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  NGRAM_OP void storeu(uint32_t* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  NGRAM_OP V add(V a, V b) { return _mm256_add_epi32(a, b); }
  NGRAM_OP V sub(V a, V b) { return _mm256_sub_epi32(a, b); }
  NGRAM_OP V min_epu32(V a, V b) { return _mm256_min_epu32(a, b); }
  NGRAM_OP V max_epi32(V a, V b) { return _mm256_max_epi32(a, b); }
  NGRAM_OP V mullo(V a, V b) { return _mm256_mullo_epi32(a, b); }
  NGRAM_OP V slli4(V a) { return _mm256_slli_epi32(a, 4); }
  NGRAM_OP V srli3(V a) { return _mm256_srli_epi32(a, 3); }
  NGRAM_OP V srlv(V a, V n) { return _mm256_srlv_epi32(a, n); }
  NGRAM_OP V and_(V a, V b) { return _mm256_and_si256(a, b); }
  NGRAM_OP V gather4(const int* base, V i) { return _mm256_i32gather_epi32(base, i, 4); }
  NGRAM_OP V gather1(const int* base, V i) { return _mm256_i32gather_epi32(base, i, 1); }
  NGRAM_OP V add_where_greater(V acc, V a, V b, V step) {
    return _mm256_add_epi32(acc, _mm256_and_si256(_mm256_cmpgt_epi32(a, b), step));
  }
  NGRAM_OP uint64_t eq_mask(V a, V b) {
    return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a, b))));
  }
  NGRAM_OP uint64_t hit_mask(V end, V result, V token, V v) {  // both below 2**31: signed compares are exact
    const V hit = _mm256_and_si256(_mm256_cmpgt_epi32(end, result), _mm256_cmpeq_epi32(token, v));
    return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(hit)));
  }
};
#undef NGRAM_OP

#define NGRAM_OP __attribute__((target("avx512f"), always_inline)) static inline
struct Avx512Ops {
  using V = __m512i;
  static constexpr uint32_t kLanes = 16;
  NGRAM_OP V set1(int x) { return _mm512_set1_epi32(x); }
  NGRAM_OP V zero() { return _mm512_setzero_si512(); }
  NGRAM_OP V loadu(const uint32_t* p) { return _mm512_loadu_si512(p); }
  NGRAM_OP void storeu(uint32_t* p, V v) { _mm512_storeu_si512(p, v); }
  NGRAM_OP V add(V a, V b) { return _mm512_add_epi32(a, b); }
  NGRAM_OP V sub(V a, V b) { return _mm512_sub_epi32(a, b); }
  NGRAM_OP V min_epu32(V a, V b) { return _mm512_min_epu32(a, b); }
  NGRAM_OP V max_epi32(V a, V b) { return _mm512_max_epi32(a, b); }
  NGRAM_OP V mullo(V a, V b) { return _mm512_mullo_epi32(a, b); }
  NGRAM_OP V slli4(V a) { return _mm512_slli_epi32(a, 4); }
  NGRAM_OP V srli3(V a) { return _mm512_srli_epi32(a, 3); }
  NGRAM_OP V srlv(V a, V n) { return _mm512_srlv_epi32(a, n); }
  NGRAM_OP V and_(V a, V b) { return _mm512_and_si512(a, b); }
  NGRAM_OP V gather4(const int* base, V i) { return _mm512_i32gather_epi32(i, base, 4); }
  NGRAM_OP V gather1(const int* base, V i) { return _mm512_i32gather_epi32(i, base, 1); }
  NGRAM_OP V add_where_greater(V acc, V a, V b, V step) {
    return _mm512_mask_add_epi32(acc, _mm512_cmpgt_epi32_mask(a, b), acc, step);
  }
  NGRAM_OP uint64_t eq_mask(V a, V b) { return _mm512_cmpeq_epi32_mask(a, b); }
  NGRAM_OP uint64_t hit_mask(V end, V result, V token, V v) {
    return _mm512_cmpgt_epi32_mask(end, result) & _mm512_cmpeq_epi32_mask(token, v);
  }
};
#undef NGRAM_OP

namespace avx2 {
using Ops = Avx2Ops;
#define NGRAM_SIMD_TARGET "avx2"
#include "search_kernel.inc"
#undef NGRAM_SIMD_TARGET
}  // namespace avx2

// GCC 12 warns of its own AVX-512 intrinsics (their undefined-vector
// placeholders) as maybe uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace avx512 {
using Ops = Avx512Ops;
#define NGRAM_SIMD_TARGET "avx512f"
#include "search_kernel.inc"
#undef NGRAM_SIMD_TARGET
}  // namespace avx512
#pragma GCC diagnostic pop

}  // namespace

bool find_many_simd(const LevelV1& level, uint64_t lo, uint64_t hi, const uint32_t* v, uint32_t m, uint64_t* out,
                    uint64_t* hits) {
  return simd_search() == SimdSearch::kAvx512 ? avx512::find_runs<1>(level, &lo, &hi, v, 0, m, out, hits)
                                              : avx2::find_runs<1>(level, &lo, &hi, v, 0, m, out, hits);
}

bool find_many_runs_simd(const LevelV1& level, uint32_t runs, const uint64_t* lo, const uint64_t* hi, const uint32_t* v,
                         uint32_t m, uint64_t* out, uint64_t* hits, uint32_t v_stride) {
  static_assert(LevelV1::kMaxRuns == 2, "one instance per run count");
  if (runs != 2) return false;
  return simd_search() == SimdSearch::kAvx512 ? avx512::find_runs<2>(level, lo, hi, v, v_stride, m, out, hits)
                                              : avx2::find_runs<2>(level, lo, hi, v, v_stride, m, out, hits);
}

uint64_t scan_run_simd(const LevelV1& level, uint64_t lo, uint64_t hi, const uint32_t* v, uint32_t m, uint64_t* out) {
  return simd_search() == SimdSearch::kAvx512 ? avx512::scan_run(level, lo, hi, v, m, out)
                                              : avx2::scan_run(level, lo, hi, v, m, out);
}

#else  // no vector search on this platform

SimdSearch simd_search() { return SimdSearch::kNone; }
bool find_many_simd(const LevelV1&, uint64_t, uint64_t, const uint32_t*, uint32_t, uint64_t*, uint64_t*) { return false; }
bool find_many_runs_simd(const LevelV1&, uint32_t, const uint64_t*, const uint64_t*, const uint32_t*, uint32_t,
                         uint64_t*, uint64_t*, uint32_t) {
  return false;
}
uint64_t scan_run_simd(const LevelV1&, uint64_t, uint64_t, const uint32_t*, uint32_t, uint64_t*) { return 0; }

#endif

}  // namespace ngram
