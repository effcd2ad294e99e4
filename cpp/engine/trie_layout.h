// The sections of each level, declared once: the writer lays out exactly
// these and the reader requires exactly these (docs/FORMAT.md, "Section
// kinds"). A level's sections, their element counts and their widths all
// follow from a few numbers (LevelShape); level_sections() turns those into
// the list, in file order.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "chunked_elias_fano.h"
#include "count_ranks.h"
#include "dense_runs.h"
#include "elias_fano.h"
#include "packed_array.h"
#include "trie_format.h"

namespace ngram {

// How a level stores the child offsets of its entries (levels < order).
enum class ChildOffsetRep {
  kNone,        // the last level: no children
  kPlain,       // level 1: plainly packed (small, read by every lookup, and
                // too skewed for a fast Elias-Fano select)
  kEliasFano,   // levels 2 .. N-1
};

inline ChildOffsetRep child_offset_rep(uint32_t level, uint32_t order) {
  if (level >= order) return ChildOffsetRep::kNone;
  return level == 1 ? ChildOffsetRep::kPlain : ChildOffsetRep::kEliasFano;
}

// What a level's section sizes depend on.
struct LevelShape {
  uint32_t version = kFormatVersion;
  uint32_t level = 1, order = 1;
  uint64_t size = 0;          // entries (level 1: the vocabulary size)
  uint64_t next_size = 0;     // entries of level + 1 (0 for the last level)
  uint64_t vocab_size = 1;
  uint64_t count_values = 0;  // distinct counts of the level
  uint32_t rank_width = 1;    // the primary count-rank width b (count_ranks.h)
  uint64_t escapes = 0;       // escaped count ranks (version 2: of the first tier)
  // Version 2 only:
  uint32_t rank2_width = 1;   // the second tier's width b2
  uint64_t escapes2 = 0;      // entries escaped in the second tier too
  uint64_t token_bits = 0;    // length of the token bit streams
  uint32_t token_end_width = 1;  // width of the chunks' last values
  uint64_t used_tokens = 0;   // tokens with a count > 0 (level 2's rank range)
  uint64_t dense_runs = 0;    // level 2: runs stored as bitmaps (dense_runs.h)
  uint64_t dense_entries = 0; // level 2: the entries of those runs
};

// One section as the layout requires it.
struct SectionShape {
  SectionKind kind;
  uint64_t count;  // elements
  uint32_t width;  // bits per element
};

inline std::vector<SectionShape> level_sections_v2(const LevelShape& s);
// The child offsets' sections of a level (none for the last).
inline void append_child_offset_sections(const LevelShape& s, std::vector<SectionShape>& out) {
  // Version 2's level 1 has children for the tokens that occur only.
  const uint64_t n = s.version == kFormatVersion2 && s.level == 1 ? s.used_tokens : s.size;
  switch (child_offset_rep(s.level, s.order)) {
    case ChildOffsetRep::kNone:
      break;
    case ChildOffsetRep::kPlain:
      out.push_back({SectionKind::kChildOffsets, n + 1, bits_for(s.next_size)});
      break;
    case ChildOffsetRep::kEliasFano: {
      const uint32_t l = ef_low_bits(n + 1, s.next_size);
      const uint64_t high = ef_high_bits(n + 1, s.next_size, l);
      out.push_back({SectionKind::kChildLow, n + 1, l});
      out.push_back({SectionKind::kChildHigh, high, 1});
      out.push_back({SectionKind::kChildSelect, (n + 1 + kSelectEvery - 1) / kSelectEvery, bits_for(high)});
      break;
    }
  }
}


// The sections of one level, in file order, with their element counts and widths.
inline std::vector<SectionShape> level_sections(const LevelShape& s) {
  if (s.version == kFormatVersion2) return level_sections_v2(s);
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
  append_child_offset_sections(s, out);
  return out;
}
// Version 2 (docs/FORMAT.md, "Version 2"): two-tier count ranks; level 1
// marks the tokens that occur, and its counts and child offsets are those
// of these tokens only; levels >= 2 store each entry's token as a rank,
// coded in chunked Elias-Fano, and their child offsets in Elias-Fano.
inline std::vector<SectionShape> level_sections_v2(const LevelShape& s) {
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
  append_child_offset_sections(s, out);
  return out;
}

// Bytes of a section of `count` elements of `width` bits: count_values are
// plain u64, meta is raw bytes, every other kind is packed (packed_array.h).
inline uint64_t section_bytes(SectionKind kind, uint64_t count, uint32_t width) {
  switch (kind) {
    case SectionKind::kMeta: return count;
    case SectionKind::kCountValues: return count * 8;
    default: return packed_bytes(count, width);
  }
}

// The sentence an error message gives when a level's section of this kind is
// missing where the layout needs it (or present where it does not), and when
// its count or width is not the layout's.
inline const char* layout_missing_message(SectionKind kind) {
  switch (kind) {
    case SectionKind::kTokens:
    case SectionKind::kTokenBits:
    case SectionKind::kTokenStarts:
    case SectionKind::kTokenEnds:
    case SectionKind::kUsedTokens:
    case SectionKind::kUsedTokenRanks: return "token section missing or unexpected";
    case SectionKind::kDenseRuns:
    case SectionKind::kDenseBits:
    case SectionKind::kDenseRanks: return "dense run sections missing or unexpected";
    case SectionKind::kTokenSamples: return "token samples missing or unexpected";
    case SectionKind::kChildOffsets:
    case SectionKind::kChildLow:
    case SectionKind::kChildHigh:
    case SectionKind::kChildSelect: return "child offset sections missing or unexpected";
    default: return "count sections missing";
  }
}
inline const char* layout_size_message(SectionKind kind) {
  switch (kind) {
    case SectionKind::kTokens:
    case SectionKind::kTokenBits:
    case SectionKind::kTokenStarts:
    case SectionKind::kTokenEnds:
    case SectionKind::kUsedTokens:
    case SectionKind::kUsedTokenRanks: return "token and count sections differ in size";
    case SectionKind::kDenseRuns:
    case SectionKind::kDenseBits:
    case SectionKind::kDenseRanks: return "dense run sections differ in size";
    case SectionKind::kTokenSamples: return "token samples differ in size";
    case SectionKind::kChildOffsets:
    case SectionKind::kChildLow:
    case SectionKind::kChildHigh:
    case SectionKind::kChildSelect: return "child offsets differ in size";
    default: return "count rank sections differ in size";
  }
}

}  // namespace ngram
