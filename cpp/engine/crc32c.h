// CRC-32C (Castagnoli): the checksum of every trie section and of the header.
// Hardware instruction where the CPU has SSE4.2, a table otherwise; both give
// the same value.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ngram {

// Extends `crc` (0 for a new checksum) over `len` bytes.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t len);

inline uint32_t crc32c(const void* data, size_t len) { return crc32c_extend(0, data, len); }

}  // namespace ngram
