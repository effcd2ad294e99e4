// The engine's queries driven by fuzzer bytes on an open trie, with the
// invariants every answer must keep. Used by the trie-reader and engine-API
// targets; aborts (a crash libFuzzer reports) when an invariant breaks.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "errors.h"
#include "fuzz_input.h"
#include "propose.h"
#include "prune_tree.h"
#include "queries.h"
#include "trie_index.h"

namespace ngram_fuzz {

// Whether answers are checked: true for a trie that passed verification.
// A corrupted file opened without verification may hold any counts (p above
// 1, say); from it only "no crash, no read outside the file" is asked.
inline bool g_check_answers = true;

inline void fail(const char* what) {
  if (!g_check_answers) return;
  std::fprintf(stderr, "invariant broken: %s\n", what);
  std::abort();
}

// conditional_probs: p in [0, 1], matched in [0, order - 1], 0 exactly when p is 0.
inline void fuzz_conditional_probs(const ngram::TrieIndex& t, Bytes& in) {
  const uint64_t b = in.count(4), c = in.count(8), k = in.count(8);
  std::vector<int64_t> ctx(b * c), cand(b * k);
  for (auto& x : ctx) x = in.token(t.vocab_size());
  for (auto& x : cand) x = in.token(t.vocab_size());
  std::vector<float> probs(b * k, -1.0f);
  std::vector<int32_t> matched(b * k, -1);
  try {
    ngram::conditional_probs(t, ctx.data(), b, c, cand.data(), k, probs.data(), matched.data());
  } catch (const ngram::InvalidArgument&) {
    return;
  }
  for (uint64_t i = 0; i < b * k; ++i) {
    if (!(probs[i] >= 0.0f && probs[i] <= 1.0f)) fail("conditional_probs: p outside [0, 1]");
    if (matched[i] < 0 || static_cast<uint32_t>(matched[i]) >= t.order()) fail("conditional_probs: matched");
    if ((probs[i] == 0.0f) != (matched[i] == 0)) fail("conditional_probs: p == 0 iff matched == 0");
  }
}

// topk: at most k answers, counts descending, probabilities in [0, 1].
inline void fuzz_topk(const ngram::TrieIndex& t, Bytes& in) {
  const uint64_t c = in.count(8);
  std::vector<int64_t> ctx(c);
  for (auto& x : ctx) x = in.token(t.vocab_size());
  const int64_t k = static_cast<int64_t>(in.take<int16_t>());
  ngram::TopK r;
  try {
    r = ngram::topk(t, ctx.data(), c, k);
  } catch (const ngram::InvalidArgument&) {
    return;
  }
  if (k >= 0 && r.tokens.size() > static_cast<uint64_t>(k)) fail("topk: more than k");
  if (r.tokens.size() != r.probs.size() || r.tokens.size() != r.counts.size()) fail("topk: lengths");
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    if (!(r.probs[i] >= 0.0f && r.probs[i] <= 1.0f)) fail("topk: p outside [0, 1]");
    if (i && r.counts[i] > r.counts[i - 1]) fail("topk: counts not descending");
  }
}

inline void fuzz_count(const ngram::TrieIndex& t, Bytes& in) {
  const uint64_t n = in.count(18);
  std::vector<int64_t> g(n);
  for (auto& x : g) x = in.token(t.vocab_size());
  try {
    (void)ngram::count_ngram(t, g.data(), n);
  } catch (const ngram::InvalidArgument&) {
  }
}

