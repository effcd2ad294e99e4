#include "document_source.h"

#include <algorithm>

namespace ngram {

DocumentSource::Matches DocumentSource::root() {
  Matches m;
  m.begin = static_cast<uint32_t>(occurrences_.size());
  if (n_ < 2) return m;
  const int64_t* ctx = ctx_;
  const uint64_t n = n_;
  // A match ends only where the last token stands: the positions that hold
  // it and their match lengths, in context order.
  uint32_t best = 0;
  std::vector<uint32_t>& at = match_at_;
  std::vector<uint32_t>& lens = match_lens_;
  at.clear();
  lens.clear();
  const int64_t last = ctx[n - 1];
  for (uint64_t i = 0; i + 1 < n; ++i) {
    // Most positions do not hold the last token: skip 8 at a time, with no
    // branch inside the 8, so that the compiler vectorizes the test.
    while (i + 9 < n) {
      bool any = false;
      for (uint32_t k = 0; k < 8; ++k) any |= ctx[i + k] == last;
      if (any) break;
      i += 8;
    }
    if (ctx[i] != last) continue;
    uint32_t l = 1;
    while (l < ProposeLimits::kMaxMatch && l <= i && ctx[i - l] == ctx[n - 1 - l]) ++l;
    at.push_back(static_cast<uint32_t>(i));
    lens.push_back(l);
    best = std::max(best, l);
  }
  if (best < min_match_) return m;
  uint32_t kept = 0;
  for (size_t k = at.size(); k-- > 0 && kept < ProposeLimits::kMaxOccurrences;)
    if (lens[k] == best) {
      occurrences_.push_back(at[k]);
      ++kept;
    }
  std::reverse(occurrences_.begin() + m.begin, occurrences_.end());
  m.size = kept;
  m.match = best;
  return m;
}

DocumentSource::Matches DocumentSource::child(const Matches& parent, int32_t token) {
  Matches m;
  m.begin = static_cast<uint32_t>(occurrences_.size());
  if (n_ < 2) return m;
  for (uint32_t k = 0; k < parent.size; ++k) {
    const uint64_t i = occurrences_[parent.begin + k] + uint64_t{1};
    if (i + 1 < n_ && ctx_[i] == token) occurrences_.push_back(static_cast<uint32_t>(i));
  }
  m.size = static_cast<uint32_t>(occurrences_.size()) - m.begin;
  m.match = m.size > 0 ? parent.match + 1 : 0;
  return m;
}

template <class F>
void DocumentSource::for_each_next_token(const Matches& m, F f) {
  std::vector<int32_t>& next = next_tokens_;
  next.resize(m.size);
  for (uint32_t k = 0; k < m.size; ++k) next[k] = static_cast<int32_t>(ctx_[occurrences_[m.begin + k] + 1]);
  std::sort(next.begin(), next.end());
  for (size_t i = 0; i < next.size();) {
    size_t j = i + 1;
    while (j < next.size() && next[j] == next[i]) ++j;
    f(next[i], static_cast<uint64_t>(j - i));
    i = j;
  }
}

float DocumentSource::evidence(const Matches& m) const {
  float decayed = 1.0f;  // decay^match, by repeated products
  for (uint32_t k = 0; k < m.match && decayed > 0.0f; ++k) decayed *= decay_;
  const float n = static_cast<float>(m.size);
  return weight_ * (n / (n + prior_)) * (1.0f - decayed);
}

float DocumentSource::bound(const Matches& m) {
  if (m.size == 0) return 0.0f;
  uint64_t most = 0;
  for_each_next_token(m, [&](int32_t, uint64_t c) { most = std::max(most, c); });
  const float inv = 1.0f / static_cast<float>(m.size);
  return static_cast<float>(most) * inv * evidence(m);
}

void DocumentSource::score(const Matches& m, uint32_t cap, ContinuationScores& scores) {
  if (m.size == 0) return;
  TopCounts top;
  for_each_next_token(m, [&](int32_t tok, uint64_t c) { top.offer(c, tok, cap); });
  const float inv = 1.0f / static_cast<float>(m.size);
  const float w = evidence(m);
  for (uint32_t j = 0; j < top.size; ++j) scores.set_document(top.tokens[j], static_cast<float>(top.counts[j]) * inv * w);
}

}  // namespace ngram
