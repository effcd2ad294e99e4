// Tree pruning's n-gram terms: each level's lookups of its candidates after
// every distinct context of the beam, on the lookup loop conditional_probs
// runs (lookup_steps.h), with DART's one-token backoff step shared by every
// context that ends in the same token.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "no_trie.h"
#include "prune_search.h"

namespace ngram {

namespace {

using State = PruneState;
constexpr uint32_t kRoot = State::kRoot;

// The last min(cap, available) tokens of prefix + the sequence ending at beam
// node x, written to buf[0, n); returns n.
uint32_t context_of(const State& ws, uint32_t x, const int64_t* prefix, uint64_t prefix_len, uint32_t cap,
                    int32_t* buf) {
  uint32_t pos = cap;
  while (pos > 0 && x != kRoot) {
    buf[--pos] = ws.beam_nodes[x].token;
    x = ws.beam_nodes[x].parent;
  }
  uint64_t p = prefix_len;
  while (pos > 0 && p > 0) buf[--pos] = static_cast<int32_t>(prefix[--p]);
  const uint32_t n = cap - pos;
  if (pos > 0) std::memmove(buf, buf + pos, n * sizeof(int32_t));
  return n;
}

// Every beam entry's context but those ws.entry_skip marks, deduplicated
// into rows (ws.entry_row, ws.row_entry): a 64-bit key of the tokens first,
// then the tokens themselves.
void level_contexts(PruneSearch& s, uint32_t b_count) {
  State& ws = s.ws;
  const uint32_t cap = s.cap;
  ws.contexts.resize(static_cast<size_t>(b_count) * (cap ? cap : 1));
  ws.ctx_lens.resize(b_count);
  ws.ctx_keys.resize(b_count);
  ws.entry_row.resize(b_count);
  ws.row_entry.clear();
  for (uint32_t b = 0; b < b_count; ++b) {
    if (ws.entry_skip[b]) continue;
    int32_t* ctx = ws.contexts.data() + static_cast<size_t>(b) * cap;
    const uint32_t len = context_of(ws, ws.beam[b], s.in.prefix, s.in.prefix_len, cap, ctx);
    uint64_t key = len;
    for (uint32_t i = 0; i < len; ++i) key = (key ^ static_cast<uint32_t>(ctx[i])) * 0x9E3779B97F4A7C15ull;
    ws.ctx_lens[b] = len;
    ws.ctx_keys[b] = key;
    uint32_t row = 0;
    const uint32_t rows = static_cast<uint32_t>(ws.row_entry.size());
    for (; row < rows; ++row) {
      const uint32_t c = ws.row_entry[row];
      if (ws.ctx_keys[c] != key || ws.ctx_lens[c] != len) continue;
      const int32_t* other = ws.contexts.data() + static_cast<size_t>(c) * cap;
      uint32_t i = 0;
      while (i < len && other[i] == ctx[i]) ++i;
      if (i == len) break;
    }
    if (row == rows) ws.row_entry.push_back(b);
    ws.entry_row[b] = row;
  }
}

// The n-gram terms logf(q + 1e-10f) * lambda of the level's candidates after
// each row's context (ws.row_entry: one beam entry per distinct context),
// into ws.ngram_terms (row r at r * k, in the level's candidate order), with q
// the DART-compatible conditional probability (conditional_probs): the
// lookup's loop over the suffix lengths down to 2, then the one-token
// backoff step once per distinct last token. Each step runs over all rows
// before the next, so that the memory reads of different rows overlap
// instead of each row waiting for its own chain of them. A matched
// candidate's q is count / count > 0, so q == 0 means unmatched.
template <class Trie>
void level_ngram_terms(const Trie& t, State& ws, const uint32_t* order, uint32_t cap, uint32_t k, float lambda,
                       float zero_q_term) {
  const uint32_t rows = static_cast<uint32_t>(ws.row_entry.size());
  ws.row_q.assign(static_cast<size_t>(rows) * k, 0.0f);
  ws.row_matched.assign(static_cast<size_t>(rows) * k, 0);
  ws.row_left.assign(rows, k);
  // One suffix per row at most (the backoff tokens are some rows' last tokens).
  ws.steps.reserve(std::max(rows, 1u));
  const auto ctx_of = [&](uint32_t r) { return ws.contexts.data() + static_cast<size_t>(ws.row_entry[r]) * cap; };
  const auto len_of = [&](uint32_t r) { return ws.ctx_lens[ws.row_entry[r]]; };
  const auto table = [&](uint32_t) { return &ws.candidates; };
  lookup_lengths(
      t, cap, 2, rows, k,
      [&](uint32_t r, uint32_t len) -> const int32_t* {
        return len_of(r) < len ? nullptr : ctx_of(r) + (len_of(r) - len);
      },
      table, ws.row_q.data(), ws.row_matched.data(), ws.row_left.data(), ws.steps);

  // Backoff: the distinct last tokens of the rows that still miss some.
  ws.backoff_token.clear();
  ws.row_backoff.assign(rows, -1);
  for (uint32_t r = 0; r < rows; ++r) {
    if (ws.row_left[r] == 0 || len_of(r) == 0) continue;
    const int32_t last = ctx_of(r)[len_of(r) - 1];
    uint32_t i = 0;
    while (i < ws.backoff_token.size() && ws.backoff_token[i] != last) ++i;
    if (i == ws.backoff_token.size()) ws.backoff_token.push_back(last);
    ws.row_backoff[r] = static_cast<int32_t>(i);
  }
  const uint32_t tokens = static_cast<uint32_t>(ws.backoff_token.size());
  ws.backoff_q.assign(static_cast<size_t>(tokens) * k, 0.0f);
  ws.backoff_matched.assign(static_cast<size_t>(tokens) * k, 0);
  for (uint32_t i = 0; i < tokens; ++i) {
    ws.steps.suffixes[i] = &ws.backoff_token[i];
    ws.steps.rows[i] = i;  // token i answers into row i of backoff_q
  }
  lookup_step(t, 1, tokens, k, table, ws.backoff_q.data(), ws.backoff_matched.data(), ws.steps);

  // Backoff fills the unmatched, then logf only for the candidates found
  // (compacted with selects, not a branch each: found or not is a coin toss
  // for the predictor); the rest share one term.
  uint32_t* found = ws.found.data();
  for (uint32_t r = 0; r < rows; ++r) {
    float* q = ws.row_q.data() + static_cast<size_t>(r) * k;
    float* terms = ws.ngram_terms.data() + static_cast<size_t>(r) * k;
    const float* bq = ws.row_backoff[r] < 0 ? nullptr : ws.backoff_q.data() + static_cast<size_t>(ws.row_backoff[r]) * k;
    uint32_t n_found = 0;
    for (uint32_t i = 0; i < k; ++i) {
      const float qi = bq && q[i] == 0.0f ? bq[i] : q[i];
      q[i] = qi;
      terms[i] = zero_q_term;
      found[n_found] = i;
      n_found += qi != 0.0f;
    }
    for (uint32_t f = 0; f < n_found; ++f) {
      const uint32_t i = found[f];
      terms[order[i]] = std::log(q[i] + kEps) * lambda;
    }
  }
}

}  // namespace

template <class Index>
void level_lookups(PruneSearch& s, const Index& t, uint64_t off, uint32_t k) {
  State& ws = s.ws;
  const uint32_t* order = ws.lattice.order.data() + off;
  const int32_t* toks = ws.lattice.tokens.data() + off;
  ws.sorted_tokens.resize(k);
  for (uint32_t r = 0; r < k; ++r) ws.sorted_tokens[r] = toks[order[r]];
  ws.candidates.build(ws.sorted_tokens.data(), k);
  ws.found.resize(k);
  const uint32_t b_count = static_cast<uint32_t>(ws.beam.size());
  level_contexts(s, b_count);
  const size_t rows = ws.row_entry.size();
  ws.ngram_terms.resize((rows + 1) * k);
  // One visit per level: the lookups of all its contexts run on the trie's
  // own representation.
  t.visit([&](const auto& trie) {
    level_ngram_terms(trie, ws, order, s.cap, k, s.params.ngram_weight, s.zero_q_term);
  });
  std::fill_n(ws.ngram_terms.data() + rows * k, k, s.max_term);
  for (uint32_t b = 0; b < b_count; ++b)
    if (ws.entry_skip[b]) ws.entry_row[b] = static_cast<uint32_t>(rows);
}

template void level_lookups<TrieIndex>(PruneSearch&, const TrieIndex&, uint64_t, uint32_t);
template void level_lookups<NoTrie>(PruneSearch&, const NoTrie&, uint64_t, uint32_t);

}  // namespace ngram
