// The DART-compatible lookup as steps over many suffixes at once, the one
// loop that conditional_probs (queries.cc) and tree pruning's level lookups
// (prune_lookups.cc) both run. Engine-internal: not part of the API.
//
// A lookup is made of two steps, each for many suffixes at once so that
// their memory reads overlap, over any representation `Trie` (trie_index.h):
// the run of continuations of each suffix (find_runs), then the
// representation's own search of those runs for the candidates
// (Trie::lookup_in_runs).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runs.h"

namespace ngram {

// Step one, for n suffixes of `len` tokens each (suffixes[i], validated
// ids): the run of each (Trie::find_many, then the child offsets and the
// counts), found[i] false when the suffix does not occur or has no
// continuations. Instantiated for every representation in queries.cc.
template <class Trie>
void find_runs(const Trie& t, const int32_t* const* suffixes, uint32_t n, uint32_t len, Run* runs, uint8_t* found);

// The scratch of lookup steps: per suffix asked, its row (the query it
// answers for), its run, and where the answers go.
struct LookupScratch {
  std::vector<const int32_t*> suffixes;
  std::vector<uint32_t> rows;
  std::vector<Run> runs;
  std::vector<uint8_t> found;
  std::vector<const CandidateTable*> tables;
  std::vector<float*> p;
  std::vector<int32_t*> m;
  std::vector<uint32_t> matched;
  // Room for n suffixes a step.
  void reserve(uint32_t n) {
    suffixes.resize(n);
    rows.resize(n);
    runs.resize(n);
    found.resize(n);
    tables.resize(n);
    p.resize(n);
    m.resize(n);
    matched.resize(n);
  }
};

// Both steps for the n suffixes of `len` tokens in s.suffixes[0, n), suffix
// i answering for row s.rows[i]: the runs found are searched for the
// candidates table(row) (k of them), the candidates not yet matched
// (matched == 0) that occur getting probs = count(suffix + w) / count(suffix)
// and matched = len, at probs and matched + row * k. Returns how many runs
// were searched; they move to the front, with their rows in s.rows and how
// many candidates each matched in s.matched.
template <class Trie, class TableOf>
uint32_t lookup_step(const Trie& t, uint32_t len, uint32_t n, uint32_t k, TableOf table, float* probs,
                     int32_t* matched, LookupScratch& s) {
  find_runs(t, s.suffixes.data(), n, len, s.runs.data(), s.found.data());
  uint32_t searched = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (!s.found[i]) continue;
    const uint32_t r = s.rows[i];
    s.runs[searched] = s.runs[i];
    s.rows[searched] = r;
    s.tables[searched] = table(r);
    s.p[searched] = probs + static_cast<size_t>(r) * k;
    s.m[searched++] = matched + static_cast<size_t>(r) * k;
  }
  t.lookup_in_runs(len, s.runs.data(), searched, s.tables.data(), s.p.data(), s.m.data(), s.matched.data());
  return searched;
}

// The lookup's loop over suffix lengths, longest first: for each len from
// `longest` down to `shortest`, every row r of `rows` that still misses
// some of its k candidates (left[r] > 0) and whose context has a suffix of
// len tokens (suffix(r, len), nullptr when it is shorter) takes one
// lookup_step, and left[r] drops by what it matched. s must have room for
// `rows` suffixes.
template <class Trie, class SuffixOf, class TableOf>
void lookup_lengths(const Trie& t, uint32_t longest, uint32_t shortest, uint32_t rows, uint32_t k, SuffixOf suffix,
                    TableOf table, float* probs, int32_t* matched, uint32_t* left, LookupScratch& s) {
  for (uint32_t len = longest; len >= shortest && len > 0; --len) {
    uint32_t asked = 0;
    for (uint32_t r = 0; r < rows; ++r) {
      if (left[r] == 0) continue;
      const int32_t* x = suffix(r, len);
      if (!x) continue;
      s.suffixes[asked] = x;
      s.rows[asked++] = r;
    }
    if (asked == 0) continue;
    const uint32_t searched = lookup_step(t, len, asked, k, table, probs, matched, s);
    for (uint32_t i = 0; i < searched; ++i) left[s.rows[i]] -= s.matched[i];
  }
}

// The semantics of conditional_probs (queries.h) for n queries of validated
// int32 ids (context q: ctx_len tokens at contexts + q * ctx_len, of which
// the last min(order-1, ctx_len) count; its k candidates at candidates +
// q * k), the answers at probs / matched + q * k: the lookup's loop over
// every suffix length for all the queries still missing some.
struct ProbsScratch {
  std::vector<CandidateTable> tables;
  std::vector<uint32_t> left;
  LookupScratch steps;
};
template <class Trie>
void conditional_probs_many(const Trie& t, const int32_t* contexts, uint32_t n, uint32_t ctx_len,
                            const int32_t* candidates, uint32_t k, float* probs, int32_t* matched,
                            ProbsScratch& scratch);

}  // namespace ngram
