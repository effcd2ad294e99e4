// A proposal's document source (prompt lookup): a node's continuations
// from the sequence's own earlier text. At a node whose sequence is x =
// context + the path to the node, the positions i <= N-2 of the context
// where the longest match of x's suffix ends (at least min_match tokens,
// counted up to ProposeLimits::kMaxMatch), the most recent kMaxOccurrences
// of them; a continuation w scores (occurrences followed by w) /
// (occurrences) times the evidence's weight, weight * n / (n + prior) * (1
// - decay^m) for n occurrences of an m-token match. The root measures every
// position; a child keeps the occurrences of its parent that its own token
// continues, its match one token longer. docs/PROPOSALS.md is the
// specification. Engine-internal: included by the proposal search.
#pragma once
#include <cstdint>
#include <vector>

#include "continuation_scores.h"

namespace ngram {

class DocumentSource {
 public:
  // A node's occurrences: positions i of the context, the match ending at i.
  struct Matches {
    uint32_t begin = 0, size = 0;
    uint32_t match = 0;  // the match's length in tokens
  };

  // A new sequence: its context (n tokens) and the source's parameters.
  void start(const int64_t* context, uint64_t n, uint32_t min_match, float weight, float decay, float prior) {
    ctx_ = context;
    n_ = n;
    min_match_ = min_match;
    weight_ = weight;
    decay_ = decay;
    prior_ = prior;
    occurrences_.clear();
  }
  // The root's occurrences: every match of the context's suffix.
  Matches root();
  // A child's: those of its parent that its token continues.
  Matches child(const Matches& parent, int32_t token);
  // The largest score a continuation at a node with these occurrences gets:
  // the share of its most frequent next token, times the evidence's weight.
  float bound(const Matches& m);
  // Scores the `cap` most frequent tokens that follow the occurrences into scores.
  void score(const Matches& m, uint32_t cap, ContinuationScores& scores);

 private:
  // f(token, count) for each distinct token that follows the occurrences, in token order.
  template <class F>
  void for_each_next_token(const Matches& m, F f);
  // weight * (n / (n + prior)) * (1 - decay^m), in that order (float32).
  float evidence(const Matches& m) const;

  const int64_t* ctx_ = nullptr;
  uint64_t n_ = 0;
  uint32_t min_match_ = 1;
  float weight_ = 1.0f;
  float decay_ = 0.5f;
  float prior_ = 1.0f;
  std::vector<uint32_t> occurrences_;  // every node's, node by node
  std::vector<uint32_t> match_at_;     // the root's candidate match ends: where the last token stands
  std::vector<uint32_t> match_lens_;   // and their match lengths
  std::vector<int32_t> next_tokens_;
};

}  // namespace ngram
