#include "trie_v1.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "errors.h"

namespace ngram {

namespace {

// The widths TrieV1Ram gives level L's tokens, count ranks and child
// offsets; 0 for what it leaves as the file has it.
//
// Tokens of levels >= 2 become 32-bit words: the token above, its count rank
// below in the bits the token leaves (LevelV1::key_shift). The vector search
// reads a token with one gather and a shift instead of a gather, a multiply,
// a shift and a mask, and a hit's count rank from the line it has just read
// instead of a miss in another array (search_kernel.inc). Only tokens
// narrower than 32 bits are (any vocabulary of at most 2^31 tokens).
uint32_t decoded_token_width(const LevelV1& L) {
  return L.tokens.size() > 0 && L.tokens.width() < kTokenWordBits ? kTokenWordBits : 0;
}
// Escaped count ranks of a level whose tokens are not decoded (level 1).
// Wide enough for count_value_count itself, which stands for a corrupted
// rank (count() answers 0 for it, as for the corrupted rank in the file).
uint32_t decoded_rank_width(const LevelV1& L) {
  return L.count_ranks.has_escapes() && decoded_token_width(L) == 0 ? bits_for(L.count_value_count) : 0;
}
uint32_t decoded_offset_width(const LevelV1& L, const LevelV1* next) {
  return next && L.child_offsets.elias_fano() ? bits_for(next->size) : 0;
}

uint64_t decode_plan_bytes(const std::vector<LevelV1>& levels) {
  uint64_t bytes = 0;
  for (size_t k = 0; k < levels.size(); ++k) {
    const LevelV1& L = levels[k];
    const LevelV1* next = k + 1 < levels.size() ? &levels[k + 1] : nullptr;
    if (const uint32_t w = decoded_rank_width(L)) bytes += packed_bytes(L.size, w);
    if (const uint32_t w = decoded_offset_width(L, next)) bytes += packed_bytes(L.size + 1, w);
    if (const uint32_t w = decoded_token_width(L)) bytes += packed_bytes(L.tokens.size(), w);
  }
  return bytes;
}

}  // namespace

TrieV1::TrieV1(const SectionTable& t) {
  const uint32_t n = t.order();
  levels_.assign(n, LevelV1{});
  for (uint32_t k = 1; k <= n; ++k) {
    const SectionTable::CountSections c = t.count_sections(k, /*tiered=*/false);
    LevelV1& L = levels_[k - 1];
    L.size = c.ranks->count;
    if (k == 1 && L.size != t.vocab_size()) throw FormatError(level_name(k) + ": size differs from vocab_size");
    LevelShape shape;
    t.fill_common_shape(k, L.size, c, shape);
    shape.escapes = c.escapes->count;
    // Exactly the layout's sections, each with the layout's count and width.
    t.require_layout(k, level_sections(shape));
    L.count_values = t.count_values(k, c.values, c.ranks->count);
    L.count_value_count = c.values->count;
    L.count_ranks = RankView(t.packed(c.ranks), t.packed(c.escapes), t.packed(c.escape_index));
    if (const SectionEntry* tokens = t.find(k, SectionKind::kTokens)) L.tokens = t.packed(tokens);
    if (const SectionEntry* samples = t.find(k, SectionKind::kTokenSamples)) {
      L.token_samples = reinterpret_cast<const uint32_t*>(t.bytes(samples));
      L.sample_count = samples->count;
    }
    L.child_offsets = read_child_offsets(t, k, n);
  }
  for (uint32_t k = 1; k < n; ++k) {
    const LevelV1& L = levels_[k - 1];
    if (L.child_offsets[0] != 0 || L.child_offsets[L.size] != levels_[k].size)
      throw FormatError(level_name(k) + ": child offsets do not span level " + std::to_string(k + 1));
  }
  ram_decode_bytes_ = decode_plan_bytes(levels_);
}

TrieV1Ram::TrieV1Ram(TrieV1&& parsed) : TrieV1(std::move(parsed)) {
  const uint64_t bytes = ram_decode_bytes_;
  if (bytes == 0) return;
  decoded_ = allocate_anonymous(bytes);
  uint8_t* out = decoded_.get();
  // Packs the `count` values that each(push) pushes, `width` bits each, at out.
  auto write = [&out](uint64_t count, uint32_t width, const auto& each) {
    uint8_t* start = out;
    PackedWriter w(width, [&out](uint64_t x) {
      std::memcpy(out, &x, 8);
      out += 8;
    });
    each([&w](uint64_t v) { w.push(v); });
    w.finish();
    return PackedView(start, count, width);
  };
  const uint32_t n = order();
  for (uint32_t k = 1; k <= n; ++k) {
    LevelV1& L = levels_[k - 1];
    const LevelV1* next = k < n ? &levels_[k] : nullptr;
    if (const uint32_t w = decoded_rank_width(L)) {
      const uint64_t corrupted = L.count_value_count;  // fits w bits; counts 0
      const RankView& file = L.count_ranks;
      L.count_ranks = RankView::plain(write(L.size, w, [&](const auto& push) {
        file.for_each([&](uint64_t r) { push(r < corrupted ? r : corrupted); });
      }));
    }
    if (const uint32_t w = decoded_offset_width(L, next)) {
      // Clamped to the next level as children() clamps what it reads.
      const uint64_t end = next->size;
      const ChildOffsets& file = L.child_offsets;
      L.child_offsets = ChildOffsets(PlainOffsetsView(write(L.size + 1, w, [&](const auto& push) {
        file.for_each([&](uint64_t v) { push(std::min(v, end)); }, end);
      })));
    }
    if (const uint32_t w = decoded_token_width(L)) {
      // A rank that does not fit below the token, or a corrupted one (count()
      // then reads the file's, and answers 0 for a corrupted one), is escaped.
      const PackedView file = L.tokens;
      const uint32_t shift = w - file.width();
      const uint64_t escape = (uint64_t{1} << shift) - 1;
      const uint64_t values = L.count_value_count;
      L.tokens = write(file.size(), w, [&](const auto& push) {
        uint64_t i = 0;
        L.count_ranks.for_each([&](uint64_t r) { push((file[i++] << shift) | (r < escape && r < values ? r : escape)); });
      });
      L.key_shift = shift;
      L.rank_escape = escape;
    }
  }
}

}  // namespace ngram
