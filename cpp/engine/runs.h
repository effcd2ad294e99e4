// What a DART-compatible lookup hands every representation: the runs of
// continuations it found (Run) and the candidates to look up in them
// (CandidateTable). Each representation's lookup_in_runs searches them.
#pragma once
#include <cstdint>
#include <vector>

namespace ngram {

// The candidates of lookups, and (made on the first scan that needs it) an
// open-addressing table of them, so that a short run of continuations can be
// read once and each entry looked up among them (where there is no vector
// search, or more than LevelV1::kMaxBatch candidates; else scan_run_simd
// compares each entry with all candidates at once).
struct CandidateTable {
  static constexpr uint32_t kEmpty = 0xffffffffu;
  const int32_t* tokens = nullptr;  // the k candidates (not copied: keep them alive)
  uint32_t count = 0;
  void build(const int32_t* candidates, uint32_t k) {
    tokens = candidates;
    count = k;
    hashed = false;
  }
  // The table, built on first use (many lookups only search long runs).
  void hash() const;
  uint32_t slot(uint32_t token) const {
    return static_cast<uint32_t>((uint64_t{token} * 0x9E3779B97F4A7C15ull) >> shift);
  }
  mutable bool hashed = false;
  mutable uint32_t shift = 62;
  mutable std::vector<uint32_t> key, index;
};

// The continuations of an n-gram `suffix` of `len` tokens: the run [lo, hi)
// of level len + 1, and 1 / count(suffix).
struct Run {
  uint64_t lo = 0, hi = 0;
  float inv = 0.0f;
  const int32_t* suffix = nullptr;  // its n-gram (a version-2 lookup follows its shorter suffixes)
};

}  // namespace ngram
