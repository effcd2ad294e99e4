// What a proposal's sources (corpus_source.h, document_source.h) score into
// at the node being expanded: its continuations, each token once with its
// score from each source. Engine-internal: included by the proposal search
// only.
#pragma once
#include <algorithm>
#include <cstdint>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "propose_params.h"
#include "trie_format.h"

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

// The node being expanded's continuations and their scores from both
// sources: a token's corpus score is the sum of what each suffix of the
// corpus gives it (added in the order the suffixes are read), its document
// score is set once; select() combines them and keeps the best. Tokens,
// scores apart, so that a token is found by comparing 8 at once.
class ContinuationScores {
 public:
  // Every suffix of the corpus (at most kMaxOrder - 1) and the document
  // give at most ProposeLimits::kMaxBranch tokens each.
  static constexpr uint32_t kCapacity = ProposeLimits::kMaxBranch * kMaxOrder;

  void clear() { size_ = 0; }
  // Adds v to tok's corpus score.
  void add_corpus(int32_t tok, float v) { corpus_[slot(tok)] += v; }
  void set_document(int32_t tok, float v) { document_[slot(tok)] = v; }

  // A token's score from its two (docs/PROPOSALS.md): where both are above
  // 0, the chance that either is right, 1 - (1 - c)(1 - d); else the one
  // there is; at most 1 (a sum of float products may round past it).
  // Increasing in each, as the search's bound needs.
  static float combine(float c, float d) {
    return std::min(1.0f, c > 0.0f && d > 0.0f ? 1.0f - (1.0f - c) * (1.0f - d) : std::max(c, d));
  }

  // Keeps the `cap` best continuations whose score is above 0, best first
  // (by `better`); returns how many.
  uint32_t select(uint32_t cap) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < size_; ++i) {
      const float s = combine(corpus_[i], document_[i]);
      const int32_t tok = token_[i];
      if (!(s > 0.0f)) continue;
      if (n == cap && !better(s, tok, best_score_[cap - 1], best_token_[cap - 1])) continue;
      uint32_t j = n < cap ? n++ : cap - 1;
      for (; j > 0 && better(s, tok, best_score_[j - 1], best_token_[j - 1]); --j) {
        best_score_[j] = best_score_[j - 1];
        best_token_[j] = best_token_[j - 1];
      }
      best_score_[j] = s;
      best_token_[j] = tok;
    }
    return n;
  }
  // select()'s j-th.
  int32_t token(uint32_t j) const { return best_token_[j]; }
  float score(uint32_t j) const { return best_score_[j]; }

 private:
  static_assert(kCapacity % 8 == 0, "the tokens are compared 8 at a time");

  // tok's index, a new one (both scores 0) if it has none.
  uint32_t slot(int32_t tok) {
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
    token_[n] = tok;
    corpus_[n] = 0.0f;
    document_[n] = 0.0f;
    size_ = n + 1;
    return n;
  }

  int32_t token_[kCapacity];
  float corpus_[kCapacity];
  float document_[kCapacity];
  uint32_t size_ = 0;
  int32_t best_token_[ProposeLimits::kMaxBranch];
  float best_score_[ProposeLimits::kMaxBranch];
};

}  // namespace ngram
