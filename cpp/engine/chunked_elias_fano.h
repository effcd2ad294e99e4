// A strictly increasing sequence S[0..n) coded as Elias-Fano in chunks of
// kChunk values, each over its own range (partitioned Elias-Fano with fixed
// partitions): dense stretches get few low bits, sparse ones more, instead
// of one width for the whole sequence. Format version 2 stores each level's
// tokens this way (docs/FORMAT.md, "Version 2").
//
// Chunk c holds the m values S[c*kChunk .. min(n, (c+1)*kChunk)). With
// base = S[c*kChunk - 1] + 1 (0 for c = 0) and end its last value, each is
// coded as d = S - base in [0, u], u = end - base: l = ef_low_bits(m, u)
// low bits each, packed, then a high-part bit vector of m + (u >> l) + 1
// bits with bit (d_j >> l) + j set for value j. Three sections: the chunks'
// bits back to back (`bits`, width 1), each chunk's first bit (`starts`,
// chunks + 1 of them, the last = the total) and each chunk's last value
// (`ends`). Every value of a chunk is found from its first bit and its
// neighbours' ends: no select samples.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "elias_fano.h"
#include "packed_array.h"

namespace ngram {

class ChunkedEliasFanoView {
 public:
  static constexpr uint64_t kChunk = 128;

  ChunkedEliasFanoView() = default;
  // n values; bits: the chunks' bit streams (bit_count bits); starts: each
  // chunk's first bit; ends: each chunk's last value.
  ChunkedEliasFanoView(uint64_t n, const uint8_t* bits, uint64_t bit_count, PackedView starts, PackedView ends)
      : n_(n), bits_(bits), bit_words_((bit_count + 63) / 64), starts_(starts), ends_(ends) {}

  uint64_t size() const { return n_; }
  void prefetch(uint64_t i) const {
    const uint64_t c = i / kChunk;
    if (c < ends_.size()) __builtin_prefetch(bits_ + (starts_[c] >> 3));
  }

  // S[i], i < size().
  uint64_t operator[](uint64_t i) const { return chunk(i / kChunk).value(*this, i % kChunk); }

  // Decodes S[lo..hi) into out, chunk by chunk.
  void decode(uint64_t lo, uint64_t hi, uint64_t* out) const {
    while (lo < hi) {
      const uint64_t ci = lo / kChunk;
      const Chunk c = chunk(ci);
      const uint64_t j0 = lo - ci * kChunk, j1 = std::min<uint64_t>(hi - ci * kChunk, kChunk);
      c.values(*this, j0, j1, out);
      out += j1 - j0;
      lo += j1 - j0;
    }
  }

  // For m values v[0..m) at once: whether S[lo..hi) holds v[j] (hit[j]),
  // and then at which index (pos[j]). The range's chunk ends are read once
  // for all the values (up to kMaxRunChunks; a longer range bisects them in
  // place), then each value's bisection runs over them branch-free, in
  // lockstep with the others'.
  void find_many(uint64_t lo, uint64_t hi, const uint64_t* v, uint32_t m, uint64_t* pos, bool* hit) const {
    for (uint32_t j = 0; j < m; ++j) pos[j] = lo, hit[j] = false;
    if (lo >= hi) return;
    const uint64_t c_first = lo / kChunk, c_last = (hi - 1) / kChunk;
    if (c_last >= ends_.size()) return;  // only in a corrupted file
    const uint64_t nc = c_last - c_first + 1;
    uint64_t c[kMaxLanes];
    if (nc > kMaxRunChunks) {
      for (uint32_t j = 0; j < m; ++j) c[j] = c_first;
      for (uint64_t n = nc; n > 1;) {
        const uint64_t half = n / 2;
        for (uint32_t j = 0; j < m; ++j) c[j] += half & -static_cast<uint64_t>(ends_[c[j] + half - 1] < v[j]);
        n -= half;
      }
      for (uint32_t j = 0; j < m; ++j) {
        uint64_t at = 0;
        hit[j] = chunk(c[j]).find(*this, v[j], &at);
        pos[j] = c[j] * kChunk + at;
        hit[j] = hit[j] && pos[j] >= lo && pos[j] < hi;
      }
      return;
    }
    // e[i + 1]: the end of chunk c_first + i; e[0]: the end before it.
    uint64_t e[kMaxRunChunks + 1];
    e[0] = c_first == 0 ? 0 : ends_[c_first - 1];
    for (uint64_t i = 0; i < nc; ++i) e[i + 1] = ends_[c_first + i];
    for (uint32_t j = 0; j < m; ++j) c[j] = 0;
    for (uint64_t n = nc; n > 1;) {
      const uint64_t half = n / 2;
      for (uint32_t j = 0; j < m; ++j) c[j] += half & -static_cast<uint64_t>(e[c[j] + half] < v[j]);
      n -= half;
    }
    for (uint32_t j = 0; j < m; ++j) {
      const uint64_t ci = c_first + c[j];
      uint64_t at = 0;
      hit[j] = chunk(ci, ci == 0 ? 0 : e[c[j]] + 1, e[c[j] + 1]).find(*this, v[j], &at);
      pos[j] = ci * kChunk + at;
      hit[j] = hit[j] && pos[j] >= lo && pos[j] < hi;
    }
  }
  static constexpr uint64_t kMaxRunChunks = 256;
  static constexpr uint32_t kMaxLanes = 64;

