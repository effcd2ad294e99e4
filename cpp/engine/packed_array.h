// Fixed-width bit-packed integer arrays: element i occupies bits
// [i*width, (i+1)*width) of a little-endian stream of 64-bit words. Every
// packed section ends with one extra zero word so that a read of any element
// touches at most two in-bounds words, without a branch.
#pragma once
#include <cstdint>
#include <cstring>

namespace ngram {

// Bits needed to store values in [0, max_value]; at least 1.
inline uint32_t bits_for(uint64_t max_value) {
  uint32_t b = 1;
  while (b < 64 && (max_value >> b) != 0) ++b;
  return b;
}

// Bytes of a packed section holding `count` elements of `width` bits.
inline uint64_t packed_bytes(uint64_t count, uint32_t width) {
  return ((count * width + 63) / 64 + 1) * 8;
}

class PackedView {
 public:
  PackedView() = default;
  PackedView(const uint8_t* data, uint64_t count, uint32_t width)
      : data_(data), count_(count), width_(width),
        mask_(width >= 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1) {}

  uint64_t size() const { return count_; }
  uint32_t width() const { return width_; }
  const uint8_t* data() const { return data_; }

  uint64_t operator[](uint64_t i) const {
    const uint64_t bit = i * width_;
    uint64_t x;
    if (width_ <= 56) {
      // One unaligned load from the element's first byte holds all of it;
      // the trailing zero word keeps the load inside the section.
      std::memcpy(&x, data_ + (bit >> 3), 8);
      return (x >> (bit & 7)) & mask_;
    }
    const uint64_t word = bit >> 6;
    const unsigned shift = bit & 63;
    uint64_t hi;
    std::memcpy(&x, data_ + word * 8, 8);
    std::memcpy(&hi, data_ + word * 8 + 8, 8);
    // (hi << 1) << (63 - shift) is hi << (64 - shift) without the undefined
    // shift by 64 when shift == 0.
    return ((x >> shift) | ((hi << 1) << (63 - shift))) & mask_;
  }

  // First index in [lo, hi) whose value is >= v (hi if none). Values in the
  // range must be sorted ascending. Branch-free halving: the comparisons of
  // a binary search are unpredictable, and a mispredicted branch costs more
  // than the whole probe.
  uint64_t lower_bound(uint64_t lo, uint64_t hi, uint64_t v) const {
    if (lo >= hi) return lo;
    uint64_t base = lo, n = hi - lo;
    while (n > 1) {
      const uint64_t half = n / 2;
      base += half & -static_cast<uint64_t>((*this)[base + half] < v);
      n -= half;
    }
    return base + ((*this)[base] < v);
  }

 private:
  const uint8_t* data_ = nullptr;
  uint64_t count_ = 0;
  uint32_t width_ = 0;
  uint64_t mask_ = 0;
};

// Packs values into 64-bit words and hands each finished word to a sink
// (anything callable with `void(uint64_t word)`).
template <typename Sink>
class PackedWriter {
 public:
  PackedWriter(uint32_t width, Sink sink) : width_(width), sink_(std::move(sink)) {}

  void push(uint64_t v) {
    cur_ |= v << used_;
    used_ += width_;
    if (used_ >= 64) {
      sink_(cur_);
      used_ -= 64;
      cur_ = used_ == 0 ? 0 : v >> (width_ - used_);
    }
    ++count_;
  }

  // Flushes the partial word and the trailing zero word.
  void finish() {
    if (used_ > 0) sink_(cur_);
    sink_(uint64_t{0});
    cur_ = 0;
    used_ = 0;
  }

  uint64_t count() const { return count_; }

 private:
  uint32_t width_;
  Sink sink_;
  uint64_t cur_ = 0;
  uint32_t used_ = 0;
  uint64_t count_ = 0;
};

}  // namespace ngram
