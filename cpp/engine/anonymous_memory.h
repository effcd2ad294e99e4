// Anonymous memory for what a trie holds in RAM (its image, and the arrays
// a version-1 trie decodes beside it), on huge pages where the kernel gives
// them.
#pragma once
#include <cstdint>
#include <memory>

namespace ngram {

struct AnonymousMemoryDeleter {
  uint64_t bytes;
  void operator()(uint8_t* p) const;
};
using AnonymousMemory = std::unique_ptr<uint8_t, AnonymousMemoryDeleter>;

// `bytes` of zeroed memory; throws std::bad_alloc when there is none.
AnonymousMemory allocate_anonymous(uint64_t bytes);

}  // namespace ngram
