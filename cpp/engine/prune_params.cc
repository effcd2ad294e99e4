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
  for (const PruneField& f : kPruneFields) {
    if (f.integer) {
      check_range(params.*f.integer, f.lo, f.hi, f.name);
    } else if (f.weight) {
      check_weight(params.*f.weight, f.name);
    } else if (f.weights) {
      check_weights(params.*f.weights, depth, f.name);
    } else if (f.token) {
      const std::optional<int64_t>& t = params.*f.token;
      if (t && (*t < f.lo || *t >= static_cast<int64_t>(vocab)))
        throw InvalidArgument(std::string(f.name) + " = " + std::to_string(*t) + ": must be -1 (none) or in [0, " +
                              std::to_string(vocab) + ")");
    }
  }
}

}  // namespace ngram