  // Whether S[lo..hi) holds v, and then at which index (*pos).
  bool find(uint64_t lo, uint64_t hi, uint64_t v, uint64_t* pos) const {
    if (lo >= hi) return false;
    // The chunk: the first of the range's whose last value is >= v.
    uint64_t c_lo = lo / kChunk, c_hi = (hi - 1) / kChunk;  // inclusive
    if (c_hi >= ends_.size()) return false;  // only in a corrupted file
    while (c_lo < c_hi) {
      const uint64_t mid = (c_lo + c_hi) / 2;
      if (ends_[mid] < v) c_lo = mid + 1;
      else c_hi = mid;
    }
    uint64_t at = 0;
    if (!chunk(c_lo).find(*this, v, &at)) return false;
    *pos = c_lo * kChunk + at;
    return *pos >= lo && *pos < hi;
  }

 private:
  struct Chunk {
    uint64_t bit = 0;   // first bit of the low part
    uint64_t base = 0;  // the value d = 0 stands for
    uint64_t end = 0;   // the chunk's last value
    uint64_t m = 0;     // values in the chunk (0 only in a corrupted file)
    uint32_t l = 0;

    uint64_t high_start() const { return bit + m * l; }

    // The word holding the j-th set bit of the high part (*w), and that
    // word's bits from it on (*bits); false past the section (corrupted).
    bool seek(const ChunkedEliasFanoView& v, uint64_t j, uint64_t* w, uint64_t* bits) const {
      const uint64_t h0 = high_start();
      *w = h0 / 64;
      uint64_t word = v.word(*w) & (~uint64_t{0} << (h0 % 64));
      uint64_t left = j;
      for (;;) {
        const uint64_t c = static_cast<uint64_t>(__builtin_popcountll(word));
        if (left < c) break;
        left -= c;
        if (++*w >= v.bit_words_) return false;
        word = v.word(*w);
      }
      *bits = word & (~uint64_t{0} << select_in_word(word, left));
      return true;
    }

    // Value j (< m).
    uint64_t value(const ChunkedEliasFanoView& v, uint64_t j) const {
      uint64_t w, bits;
      if (j >= m || !seek(v, j, &w, &bits)) return 0;  // only in a corrupted file
      const uint64_t pos = w * 64 + static_cast<uint64_t>(__builtin_ctzll(bits)) - high_start();
      return base + (((pos - j) << l) | low(v, j));
    }
    uint64_t low(const ChunkedEliasFanoView& v, uint64_t j) const { return l ? v.bits_at(bit + j * l, l) : 0; }

