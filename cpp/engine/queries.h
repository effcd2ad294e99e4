// The queries answered from a TrieIndex: counts, DART-compatible conditional
// probabilities, top-k continuations. Input validation for every query lives
// here, in one place, for the Python module and the server alike.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "interrupt.h"
#include "runs.h"
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
// the queries with conditional_probs_many, a few dozen at a time, checking
// `stop` before each few dozen: once it says stop, the call throws
// Interrupted, probs and matched then partly written.
void conditional_probs(const TrieIndex& t, const int64_t* contexts, uint64_t batch, uint64_t ctx_len,
                       const int64_t* candidates, uint64_t k, float* probs, int32_t* matched,
                       const Interrupt& stop = Interrupt());
// The same for int32 ids (the lookups' own type: read where they lie).
void conditional_probs(const TrieIndex& t, const int32_t* contexts, uint64_t batch, uint64_t ctx_len,
                       const int32_t* candidates, uint64_t k, float* probs, int32_t* matched,
                       const Interrupt& stop = Interrupt());

// The two steps every DART-compatible lookup is made of, each for many
// suffixes at once so that their memory reads overlap, over any
// representation `Trie` (trie_index.h: TrieV1, TrieV1Ram or TrieV2). Step
// one, for n suffixes of `len` tokens each (suffixes[i], validated ids): the
// run of each (Trie::find_many, then the child offsets and the counts),
// found[i] false when the suffix does not occur or has no continuations.
// Step two is the representation's own: Trie::lookup_in_runs.
template <class Trie>
void find_runs(const Trie& t, const int32_t* const* suffixes, uint32_t n, uint32_t len, Run* runs, uint8_t* found);

// The semantics of conditional_probs for n queries of validated int32 ids
// (context q: ctx_len tokens at contexts + q * ctx_len, of which the last
// min(order-1, ctx_len) count; its k candidates at candidates + q * k), the
// answers at probs / matched + q * k: the single definition of the lookup,
// a loop over the suffix lengths of find_runs and lookup_in_runs for all the
// queries still missing some. Tree pruning runs the same two steps over a
// level's distinct contexts, sharing the one-token backoff step between them.
struct ProbsScratch;
template <class Trie>
void conditional_probs_many(const Trie& t, const int32_t* contexts, uint32_t n, uint32_t ctx_len,
                            const int32_t* candidates, uint32_t k, float* probs, int32_t* matched,
                            ProbsScratch& scratch);
struct ProbsScratch {
  std::vector<CandidateTable> tables;
  std::vector<const CandidateTable*> run_tables;
  std::vector<const int32_t*> suffixes;
  std::vector<uint32_t> rows, left, matched;
  std::vector<Run> runs;
  std::vector<uint8_t> found;
  std::vector<float*> p;
  std::vector<int32_t*> m;
};

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
