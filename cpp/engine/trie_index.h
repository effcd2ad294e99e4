// TrieIndex: a read-only view of a trie file (mapped or in RAM) and the
// lookups every query is made of. Opening checks the header, the section
// table and every section's bounds, so that no later read leaves the file.
#pragma once
#include <algorithm>
#include <cstring>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "child_offsets.h"
#include "chunked_elias_fano.h"
#include "count_ranks.h"
#include "dense_runs.h"
#include "packed_array.h"
#include "trie_format.h"
#include "trie_layout.h"

namespace ngram {

// Version 2, level 1: which tokens occur (bit t of `bits`) and, per 64
// tokens, how many below them do (`ranks`): a token's rank among the tokens
// that occur, the index of its counts (docs/FORMAT.md, "Version 2").
struct UsedTokens {
  PackedView bits, ranks;

  // Whether token t occurs, and then how many tokens below t do.
  bool rank(uint64_t t, uint64_t* r) const {
    if (t >= bits.size()) return false;
    uint64_t word;
    std::memcpy(&word, bits.data() + (t / 64) * 8, 8);
    const uint64_t below = word & ((uint64_t{1} << (t % 64)) - 1);
    *r = ranks[t / 64] + static_cast<uint64_t>(__builtin_popcountll(below));
    return (word >> (t % 64)) & 1;
  }
  // The number of tokens that occur (0 for sections too short to say).
  uint64_t count() const {
    const uint64_t words = std::min(ranks.size(), (bits.size() + 63) / 64);
    if (words == 0) return 0;
    uint64_t last;
    std::memcpy(&last, bits.data() + (words - 1) * 8, 8);
    return ranks[words - 1] + static_cast<uint64_t>(__builtin_popcountll(last));
  }
};

// The width of the token words of a trie in RAM (Level::tokens).
constexpr uint32_t kTokenWordBits = 32;

// One order's arrays. Level 1 is dense over the vocabulary (entry = token id,
// no token array); level k >= 2 holds the k-grams sorted lexicographically, so
// the children of one (k-1)-gram are a contiguous run sorted by token.
struct Level {
  uint64_t size = 0;
  uint32_t version = kFormatVersion;
  // Levels >= 2 (version 1): as the file packs them, or in RAM
  // kTokenWordBits-bit words, the token in the high bits and its count rank
  // in the low key_shift bits (all ones, rank_escape: the rank is only in
  // count_ranks; decode_for_ram). token(i) reads either.
  PackedView tokens;
  uint32_t key_shift = 0;
  uint64_t rank_escape = 0;  // (1 << key_shift) - 1, the mask count_v1 applies
  uint64_t token(uint64_t i) const { return tokens[i] >> key_shift; }
  // The first index in [lo, hi) (sorted tokens) whose token is >= v.
  uint64_t lower_bound_token(uint64_t lo, uint64_t hi, uint64_t v) const {
    return tokens.lower_bound(lo, hi, v << key_shift);
  }
  RankView count_ranks;     // version 1
  TieredRankView count_ranks_v2;  // version 2
  // Version 2, levels >= 2: per entry, the start of its run's rank range
  // plus its token's rank (docs/FORMAT.md, "Version 2"; lookup_v2.h).
  ChunkedEliasFanoView token_ranks;
  // Version 2, level 2: the runs stored as bitmaps instead (token_ranks
  // then holds only the other entries; dense_runs.h).
  DenseRunsView dense;
  // Child offsets, size + 1 of them (levels < order), in the representation
  // trie_layout.h gives the level.
  ChildOffsets child_offsets;
  const uint64_t* count_values = nullptr;
  uint64_t count_value_count = 0;
  const uint32_t* token_samples = nullptr;  // levels >= 2: tokens[i * kSampleEvery]
  uint64_t sample_count = 0;

  // Version 2, level 1: its counts and child offsets are those of the
  // tokens that occur, in token order (token t's are at its rank among them).
  bool by_used_rank = false;
  UsedTokens used;

  // Entry i's count. Inlined with the version-1 read, so that a caller
  // serving both versions pays a predictable branch, not a call.
  __attribute__((always_inline)) uint64_t count(uint64_t i) const {
    return version == kFormatVersion ? count_v1(i) : count_v2(i);
  }

  // count(i) of a version-1 level, always inlined: the version-1 lookups
  // (queries.cc) call it for every hit, where a call costs as much as the read.
  // In RAM the rank is read beside the token, which the lookup has just read.
  __attribute__((always_inline)) uint64_t count_v1(uint64_t i) const {
    if (key_shift) {
      const uint64_t inline_rank = tokens[i] & rank_escape;
      if (inline_rank != rank_escape) return count_values[inline_rank];
    }
    const uint64_t r = count_ranks[i];
    return r < count_value_count ? count_values[r] : 0;  // bounds checked at open
  }

