// protobuf's wire encoding (protobuf.dev/programming-guides/encoding): the
// primitives the hand codecs of the tree messages are written with
// (prune_tree_codec.h, propose_tree_codec.h, tree_codec.h). Every read is
// bounds-checked; a malformed message throws naming the message and the
// byte offset.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "protobuf's fixed-width fields are copied as they lie");

namespace ngram_py::wire {

using ngram::InvalidArgument;

constexpr uint32_t kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5;

inline void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

inline size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, ++n;
  return n;
}

// A packed repeated fixed-width field; empty arrays are left out, as protobuf leaves them out.
template <class T>
size_t packed_size(uint32_t field, size_t n) {
  return n ? varint_size(field << 3 | kLen) + varint_size(n * sizeof(T)) + n * sizeof(T) : 0;
}

template <class T>
void put_packed(std::string& out, uint32_t field, const T* v, size_t n) {
  if (!n) return;
  put_varint(out, field << 3 | kLen);
  put_varint(out, n * sizeof(T));
  out.append(reinterpret_cast<const char*>(v), n * sizeof(T));
}

// A length-delimited field: a string, or a message already written.
inline void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_varint(out, field << 3 | kLen);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// The head every tree request shares: index (field 1) and tokenizer
// fingerprint (2) when set, and its params message (3), always written.
inline std::string tree_request_head(const std::string& index, const std::string& fingerprint,
                                     const std::string& params) {
  std::string out;
  if (!index.empty()) put_bytes(out, 1, index);
  if (!fingerprint.empty()) put_bytes(out, 2, fingerprint);
  put_bytes(out, 3, params);
  return out;
}

// A varint field (int64 values as protobuf writes them: two's complement, 10 bytes when negative).
inline void put_varint_field(std::string& out, uint32_t field, uint64_t v) {
  put_varint(out, field << 3 | kVarint);
  put_varint(out, v);
}

inline void put_float_field(std::string& out, uint32_t field, float v) {
  put_varint(out, field << 3 | kFixed32);
  out.append(reinterpret_cast<const char*>(&v), 4);
}

// Reads one message's fields; every read is bounds-checked and a malformed
// message throws naming the message and the byte offset.
class WireReader {
 public:
  // base: the offset of p in the outermost message, for the error messages.
  WireReader(const uint8_t* p, size_t n, const char* what, size_t base = 0)
      : p_(p), end_(p + n), at0_(p - base), what_(what) {}
  bool done() const { return p_ >= end_; }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) fail("truncated varint");
      const uint8_t b = *p_++;
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint longer than 10 bytes");
  }

  // The next field's number and wire type.
  std::pair<uint32_t, uint32_t> tag() {
    const uint64_t t = varint();
    if ((t >> 3) == 0 || (t >> 3) > UINT32_MAX) fail("field number out of range");
    return {static_cast<uint32_t>(t >> 3), static_cast<uint32_t>(t & 7)};
  }

  // A length-delimited payload: (pointer, length).
  std::pair<const uint8_t*, size_t> bytes() {
    const uint64_t n = varint();
    if (n > static_cast<uint64_t>(end_ - p_)) fail("length " + std::to_string(n) + " past the end");
    const uint8_t* at = p_;
    p_ += n;
    return {at, static_cast<size_t>(n)};
  }

  void skip(uint32_t wire_type) {
    switch (wire_type) {
      case kVarint: varint(); return;
      case kFixed64: advance(8); return;
      case kLen: bytes(); return;
      case kFixed32: advance(4); return;
      default: fail("unsupported wire type " + std::to_string(wire_type));
    }
  }

  // A repeated 4-byte field, packed or one element at a time.
  template <class T>
  void read_fixed32s(uint32_t wire_type, std::vector<T>& out) {
    static_assert(sizeof(T) == 4);
    if (wire_type == kLen) {
      const auto [at, n] = bytes();
      if (n % 4) fail("packed 4-byte field of " + std::to_string(n) + " bytes");
      const size_t old = out.size();
      out.resize(old + n / 4);
      std::memcpy(out.data() + old, at, n);
    } else if (wire_type == kFixed32) {
      T v;
      std::memcpy(&v, p_, 4);
      advance(4);
      out.push_back(v);
    } else {
      fail("4-byte field with wire type " + std::to_string(wire_type));
    }
  }

  size_t offset() const { return static_cast<size_t>(p_ - at0_); }
  [[noreturn]] void fail(const std::string& why) const {
    throw InvalidArgument(std::string(what_) + ": " + why + " at byte " + std::to_string(offset()));
  }

 private:
  void advance(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) fail("truncated fixed-width field");
    p_ += n;
  }
  const uint8_t* p_;
  const uint8_t* end_;
  const uint8_t* at0_;
  const char* what_;
};

}  // namespace ngram_py::wire
