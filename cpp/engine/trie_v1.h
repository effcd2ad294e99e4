// Format version 1 (docs/FORMAT.md, "Levels"): each level's last tokens
// bit-packed and sorted within each run of children, count ranks with
// escapes, child offsets plainly packed (level 1) or Elias-Fano coded. Two
// representations read it: TrieV1, the file's arrays as they lie (mapped),
// and TrieV1Ram, which decodes at open what a lookup reads as a chain of
// dependent reads into plain arrays beside the image (docs/FORMAT.md, "In
// RAM"). Both have one level type, LevelV1, whose reads take either form.
// TrieV1Writer (trie_v1_writer.h) writes the file.
#pragma once
#include <cstdint>
#include <vector>

#include "anonymous_memory.h"
#include "child_offsets.h"
#include "count_ranks.h"
#include "packed_array.h"
#include "runs.h"
#include "section_table.h"
#include "trie_format.h"
#include "trie_layout.h"

namespace ngram {

// The width of the token words of a version-1 trie in RAM (LevelV1::tokens).
constexpr uint32_t kTokenWordBits = 32;

// One order's arrays. Level 1 is dense over the vocabulary (entry = token id,
// no token array); level k >= 2 holds the k-grams sorted lexicographically, so
// the children of one (k-1)-gram are a contiguous run sorted by token.
struct LevelV1 {
  uint64_t size = 0;
  // Levels >= 2: as the file packs them, or in RAM kTokenWordBits-bit words,
  // the token in the high bits and its count rank in the low key_shift bits
  // (all ones, rank_escape: the rank is only in count_ranks; TrieV1Ram).
  // token(i) reads either.
  PackedView tokens;
  uint32_t key_shift = 0;
  uint64_t rank_escape = 0;  // (1 << key_shift) - 1, the mask count() applies
  uint64_t token(uint64_t i) const { return tokens[i] >> key_shift; }
  // The first index in [lo, hi) (sorted tokens) whose token is >= v.
  uint64_t lower_bound_token(uint64_t lo, uint64_t hi, uint64_t v) const {
    return tokens.lower_bound(lo, hi, v << key_shift);
  }
  RankView count_ranks;
  // Child offsets, size + 1 of them (levels < order), in the representation
  // trie_layout.h gives the level.
  ChildOffsets child_offsets;
  const uint64_t* count_values = nullptr;
  uint64_t count_value_count = 0;
  const uint32_t* token_samples = nullptr;  // levels >= 2: tokens[i * kSampleEvery]
  uint64_t sample_count = 0;

  // Entry i's count, always inlined: the lookups call it for every hit,
  // where a call costs as much as the read. In RAM the rank is read beside
  // the token, which the lookup has just read.
  __attribute__((always_inline)) uint64_t count(uint64_t i) const {
    if (key_shift) {
      const uint64_t inline_rank = tokens[i] & rank_escape;
      if (inline_rank != rank_escape) return count_values[inline_rank];
    }
    const uint64_t r = count_ranks[i];
    return r < count_value_count ? count_values[r] : 0;  // bounds checked at open
  }

  // Asks the caches for the start of the run [lo, hi): its first tokens, its
  // token samples when it is long, and its first count ranks. A lookup step
  // prefetches every run it will search first, so that on a trie much larger
  // than the caches their misses overlap instead of coming one run at a time.
  void prefetch_run(uint64_t lo, uint64_t hi) const {
    const uint8_t* first = tokens.data() + ((lo * tokens.width()) >> 3);
    __builtin_prefetch(first);
    if (hi - lo > 2 * kSampleEvery) {
      if (token_samples) __builtin_prefetch(token_samples + lo / kSampleEvery);
    } else {
      const uint8_t* last = tokens.data() + (((hi - 1) * tokens.width()) >> 3);
      for (const uint8_t* p = first + 64; p <= last; p += 64) __builtin_prefetch(p);
      __builtin_prefetch(last);
    }
    if (key_shift == 0) count_ranks.prefetch(lo);
  }