// prune_tree: arbitrary lattices and parameters; a tree that comes back is
// well formed (parents precede children, at most max_nodes + 1 nodes).
inline void fuzz_prune(const ngram::TrieIndex& t, Bytes& in) {
  thread_local ngram::PruneWorkspace ws;
  const uint64_t p = in.count(6);
  const uint32_t d = in.count(6);
  std::vector<int64_t> prefix(p);
  for (auto& x : prefix) x = in.token(t.vocab_size());
  std::vector<uint64_t> offsets(1, 0);
  for (uint32_t l = 0; l < d; ++l) offsets.push_back(offsets.back() + in.count(6));
  std::vector<int64_t> tokens(offsets.back());
  std::vector<float> probs(offsets.back());
  for (auto& x : tokens) x = in.token(t.vocab_size());
  const bool raw_probs = in.take<uint8_t>() & 1;
  for (auto& x : probs) x = raw_probs ? in.take<float>() : in.take<uint8_t>() / 255.0f;
  ngram::PruneParams params;
  const uint8_t set = in.take<uint8_t>();
  if (set & 1) params.beam_width = in.take<int16_t>();
  if (set & 2) params.max_nodes = in.take<int16_t>();
  if (set & 4) params.ngram_weight = in.take<float>();
  if (set & 8) params.eos_token_id = in.token(t.vocab_size());
  if (set & 16) params.level_weights.resize(in.count(7), in.take<uint8_t>() / 64.0f);
  if (set & 32) params.logit_weights.resize(in.count(7), in.take<float>());
  params.ngram_on_first_level = set & 64;
  ngram::PruneInput pin;
  pin.prefix = prefix.data();
  pin.prefix_len = p;
  pin.tokens = tokens.data();
  pin.probs = probs.data();
  pin.level_offsets = offsets.data();
  pin.depth = d;
  ngram::DraftTree tree;
  try {
    ngram::prune_tree(t, pin, params, ws, tree);
  } catch (const ngram::InvalidArgument&) {
    return;
  }
  const size_t n = tree.tokens.size();
  if (n == 0 || n > static_cast<size_t>(params.max_nodes) + 1) fail("prune: node count");
  if (tree.parents.size() != n || tree.parents[0] != -1) fail("prune: root");
  for (size_t i = 1; i < n; ++i)
    if (tree.parents[i] < 0 || static_cast<size_t>(tree.parents[i]) >= i) fail("prune: parent after child");
  if (tree.tree_mask.size() != n * n) fail("prune: mask size");
}

// propose_tree: arbitrary contexts (often repetitive, so that the document
// source matches) and parameters; a tree that comes back is well formed and
// its path probabilities never grow from parent to child.
inline void fuzz_propose(const ngram::TrieIndex& t, Bytes& in) {
  thread_local ngram::ProposeWorkspace ws;
  const uint64_t n = in.count(255);
  const uint64_t alphabet = 1 + in.count(5);  // few distinct tokens: repeats
  std::vector<int64_t> ctx(n);
  for (auto& x : ctx) x = in.token(std::min<uint64_t>(alphabet, t.vocab_size()));
  ngram::ProposeParams params;
  const uint8_t set = in.take<uint8_t>();
  if (set & 1) params.max_nodes = in.take<int16_t>();
  if (set & 2) params.max_depth = in.take<int8_t>();
  if (set & 4) {
    params.max_branch = in.take<int8_t>();
    params.root_branch = in.take<int8_t>();
  }
  if (set & 8) params.min_prob = in.take<float>();
  if (set & 16) {
    params.discount = in.take<uint8_t>() / 255.0f;
    params.lookup_decay = in.take<uint8_t>() / 255.0f;
    params.lookup_prior = in.take<uint8_t>() / 255.0f;
    params.order_weight = in.take<uint8_t>() / 255.0f;
  }
  if (set & 32) params.lookup_min_match = in.take<int8_t>();
  params.corpus = !(set & 64);
  params.lookup = !(set & 128);
  ngram::DraftTree tree;
  try {
    ngram::propose_tree(t, ctx.data(), n, params, ws, tree);
  } catch (const ngram::InvalidArgument&) {
    return;
  }
  const size_t m = tree.tokens.size();
  if (m == 0 || m > static_cast<size_t>(params.max_nodes) + 1) fail("propose: node count");
  if (tree.parents[0] != -1 || tree.tokens[0] != ctx.back() || tree.scores[0] != 1.0f) fail("propose: root");
  for (size_t i = 1; i < m; ++i) {
    if (tree.parents[i] < 0 || static_cast<size_t>(tree.parents[i]) >= i) fail("propose: parent after child");
    if (!(tree.scores[i] <= tree.scores[tree.parents[i]]) || !(tree.scores[i] >= params.min_prob))
      fail("propose: path probability");
    if (tree.depths[i] > params.max_depth) fail("propose: depth");
  }
}

// Every query once, in an order the input picks.
inline void fuzz_queries(const ngram::TrieIndex& t, Bytes& in) {
  while (in.left() > 0) {
    switch (in.take<uint8_t>() % 5) {
      case 0: fuzz_conditional_probs(t, in); break;
      case 1: fuzz_topk(t, in); break;
      case 2: fuzz_count(t, in); break;
      case 3: fuzz_propose(t, in); break;
      default: fuzz_prune(t, in); break;
    }
  }
}

}  // namespace ngram_fuzz
