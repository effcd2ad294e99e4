#include "request_bounds.h"

#include <limits>

#include "message_text.h"
#include "server_config.h"

namespace ngram::server {

namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// Saturating: a figure past 2^64 is refused all the same.
uint64_t mul(uint64_t a, uint64_t b) { return a != 0 && b > kMax / a ? kMax : a * b; }
uint64_t add(uint64_t a, uint64_t b) { return b > kMax - a ? kMax : a + b; }

// The most bytes a protobuf field header (tag and length) takes.
constexpr uint64_t kHeader = 1 + 10;

// A PrunedTreeNodes of n nodes: sfixed32 tokens and parents, float scores,
// each a packed field, inside its own length-delimited entry.
uint64_t tree_bytes(uint64_t nodes, bool scores) {
  const uint64_t fields = scores ? 3 : 2;
  return add(mul(nodes, 4 * fields), kHeader * (fields + 1));
}

}  // namespace

RequestCost probs_cost(uint64_t batch, uint64_t num_candidates, uint64_t context_len) {
  RequestCost c;
  const uint64_t cells = mul(batch, num_candidates);
  c.work = add(cells, mul(batch, context_len));
  c.work_terms = grouped(batch) + " queries x (" + grouped(num_candidates) + " candidates + " + grouped(context_len) +
                 " context tokens)";
  // float probs (4 bytes) and int32 matched (one byte: a suffix length below 128) per cell.
  c.reply_bytes = add(mul(cells, 5), 4 * kHeader);
  c.reply_terms = grouped(cells) + " probabilities";
  return c;
}

RequestCost topk_cost(uint64_t k, uint64_t context_len) {
  RequestCost c;
  c.work = add(k, context_len);
  c.work_terms = grouped(k) + " continuations + " + grouped(context_len) + " context tokens";
  // int32 token (5), float (4), uint64 count (10) per continuation.
  c.reply_bytes = add(mul(k, 19), 4 * kHeader);
  c.reply_terms = grouped(k) + " continuations";
  return c;
}

RequestCost prune_cost(uint64_t trees, uint64_t first_level_cells, uint64_t cells_after_first, uint64_t beam_width,
                       uint64_t max_nodes, bool with_scores) {
  RequestCost c;
  c.work = add(add(first_level_cells, mul(cells_after_first, beam_width)), mul(trees, max_nodes));
  c.work_terms = grouped(first_level_cells) + " first-level candidates + " + grouped(cells_after_first) +
                 " deeper candidates x beam_width " + grouped(beam_width) + " + " + grouped(trees) + " trees x " +
                 grouped(max_nodes) + " nodes";
  c.reply_bytes = add(mul(trees, tree_bytes(add(max_nodes, 1), with_scores)), kHeader);
  c.reply_terms = grouped(trees) + " trees of up to " + grouped(add(max_nodes, 1)) + " nodes";
  return c;
}

RequestCost propose_cost(uint64_t trees, uint64_t context_tokens, uint64_t max_nodes, uint64_t max_branch,
                         uint64_t root_branch, uint64_t order) {
  RequestCost c;
  c.work = add(mul(mul(trees, add(mul(max_nodes, max_branch), root_branch)), order), context_tokens);
  c.work_terms = grouped(trees) + " trees x (" + grouped(max_nodes) + " nodes x " + grouped(max_branch) +
                 " branches + " + grouped(root_branch) + " at the root) x order " + grouped(order) + " + " +
                 grouped(context_tokens) + " context tokens";
  c.reply_bytes = add(mul(trees, tree_bytes(add(max_nodes, 1), true)), kHeader);
  c.reply_terms = grouped(trees) + " trees of up to " + grouped(add(max_nodes, 1)) + " nodes";
  return c;
}

grpc::Status check_cost(const RequestCost& cost, const Limits& limits) {
  if (cost.reply_bytes > limits.max_message_bytes)
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "reply: up to " + grouped(cost.reply_bytes) + " bytes (" + cost.reply_terms +
                            "), over the server's message limit of " + grouped(limits.max_message_bytes) +
                            " bytes (--max-message-bytes); send fewer or smaller requests");
  if (cost.work > limits.max_request_work)
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "request: " + grouped(cost.work) + " work units (" + cost.work_terms +
                            "), the server's limit is " + grouped(limits.max_request_work) +
                            " (--max-request-work); split it into smaller requests");
  return grpc::Status::OK;
}

}  // namespace ngram::server
