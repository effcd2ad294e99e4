#include "trie_v2.h"

#include <string>

#include "elias_fano.h"
#include "errors.h"

namespace ngram {

TrieV2::TrieV2(const SectionTable& t) {
  const uint32_t n = t.order();
  levels_.assign(n, LevelV2{});
  for (uint32_t k = 1; k <= n; ++k) {
    const SectionTable::CountSections c = t.count_sections(k, /*tiered=*/true);
    LevelV2& L = levels_[k - 1];
    // Level 1 has an entry per token; only those that occur are counted.
    L.size = k == 1 ? t.vocab_size() : c.ranks->count;
    LevelShapeV2 shape;
    std::vector<uint64_t> dense_first, dense_before;  // level 2 (read_dense_runs)
    t.fill_common_shape(k, L.size, c, shape);
    // The layout's other free parameters, from the sections that carry them.
    shape.escapes = c.ranks2->count;
    shape.rank2_width = c.ranks2->width;
    shape.escapes2 = c.escapes->count;
    const SectionEntry *bits = t.find(k, SectionKind::kTokenBits), *ends = t.find(k, SectionKind::kTokenEnds);
    shape.token_bits = bits ? bits->count : 0;
    shape.token_end_width = ends ? ends->width : 1;
    const SectionEntry *used = t.find(k, SectionKind::kUsedTokens), *used_ranks = t.find(k, SectionKind::kUsedTokenRanks);
    if (k == 1 && used && used_ranks) {  // their sizes are checked with the rest below
      used_ = UsedTokens{t.packed(used), t.packed(used_ranks)};
      shape.used_tokens = used_.count();
    }
    if (k == 2) read_dense_runs(t, t.find(k, SectionKind::kDenseRuns), shape, dense_first, dense_before);
    // Exactly the layout's sections, each with the layout's count and width.
    t.require_layout(k, level_sections(shape));
    L.count_values = t.count_values(k, c.values, c.ranks->count);
    L.count_value_count = c.values->count;
    L.count_ranks = TieredRankView(RankView(t.packed(c.ranks), PackedView(), t.packed(c.escape_index)),
                                   RankView(t.packed(c.ranks2), t.packed(c.escapes), t.packed(c.ranks2_index)));
    if (const SectionEntry* dense = t.find(k, SectionKind::kDenseBits))
      L.dense = DenseRunsView(t.bytes(dense), t.packed(k, SectionKind::kDenseRanks), shape.used_tokens,
                              std::move(dense_first), std::move(dense_before));
    if (bits)
      L.token_ranks = ChunkedEliasFanoView(L.size - std::min(L.size, shape.dense_entries), t.bytes(bits), bits->count,
                                           t.packed(k, SectionKind::kTokenStarts), t.packed(ends));
    L.child_offsets = read_child_offsets(t, k, n);
  }
  for (uint32_t k = 1; k < n; ++k) {
    const LevelV2& L = levels_[k - 1];
    const uint64_t parents = k == 1 ? used_.count() : L.size;
    if (L.child_offsets[0] != 0 || L.child_offsets[parents] != levels_[k].size)
      throw FormatError(level_name(k) + ": child offsets do not span level " + std::to_string(k + 1));
  }
}

void TrieV2::read_dense_runs(const SectionTable& t, const SectionEntry* s, LevelShapeV2& shape,
                             std::vector<uint64_t>& first, std::vector<uint64_t>& before) const {
  shape.used_tokens = used_.count();
  if (!s) return;  // the layout check names the missing section
  const std::string what = level_name(2) + ": dense run ";
  const PackedView parents = t.packed(s);
  before.push_back(0);
  for (uint64_t d = 0; d < parents.size(); ++d) {
    const uint64_t p = parents[d];
    if (p >= levels_[0].size || (d > 0 && p <= parents[d - 1]))
      throw FormatError(what + std::to_string(d) + ": parent " + std::to_string(p) +
                        " out of range or not ascending");
    uint64_t lo, hi;
    children(1, p, &lo, &hi);
    if (hi <= lo || hi - lo > shape.used_tokens)
      throw FormatError(what + std::to_string(d) + ": " + std::to_string(hi - lo) +
                        " children, a bitmap holds 1 to " + std::to_string(shape.used_tokens));
    first.push_back(lo);
    before.push_back(before.back() + (hi - lo));
  }
  shape.dense_runs = parents.size();
  shape.dense_entries = before.back();
}

uint64_t TrieV2::used_token(uint64_t r) const {
  // The last word whose rank sample is <= r, then the bit within it.
  const uint64_t words = used_.ranks.size();
  uint64_t lo = 0, hi = words;
  while (hi - lo > 1) {
    const uint64_t mid = (lo + hi) / 2;
    if (used_.ranks[mid] <= r) lo = mid;
    else hi = mid;
  }
  if (words == 0) return UINT64_MAX;
  uint64_t word;
  std::memcpy(&word, used_.bits.data() + lo * 8, 8);
  const uint64_t left = r - used_.ranks[lo];
  if (left >= static_cast<uint64_t>(__builtin_popcountll(word))) return UINT64_MAX;
  return lo * 64 + select_in_word(word, left);
}

}  // namespace ngram
