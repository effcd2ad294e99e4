#include "propose_params.h"

#include <string>

#include "checks.h"
#include "errors.h"

namespace ngram {

void check_propose_params(const ProposeParams& p) {
  for (const ProposeField& f : kProposeFields)
    if (f.integer) check_range(p.*f.integer, f.lo, f.hi, f.name, "must be in");
  for (const ProposeField& f : kProposeFields)
    if (f.unit) check_unit(p.*f.unit, f.name);
}

void check_context_length(uint64_t n) {
  if (n == 0) throw InvalidArgument("context: empty; its last token is the tree's root");
  if (n > ProposeLimits::kMaxContext)
    throw InvalidArgument("context: " + std::to_string(n) + " tokens, limit " +
                          std::to_string(ProposeLimits::kMaxContext));
}

}  // namespace ngram
