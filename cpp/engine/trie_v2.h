// Format version 2 (docs/FORMAT.md, "Version 2"): the same counts as
// version 1 in about half the bytes, read as the file lies (mapped or in
// RAM alike). Each k-gram's last token w is stored as its rank: for k = 2,
// among the tokens that occur; for k >= 3, among the continuations of its
// own (k-1)-suffix context, i.e. (the index of the k-gram without its first
// token, in level k-1) minus (the first child of that context), coded in
// chunked Elias-Fano (level 2's longest runs as bitmaps instead). So
// finding w after a context first finds w after each shorter suffix of the
// context, shortest first (lookup_v2.cc). Counts get two tiers of escapes;
// level 1 counts, and has children for, only the tokens that occur.
// write_trie_v2 (trie_v2_writer.h) writes the file.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "child_offsets.h"
#include "chunked_elias_fano.h"
#include "count_ranks.h"
#include "dense_runs.h"
#include "packed_array.h"
#include "runs.h"
#include "section_table.h"
#include "trie_format.h"
#include "trie_layout.h"

namespace ngram {

// What the section sizes of a version-2 level depend on besides LevelShape's.
struct LevelShapeV2 : LevelShape {
  uint32_t rank2_width = 1;   // the second tier's width b2
  uint64_t escapes2 = 0;      // entries escaped in the second tier too
  uint64_t token_bits = 0;    // length of the token bit streams
  uint32_t token_end_width = 1;  // width of the chunks' last values
  uint64_t used_tokens = 0;   // tokens with a count > 0 (level 2's rank range)
  uint64_t dense_runs = 0;    // level 2: runs stored as bitmaps (dense_runs.h)
  uint64_t dense_entries = 0; // level 2: the entries of those runs
};

// Level 1: which tokens occur (bit t of `bits`) and, per 64 tokens, how
// many below them do (`ranks`): a token's rank among the tokens that occur,
// the index of its counts and child offsets.
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

// One order's arrays. Level 1 has an entry per token of the vocabulary
// (size), but counts and child offsets only for those that occur, in token
// order (UsedTokens); level k >= 2 holds the k-grams sorted
// lexicographically, each one's token as a rank.
struct LevelV2 {
  uint64_t size = 0;
  TieredRankView count_ranks;
  const uint64_t* count_values = nullptr;
  uint64_t count_value_count = 0;
  // Levels >= 2: per entry, the start of its run's rank range plus its
  // token's rank.
  ChunkedEliasFanoView token_ranks;
  // Level 2: the runs stored as bitmaps instead (token_ranks then holds only
  // the other entries; dense_runs.h).
  DenseRunsView dense;
  // Child offsets (levels < order): level 1's for the tokens that occur.
  ChildOffsets child_offsets;
};

class TrieV2 {
 public:
  // The sections of one level, in file order, with their element counts and
  // widths: two-tier count ranks; level 1 marks the tokens that occur, and
  // its counts and child offsets are those of these tokens only; levels >= 2
  // store each entry's token as a rank, coded in chunked Elias-Fano, and
  // their child offsets in Elias-Fano. The one list of them, which
  // write_trie_v2 lays out and the constructor requires.
  static std::vector<SectionShape> level_sections(const LevelShapeV2& s);

  // Checks every level against the layout, its count tables, level 2's
  // dense runs and that child offsets span the next level.
  explicit TrieV2(const SectionTable& table);

  uint32_t order() const { return static_cast<uint32_t>(levels_.size()); }
  uint64_t size(uint32_t k) const { return levels_[k - 1].size; }
  const LevelV2& level(uint32_t k) const { return levels_[k - 1]; }
  uint64_t count(uint32_t k, uint64_t i) const {
    const LevelV2& L = levels_[k - 1];
    if (k == 1 && !(used_.rank(i, &i) && i < L.count_ranks.size())) return 0;
    const uint64_t r = L.count_ranks[i];
    return r < L.count_value_count ? L.count_values[r] : 0;
  }
  // Children of entry `index` of level k (k < order): [*lo, *hi) in level k+1.
  void children(uint32_t k, uint64_t index, uint64_t* lo, uint64_t* hi) const {
    if (k == 1 && !used_.rank(index, &index)) {  // a token that never occurs has no children
      *lo = *hi = 0;
      return;
    }
    uint64_t a, b;
    levels_[k - 1].child_offsets.pair(index, &a, &b);
    // A corrupted (unverified) file must not send reads past the next level.
    const uint64_t n = levels_[k].size;
    if (b > n) b = n;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
  }
  // Whether token t occurs, and then how many tokens below t do (its rank
  // among the tokens that occur).
  bool used_rank(uint64_t t, uint64_t* rank) const { return used_.rank(t, rank); }
  // The token whose rank among the tokens that occur is r (UINT64_MAX if none).
  uint64_t used_token(uint64_t r) const;

