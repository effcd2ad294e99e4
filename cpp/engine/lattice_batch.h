// Lattices fitted to a trie's vocabulary, as a client sends them to the
// trie: the one definition of the fit, which the GPU worker's pruners
// (through the bindings' LatticeBatch), ngram-eval's replay and the
// proposers (fitted_context_start) share.
//
// The fit: a context keeps its last `keep` tokens (max(1, order - 1): what
// a search reads), cut after its last id outside [0, vocab); each level
// keeps its candidates inside [0, vocab) in the drafter's order; the levels
// after the first one left empty are dropped. A lattice whose root (its
// context's last token) or whose first level the trie cannot serve has
// depth 0 and keeps nothing.
#pragma once
#include <cstdint>
#include <vector>

#include "lattice.h"

namespace ngram {

// The first of a context's last `keep` tokens (context[0..n)) that the fit
// keeps: after the last id outside [0, vocab); n when the root itself is
// outside (or the context is empty).
uint64_t fitted_context_start(const int64_t* context, uint64_t n, uint64_t keep, uint64_t vocab);

class LatticeBatch {
 public:
  // keep: context tokens a search reads; vocab: the trie's ids.
  LatticeBatch(uint64_t keep, uint64_t vocab) : keep_(keep), vocab_(vocab) { level_ends_.push_back(0); }

  // Fits and appends one lattice: its context (n >= 1 tokens; only the last
  // `keep` are read) and its levels as a GPU worker packs them, `depth`
  // rows of 2k int32 each (k ids, then the bits of their float32
  // probabilities). Returns the depth kept.
  uint32_t add_packed(const int64_t* context, uint64_t n, const int32_t* rows, uint32_t depth, uint32_t k);
  // The same for a lattice in the engine's layout (in.prefix is the context).
  uint32_t add(const PruneInput& in);

  uint64_t vocab_size() const { return vocab_; }
  uint32_t size() const { return static_cast<uint32_t>(depths_.size()); }
  uint32_t depth(uint32_t b) const { return depths_[b]; }
  const std::vector<uint32_t>& depths() const { return depths_; }
  // The largest id of lattice b's context tail and candidates, before fitting.
  const std::vector<int64_t>& max_ids() const { return max_ids_; }
  // Lattice b as the engine's search reads it (depth(b) > 0); `offsets`
  // holds its level_offsets.
  PruneInput input(uint32_t b, std::vector<uint64_t>& offsets) const;

 private:
  template <class Level>
  uint32_t fit(const int64_t* context, uint64_t n, uint32_t depth, Level level);

  uint64_t keep_, vocab_;
  std::vector<int64_t> prefix_;       // the fitted contexts, concatenated
  std::vector<uint64_t> prefix_at_{0};  // [B + 1]
  std::vector<int64_t> tokens_;       // the kept candidates, concatenated
  std::vector<float> probs_;
  std::vector<uint64_t> level_ends_;  // every kept level's end in tokens_, lattice after lattice
  std::vector<uint64_t> first_level_;  // [B]: lattice b's first entry in level_ends_ (its start)
  std::vector<uint32_t> depths_;      // [B]
  std::vector<int64_t> max_ids_;      // [B]
};

}  // namespace ngram
