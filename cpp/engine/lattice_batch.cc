#include "lattice_batch.h"

#include <algorithm>
#include <climits>
#include <cstring>

namespace ngram {

uint64_t fitted_context_start(const int64_t* context, uint64_t n, uint64_t keep, uint64_t vocab) {
  const auto known = [vocab](int64_t t) { return t >= 0 && static_cast<uint64_t>(t) < vocab; };
  if (n == 0 || !known(context[n - 1])) return n;
  const uint64_t first = n > keep ? n - keep : 0;
  uint64_t cut = n;
  while (cut > first && known(context[cut - 1])) --cut;
  return cut;
}

template <class Level>
uint32_t LatticeBatch::fit(const int64_t* context, uint64_t n, uint32_t depth, Level level) {
  const auto known = [this](int64_t t) { return t >= 0 && static_cast<uint64_t>(t) < vocab_; };
  const uint64_t first = n > keep_ ? n - keep_ : 0;
  int64_t top = INT64_MIN;
  for (uint64_t i = first; i < n; ++i) top = std::max(top, context[i]);
  for (uint32_t l = 0; l < depth; ++l)
    level(l, [&](int64_t tok, float) { top = std::max(top, tok); });
  max_ids_.push_back(top);
  first_level_.push_back(level_ends_.size() - 1);
  const uint64_t start = tokens_.size();
  uint32_t kept = 0;
  const uint64_t cut = fitted_context_start(context, n, keep_, vocab_);
  if (cut < n) {
    for (uint32_t l = 0; l < depth; ++l) {
      const size_t before = tokens_.size();
      level(l, [&](int64_t tok, float p) {
        if (!known(tok)) return;
        tokens_.push_back(tok);
        probs_.push_back(p);
      });
      if (tokens_.size() == before) break;
      level_ends_.push_back(tokens_.size());
      ++kept;
    }
    if (kept > 0) {
      prefix_.insert(prefix_.end(), context + cut, context + n);
    } else {
      tokens_.resize(start);
      probs_.resize(start);
    }
  }
  prefix_at_.push_back(prefix_.size());
  depths_.push_back(kept);
  return kept;
}

uint32_t LatticeBatch::add_packed(const int64_t* context, uint64_t n, const int32_t* rows, uint32_t depth,
                                  uint32_t k) {
  return fit(context, n, depth, [rows, k](uint32_t l, auto f) {
    const int32_t* row = rows + static_cast<size_t>(l) * 2 * k;
    for (uint32_t j = 0; j < k; ++j) {
      float p;
      std::memcpy(&p, row + k + j, 4);
      f(row[j], p);
    }
  });
}

uint32_t LatticeBatch::add(const PruneInput& in) {
  return fit(in.prefix, in.prefix_len, in.depth, [&in](uint32_t l, auto f) {
    for (uint64_t i = in.level_offsets[l]; i < in.level_offsets[l + 1]; ++i) f(in.tokens[i], in.probs[i]);
  });
}

PruneInput LatticeBatch::input(uint32_t b, std::vector<uint64_t>& offsets) const {
  const uint64_t* at = level_ends_.data() + first_level_[b];
  offsets.assign(at, at + depths_[b] + 1);
  for (auto& o : offsets) o -= at[0];
  PruneInput in;
  in.prefix = prefix_.data() + prefix_at_[b];
  in.prefix_len = prefix_at_[b + 1] - prefix_at_[b];
  in.tokens = tokens_.data() + at[0];
  in.probs = probs_.data() + at[0];
  in.level_offsets = offsets.data();
  in.depth = depths_[b];
  return in;
}

}  // namespace ngram
