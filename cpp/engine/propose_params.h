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
  int64_t max_depth = 8;
  int64_t max_branch = 8;      // each node's best continuations considered
  float min_prob = 1e-4f;      // nodes whose path probability is below are not kept
  float backoff = 0.4f;        // a suffix one token shorter weighs this much less
  bool corpus = true;          // continuations from the trie
  bool lookup = true;          // continuations from the sequence's own earlier occurrences
  float lookup_weight = 1.0f;  // the document source's probabilities are scaled by this
  int64_t lookup_min_match = 1;  // the shortest suffix the document source matches
};

// One parameter of a proposal: its name, its member (an integer, a float in
// [0, 1], or a flag), an integer's range, and what it means.
struct ProposeField {
  const char* name;
  int64_t ProposeParams::*integer;
  float ProposeParams::*unit;
  bool ProposeParams::*flag;
  int64_t lo, hi;
  const char* help;
};

// Every parameter, in the order of their field numbers in the wire's
// ProposeParams (proto/ngram/v1/ngram.proto: kProposeFields[i] is field
// i + 1): the one table that the checks, the bindings' conversion and
// defaults, and the request codec read.
inline constexpr ProposeField kProposeFields[] = {
    {"max_nodes", &ProposeParams::max_nodes, nullptr, nullptr, 0, ProposeLimits::kMaxNodes, "nodes kept, root excluded"},
    {"max_depth", &ProposeParams::max_depth, nullptr, nullptr, 0, ProposeLimits::kMaxDepth, "deepest node"},
    {"max_branch", &ProposeParams::max_branch, nullptr, nullptr, 1, ProposeLimits::kMaxBranch,
     "continuations considered per node"},
    {"min_prob", nullptr, &ProposeParams::min_prob, nullptr, 0, 0, "path-probability floor"},
    {"backoff", nullptr, &ProposeParams::backoff, nullptr, 0, 0, "weight of a suffix one token shorter"},
    {"corpus", nullptr, nullptr, &ProposeParams::corpus, 0, 0, "the trie's continuations"},
    {"lookup", nullptr, nullptr, &ProposeParams::lookup, 0, 0, "the context's own earlier continuations"},
    {"lookup_weight", nullptr, &ProposeParams::lookup_weight, nullptr, 0, 0,
     "scales the document's probabilities"},
    {"lookup_min_match", &ProposeParams::lookup_min_match, nullptr, nullptr, 1, ProposeLimits::kMaxMatch,
     "shortest suffix the document source matches"},
};
inline constexpr uint32_t kProposeFieldCount = sizeof(kProposeFields) / sizeof(kProposeFields[0]);

// Throws InvalidArgument naming the field at fault: integers or floats
// outside their range (the integers first, then the floats, each in
// kProposeFields' order).
void check_propose_params(const ProposeParams& params);

// Throws InvalidArgument for an empty context or one of more than
// ProposeLimits::kMaxContext tokens.
void check_context_length(uint64_t n);

}  // namespace ngram
