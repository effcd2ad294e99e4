// Reads typed values off a fuzzer's byte string, front to back; past the end
// every read gives zero. Shared by the libFuzzer targets in this folder.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ngram_fuzz {

class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  template <class T>
  T take() {
    T v{};
    const size_t n = static_cast<size_t>(end_ - p_) < sizeof(T) ? static_cast<size_t>(end_ - p_) : sizeof(T);
    std::memcpy(&v, p_, n);
    p_ += n;
    return v;
  }
  // A small count in [0, limit].
  uint32_t count(uint32_t limit) { return take<uint8_t>() % (limit + 1); }
  // A token id: mostly inside a vocabulary of `vocab`, sometimes any int64.
  int64_t token(uint64_t vocab) {
    const uint8_t kind = take<uint8_t>();
    if (kind < 240 && vocab > 0) return static_cast<int64_t>(take<uint16_t>() % vocab);
    return take<int64_t>();
  }
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  const uint8_t* rest() const { return p_; }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace ngram_fuzz
