#include "prune_params.h"

#include <cmath>
#include <string>

#include "checks.h"
#include "errors.h"

namespace ngram {

// float32 of Python's (l+1)**-0.7 and 0.9**l (both C's pow in double).
float default_level_weight(uint32_t l) { return static_cast<float>(std::pow(static_cast<double>(l) + 1.0, -0.7)); }
float default_logit_weight(uint32_t l) { return static_cast<float>(std::pow(0.9, static_cast<double>(l))); }

namespace {

// Weights lie in [0, kMaxWeight] (NaN fails both tests). `index` < 0: a
// scalar. The name is made only for the message.
void check_weight(float w, const char* field, int index = -1) {
  if (w >= 0.0f && w <= PruneLimits::kMaxWeight) return;
  const std::string name = index < 0 ? std::string(field) : std::string(field) + "[" + std::to_string(index) + "]";
  throw InvalidArgument(name + " = " + number_text(w) + ": must be a finite weight in [0, " +
                        number_text(PruneLimits::kMaxWeight) + "]");
}

void check_weights(const std::vector<float>& w, uint32_t depth, const char* field) {
  if (w.empty()) return;
  if (w.size() != depth)
    throw InvalidArgument(std::string(field) + " has " + std::to_string(w.size()) + " entries: need one per level (D = " +
                          std::to_string(depth) + ")");
  for (uint32_t l = 0; l < depth; ++l) check_weight(w[l], field, static_cast<int>(l));
}

}  // namespace

void check_prune_params(const PruneParams& params, uint32_t depth, uint64_t vocab) {
  check_range(params.beam_width, 1, PruneLimits::kMaxBeamWidth, "beam_width");
  check_range(params.max_nodes, 0, PruneLimits::kMaxNodes, "max_nodes");
  check_weight(params.ngram_weight, "ngram_weight");
  check_weights(params.level_weights, depth, "level_weights");
  check_weights(params.logit_weights, depth, "logit_weights");
  if (params.eos_token_id && (*params.eos_token_id < -1 || *params.eos_token_id >= static_cast<int64_t>(vocab)))
    throw InvalidArgument("eos_token_id = " + std::to_string(*params.eos_token_id) + ": must be -1 (none) or in [0, " +
                          std::to_string(vocab) + ")");
}

}  // namespace ngram
