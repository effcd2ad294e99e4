// What the section layouts of both versions share. A level's sections,
// their element counts and their widths all follow from a few numbers
// (LevelShape); each representation's level_sections() turns those into the
// list, in file order (TrieV1 and TrieV2), declared once: the writer lays out
// exactly these and the reader requires exactly these (docs/FORMAT.md,
// "Section kinds").
#pragma once
#include <cstdint>
#include <vector>

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

// What the section sizes of a level depend on, in either version (version
// 2 adds its own: LevelShapeV2, trie_v2.h).
struct LevelShape {
  uint32_t level = 1, order = 1;
  uint64_t size = 0;          // entries (level 1: the vocabulary size)
  uint64_t next_size = 0;     // entries of level + 1 (0 for the last level)
  uint64_t vocab_size = 1;
  uint64_t count_values = 0;  // distinct counts of the level
  uint32_t rank_width = 1;    // the primary count-rank width b (count_ranks.h)
  uint64_t escapes = 0;       // escaped count ranks (version 2: of the first tier)
};

// One section as the layout requires it.
struct SectionShape {
  SectionKind kind;
  uint64_t count;  // elements
  uint32_t width;  // bits per element
};

// The child offsets' sections of a level whose n entries have children
// (none for the last level), in file order.
inline void append_child_offset_sections(const LevelShape& s, uint64_t n, std::vector<SectionShape>& out) {
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

// Bytes of a section of `count` elements of `width` bits: count_values are
// plain u64, meta is raw bytes, every other kind is packed (packed_array.h).
inline uint64_t section_bytes(SectionKind kind, uint64_t count, uint32_t width) {
  switch (kind) {
    case SectionKind::kMeta: return count;
    case SectionKind::kCountValues: return count * 8;
    default: return packed_bytes(count, width);
  }
}

// The group of sections a kind belongs to, as error messages name it: the
// tokens (with the counts they are sized by), the dense runs, the token
// samples, the child offsets, and the count ranks.
enum class SectionGroup : uint8_t { kTokens, kDenseRuns, kTokenSamples, kChildOffsets, kCounts };

inline SectionGroup section_group(SectionKind kind) {
  switch (kind) {
    case SectionKind::kTokens:
    case SectionKind::kTokenBits:
    case SectionKind::kTokenStarts:
    case SectionKind::kTokenEnds:
    case SectionKind::kUsedTokens:
    case SectionKind::kUsedTokenRanks: return SectionGroup::kTokens;
    case SectionKind::kDenseRuns:
    case SectionKind::kDenseBits:
    case SectionKind::kDenseRanks: return SectionGroup::kDenseRuns;
    case SectionKind::kTokenSamples: return SectionGroup::kTokenSamples;
    case SectionKind::kChildOffsets:
    case SectionKind::kChildLow:
    case SectionKind::kChildHigh:
    case SectionKind::kChildSelect: return SectionGroup::kChildOffsets;
    default: return SectionGroup::kCounts;
  }
}

// The sentence an error message gives when a level's section of this kind is
// missing where the layout needs it (or present where it does not), and when
// its count or width is not the layout's.
inline const char* layout_missing_message(SectionKind kind) {
  static constexpr const char* kText[] = {"token section missing or unexpected",
                                          "dense run sections missing or unexpected",
                                          "token samples missing or unexpected",
                                          "child offset sections missing or unexpected", "count sections missing"};
  return kText[static_cast<uint8_t>(section_group(kind))];
}
inline const char* layout_size_message(SectionKind kind) {
  static constexpr const char* kText[] = {"token and count sections differ in size", "dense run sections differ in size",
                                          "token samples differ in size", "child offsets differ in size",
                                          "count rank sections differ in size"};
  return kText[static_cast<uint8_t>(section_group(kind))];
}

}  // namespace ngram
