// The parameters of DART tree pruning and every bound on a prune request,
// the one definition of both (docs/PRUNING.md, "Limits and validation").
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace ngram {

// Every bound on a prune request, in one place (checked by check_prune_params
// and, for the lattice, check_lattice in lattice.h).
struct PruneLimits {
  static constexpr uint32_t kMaxDepth = 64;        // D: draft positions
  static constexpr uint32_t kMaxCandidates = 1024; // K: candidates per position
  static constexpr uint32_t kMaxBeamWidth = 1024;
  static constexpr uint32_t kMaxNodes = 4096;      // nodes kept, root excluded
  static constexpr float kMaxWeight = 1e6f;        // level, logit and n-gram weights lie in [0, kMaxWeight]
};

// The parameters of a search. The defaults are DART's production settings,
// the only definition of them: the Python module exports them (as
// PRUNE_DEFAULTS) and the server leaves unset fields at these values. The
// integers are as wide as any caller's, so that check_prune_params alone
// judges their range.
struct PruneParams {
  int64_t beam_width = 20;
  int64_t max_nodes = 60;
  float ngram_weight = 0.5f;
  // D entries each, or empty for DART's defaults: float32((l+1)**-0.7) and
  // float32(0.9**l).
  std::vector<float> level_weights;
  std::vector<float> logit_weights;
  // Extensions ending in this token rank after all others in the beam; -1:
  // no such rule; unset: the trie's EOS id (its header's, -1 when none).
  std::optional<int64_t> eos_token_id;
  // false: level 0 is scored by the drafter alone (DART's production build).
  bool ngram_on_first_level = false;
};

// One parameter of a search: its name, its member (exactly one of: an
// integer, in [lo, hi]; a weight, in [0, kMaxWeight]; a weight per level;
// a token id, in [-1, vocab) or unset; a flag), and what it means.
struct PruneField {
  const char* name;
  int64_t PruneParams::*integer;
  float PruneParams::*weight;
  std::vector<float> PruneParams::*weights;
  std::optional<int64_t> PruneParams::*token;
  bool PruneParams::*flag;
  int64_t lo, hi;
  const char* help;
};

// Every parameter, in the order of their field numbers in the wire's
// PruneParams (proto/ngram/v1/ngram.proto: kPruneFields[i] is field i + 1):
// the one table that the checks, the bindings' conversion and defaults, the
// request codec and the server read.
inline constexpr PruneField kPruneFields[] = {
    {"beam_width", &PruneParams::beam_width, nullptr, nullptr, nullptr, nullptr, 1, PruneLimits::kMaxBeamWidth,
     "the search's beam (extensions kept per level)"},
    {"max_nodes", &PruneParams::max_nodes, nullptr, nullptr, nullptr, nullptr, 0, PruneLimits::kMaxNodes,
     "nodes kept in a tree, the root excluded"},
    {"ngram_weight", nullptr, &PruneParams::ngram_weight, nullptr, nullptr, nullptr, 0, 0,
     "the n-gram term's weight in a node's score (0: the drafter alone)"},
    {"level_weights", nullptr, nullptr, &PruneParams::level_weights, nullptr, nullptr, 0, 0,
     "a weight per level on a node's score increment (unset: DART's (l+1)**-0.7)"},
    {"logit_weights", nullptr, nullptr, &PruneParams::logit_weights, nullptr, nullptr, 0, 0,
     "a weight per level on the drafter's term (unset: DART's 0.9**l)"},
    {"eos_token_id", nullptr, nullptr, nullptr, &PruneParams::eos_token_id, nullptr, -1, 0,
     "extensions ending in this token rank last (-1: no such rule; unset: the trie's EOS)"},
    {"ngram_on_first_level", nullptr, nullptr, nullptr, nullptr, &PruneParams::ngram_on_first_level, 0, 0,
     "score level 0 with the n-gram term too (DART's production build does not)"},
};
inline constexpr uint32_t kPruneFieldCount = sizeof(kPruneFields) / sizeof(kPruneFields[0]);

// Throws InvalidArgument naming the field at fault, in kPruneFields' order,
// for a lattice of `depth` levels over ids in [0, vocab): beam_width or
// max_nodes out of range, weights outside [0, kMaxWeight] or not finite, a
// weight list not of `depth` entries, eos_token_id outside [-1, vocab).
void check_prune_params(const PruneParams& params, uint32_t depth, uint64_t vocab);

// DART's default weights for level l.
float default_level_weight(uint32_t l);
float default_logit_weight(uint32_t l);

}  // namespace ngram
