// The draft lattice: per draft position (level), the drafter's top-k
// candidate tokens and their probabilities, after a prefix whose last token
// is the tree's root. Its shape and values are checked here, the one
// definition of every surface's checks (tree pruning's, the server's
// PruneTree through lattice_offsets).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "prune_params.h"

namespace ngram {

// One draft lattice. Level l's K_l candidates are tokens[level_offsets[l] ..
// level_offsets[l+1]) with their probabilities at the same positions.
struct PruneInput {
  const int64_t* prefix = nullptr;  // the context; prefix[prefix_len-1] becomes the root
  uint64_t prefix_len = 0;
  const int64_t* tokens = nullptr;
  const float* probs = nullptr;
  const uint64_t* level_offsets = nullptr;  // depth + 1 entries, level_offsets[0] == 0
  uint32_t depth = 0;                       // D
};

// How a surface names a lattice's fields in its errors. The defaults are
// prune's arguments (the Python module); the server names its PruneInput
// message's fields, after the input they belong to ("inputs[2]").
struct LatticeFields {
  std::string input;                  // put before each field, with a '.'; empty: none
  const char* sizes = "topk_tokens";  // the field with an entry per level, K_l each
  const char* tokens = "topk_tokens";
  const char* probs = "topk_probs";
  std::string name(const char* field) const { return input.empty() ? field : input + "." + field; }
};

// The bounds of a lattice's shape: the engine's (PruneLimits) unless a
// surface admits less (the server's --max-levels and --max-candidates,
// which its configuration keeps within the engine's). A bound's name, when
// given, ends the error about it: "... must be 1..3 (--max-levels)".
struct LatticeBounds {
  uint64_t max_levels = PruneLimits::kMaxDepth;
  uint64_t max_candidates = PruneLimits::kMaxCandidates;
  const char* levels_bound = nullptr;
  const char* candidates_bound = nullptr;
};

// A lattice's shape, one rule each. Each throws InvalidArgument naming the
// field at fault: D levels, in 1..max_levels; level l's K candidates, in
// 1..max_candidates; tokens and probs of `total` = sum(K_l) values each.
void check_lattice_depth(uint64_t depth, const LatticeFields& f = {}, const LatticeBounds& b = {});
void check_lattice_level(uint64_t l, uint64_t k, const LatticeFields& f = {}, const LatticeBounds& b = {});
void check_lattice_values(uint64_t total, uint64_t n_tokens, uint64_t n_probs, const LatticeFields& f = {});

// A lattice given as level sizes (K_l = sizes[l], l < depth) and flat
// arrays of n_tokens token ids and n_probs probabilities: its shape checked
// by the three rules above, in that order (the levels before any is read),
// and its PruneInput::level_offsets, the depth + 1 running sums, into
// `offsets`.
template <class Sizes>
void lattice_offsets(const Sizes& sizes, uint64_t depth, uint64_t n_tokens, uint64_t n_probs,
                     std::vector<uint64_t>& offsets, const LatticeFields& f = {}, const LatticeBounds& b = {}) {
  check_lattice_depth(depth, f, b);
  offsets.assign(1, 0);
  for (uint64_t l = 0; l < depth; ++l) {
    const uint64_t k = sizes[l];
    check_lattice_level(l, k, f, b);
    offsets.push_back(offsets.back() + k);
  }
  check_lattice_values(offsets.back(), n_tokens, n_probs, f);
}

// A checked lattice's candidates as a search reads them: the tokens
// narrowed to int32, and per level the indices of its candidates in token
// order (order[level_offsets[l] + r] = the index within level l of its
// r-th smallest token).
struct CheckedLattice {
  std::vector<int32_t> tokens;
  std::vector<uint32_t> order;
};

// Throws InvalidArgument naming the field at fault: an empty prefix, token
// ids outside [0, vocab), a shape outside the engine's limits,
// probabilities that are not in [0, 1] (NaN included), a token listed twice
// in one level. Leaves the candidates as the search reads them in `out`.
void check_lattice(uint64_t vocab, const PruneInput& in, CheckedLattice& out);

}  // namespace ngram