  // The lookups TrieV1 has (trie_v1.h), here one n-gram at a time.
  bool find(const int32_t* toks, uint32_t len, uint64_t* index) const;
  void find_many(const int32_t* const* toks, uint32_t n, uint32_t len, uint64_t* index, bool* found) const {
    for (uint32_t i = 0; i < n; ++i) found[i] = find(toks[i], len, &index[i]);
  }
  // The tokens of entries [lo, hi) of level len + 1, the continuations of
  // suffix[0..len).
  void run_tokens(const int32_t* suffix, uint32_t len, uint64_t lo, uint64_t hi, int32_t* out) const;
  // The entry of toks[0..len+1) in level len + 1, given the entry of
  // toks[0..len) in level len: found from the first level (a run is
  // searched by the ranks of its shorter suffixes, not by its own tokens).
  bool find_next(uint32_t len, uint64_t /*at*/, const int32_t* toks, uint64_t* index) const {
    return find(toks, len + 1, index);
  }
  // f(token, count) for each entry of run [lo, hi) of level len + 1 (the
  // continuations of suffix[0..len)), in token order. The run is decoded
  // into `copy`, which holds its tokens afterwards (returns true), so that
  // one of them is found there again without decoding.
  template <class F>
  bool for_each_in_run(const int32_t* suffix, uint32_t len, uint64_t lo, uint64_t hi, std::vector<int32_t>& copy,
                       F f) const {
    copy.resize(hi - lo);
    run_tokens(suffix, len, lo, hi, copy.data());
    for (uint64_t i = lo; i < hi; ++i) f(copy[i - lo], count(len + 1, i));
    return true;
  }
  // TrieV1::lookup_in_runs for version 2: runs[i].suffix names each run's
  // context. Following a candidate down the chain answers it at every suffix
  // length at once, so each unmatched candidate gets its final answer here:
  // p and m from the longest suffix of the context after which it is stored
  // (m may be less than len), or stays unmatched when none has it;
  // matched[i] counts all of them (resolved), so that the callers'
  // shorter-suffix steps skip this run's query.
  void lookup_in_runs(uint32_t len, const Run* runs, uint32_t n, const CandidateTable* const* tables,
                      float* const* p, int32_t* const* m, uint32_t* matched) const;

  // Version 2 holds its image only.
  uint64_t ram_decode_bytes() const { return 0; }
  uint64_t decoded_bytes() const { return 0; }

 private:
  // Level 2: the dense runs' parents (section s, may be null) and their
  // entries, into shape; each run's first entry and the entries of the runs
  // before it into first and before.
  void read_dense_runs(const SectionTable& t, const SectionEntry* s, LevelShapeV2& shape, std::vector<uint64_t>& first,
                       std::vector<uint64_t>& before) const;

  std::vector<LevelV2> levels_;
  UsedTokens used_;  // level 1
};

inline std::vector<SectionShape> TrieV2::level_sections(const LevelShapeV2& s) {
  std::vector<SectionShape> out;
  const uint64_t n = s.size;
  const uint64_t counted = s.level == 1 ? s.used_tokens : n;  // level 1: the tokens that occur
  out.push_back({SectionKind::kCountValues, s.count_values, 64});
  out.push_back({SectionKind::kCountRanks, counted, s.rank_width});
  out.push_back({SectionKind::kCountEscapeIndex, (counted + kEscapeBlock - 1) / kEscapeBlock, bits_for(s.escapes)});
  out.push_back({SectionKind::kCountRanks2, s.escapes, s.rank2_width});
  out.push_back({SectionKind::kCountRanks2Index, (s.escapes + kEscapeBlock - 1) / kEscapeBlock, bits_for(s.escapes2)});
  out.push_back({SectionKind::kCountEscapes, s.escapes2, bits_for(s.count_values ? s.count_values - 1 : 0)});
  if (s.level == 1) {
    out.push_back({SectionKind::kUsedTokens, s.vocab_size, 1});
    out.push_back({SectionKind::kUsedTokenRanks, (s.vocab_size + 63) / 64, bits_for(s.vocab_size)});
  } else {
    // The sequence holds the entries of the runs that are not bitmaps.
    const uint64_t values = n - std::min(n, s.dense_entries);
    const uint64_t chunks = (values + ChunkedEliasFanoView::kChunk - 1) / ChunkedEliasFanoView::kChunk;
    out.push_back({SectionKind::kTokenBits, s.token_bits, 1});
    out.push_back({SectionKind::kTokenStarts, chunks + 1, bits_for(s.token_bits)});
    out.push_back({SectionKind::kTokenEnds, chunks, s.token_end_width});
    if (s.level == 2) {
      out.push_back({SectionKind::kDenseRuns, s.dense_runs, bits_for(s.vocab_size - 1)});
      out.push_back({SectionKind::kDenseBits, s.dense_runs * dense_bitmap_bits(s.used_tokens), 1});
      out.push_back({SectionKind::kDenseRanks, s.dense_runs * dense_blocks(s.used_tokens), bits_for(s.used_tokens)});
    }
  }
  append_child_offset_sections(s, s.level == 1 ? s.used_tokens : n, out);  // level 1: the tokens that occur have children
  return out;
}

}  // namespace ngram
