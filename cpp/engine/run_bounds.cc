#include "run_bounds.h"

#include "env_bytes.h"

namespace ngram {

void RunBounds::allocate(const std::vector<uint64_t>& sizes) const {
  const uint64_t budget = bytes_from_env("NGRAM_RUN_BOUNDS_BYTES", kBudgetBytes);
  uint64_t total = 0;
  first_.clear();
  for (uint64_t n : sizes) {
    if ((total + n) * sizeof(uint16_t) > budget) break;
    first_.push_back(total);
    total += n;
  }
  memory_ = allocate_anonymous(total * sizeof(uint16_t));
}

}  // namespace ngram
