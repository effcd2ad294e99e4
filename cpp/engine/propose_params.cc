#include "propose_params.h"

#include <string>

#include "checks.h"
#include "errors.h"

namespace ngram {

void check_propose_params(const ProposeParams& p) {
  const char* in = "must be in";
  check_range(p.max_nodes, 0, ProposeLimits::kMaxNodes, "max_nodes", in);
  check_range(p.max_depth, 0, ProposeLimits::kMaxDepth, "max_depth", in);
  check_range(p.max_branch, 1, ProposeLimits::kMaxBranch, "max_branch", in);
  check_range(p.lookup_min_match, 1, ProposeLimits::kMaxMatch, "lookup_min_match", in);
  check_unit(p.min_prob, "min_prob");
  check_unit(p.backoff, "backoff");
  check_unit(p.lookup_weight, "lookup_weight");
}

void check_context_length(uint64_t n) {
  if (n == 0) throw InvalidArgument("context: empty; its last token is the tree's root");
  if (n > ProposeLimits::kMaxContext)
    throw InvalidArgument("context: " + std::to_string(n) + " tokens, limit " +
                          std::to_string(ProposeLimits::kMaxContext));
}

}  // namespace ngram
