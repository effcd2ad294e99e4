// What a proposal's sources (corpus_source.h, document_source.h) score into
// at the node being expanded: its best continuations so far, each token
// once with its best score. Engine-internal: included by the proposal
// search only.
#pragma once
#include <cstdint>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "propose_params.h"

namespace ngram {

// Count order within one source: more frequent first, ties by smaller token.
inline bool more_frequent(uint64_t ca, int32_t ta, uint64_t cb, int32_t tb) { return ca != cb ? ca > cb : ta < tb; }

// The order of a node's continuations: higher score first, ties by the
// smaller token. true when (sa, ta) comes before (sb, tb).
inline bool better(float sa, int32_t ta, float sb, int32_t tb) { return sa != sb ? sa > sb : ta < tb; }

// The `cap` most frequent of the (count, token) pairs offered, sorted by
// more_frequent: what one source reads of one run before scoring it.
struct TopCounts {
  uint64_t counts[ProposeLimits::kMaxBranch];
  int32_t tokens[ProposeLimits::kMaxBranch];
  uint32_t size = 0;

  void offer(uint64_t c, int32_t tok, uint32_t cap) {
    if (c == 0) return;
    uint32_t i = size;
    if (i == cap) {
      if (!more_frequent(c, tok, counts[cap - 1], tokens[cap - 1])) return;
      --i;
    } else {
      ++size;
    }
    while (i > 0 && more_frequent(c, tok, counts[i - 1], tokens[i - 1])) {
      counts[i] = counts[i - 1];
      tokens[i] = tokens[i - 1];
      --i;
    }
    counts[i] = c;
    tokens[i] = tok;
  }
};

// The node being expanded's best `cap` continuations so far, each token
// once with its best score, best first (by `better`); tokens and scores
// apart, so that a token is found by comparing 8 at once.
class BestContinuations {
 public:
  void clear(uint32_t cap) {
    size_ = 0;
    cap_ = cap;
  }
  uint32_t size() const { return size_; }
  int32_t token(uint32_t j) const { return token_[j]; }
  float score(uint32_t j) const { return score_[j]; }
  // All `cap` places are taken, each by a score above w: no score up to w
  // can enter any more.
  bool full_above(float w) const { return size_ == cap_ && score_[cap_ - 1] > w; }

  // Adds a continuation's score from one source: a token scored twice keeps
  // the larger score. Keeping only the best as they come leaves the same
  // ones as scoring all and choosing after: a score that cannot enter is
  // below `cap` others, which only rise. Returns false when the score is
  // below all `cap` kept, as is every lower score.
  bool offer(int32_t tok, float score) {
    int32_t* tokens = token_;
    float* scores = score_;
    const uint32_t n = size_, cap = cap_;
    uint32_t i = find(tok);
    if (i < n) {
      if (!(score > scores[i])) return true;
    } else if (n == cap) {
      if (!better(score, tok, scores[cap - 1], tokens[cap - 1])) return !(score < scores[cap - 1]);
      i = cap - 1;
    } else {
      size_ = n + 1;
    }
    for (; i > 0 && better(score, tok, scores[i - 1], tokens[i - 1]); --i) {
      scores[i] = scores[i - 1];
      tokens[i] = tokens[i - 1];
    }
    scores[i] = score;
    tokens[i] = tok;
    return true;
  }

 private:
  static_assert(ProposeLimits::kMaxBranch % 8 == 0, "the kept tokens are compared 8 at a time");

  // The index of tok among the kept, size_ if none. Branch-free within 8: a
  // scan's exit, mispredicted about every other offer, cost more than the
  // comparisons.
  uint32_t find(int32_t tok) const {
    const uint32_t n = size_;
    for (uint32_t k0 = 0; k0 < n; k0 += 8) {
#if defined(__SSE2__)
      const __m128i t = _mm_set1_epi32(tok);
      const __m128i lo = _mm_cmpeq_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(token_ + k0)), t);
      const __m128i hi = _mm_cmpeq_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(token_ + k0 + 4)), t);
      uint32_t hits = static_cast<uint32_t>(_mm_movemask_ps(_mm_castsi128_ps(lo)) |
                                            (_mm_movemask_ps(_mm_castsi128_ps(hi)) << 4));
#else
      uint32_t hits = 0;
      for (uint32_t k = 0; k < 8; ++k) hits |= static_cast<uint32_t>(token_[k0 + k] == tok) << k;
#endif
      if (n - k0 < 8) hits &= (1u << (n - k0)) - 1;  // the rest are stale
      if (hits != 0) return k0 + static_cast<uint32_t>(__builtin_ctz(hits));
    }
    return n;
  }

  int32_t token_[ProposeLimits::kMaxBranch];
  float score_[ProposeLimits::kMaxBranch];
  uint32_t size_ = 0;
  uint32_t cap_ = 0;
};

}  // namespace ngram
