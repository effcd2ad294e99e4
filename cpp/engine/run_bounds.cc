#include "run_bounds.h"

namespace ngram {

void RunBounds::allocate(const std::vector<uint64_t>& sizes) const {
  uint64_t total = 0;
  first_.clear();
  for (uint64_t n : sizes) {
    first_.push_back(total);
    total += n;
  }
  memory_ = allocate_anonymous(total * sizeof(uint16_t));
}

}  // namespace ngram
