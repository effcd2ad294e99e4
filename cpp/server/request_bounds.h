// What a request may cost, worked out from its fields before any search:
// its work, in units (docs/SERVER.md, "Work bounded before it starts"), and
// the most bytes its reply can take. A request over --max-request-work or
// whose reply could exceed --max-message-bytes is refused before it runs:
// such a reply could never be sent, and the work would hold a compute
// worker for nothing.
#pragma once
#include <cstdint>
#include <string>

#include <grpcpp/support/status.h>

namespace ngram::server {

struct Limits;

// A request's bounds, and the words that say where the figures come from.
struct RequestCost {
  uint64_t work = 0;         // units
  uint64_t reply_bytes = 0;  // at most
  std::string work_terms;    // e.g. "64 trees x 65 nodes x 8 branches x 3 suffix lengths + 4,096 context tokens"
  std::string reply_terms;   // e.g. "64 trees of up to 65 nodes"
};

// ConditionalProbs: one unit per candidate and per context token.
RequestCost probs_cost(uint64_t batch, uint64_t num_candidates, uint64_t context_len);
// TopK: one unit per continuation asked for and per context token.
RequestCost topk_cost(uint64_t k, uint64_t context_len);
// PruneTree: per tree, one unit per lattice candidate for every beam entry
// it may extend (K_0 + beam_width * (K_1 + ... + K_{D-1})), and one per node
// kept; `cells_after_first` is K_1 + ... summed over the trees.
RequestCost prune_cost(uint64_t trees, uint64_t first_level_cells, uint64_t cells_after_first, uint64_t beam_width,
                       uint64_t max_nodes, bool with_scores);
// ProposeTree: per tree, max_nodes expansions x max_branch continuations
// and the root's root_branch, x the trie's order (each suffix length a
// continuation may be read after), plus one unit per context token (the
// document source's scan).
RequestCost propose_cost(uint64_t trees, uint64_t context_tokens, uint64_t max_nodes, uint64_t max_branch,
                         uint64_t root_branch, uint64_t order);

// OK, or the refusal naming the bound and the figure: INVALID_ARGUMENT for
// work over --max-request-work (the request as posed can never run),
// RESOURCE_EXHAUSTED for a reply over --max-message-bytes (as gRPC answers
// a message over its limit).
grpc::Status check_cost(const RequestCost& cost, const Limits& limits);

}  // namespace ngram::server