  // The first index in [lo, hi) whose token is >= v[j] (the range one run
  // of children, sorted), for m tokens at once (m <= kMaxBatch), out[j];
  // returns a bit mask of the j whose token is there (tokens[out[j]] ==
  // v[j]). With vector gathers (AVX-512 or AVX2) where the CPU has them
  // (search_simd.h), else lower_bound_many_portable.
  static constexpr uint32_t kMaxBatch = 64;
  uint64_t find_many(uint64_t lo, uint64_t hi, const uint32_t* v, uint32_t m, uint64_t* out) const;

  // find_many in `runs` (1..kMaxRuns) runs [lo[r], hi[r]) at once (hi > lo)
  // for the same tokens: out[r * m + j], the masks into hits[r]. With the
  // vector search the runs advance in lockstep, so that their memory reads
  // overlap.
  static constexpr uint32_t kMaxRuns = 2;
  void find_many_runs(uint32_t runs, const uint64_t* lo, const uint64_t* hi, const uint32_t* v, uint32_t m,
                      uint64_t* out, uint64_t* hits) const;

  // The first index in its own run [lo[j], hi[j]) whose token is >= v[j],
  // for m <= kMaxBatch runs at once, in lockstep (as below), so that the
  // reads of different runs overlap.
  void lower_bound_runs(const uint64_t* lo, const uint64_t* hi, const uint32_t* v, uint32_t m, uint64_t* out) const;

  // The same answers on any CPU. The searches run in lockstep, so their
  // independent memory reads overlap instead of each waiting for the last;
  // steps are arithmetic masks, not branches (the compiler turns a ternary
  // here into a branch, mispredicted half the time).
  void lower_bound_many_portable(uint64_t lo, uint64_t hi, const uint32_t* v, uint32_t m, uint64_t* out) const;
};

// A version-1 trie as its file lies, mapped. Parsing checks every level
// against the layout (level_sections), its count tables and that its child
// offsets span the next level, so that no later read leaves the file.
class TrieV1 {
 public:
  // The sections of one level, in file order, with their element counts and
  // widths: the one list of them, which TrieV1Writer lays out and the
  // constructor requires.
  static std::vector<SectionShape> level_sections(const LevelShape& s);

  explicit TrieV1(const SectionTable& table);
  TrieV1() = default;  // no levels: what a TrieIndex holds until its open chose

  uint32_t order() const { return static_cast<uint32_t>(levels_.size()); }
  uint64_t size(uint32_t k) const { return levels_[k - 1].size; }
  const LevelV1& level(uint32_t k) const { return levels_[k - 1]; }
  // Entry i's count in level k.
  __attribute__((always_inline)) uint64_t count(uint32_t k, uint64_t i) const { return levels_[k - 1].count(i); }
  // Children of entry `index` of level k (k < order): [*lo, *hi) in level k+1.
  // Inline: every lookup step calls it once per n-gram found.
  void children(uint32_t k, uint64_t index, uint64_t* lo, uint64_t* hi) const {
    uint64_t a, b;
    levels_[k - 1].child_offsets.pair(index, &a, &b);
    // A corrupted (unverified) file must not send reads past the next level.
    const uint64_t n = levels_[k].size;
    if (b > n) b = n;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
  }

