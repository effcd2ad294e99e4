// LevelV1::find_many with vector gathers: eight (AVX2) or sixteen (AVX-512)
// searches advance per instruction instead of one. Tree pruning and
// conditional probabilities spend most of their time in these searches (25
// candidates looked up in one run of continuations, thousands of times a
// tree), so this is the engine's hot loop. The answers equal the portable
// search's exactly; tests run every path.
#pragma once
#include <cstdint>

namespace ngram {

struct LevelV1;

// The vector search LevelV1::find_many uses: AVX2, or AVX-512 on an AMD CPU
// that has it (the faster on each, as measured), unless the environment
// variable NGRAM_ENGINE_SIMD says otherwise ("0": none, the portable search;
// "avx2"; "avx512" where the CPU has it). Read once.
enum class SimdSearch { kNone, kAvx2, kAvx512 };
SimdSearch simd_search();
const char* simd_search_name(SimdSearch s);  // "none", "avx2", "avx512"

// LevelV1::find_many for the run [lo, hi) of `level` (hi > lo, m <=
// kMaxBatch): positions into out, the hit mask into *hits. Returns false,
// writing nothing, for what it does not handle (packed tokens wider than 25
// bits, or a run too long for 32-bit bit offsets); the caller then searches
// portably. Requires simd_search() != kNone.
bool find_many_simd(const LevelV1& level, uint64_t lo, uint64_t hi, const uint32_t* v, uint32_t m, uint64_t* out,
                    uint64_t* hits);

// The same search in `runs` runs [lo[r], hi[r]) at once (2 = kMaxRuns),
// each longer than 2 * kSampleEvery: out[r * m + j], hits[r]. Their memory
// reads overlap. Run r's m tokens are at v + r * v_stride (0: the same for
// every run).
bool find_many_runs_simd(const LevelV1& level, uint32_t runs, const uint64_t* lo, const uint64_t* hi, const uint32_t* v,
                         uint32_t m, uint64_t* out, uint64_t* hits, uint32_t v_stride = 0);

// The other way round, for a short run: each of its tokens read once and
// compared with all m <= kMaxBatch tokens v at once (a vector compare per
// kLanes of them). The same answers as find_many_simd for the tokens found:
// out[j] for each bit j of the returned mask (out[j] unset for the others).
// Requires simd_search() != kNone.
uint64_t scan_run_simd(const LevelV1& level, uint64_t lo, uint64_t hi, const uint32_t* v, uint32_t m, uint64_t* out);

}  // namespace ngram
