// The checks every request's values go through, and how a value is written
// in their messages: one definition for tree pruning, proposals and the
// queries. Each throws InvalidArgument naming the field at fault.
#pragma once
#include <cstdint>
#include <string>

namespace ngram {

// A float as an error message writes it: "nan", "inf", an integral value
// in full ("10000000"), else its shortest decimal that reads back as the
// same float32 ("-0.1", "1e-05").
std::string number_text(float v);

// "<field> = <v>: <must> <lo>..<hi>" unless lo <= v <= hi.
void check_range(int64_t v, int64_t lo, int64_t hi, const char* field, const char* must = "must be");

// "<field> = <v>: must be in [0, 1]" unless 0 <= v <= 1 (NaN fails).
void check_unit(float v, const char* field);

// "vocab_size = <n>: must be in 1..2147483648" for a vocabulary that is
// empty or whose ids do not fit the engine's int32 tokens.
void check_vocab_size(uint64_t vocab_size);

// "<field>[i] = <id> is not a token id: must be in [0, <vocab>)" for the
// first id outside [0, vocab).
void check_token_ids(uint64_t vocab, const int64_t* ids, uint64_t n, const char* field);
void check_token_ids(uint64_t vocab, const int32_t* ids, uint64_t n, const char* field);

}  // namespace ngram
