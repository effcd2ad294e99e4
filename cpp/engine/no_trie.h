// NoTrie: the representation of no trie at all, a vocabulary of ids and
// nothing stored, so that a search runs without one: propose_lookup
// proposes from the document alone. It has no suffix to condition on
// (order 1).
#pragma once
#include <cstdint>
#include <vector>

namespace ngram {

class NoTrie {
 public:
  explicit NoTrie(uint64_t vocab_size) : vocab_size_(vocab_size) {}
  uint64_t vocab_size() const { return vocab_size_; }
  uint32_t order() const { return 1; }
  bool find(const int32_t*, uint32_t, uint64_t*) const { return false; }
  bool find_next(uint32_t, uint64_t, const int32_t*, uint64_t*) const { return false; }
  void children(uint32_t, uint64_t, uint64_t* lo, uint64_t* hi) const { *lo = *hi = 0; }
  uint64_t count(uint32_t, uint64_t) const { return 0; }
  void run_tokens(const int32_t*, uint32_t, uint64_t, uint64_t, int32_t*) const {}
  template <class F>
  bool for_each_in_run(const int32_t*, uint32_t, uint64_t, uint64_t, std::vector<int32_t>&, F) const {
    return false;
  }

 private:
  uint64_t vocab_size_;
};

}  // namespace ngram