  uint64_t count_v2(uint64_t i) const {
    if (by_used_rank && !(used.rank(i, &i) && i < count_ranks_v2.size())) return 0;
    const uint64_t r = count_ranks_v2[i];
    return r < count_value_count ? count_values[r] : 0;
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
  // overlap (two measured fastest with AVX2 and AVX-512 alike).
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

class TrieIndex {
 public:
  enum class Load { kMap, kRam };

  // Opens a plain trie file. kMap maps it; kRam reads it into memory.
  // verify_checksums also checks every section's CRC (reads the whole file).
  static std::shared_ptr<TrieIndex> open(const std::string& path, Load load, bool verify_checksums);
  // Takes ownership of an in-memory image of a trie file (e.g. decompressed).
  static std::shared_ptr<TrieIndex> from_buffer(std::string bytes, const std::string& name,
                                                bool verify_checksums);
  ~TrieIndex();
  TrieIndex(const TrieIndex&) = delete;
  TrieIndex& operator=(const TrieIndex&) = delete;

  uint32_t order() const { return header_.order; }
  uint32_t version() const { return header_.version; }
  uint64_t vocab_size() const { return header_.vocab_size; }
  int64_t eos_id() const { return header_.eos_id; }
  const std::string& meta_json() const { return meta_; }
  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  bool mapped() const { return mapped_; }
  // Bytes held beside the file's image: the arrays a trie read into RAM
  // decodes at open (decode_for_ram); 0 when mapped.
  uint64_t decoded_bytes() const { return decoded_ ? ram_decode_bytes_ : 0; }
  // What this trie takes read into RAM, mapped or not: the file's image and
  // what decode_for_ram holds beside it.
  uint64_t ram_bytes() const { return size_ + ram_decode_bytes_; }
  const Level& level(uint32_t k) const { return levels_[k - 1]; }
  uint64_t ngram_count(uint32_t k) const;  // distinct stored k-grams
  const std::vector<SectionEntry>& sections() const { return sections_; }
  // Sum of unigram counts: the number of tokens the trie was built from.
  // Computed on first use (it reads all of level 1), not at open.
  uint64_t total_tokens() const;

  // Recomputes every section's CRC; throws FormatError naming the first bad one.
  void verify_checksums() const;

  // Finds the entry of the n-gram toks[0..len) (1 <= len <= order) in level
  // `len`. Returns false when it does not occur.
  bool find(const int32_t* toks, uint32_t len, uint64_t* index) const;
  // find for n n-grams of `len` tokens each (toks[i]): found[i] and
  // index[i]. Up to Level::kMaxBatch at a time run in lockstep, each step (a
  // level's child offsets, the search in the next level) for all of them
  // before the next, so that their memory reads overlap. find is this for one.
  void find_many(const int32_t* const* toks, uint32_t n, uint32_t len, uint64_t* index, bool* found) const;
  // Children of entry `index` of level k (k < order): [*lo, *hi) in level k+1.
  // Inline: every lookup step calls it once per n-gram found.
  void children(uint32_t k, uint64_t index, uint64_t* lo, uint64_t* hi) const {
    const Level& L = levels_[k - 1];
    uint64_t a, b;
    if (L.by_used_rank && !L.used.rank(index, &index)) {  // a token that never occurs has no children
      *lo = *hi = 0;
      return;
    }
    L.child_offsets.pair(index, &a, &b);
    // A corrupted (unverified) file must not send reads past the next level.
    const uint64_t n = levels_[k].size;
    if (b > n) b = n;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
  }
  // The tokens of entries [lo, hi) of level len + 1, the continuations of
  // the stored n-gram suffix[0..len) (len >= 1), into out.
  void run_tokens(const int32_t* suffix, uint32_t len, uint64_t lo, uint64_t hi, int32_t* out) const;

  // Version 2, level 1: whether token t occurs, and then how many tokens
  // below t do (its rank among the tokens that occur).
  bool used_rank(uint64_t t, uint64_t* rank) const { return levels_[0].used.rank(t, rank); }
  // Version 2: the token whose rank among the tokens that occur is r
  // (UINT64_MAX if none).
  uint64_t used_token(uint64_t r) const;

 private:
  TrieIndex() = default;
  void parse();
  // Version 2, level 2: the used tokens, the dense runs' parents (section s,
  // may be null) and their entries, into shape; each run's first entry and
  // the entries of the runs before it into first and before.
  void read_dense_runs(const SectionEntry* s, LevelShape& shape, std::vector<uint64_t>& first,
                       std::vector<uint64_t>& before) const;

  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;
  // The image when not mapped: anonymous memory on huge pages where the
  // kernel gives them (allocate_image).
  struct ImageDeleter {
    uint64_t bytes;
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, ImageDeleter> owned_{nullptr, ImageDeleter{0}};
  static std::unique_ptr<uint8_t, ImageDeleter> allocate_anonymous(uint64_t bytes);
  uint8_t* allocate_image(uint64_t bytes);
  // A version-1 trie in RAM: the tokens of levels >= 2 decoded into 32-bit
  // words that carry their count ranks, and the Elias-Fano child offsets
  // (and any other escaped count ranks) into plain packed arrays
  // (decoded_), so that a token and its count, or a run's bounds, is one
  // read, not a chain of them (docs/FORMAT.md, "In RAM"). The image keeps
  // the file's bytes as read.
  void decode_for_ram();
  uint64_t decode_plan_bytes() const;
  std::unique_ptr<uint8_t, ImageDeleter> decoded_{nullptr, ImageDeleter{0}};
  uint64_t ram_decode_bytes_ = 0;  // decode_plan_bytes(), computed at open
  FileHeader header_{};
  std::vector<SectionEntry> sections_;
  std::vector<Level> levels_;
  std::string meta_;
  mutable std::once_flag totals_once_;
  mutable uint64_t total_tokens_ = 0;
  mutable uint64_t distinct_unigrams_ = 0;
};

}  // namespace ngram
