// Count ranks with escapes. Each entry's count is stored as its rank in the
// level's table of distinct counts. Most n-grams have one of a few small
// counts, so the ranks are stored in a narrow primary array of b bits
// (b in 1, 2, 4, 8, 16, 32); a rank that does not fit below the escape code
// 2^b - 1 is written as the escape code and stored in full, in order, in an
// escape array. A directory gives, per block of 64 entries, the escapes
// before the block; counting escape codes inside the block is a few word
// operations because b divides 64.
#pragma once
#include <cstdint>
#include <vector>

#include "packed_array.h"

namespace ngram {

constexpr uint64_t kEscapeBlock = 64;

struct RankLayout {
  uint32_t primary_width = 1;
  uint32_t full_width = 1;
  uint64_t escapes = 0;
};

// The cheapest layout for `n` entries whose rank r occurs frequencies[r] times;
// with allow_escapes false, the narrowest that needs none (for level 1, which
// is small and read by every query).
inline RankLayout choose_rank_layout(uint64_t n, const std::vector<uint64_t>& frequencies, bool allow_escapes) {
  RankLayout best;
  best.full_width = bits_for(frequencies.empty() ? 0 : frequencies.size() - 1);
  uint64_t best_bits = UINT64_MAX;
  for (uint32_t b : {1u, 2u, 4u, 8u, 16u, 32u}) {
    const uint64_t code = (uint64_t{1} << b) - 1;
    uint64_t esc = 0;
    for (uint64_t r = code; r < frequencies.size(); ++r) esc += frequencies[r];
    const uint64_t dir = ((n + kEscapeBlock - 1) / kEscapeBlock) * bits_for(esc);
    const uint64_t bits = n * b + esc * best.full_width + dir;
    if ((allow_escapes || esc == 0) && bits < best_bits) {
      best_bits = bits;
      best.primary_width = b;
      best.escapes = esc;
    }
    if (code >= frequencies.size()) break;  // wider codes only cost more
  }
  return best;
}

class RankView {
 public:
  RankView() = default;
  RankView(PackedView primary, PackedView escapes, PackedView directory)
      : primary_(primary), escapes_(escapes), directory_(directory),
        code_((uint64_t{1} << primary.width()) - 1) {
    for (uint32_t s = 0; s < 64 && primary.width() > 0; s += primary.width()) low_ |= uint64_t{1} << s;
  }

  // Ranks stored plainly, no escapes (a decoded copy: TrieIndex's RAM
  // mode): no field is an escape code.
  static RankView plain(PackedView ranks) {
    RankView v;
    v.primary_ = ranks;
    v.code_ = UINT64_MAX;
    return v;
  }

  uint64_t size() const { return primary_.size(); }
  bool has_escapes() const { return escapes_.size() > 0; }
  void prefetch(uint64_t i) const { __builtin_prefetch(primary_.data() + ((i * primary_.width()) >> 3)); }

  // f(rank) for every entry in order: operator[]'s answers, the escapes
  // read in sequence instead of through the directory.
  template <class F>
  void for_each(F f) const {
    uint64_t e = 0;
    for (uint64_t i = 0; i < primary_.size(); ++i) {
      const uint64_t r = primary_[i];
      if (r != code_) {
        f(r);
      } else {
        f(e < escapes_.size() ? escapes_[e] : UINT64_MAX);  // UINT64_MAX only in a corrupted file
        ++e;
      }
    }
  }

  uint64_t operator[](uint64_t i) const {
    const uint64_t r = primary_[i];
    if (r != code_) return r;
    const uint64_t e = escape_ordinal(i);
    return e < escapes_.size() ? escapes_[e] : UINT64_MAX;  // UINT64_MAX only in a corrupted file
  }

  // The primary field of entry i (the escape code when escaped), and the
  // number of escaped entries before entry i.
  uint64_t primary(uint64_t i) const { return primary_[i]; }
  uint64_t escape_code() const { return code_; }
  uint64_t escape_ordinal(uint64_t i) const {
    const uint64_t block = i / kEscapeBlock;
    return directory_[block] + codes_before(block * kEscapeBlock, i);
  }

