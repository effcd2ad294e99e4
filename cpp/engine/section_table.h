// The header and section table of a trie image: what every representation
// reads the same way (docs/FORMAT.md, "Layout" and "Checks"). Making one
// checks the magic, version, length, order, vocabulary, header CRC and every
// section's bounds, alignment, kind and size, so that a representation's
// parse only asks for the sections its layout names. Its errors (FormatError)
// do not name the file: TrieIndex adds the name where an error leaves the open.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "child_offsets.h"
#include "packed_array.h"
#include "trie_format.h"
#include "trie_layout.h"

namespace ngram {

class SectionTable {
 public:
  SectionTable() = default;
  // The image's header and table, checked; the image stays the caller's.
  SectionTable(const uint8_t* base, uint64_t size);

  const FileHeader& header() const { return header_; }
  const std::vector<SectionEntry>& entries() const { return sections_; }
  const std::string& meta() const { return meta_; }
  uint32_t order() const { return header_.order; }
  uint64_t vocab_size() const { return header_.vocab_size; }

  // Level k's section of this kind, or null when the file has none.
  const SectionEntry* find(uint32_t k, SectionKind kind) const {
    const int32_t i = by_kind_[k - 1][static_cast<uint32_t>(kind)];
    return i < 0 ? nullptr : &sections_[static_cast<size_t>(i)];
  }
  const uint8_t* bytes(const SectionEntry* s) const { return base_ + s->offset; }
  PackedView packed(const SectionEntry* s) const { return PackedView(base_ + s->offset, s->count, s->width); }
  // Level k's section of this kind as a packed array (empty when absent).
  PackedView packed(uint32_t k, SectionKind kind) const {
    const SectionEntry* s = find(k, kind);
    return s ? packed(s) : PackedView();
  }

  // The count sections of level k: values, ranks, escapes and their index,
  // and (`tiered`, version 2) the second tier of ranks and its index; all
  // present, every rank width a power of two of at most 32 bits.
  struct CountSections {
    const SectionEntry *values, *ranks, *escapes, *escape_index, *ranks2, *ranks2_index;
  };
  CountSections count_sections(uint32_t k, bool tiered) const;

  // The shape fields every version reads the same way, into `shape`: level
  // k of this order, `size` entries, the next level's size, the vocabulary,
  // the count values and the (first-tier) rank width.
  void fill_common_shape(uint32_t k, uint64_t size, const CountSections& c, LevelShape& shape) const;

  // Throws unless level k has exactly the sections `want` lists, each with
  // its count and width.
  void require_layout(uint32_t k, const std::vector<SectionShape>& want) const;

  // Level k's table of distinct counts, ascending; not empty when `ranked`
  // entries refer to it.
  const uint64_t* count_values(uint32_t k, const SectionEntry* values, uint64_t ranked) const;

 private:
  static constexpr uint32_t kKinds = static_cast<uint32_t>(SectionKind::kDenseRanks) + 1;
  const uint8_t* base_ = nullptr;
  FileHeader header_{};
  std::vector<SectionEntry> sections_;
  std::string meta_;
  // Per level, per kind: the index of its section in sections_, -1 if none.
  std::vector<std::array<int32_t, kKinds>> by_kind_;
};

// Level k's child offsets (of an order-n trie) as its sections store them,
// in the representation trie_layout.h's child_offset_rep gives it; the
// sections were checked by check_level. Both file versions share it.
ChildOffsets read_child_offsets(const SectionTable& t, uint32_t k, uint32_t n);

// "level k", how errors about a level start.
inline std::string level_name(uint32_t k) { return "level " + std::to_string(k); }
// "kind (level k)", how errors about a section start, after "section ".
inline std::string section_name(const SectionEntry& s) {
  return std::string(section_kind_name(s.kind)) + (s.level ? " (" + level_name(s.level) + ")" : "");
}

}  // namespace ngram
