#include "section_table.h"

#include <cstring>

#include "crc32c.h"
#include "errors.h"

namespace ngram {

// The image holds at least the 64-byte header (TrieIndex checks that first).
SectionTable::SectionTable(const uint8_t* base, uint64_t size) : base_(base) {
  std::memcpy(&header_, base, sizeof(FileHeader));
  if (std::memcmp(header_.magic, kMagic, sizeof(kMagic)) != 0) throw FormatError("not a trie file (bad magic)");
  if (header_.version != kFormatVersion && header_.version != kFormatVersion2)
    throw FormatError("format version " + std::to_string(header_.version) + ", this engine reads versions " +
                      std::to_string(kFormatVersion) + " and " + std::to_string(kFormatVersion2));
  if (header_.file_length != size)
    throw FormatError("truncated or padded: header says " + std::to_string(header_.file_length) +
                      " bytes, file has " + std::to_string(size));
  if (header_.order < 1 || header_.order > kMaxOrder)
    throw FormatError("order " + std::to_string(header_.order) + " out of range [1, " + std::to_string(kMaxOrder) +
                      "]");
  if (header_.vocab_size < 1 || header_.vocab_size > (uint64_t{1} << 31))
    throw FormatError("vocab_size " + std::to_string(header_.vocab_size) + " out of range");
  if (header_.section_table_offset != sizeof(FileHeader) || header_.section_count > 4096 ||
      sizeof(FileHeader) + uint64_t{header_.section_count} * sizeof(SectionEntry) > size)
    throw FormatError("section table out of bounds");
  sections_.resize(header_.section_count);
  if (!sections_.empty())  // no memcpy to data() == nullptr: undefined even for 0 bytes
    std::memcpy(sections_.data(), base + sizeof(FileHeader), sections_.size() * sizeof(SectionEntry));
  {
    FileHeader h = header_;
    h.header_crc = 0;
    uint32_t crc = crc32c(&h, sizeof(h));
    crc = crc32c_extend(crc, sections_.data(), sections_.size() * sizeof(SectionEntry));
    if (crc != header_.header_crc) throw FormatError("header checksum mismatch (corrupted header)");
  }

  const uint32_t n = header_.order;
  std::array<int32_t, kKinds> none;
  none.fill(-1);
  by_kind_.assign(n, none);
  const SectionEntry* meta = nullptr;
  for (size_t i = 0; i < sections_.size(); ++i) {
    const SectionEntry& s = sections_[i];
    const std::string what = "section " + section_name(s);
    if (s.offset % kSectionAlign != 0) throw FormatError(what + ": misaligned offset");
    if (s.offset > size || s.length > size - s.offset) throw FormatError(what + ": extends past the end of the file");
    const auto kind = static_cast<SectionKind>(s.kind);
    if (kind == SectionKind::kMeta) {
      if (meta) throw FormatError(what + ": duplicated");
      meta = &s;
      continue;
    }
    if (s.level < 1 || s.level > n) throw FormatError(what + ": level out of range");
    if (s.kind < static_cast<uint32_t>(SectionKind::kCountValues) || s.kind >= kKinds)
      throw FormatError(what + ": unknown section kind");
    int32_t& slot = by_kind_[s.level - 1][s.kind];
    if (slot >= 0) throw FormatError(what + ": duplicated");
    slot = static_cast<int32_t>(i);
    if (kind == SectionKind::kCountValues) {
      if (s.width != 64 || s.count > s.length / 8 || s.length != s.count * 8)
        throw FormatError(what + ": length does not match its count");
    } else {
      const uint32_t min_width = kind == SectionKind::kChildLow ? 0 : 1;  // Elias-Fano low bits may be 0
      if (s.width < min_width || s.width > 64 || s.count > (uint64_t{1} << 40) ||
          s.length != packed_bytes(s.count, s.width))
        throw FormatError(what + ": length does not match its count and width");
    }
  }
  if (!meta) throw FormatError("no meta section");
  meta_.assign(reinterpret_cast<const char*>(base + meta->offset), meta->length);
}

SectionTable::CountSections SectionTable::count_sections(uint32_t k, bool tiered) const {
  const CountSections c{find(k, SectionKind::kCountValues),      find(k, SectionKind::kCountRanks),
                        find(k, SectionKind::kCountEscapes),     find(k, SectionKind::kCountEscapeIndex),
                        find(k, SectionKind::kCountRanks2),      find(k, SectionKind::kCountRanks2Index)};
  if (!c.values || !c.ranks || !c.escapes || !c.escape_index || (tiered && (!c.ranks2 || !c.ranks2_index)))
    throw FormatError(level_name(k) + ": count sections missing");
  auto rank_width_ok = [](uint32_t w) { return (w & (w - 1)) == 0 && w <= 32; };
  // A second tier where the layout has none is refused by require_layout;
  // its width is judged first, as every rank width is.
  if (!rank_width_ok(c.ranks->width) || (c.ranks2 && !rank_width_ok(c.ranks2->width)))
    throw FormatError(level_name(k) + ": count rank sections differ in size");
  return c;
}

void SectionTable::require_layout(uint32_t k, const std::vector<SectionShape>& want) const {
  std::array<bool, kKinds> wanted{};
  for (const SectionShape& w : want) wanted[static_cast<uint32_t>(w.kind)] = true;
  for (uint32_t kind = static_cast<uint32_t>(SectionKind::kCountValues); kind < kKinds; ++kind)
    if ((by_kind_[k - 1][kind] >= 0) != wanted[kind])
      throw FormatError(level_name(k) + ": " + layout_missing_message(static_cast<SectionKind>(kind)));
  for (const SectionShape& w : want) {
    const SectionEntry* s = find(k, w.kind);
    if (s->count != w.count || s->width != w.width)
      throw FormatError(level_name(k) + ": " + layout_size_message(w.kind));
  }
}

const uint64_t* SectionTable::count_values(uint32_t k, const SectionEntry* values, uint64_t ranked) const {
  if (values->count == 0 && ranked > 0) throw FormatError(level_name(k) + ": empty count table");
  const auto* v = reinterpret_cast<const uint64_t*>(base_ + values->offset);
  for (uint64_t i = 1; i < values->count; ++i)
    if (v[i] <= v[i - 1]) throw FormatError(level_name(k) + ": count table not ascending");
  return v;
}

ChildOffsets read_child_offsets(const SectionTable& t, uint32_t k, uint32_t n) {
  switch (child_offset_rep(k, n)) {
    case ChildOffsetRep::kNone:
      return ChildOffsets();
    case ChildOffsetRep::kPlain:
      return ChildOffsets(PlainOffsetsView(t.packed(k, SectionKind::kChildOffsets)));
    case ChildOffsetRep::kEliasFano: {
      const SectionEntry *low = t.find(k, SectionKind::kChildLow), *high = t.find(k, SectionKind::kChildHigh);
      return ChildOffsets(EliasFanoView(t.packed(low), t.bytes(high), high->count,
                                        t.packed(k, SectionKind::kChildSelect), low->width));
    }
  }
  return ChildOffsets();
}

void SectionTable::fill_common_shape(uint32_t k, uint64_t size, const CountSections& c, LevelShape& shape) const {
  shape.level = k;
  shape.order = order();
  shape.size = size;
  const SectionEntry* next_ranks = k < order() ? find(k + 1, SectionKind::kCountRanks) : nullptr;
  shape.next_size = next_ranks ? next_ranks->count : 0;
  shape.vocab_size = vocab_size();
  shape.count_values = c.values->count;
  shape.rank_width = c.ranks->width;
}

}  // namespace ngram