 private:
  // Escape codes among entries [from, to), from a multiple of 64 (so the
  // range starts on a word boundary, and b | 64 keeps fields inside words).
  uint64_t codes_before(uint64_t from, uint64_t to) const {
    const uint32_t b = primary_.width();
    uint64_t count = 0;
    uint64_t bit = from * b;
    const uint64_t end = to * b;
    // Whole words, then the partial last one (at most 64 * b / 64 = b words).
    for (; bit + 64 <= end; bit += 64) count += codes_in(word_at(bit), b);
    if (bit < end) count += codes_in(word_at(bit) & (~uint64_t{0} >> (64 - (end - bit))), b);
    return count;
  }

  uint64_t word_at(uint64_t bit) const {
    uint64_t x;
    std::memcpy(&x, primary_.data() + bit / 8, 8);
    return x;
  }

  // Fields of b bits in x that are all ones.
  uint64_t codes_in(uint64_t x, uint32_t b) const {
    for (uint32_t s = 1; s < b; s <<= 1) x &= x >> s;  // a field's low bit = AND of its bits
    return static_cast<uint64_t>(__builtin_popcountll(x & low_));
  }

  PackedView primary_, escapes_, directory_;
  uint64_t code_ = 1;
  uint64_t low_ = 0;  // the lowest bit of every b-bit field of a word
};

// Format version 2's count ranks: two tiers of escapes. Tier 1 (`primary`,
// width b1) holds ranks below its escape code c1 = 2^b1 - 1; the escaped
// entries, in order, have tier 2 (`second`, a RankView of width b2 over
// them, whose own escapes hold full ranks minus c1 + c2). Rank = tier 1,
// else c1 + tier 2, else c1 + c2 + the full entry. Most n-grams of a level
// share one or two counts, so b1 is 1 or 2 and the rare counts pay the rest.
class TieredRankView {
 public:
  TieredRankView() = default;
  TieredRankView(RankView first, RankView second) : first_(first), second_(second) {}

  uint64_t size() const { return first_.size(); }
  void prefetch(uint64_t i) const { first_.prefetch(i); }

  uint64_t operator[](uint64_t i) const {
    const uint64_t r = first_.primary(i);
    const uint64_t c1 = first_.escape_code();
    if (r != c1) return r;
    const uint64_t e = first_.escape_ordinal(i);
    if (e >= second_.size()) return UINT64_MAX;  // only in a corrupted file
    const uint64_t r2 = second_.primary(e);
    if (r2 != second_.escape_code()) return c1 + r2;
    const uint64_t full = second_[e];
    return full == UINT64_MAX ? full : c1 + second_.escape_code() + full;
  }

 private:
  RankView first_, second_;
};

// The two-tier layout (b1, b2 in 1, 2, 4, 8, 16, 32) that makes a level's
// count sections smallest; level 1 (read by every query) gets no escapes.
struct TieredRankLayout {
  uint32_t first_width = 1, second_width = 1, full_width = 1;
  uint64_t first_escapes = 0, second_escapes = 0;
};

inline TieredRankLayout choose_tiered_rank_layout(uint64_t n, const std::vector<uint64_t>& frequencies,
                                                  bool allow_escapes) {
  TieredRankLayout best;
  const uint64_t values = frequencies.size();
  best.full_width = bits_for(values ? values - 1 : 0);
  uint64_t best_bits = UINT64_MAX;
  auto escaped = [&](uint64_t from) {
    uint64_t e = 0;
    for (uint64_t r = from; r < values; ++r) e += frequencies[r];
    return e;
  };
  auto dir_bits = [](uint64_t entries, uint64_t escapes) {
    return ((entries + kEscapeBlock - 1) / kEscapeBlock) * bits_for(escapes);
  };
  for (uint32_t b1 : {1u, 2u, 4u, 8u, 16u, 32u}) {
    const uint64_t c1 = (uint64_t{1} << b1) - 1;
    const uint64_t n1 = escaped(c1);
    if (!allow_escapes && n1 > 0) continue;
    for (uint32_t b2 : {1u, 2u, 4u, 8u, 16u, 32u}) {
      const uint64_t c2 = (uint64_t{1} << b2) - 1;
      const uint64_t n2 = escaped(c1 + c2);
      const uint64_t bits = n * b1 + dir_bits(n, n1) + n1 * b2 + dir_bits(n1, n2) + n2 * best.full_width;
      if (bits < best_bits) {
        best_bits = bits;
        best.first_width = b1;
        best.second_width = b2;
        best.first_escapes = n1;
        best.second_escapes = n2;
      }
      if (c1 + c2 >= values) break;  // wider codes only cost more
    }
    if (c1 >= values) break;
  }
  return best;
}

}  // namespace ngram