  // Finds the entry of the n-gram toks[0..len) (1 <= len <= order) in level
  // `len`. Returns false when it does not occur.
  bool find(const int32_t* toks, uint32_t len, uint64_t* index) const;
  // find for n n-grams of `len` tokens each (toks[i]): found[i] and
  // index[i]. Up to LevelV1::kMaxBatch at a time run in lockstep, each step
  // (a level's child offsets, the search in the next level) for all of them
  // before the next, so that their memory reads overlap.
  void find_many(const int32_t* const* toks, uint32_t n, uint32_t len, uint64_t* index, bool* found) const;
  // The tokens of entries [lo, hi) of level len + 1, the continuations of
  // the stored n-gram suffix[0..len) (len >= 1), into out.
  void run_tokens(const int32_t* suffix, uint32_t len, uint64_t lo, uint64_t hi, int32_t* out) const;
  // The entry of toks[0..len+1) in level len + 1, given `at`, the entry of
  // toks[0..len) in level len: one search of at's run of children.
  bool find_next(uint32_t len, uint64_t at, const int32_t* toks, uint64_t* index) const {
    uint64_t lo, hi;
    children(len, at, &lo, &hi);
    const LevelV1& level = levels_[len];
    const uint64_t tok = static_cast<uint32_t>(toks[len]);
    const uint64_t i = level.lower_bound_token(lo, hi, tok);
    *index = i;
    return i < hi && level.token(i) == tok;
  }
  // f(token, count) for each entry of run [lo, hi) of level len + 1 (the
  // continuations of suffix[0..len)), in token order, read where it lies.
  // Returns whether `copy` holds the run's tokens afterwards: never, since
  // finding one of them again (find_next) costs less than copying the run.
  template <class F>
  bool for_each_in_run(const int32_t* /*suffix*/, uint32_t len, uint64_t lo, uint64_t hi,
                       std::vector<int32_t>& /*copy*/, F f) const {
    const LevelV1& next = levels_[len];
    for (uint64_t i = lo; i < hi; ++i) f(static_cast<int32_t>(next.token(i)), next.count(i));
    return false;
  }
  // For n runs of level len + 1 (runs[i], found by find_runs): the
  // candidates of tables[i] not yet matched (m[i][j] == 0) that occur in
  // runs[i] get p[i][j] = count(suffix+w) * runs[i].inv and m[i][j] = len;
  // matched[i] = how many. Runs up to kScanFactor times the candidates are
  // scanned once (scan_run_simd, else against the table); longer ones are
  // searched two at a time in lockstep, each for all its candidates
  // (find_many_runs_simd; a hit of one already matched is dropped).
  void lookup_in_runs(uint32_t len, const Run* runs, uint32_t n, const CandidateTable* const* tables,
                      float* const* p, int32_t* const* m, uint32_t* matched) const;
  static constexpr uint64_t kScanFactor = 2;

  // What TrieV1Ram decodes beside the image (read into RAM, this trie
  // takes the file's bytes and these); what it holds itself (none).
  uint64_t ram_decode_bytes() const { return ram_decode_bytes_; }
  uint64_t decoded_bytes() const { return 0; }

 protected:
  std::vector<LevelV1> levels_;
  uint64_t ram_decode_bytes_ = 0;
};

// A version-1 trie read into RAM: the tokens of levels >= 2 decoded into
// 32-bit words that carry their count ranks, and the Elias-Fano child
// offsets (and any other escaped count ranks) into plain packed arrays, so
// that a token and its count, or a run's bounds, is one read, not a chain of
// them (docs/FORMAT.md, "In RAM"). The image keeps the file's bytes as read.
class TrieV1Ram : public TrieV1 {
 public:
  explicit TrieV1Ram(TrieV1&& parsed);
  uint64_t decoded_bytes() const { return decoded_ ? ram_decode_bytes_ : 0; }

 private:
  AnonymousMemory decoded_{nullptr, AnonymousMemoryDeleter{0}};
};

inline std::vector<SectionShape> TrieV1::level_sections(const LevelShape& s) {
  std::vector<SectionShape> out;
  const uint64_t n = s.size;
  out.push_back({SectionKind::kCountValues, s.count_values, 64});
  out.push_back({SectionKind::kCountRanks, n, s.rank_width});
  out.push_back({SectionKind::kCountEscapes, s.escapes, bits_for(s.count_values ? s.count_values - 1 : 0)});
  out.push_back({SectionKind::kCountEscapeIndex, (n + kEscapeBlock - 1) / kEscapeBlock, bits_for(s.escapes)});
  if (s.level >= 2) {
    out.push_back({SectionKind::kTokens, n, bits_for(s.vocab_size - 1)});
    out.push_back({SectionKind::kTokenSamples, (n + kSampleEvery - 1) / kSampleEvery, 32});
  }
  append_child_offset_sections(s, n, out);
  return out;
}

}  // namespace ngram
