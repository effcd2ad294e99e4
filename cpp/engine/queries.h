// The queries answered from a TrieIndex: counts, DART-compatible conditional
// probabilities, top-k continuations. Input validation for every query lives
// here, in one place, for the Python module and the server alike.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "interrupt.h"
#include "trie_index.h"

namespace ngram {

// Throws InvalidArgument naming `field` when a token id is outside [0, vocab).
void check_tokens(const TrieIndex& t, const int64_t* toks, uint64_t n, const char* field);
void check_tokens(const TrieIndex& t, const int32_t* toks, uint64_t n, const char* field);

// Occurrences of the n-gram toks[0..len); 0 when absent. 1 <= len <= order.
uint64_t count_ngram(const TrieIndex& t, const int64_t* toks, uint64_t len);

// DART-compatible conditional probabilities for a batch of B queries:
// contexts [B, C] (C >= 1), candidates [B, K], row-major. For each query and
// len from min(order-1, C) down to 1: if the last `len` context tokens s occur,
// every candidate w not yet matched with s+w occurring gets
// p = float(count(s+w)) * (1.0f / float(count(s))) and matched = len.
// Unmatched candidates get 0 and 0. Validates every id first, then answers
// the queries a few dozen at a time (lookup_steps.h), checking
// `stop` before each few dozen: once it says stop, the call throws
// Interrupted, probs and matched then partly written.
void conditional_probs(const TrieIndex& t, const int64_t* contexts, uint64_t batch, uint64_t ctx_len,
                       const int64_t* candidates, uint64_t k, float* probs, int32_t* matched,
                       const Interrupt& stop = Interrupt());
// The same for int32 ids (the lookups' own type: read where they lie).
void conditional_probs(const TrieIndex& t, const int32_t* contexts, uint64_t batch, uint64_t ctx_len,
                       const int32_t* candidates, uint64_t k, float* probs, int32_t* matched,
                       const Interrupt& stop = Interrupt());

struct TopK {
  std::vector<int32_t> tokens;  // most frequent first; ties by ascending token id
  std::vector<float> probs;     // count(s+w) / count(s)
  std::vector<uint64_t> counts; // count(s+w)
  int32_t matched = 0;          // length of the context s used (0: unigrams)
};

// The k most frequent continuations of the longest suffix s of `context`
// (at most order-1 tokens) that has any; with none, the k most frequent
// tokens with p = count / total tokens.
// k >= 0.
TopK topk(const TrieIndex& t, const int64_t* context, uint64_t ctx_len, int64_t k);

}  // namespace ngram