    // Values j0..j1 (j1 <= kChunk) into out; past m (a corrupted file) zeros.
    void values(const ChunkedEliasFanoView& v, uint64_t j0, uint64_t j1, uint64_t* out) const {
      std::fill(out, out + (j1 - j0), 0);
      const uint64_t end_j = std::min(j1, m);
      if (j0 >= end_j) return;
      // Straight to value j0's set bit (whole words counted, not bits).
      uint64_t w, word;
      if (!seek(v, j0, &w, &word)) return;  // only in a corrupted file
      const uint64_t h0 = high_start();
      for (uint64_t j = j0; j < end_j; ++j) {
        while (word == 0) {
          if (++w >= v.bit_words_) return;  // only in a corrupted file
          word = v.word(w);
        }
        const uint64_t pos = w * 64 + static_cast<uint64_t>(__builtin_ctzll(word)) - h0;
        word &= word - 1;
        out[j - j0] = base + (((pos - j) << l) | low(v, j));
      }
    }

    // Whether the chunk holds target, and then as value *at. The values whose high
    // part is target's, h, are the set bits right after the h-th zero of
    // the high part: find that zero, then compare those values' low bits
    // (no value is decoded whole, no set bit selected).
    bool find(const ChunkedEliasFanoView& v, uint64_t target, uint64_t* at) const {
      if (m == 0 || target < base || target > end) return false;
      const uint64_t d = target - base;
      const uint64_t h = d >> l, low_target = d & ((uint64_t{1} << l) - 1);
      const uint64_t h0 = high_start();
      // The high part ends before bit h0 + m + (u >> l) + 1; no scan goes
      // past that word (a corrupted file may lack the zeros).
      const uint64_t last_word = std::min(v.bit_words_, (h0 + m + ((end - base) >> l) + 64) / 64);
      uint64_t p = h0, ones = 0;  // p: bucket h's first bit; ones: the values before it
      if (h > 0) {
        uint64_t w = h0 / 64, from = h0 % 64, zeros_left = h;
        for (;;) {
          if (w >= last_word) return false;  // only in a corrupted file
          const uint64_t word = v.word_unchecked(w) & (~uint64_t{0} << from);
          const uint64_t ones_here = static_cast<uint64_t>(__builtin_popcountll(word));
          const uint64_t zeros_here = 64 - from - ones_here;
          if (zeros_here >= zeros_left) {
            const uint32_t zero = select_in_word(~word & (~uint64_t{0} << from), zeros_left - 1);
            const uint64_t upto = zero == 63 ? ~uint64_t{0} : (uint64_t{1} << (zero + 1)) - 1;
            ones += static_cast<uint64_t>(__builtin_popcountll(word & upto));
            p = 64 * w + zero + 1;
            break;
          }
          zeros_left -= zeros_here;
          ones += ones_here;
          ++w;
          from = 0;
        }
      }
      // Bucket h: values ones, ones + 1, ... while the bits from p on are set.
      for (uint64_t j = ones; j < m; ++j, ++p) {
        if (p / 64 >= last_word || !((v.word_unchecked(p / 64) >> (p % 64)) & 1)) return false;
        const uint64_t lw = low(v, j);
        if (lw >= low_target) {
          *at = j;
          return lw == low_target;
        }
      }
      return false;
    }
  };

  uint64_t word_unchecked(uint64_t w) const {  // w < bit_words_
    uint64_t x;
    std::memcpy(&x, bits_ + w * 8, 8);
    return x;
  }
  uint64_t word(uint64_t w) const {
    uint64_t x = 0;
    if (w < bit_words_) std::memcpy(&x, bits_ + w * 8, 8);  // a corrupted file ends the scan
    return x;
  }
  // `width` bits (1..56) at bit position p: one unaligned load from p's
  // byte, which the section's trailing zero word (a packed section's)
  // keeps inside the section for any byte before the bits' end.
  uint64_t bits_at(uint64_t p, uint32_t width) const {
    const uint64_t byte = p >> 3;
    if (byte >= bit_words_ * 8) return 0;  // only in a corrupted file
    uint64_t x;
    std::memcpy(&x, bits_ + byte, 8);
    return (x >> (p & 7)) & ((uint64_t{1} << width) - 1);
  }

