// The queries answered from a TrieIndex: counts, DART-compatible conditional
// probabilities, top-k continuations. Input validation for every query lives
// here, in one place, for the Python module and the server alike.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "trie_index.h"

namespace ngram {

// Throws InvalidArgument naming `field` when a token id is outside [0, vocab).
void check_tokens(const TrieIndex& t, const int64_t* toks, uint64_t n, const char* field);

// Occurrences of the n-gram toks[0..len); 0 when absent. 1 <= len <= order.
uint64_t count_ngram(const TrieIndex& t, const int64_t* toks, uint64_t len);

// DART-compatible conditional probabilities for a batch of B queries:
// contexts [B, C] (C >= 1), candidates [B, K], row-major. For each query and
// len from min(order-1, C) down to 1: if the last `len` context tokens s occur,
// every candidate w not yet matched with s+w occurring gets
// p = float(count(s+w)) * (1.0f / float(count(s))) and matched = len.
// Unmatched candidates get 0 and 0. Validates every id first.
void conditional_probs(const TrieIndex& t, const int64_t* contexts, uint64_t batch, uint64_t ctx_len,
                       const int64_t* candidates, uint64_t k, float* probs, int32_t* matched);

// One query of the above on already validated int32 ids: the context's last
// min(order-1, ctx_len) tokens, k candidates. The single definition of the
// DART-compatible semantics, a loop over lookup_suffix (below), whose steps
// (find_run, lookup_in_run) tree pruning calls directly, to share the
// backoff step between contexts.
void conditional_probs_one(const TrieIndex& t, const int32_t* context, uint32_t ctx_len,
                           const int32_t* candidates, uint32_t k, float* probs, int32_t* matched);

// One step of the above: for the candidates not yet matched (m[j] == 0),
// those w with suffix+w occurring get p and m = len. `suffix` has `len`
// (>= 1, < order) validated tokens. Returns how many it matched.
uint32_t lookup_suffix(const TrieIndex& t, const int32_t* suffix, uint32_t len, const int32_t* candidates,
                       uint32_t k, float* probs, int32_t* matched);

// The candidates of many lookups (one lattice level of tree pruning) in an
// open-addressing table, so that a short run of continuations can be read
// once and each entry looked up among them.
struct CandidateTable {
  static constexpr uint32_t kEmpty = 0xffffffffu;
  const int32_t* tokens = nullptr;  // the k candidates (not copied: keep them alive)
  uint32_t count = 0;
  uint32_t shift = 62;
  std::vector<uint32_t> key, index;
  void build(const int32_t* candidates, uint32_t k);
  uint32_t slot(uint32_t token) const {
    return static_cast<uint32_t>((uint64_t{token} * 0x9E3779B97F4A7C15ull) >> shift);
  }
};

// The continuations of an n-gram `suffix` of `len` tokens: the run [lo, hi)
// of level len + 1, and 1 / count(suffix).
struct Run {
  uint64_t lo = 0, hi = 0;
  float inv = 0.0f;
};

// Finds the run; false when the n-gram does not occur or has no continuations.
bool find_run(const TrieIndex& t, const int32_t* suffix, uint32_t len, Run* run);

// find_run for n suffixes of `len` tokens each (suffixes[i], validated ids):
// each step (a level's child offsets, the search in the next level, the
// counts) runs over all of them before the next, so their reads overlap.
void find_runs(const TrieIndex& t, const int32_t* const* suffixes, uint32_t n, uint32_t len, Run* runs,
               uint8_t* found);

// lookup_suffix once the run is found, over a table's candidates: the same
// answers; short runs are scanned instead of searched. Splitting the two
// lets tree pruning find the runs of many contexts first, then search them,
// so that the memory reads of different contexts overlap.
uint32_t lookup_in_run(const TrieIndex& t, uint32_t len, const Run& run, const CandidateTable& table, float* probs,
                       int32_t* matched);

// Runs up to this many times the candidates are scanned by lookup_in_run,
// longer ones searched.
constexpr uint64_t kScanFactor = 2;

// lookup_in_run for n runs (runs[i] into p[i], m[i]; matched[i] = how many
// it matched). Long runs with nothing matched yet are searched in groups
// (Level::find_many_runs), so that the memory reads of a group overlap.
void lookup_in_runs(const TrieIndex& t, uint32_t len, const Run* runs, uint32_t n, const CandidateTable& table,
                    float* const* p, int32_t* const* m, uint32_t* matched);

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
