// Level::find_many with AVX2 gathers: eight searches advance per
// instruction instead of one. Tree pruning and conditional probabilities
// spend most of their time in these searches (25 candidates looked up in one
// run of continuations, thousands of times a tree), so this is the engine's
// hot loop. The answers equal the portable search's exactly; tests run both.
#pragma once
#include <cstdint>

namespace ngram {

struct Level;

// Whether find_many takes the AVX2 path: the CPU has AVX2 and the
// environment variable NGRAM_ENGINE_SIMD is not "0" (read once, at first use).
bool simd_search_enabled();

// Level::find_many for the run [lo, hi) of `level` (hi > lo, m <=
// kMaxBatch): positions into out, the hit mask into *hits. Returns false,
// writing nothing, for what it does not handle (token width above 25 bits,
// or a run too long for 32-bit bit offsets); the caller then searches
// portably. Requires simd_search_enabled().
bool find_many_avx2(const Level& level, uint64_t lo, uint64_t hi, const uint32_t* v, uint32_t m, uint64_t* out,
                    uint64_t* hits);

// The same search in `runs` runs [lo[r], hi[r]) at once (2..kMaxRuns), each
// longer than 2 * kSampleEvery: out[r * m + j], hits[r]. Their memory reads
// overlap.
bool find_many_runs_avx2(const Level& level, uint32_t runs, const uint64_t* lo, const uint64_t* hi, const uint32_t* v,
                         uint32_t m, uint64_t* out, uint64_t* hits);

}  // namespace ngram
