// Lookups in a format-version-2 trie (docs/FORMAT.md, "Version 2"). There a
// k-gram's last token w is stored as its rank: for k = 2, among the tokens
// that occur; for k >= 3, among the continuations of its own (k-1)-suffix
// context, i.e. (the index of the k-gram without its first token, in level
// k-1) minus (the first child of that context). So finding w after a
// context first finds w after each shorter suffix of the context, shortest
// first: the chain of runs below.
#pragma once
#include <cstdint>

#include "queries.h"
#include "trie_index.h"

namespace ngram {

// The entry of toks[0..len) in level len (1 <= len <= order), if stored.
bool find_v2(const TrieIndex& t, const int32_t* toks, uint32_t len, uint64_t* index);

// The tokens of entries [lo, hi) of level len + 1, the continuations of
// suffix[0..len).
void run_tokens_v2(const TrieIndex& t, const int32_t* suffix, uint32_t len, uint64_t lo, uint64_t hi,
                   int32_t* out);

// lookup_in_runs (queries.h) for a version-2 trie: runs[i].suffix names
// each run's context. Following a candidate down the chain answers it at
// every suffix length at once, so each unmatched candidate gets its final
// answer here: p and m from the longest suffix of the context after which
// it is stored (m may be less than len), or stays unmatched when none has
// it; matched[i] counts all of them (resolved), so that the callers'
// shorter-suffix steps skip this run's query.
void lookup_in_runs_v2(const TrieIndex& t, uint32_t len, const Run* runs, uint32_t n,
                       const CandidateTable* const* tables, float* const* p, int32_t* const* m, uint32_t* matched);

}  // namespace ngram
