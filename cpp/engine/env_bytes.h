// A memory budget an environment variable may set ($NGRAM_RUN_BOUNDS_BYTES,
// $NGRAM_RUN_TOPS_BYTES): the caches proposals keep per open trie.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <string>

#include "errors.h"

namespace ngram {

// The bytes $name names (decimal digits only), or `fallback` when it is
// unset. Anything else raises InvalidArgument naming the variable, rather
// than a budget of 0 that would silently keep nothing.
inline uint64_t bytes_from_env(const char* name, uint64_t fallback) {
  const char* e = std::getenv(name);
  if (e == nullptr) return fallback;
  const std::string v(e);
  bool digits = !v.empty() && v.size() <= 19;
  for (char c : v) digits = digits && c >= '0' && c <= '9';
  if (!digits)
    throw InvalidArgument(std::string(name) + " = '" + v + "': must be a number of bytes (decimal digits)");
  return std::strtoull(e, nullptr, 10);
}

}  // namespace ngram
