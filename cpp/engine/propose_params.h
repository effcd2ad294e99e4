// The parameters of a corpus proposal and every bound on them, the one
// definition of both (docs/PROPOSALS.md, "Parameters and limits").
#pragma once
#include <cstdint>

#include "prune_params.h"

namespace ngram {

// Every bound on a proposal request, in one place (checked by check_propose_params).
struct ProposeLimits {
  static constexpr uint32_t kMaxNodes = PruneLimits::kMaxNodes;  // nodes kept, root excluded
  static constexpr uint32_t kMaxDepth = PruneLimits::kMaxDepth;
  static constexpr uint32_t kMaxBranch = 32;            // continuations per node
  static constexpr uint64_t kMaxContext = 1u << 20;     // tokens of one sequence
  static constexpr uint32_t kMaxMatch = 32;             // lookup_min_match's bound
  // The document source keeps the most recent occurrences of the matched
  // suffix only: recent text predicts better, and the count bounds the work.
  static constexpr uint32_t kMaxOccurrences = 256;
};

// The parameters of a proposal. The defaults are the measured best of
// docs/PROPOSALS.md, the only definition of them: the Python module exports
// them (PROPOSE_DEFAULTS) and the server leaves unset fields at these values.
struct ProposeParams {
  int64_t max_nodes = 64;
  int64_t max_depth = 16;
  int64_t max_branch = 16;     // each node's best continuations considered (but the root's)
  float min_prob = 1e-4f;      // nodes whose path probability is below are not kept
  bool corpus = true;          // continuations from the trie
  bool lookup = true;          // continuations from the sequence's own earlier occurrences
  float lookup_weight = 1.0f;  // the document source's probabilities are scaled by this
  int64_t lookup_min_match = 1;  // the shortest suffix the document source matches
  float discount = 0.75f;      // taken from each count and given to the next shorter suffix
  float lookup_decay = 0.5f;   // a document match of m tokens weighs 1 - lookup_decay^m
  float lookup_prior = 1.0f;   // n document occurrences weigh n / (n + lookup_prior)
  float order_weight = 0.6f;   // the share of its probabilities a corpus suffix of 2+ tokens keeps
  int64_t root_branch = 32;    // the root's continuations considered
};

// One parameter of a proposal: its field number in the wire's ProposeParams
// (proto/ngram/v1/ngram.proto), its name, its member (an integer, a float in
// [0, 1], or a flag), an integer's range, and what it means.
struct ProposeField {
  uint32_t field;
  const char* name;
  int64_t ProposeParams::*integer;
  float ProposeParams::*unit;
  bool ProposeParams::*flag;
  int64_t lo, hi;
  const char* help;
};

// Every parameter: the one table that the checks, the bindings' conversion
// and defaults, and both ends of the wire read. Field 5, `backoff`, was the
// weight of the scoring before the interpolation (docs/PROPOSALS.md); the
// host refuses it by name.
inline constexpr ProposeField kProposeFields[] = {
    {1, "max_nodes", &ProposeParams::max_nodes, nullptr, nullptr, 0, ProposeLimits::kMaxNodes,
     "nodes kept, root excluded"},
    {2, "max_depth", &ProposeParams::max_depth, nullptr, nullptr, 0, ProposeLimits::kMaxDepth, "deepest node"},
    {3, "max_branch", &ProposeParams::max_branch, nullptr, nullptr, 1, ProposeLimits::kMaxBranch,
     "continuations considered, and per corpus suffix, at every node but the root"},
    {4, "min_prob", nullptr, &ProposeParams::min_prob, nullptr, 0, 0, "path-probability floor"},
    {6, "corpus", nullptr, nullptr, &ProposeParams::corpus, 0, 0, "the trie's continuations"},
    {7, "lookup", nullptr, nullptr, &ProposeParams::lookup, 0, 0, "the context's own earlier continuations"},
    {8, "lookup_weight", nullptr, &ProposeParams::lookup_weight, nullptr, 0, 0,
     "scales the document's probabilities"},
    {9, "lookup_min_match", &ProposeParams::lookup_min_match, nullptr, nullptr, 1, ProposeLimits::kMaxMatch,
     "shortest suffix the document source matches"},
    {10, "discount", nullptr, &ProposeParams::discount, nullptr, 0, 0,
     "taken from each corpus count, given to the shorter suffix"},
    {11, "lookup_decay", nullptr, &ProposeParams::lookup_decay, nullptr, 0, 0,
     "a document match of m tokens weighs 1 - lookup_decay^m"},
    {12, "lookup_prior", nullptr, &ProposeParams::lookup_prior, nullptr, 0, 0,
     "n document occurrences weigh n / (n + lookup_prior)"},
    {13, "order_weight", nullptr, &ProposeParams::order_weight, nullptr, 0, 0,
     "share of its probabilities a corpus suffix of 2+ tokens keeps, the rest to the shorter"},
    {14, "root_branch", &ProposeParams::root_branch, nullptr, nullptr, 1, ProposeLimits::kMaxBranch,
     "continuations considered, and per corpus suffix, at the root"},
};
// The wire field that held the scoring's former parameter, refused by name.
inline constexpr uint32_t kRemovedBackoffField = 5;
inline constexpr uint32_t kProposeFieldCount = sizeof(kProposeFields) / sizeof(kProposeFields[0]);

// Throws InvalidArgument naming the field at fault: integers or floats
// outside their range (the integers first, then the floats, each in
// kProposeFields' order).
void check_propose_params(const ProposeParams& params);

// Throws InvalidArgument for an empty context or one of more than
// ProposeLimits::kMaxContext tokens.
void check_context_length(uint64_t n);

}  // namespace ngram
