// NoTrie: the representation of no trie at all, a vocabulary of ids and
// nothing stored, so that a search runs without one: propose_lookup
// proposes from the document alone, and tree pruning prunes by the
// drafter's probabilities alone (every n-gram lookup finds nothing: q = 0;
// with ngram_weight 0, exactly the tree any trie of that vocabulary gives).
// It has no suffix to condition on (order 1) and no EOS.
#pragma once
#include <cstdint>
#include <vector>

#include "runs.h"

namespace ngram {

class NoTrie {
 public:
  explicit NoTrie(uint64_t vocab_size) : vocab_size_(vocab_size) {}
  uint64_t vocab_size() const { return vocab_size_; }
  int64_t eos_id() const { return -1; }
  uint32_t order() const { return 1; }
  // f(representation), as TrieIndex::visit: itself.
  template <class F>
  decltype(auto) visit(F&& f) const {
    return f(*this);
  }

  bool find(const int32_t*, uint32_t, uint64_t*) const { return false; }
  void find_many(const int32_t* const*, uint32_t n, uint32_t, uint64_t*, bool* found) const {
    for (uint32_t i = 0; i < n; ++i) found[i] = false;
  }
  bool find_next(uint32_t, uint64_t, const int32_t*, uint64_t*) const { return false; }
  void children(uint32_t, uint64_t, uint64_t* lo, uint64_t* hi) const { *lo = *hi = 0; }
  uint64_t count(uint32_t, uint64_t) const { return 0; }
  void run_tokens(const int32_t*, uint32_t, uint64_t, uint64_t, int32_t*) const {}
  template <class F>
  bool for_each_in_run(const int32_t*, uint32_t, uint64_t, uint64_t, std::vector<int32_t>&, F) const {
    return false;
  }
  void lookup_in_runs(uint32_t, const Run*, uint32_t n, const CandidateTable* const*, float* const*,
                      int32_t* const*, uint32_t* matched) const {
    for (uint32_t i = 0; i < n; ++i) matched[i] = 0;
  }

 private:
  uint64_t vocab_size_;
};

}  // namespace ngram
