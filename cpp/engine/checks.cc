#include "checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "errors.h"

namespace ngram {

std::string number_text(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[48];
  if (v == std::trunc(v) && std::fabs(v) < 1e16f) {
    std::snprintf(buf, sizeof buf, "%.0f", static_cast<double>(v));
    return buf;
  }
  for (int digits = 1; digits <= 9; ++digits) {  // 9 significant digits always read back
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

void check_range(int64_t v, int64_t lo, int64_t hi, const char* field, const char* must) {
  if (v < lo || v > hi)
    throw InvalidArgument(std::string(field) + " = " + std::to_string(v) + ": " + must + " " + std::to_string(lo) +
                          ".." + std::to_string(hi));
}

void check_unit(float v, const char* field) {
  if (!(v >= 0.0f && v <= 1.0f))  // NaN fails too
    throw InvalidArgument(std::string(field) + " = " + number_text(v) + ": must be in [0, 1]");
}

void check_vocab_size(uint64_t vocab_size) {
  if (vocab_size == 0 || vocab_size > (uint64_t{1} << 31))
    throw InvalidArgument("vocab_size = " + std::to_string(vocab_size) + ": must be in 1..2147483648");
}

namespace {

template <class Id>
void check_ids(uint64_t vocab, const Id* toks, uint64_t n, const char* field) {
  const int64_t v = static_cast<int64_t>(vocab);
  // The smallest and largest ids, signed, with no early exit, so that the
  // compiler vectorizes them (SSE4.2 compares signed 64-bit words, not
  // unsigned ones); only a batch with a bad id looks for the first one.
  Id smallest = 0, largest = 0;
  for (uint64_t i = 0; i < n; ++i) {
    smallest = std::min(smallest, toks[i]);
    largest = std::max(largest, toks[i]);
  }
  if (smallest >= 0 && static_cast<int64_t>(largest) < v) return;
  for (uint64_t i = 0; i < n; ++i) {
    if (toks[i] < 0 || toks[i] >= v)
      throw InvalidArgument(std::string(field) + "[" + std::to_string(i) + "] = " + std::to_string(toks[i]) +
                            " is not a token id: must be in [0, " + std::to_string(v) + ")");
  }
}

}  // namespace

void check_token_ids(uint64_t vocab, const int64_t* ids, uint64_t n, const char* field) {
  check_ids(vocab, ids, n, field);
}
void check_token_ids(uint64_t vocab, const int32_t* ids, uint64_t n, const char* field) {
  check_ids(vocab, ids, n, field);
}

}  // namespace ngram