  Chunk chunk(uint64_t c) const {
    if (c >= ends_.size() || c * kChunk >= n_) return Chunk{};  // only in a corrupted file (m = 0)
    return chunk(c, c == 0 ? 0 : ends_[c - 1] + 1, ends_[c]);
  }
  // Chunk c (< ends_.size()) whose values start at base and end at end.
  Chunk chunk(uint64_t c, uint64_t base, uint64_t end) const {
    Chunk out;
    if (c * kChunk >= n_) return out;  // only in a corrupted file (m = 0)
    out.base = base;
    out.end = end;
    out.m = std::min<uint64_t>(kChunk, n_ - c * kChunk);
    const uint64_t u = end - std::min(end, out.base);
    const uint64_t q = out.m == kChunk ? u / kChunk : u / out.m;  // ef_low_bits without its loop (a shift, mostly)
    out.l = q == 0 ? 0 : std::min<uint32_t>(63 - static_cast<uint32_t>(__builtin_clzll(q)), 56);  // 56+: corrupted
    out.bit = starts_[c];
    return out;
  }

  uint64_t n_ = 0;
  const uint8_t* bits_ = nullptr;
  uint64_t bit_words_ = 0;
  PackedView starts_, ends_;
};

// Codes a strictly increasing sequence: streams the chunks' bits, as
// little-endian words, into `sink` (a chunk's words once it is complete, the
// trailing zero word at finish()), and keeps their starts and ends, small,
// for the caller to write as the other two sections.
template <typename Sink>
class ChunkedEliasFanoWriter {
 public:
  static constexpr uint64_t kChunk = ChunkedEliasFanoView::kChunk;

  explicit ChunkedEliasFanoWriter(Sink sink) : sink_(std::move(sink)) {}

  void push(uint64_t v) {
    pending_.push_back(v);
    if (pending_.size() == kChunk) flush();
  }
  void finish() {
    if (!pending_.empty()) flush();
    starts.push_back(bit_count);
    const uint64_t total = (bit_count + 63) / 64;
    for (uint64_t w = first_word_; w < total; ++w) sink_(words_[w - first_word_]);
    sink_(uint64_t{0});
  }

  uint64_t bit_count = 0;
  std::vector<uint64_t> starts, ends;

 private:
  // Word w of the stream (w >= first_word_), grown as needed.
  uint64_t& word(uint64_t w) {
    while (first_word_ + words_.size() <= w) words_.push_back(0);
    return words_[w - first_word_];
  }
  void put(uint64_t value, uint32_t width) {
    if (width == 0) return;
    const uint64_t w = bit_count / 64, s = bit_count % 64;
    word(w) |= value << s;
    if (s + width > 64) word(w + 1) |= value >> (64 - s);
    bit_count += width;
  }
  void flush() {
    const uint64_t m = pending_.size();
    const uint64_t base = next_base_, end = pending_.back();
    const uint64_t u = end - base;
    const uint32_t l = ef_low_bits(m, u);
    starts.push_back(bit_count);
    ends.push_back(end);
    const uint64_t mask = l ? (uint64_t{1} << l) - 1 : 0;
    for (uint64_t j = 0; j < m; ++j) put((pending_[j] - base) & mask, l);
    const uint64_t h0 = bit_count, high_bits = m + (u >> l) + 1;
    for (uint64_t j = 0; j < m; ++j) {
      const uint64_t p = h0 + ((pending_[j] - base) >> l) + j;
      word(p / 64) |= uint64_t{1} << (p % 64);
    }
    bit_count += high_bits;
    next_base_ = end + 1;
    pending_.clear();
    // The words before the one bit_count is in are complete.
    const uint64_t done = bit_count / 64;
    for (uint64_t w = first_word_; w < done; ++w) sink_(word(w));
    if (done > first_word_) {
      words_.erase(words_.begin(), words_.begin() + static_cast<std::ptrdiff_t>(std::min<uint64_t>(done - first_word_, words_.size())));
      first_word_ = done;
    }
  }

  Sink sink_;
  std::vector<uint64_t> words_;  // words first_word_, first_word_ + 1, ... of the stream
  uint64_t first_word_ = 0;
  std::vector<uint64_t> pending_;
  uint64_t next_base_ = 0;
};

}  // namespace ngram
