// Elias-Fano coding of a non-decreasing sequence v[0..n) with values in
// [0, u]: the low l = floor(log2(u / n)) bits of each value are bit-packed;
// the high parts are a bit vector with bit (v[i] >> l) + i set for each i.
// About 2 + log2(u / n) bits per value. A sample of the position of every
// kSelectEvery-th set bit makes access O(1). Used for child offsets, where
// n is the number of entries of a level and u the size of the next level.
#pragma once
#include <cstdint>

#include "packed_array.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ngram {

// Position of the r-th set bit of x (r < popcount(x)).
#if defined(__x86_64__)
__attribute__((target("bmi2"))) inline uint32_t select_in_word_bmi2(uint64_t x, uint64_t r) {
  return static_cast<uint32_t>(__builtin_ctzll(_pdep_u64(uint64_t{1} << r, x)));
}
#endif

inline uint32_t select_in_word_portable(uint64_t x, uint64_t r) {
  uint32_t shift = 0;
  for (;;) {  // whole bytes first, then bits
    const uint64_t c = static_cast<uint64_t>(__builtin_popcountll(x & 0xFF));
    if (r < c) break;
    r -= c;
    x >>= 8;
    shift += 8;
  }
  for (; r > 0; --r) x &= x - 1;
  return shift + static_cast<uint32_t>(__builtin_ctzll(x));
}

inline uint32_t select_in_word(uint64_t x, uint64_t r) {
#if defined(__x86_64__)
  static const bool bmi2 = __builtin_cpu_supports("bmi2");
  if (bmi2) return select_in_word_bmi2(x, r);
#endif
  return select_in_word_portable(x, r);
}

constexpr uint64_t kSelectEvery = 64;

inline uint32_t ef_low_bits(uint64_t n, uint64_t u) {
  uint32_t l = 0;
  while (n > 0 && l < 62 && (u / n) >> (l + 1) != 0) ++l;
  return l;
}

inline uint64_t ef_high_bits(uint64_t n, uint64_t u, uint32_t l) { return n + (u >> l) + 1; }

class EliasFanoView {
 public:
  EliasFanoView() = default;
  EliasFanoView(PackedView low, const uint8_t* high, uint64_t high_bits, PackedView select, uint32_t l)
      : low_(low), high_(high), high_words_((high_bits + 63) / 64), select_(select), l_(l) {}

  uint64_t size() const { return low_.size(); }

  // v[i] and v[i+1] (i + 1 < size()).
  void pair(uint64_t i, uint64_t* a, uint64_t* b) const {
    const uint64_t p = select(i);
    const uint64_t q = next_one(p + 1);
    *a = ((p - i) << l_) | low_[i];
    *b = ((q - i - 1) << l_) | low_[i + 1];
  }

  uint64_t operator[](uint64_t i) const { return ((select(i) - i) << l_) | low_[i]; }

  // f(v[i]) for every i in order, walking the high bits once. A corrupted
  // high part with too few set bits ends early: the rest get `missing`.
  template <class F>
  void for_each(F f, uint64_t missing) const {
    uint64_t i = 0;
    const uint64_t n = size();
    for (uint64_t w = 0; w < high_words_ && i < n; ++w) {
      for (uint64_t x = word(w); x != 0 && i < n; x &= x - 1, ++i)
        f(((w * 64 + static_cast<uint64_t>(__builtin_ctzll(x)) - i) << l_) | low_[i]);
    }
    for (; i < n; ++i) f(missing);
  }

 private:
  uint64_t word(uint64_t w) const {
    uint64_t x = 0;
    if (w < high_words_) std::memcpy(&x, high_ + w * 8, 8);  // a corrupted file ends the scan
    return x;
  }

  // Position of the i-th set bit (0-based).
  uint64_t select(uint64_t i) const {
    const uint64_t s = i / kSelectEvery;
    uint64_t pos = s < select_.size() ? select_[s] : 0;
    uint64_t left = i % kSelectEvery;
    uint64_t w = pos / 64;
    uint64_t bits = word(w) & (~uint64_t{0} << (pos % 64));
    for (;;) {
      const uint64_t c = static_cast<uint64_t>(__builtin_popcountll(bits));
      if (left < c) break;
      left -= c;
      if (++w >= high_words_) return high_words_ * 64;
      bits = word(w);
    }
    return w * 64 + select_in_word(bits, left);
  }

  // Position of the first set bit at or after p.
  uint64_t next_one(uint64_t p) const {
    uint64_t w = p / 64;
    uint64_t bits = word(w) & (p % 64 ? ~uint64_t{0} << (p % 64) : ~uint64_t{0});
    while (bits == 0) {
      if (++w >= high_words_) return high_words_ * 64;
      bits = word(w);
    }
    return w * 64 + static_cast<uint64_t>(__builtin_ctzll(bits));
  }

  PackedView low_;
  const uint8_t* high_ = nullptr;
  uint64_t high_words_ = 0;
  PackedView select_;
  uint32_t l_ = 0;
};

// Streams an Elias-Fano sequence into three word sinks (low, high, select).
template <typename Sink>
class EliasFanoWriter {
 public:
  EliasFanoWriter(uint64_t n, uint64_t u, Sink low, Sink high, Sink select)
      : l_(ef_low_bits(n, u)), high_bits_(ef_high_bits(n, u, l_)), low_(l_, std::move(low)),
        high_(std::move(high)), select_(bits_for(high_bits_), std::move(select)) {}

  uint32_t low_bits() const { return l_; }

  void push(uint64_t v) {
    const uint64_t pos = (v >> l_) + i_;
    if (i_ % kSelectEvery == 0) select_.push(pos);
    while (pos / 64 > word_index_) {
      high_(cur_);
      cur_ = 0;
      ++word_index_;
    }
    cur_ |= uint64_t{1} << (pos % 64);
    low_.push(l_ ? v & ((uint64_t{1} << l_) - 1) : 0);
    ++i_;
  }

  void finish() {
    const uint64_t words = (high_bits_ + 63) / 64 + 1;  // + the trailing zero word
    while (word_index_ < words) {
      high_(cur_);
      cur_ = 0;
      ++word_index_;
    }
    low_.finish();
    select_.finish();
  }

 private:
  uint32_t l_;
  uint64_t high_bits_;  // the length of the high-part bit vector
  PackedWriter<Sink> low_;
  Sink high_;
  PackedWriter<Sink> select_;
  uint64_t i_ = 0;
  uint64_t cur_ = 0;
  uint64_t word_index_ = 0;
};

}  // namespace ngram
