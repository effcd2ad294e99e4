#include "prune_tree.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "errors.h"
#include "parallel_batch.h"
#include "queries.h"

// The score of an extension must be the float32 value DART computes, so the
// compiler may not fuse its multiply and add into one FMA (that rounds once
// instead of twice). Only score_entry() does that arithmetic.
#if defined(__clang__)
#define NGRAM_NO_FP_CONTRACT
#define NGRAM_FP_CONTRACT_OFF_PRAGMA _Pragma("clang fp contract(off)")
#elif defined(__GNUC__)
#define NGRAM_NO_FP_CONTRACT __attribute__((optimize("fp-contract=off")))
#define NGRAM_FP_CONTRACT_OFF_PRAGMA
#else
#define NGRAM_NO_FP_CONTRACT
#define NGRAM_FP_CONTRACT_OFF_PRAGMA
#endif

namespace ngram {

// float32 of Python's (l+1)**-0.7 and 0.9**l (both C's pow in double).
float default_level_weight(uint32_t l) { return static_cast<float>(std::pow(static_cast<double>(l) + 1.0, -0.7)); }
float default_logit_weight(uint32_t l) { return static_cast<float>(std::pow(0.9, static_cast<double>(l))); }

namespace {

using Ext = PruneWorkspace::Ext;
using BeamNode = PruneWorkspace::BeamNode;
using Kept = PruneWorkspace::Kept;
constexpr uint32_t kRoot = PruneWorkspace::kRoot;
constexpr uint32_t kMaxGen = 0x7fffffffu;  // gen < beam_width * K <= 2**20
constexpr float kEps = 1e-10f;  // DART's guard inside logf(p + 1e-10f)

std::string at(const char* field, uint32_t l) { return std::string(field) + "[" + std::to_string(l) + "]"; }

std::string num(double v) {
  if (std::isnan(v)) return "nan";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// Weights lie in [0, kMaxWeight] (NaN fails both tests). `index` < 0: a scalar.
void check_weight(float w, const char* field, int index = -1) {
  if (w >= 0.0f && w <= PruneLimits::kMaxWeight) return;
  const std::string name = index < 0 ? std::string(field) : at(field, static_cast<uint32_t>(index));
  throw InvalidArgument(name + " = " + num(w) + ": must be a finite weight in [0, " + num(PruneLimits::kMaxWeight) +
                        "]");
}

void check_weights(const std::vector<float>& w, uint32_t depth, const char* field) {
  if (w.empty()) return;
  if (w.size() != depth)
    throw InvalidArgument(std::string(field) + " has " + std::to_string(w.size()) + " entries: need one per level (D = " +
                          std::to_string(depth) + ")");
  for (uint32_t l = 0; l < depth; ++l) check_weight(w[l], field, static_cast<int>(l));
}

// A finite float, never -0.0, as an unsigned integer of the same order.
inline uint32_t ordered_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u ^ (static_cast<uint32_t>(static_cast<int32_t>(u) >> 31) | 0x80000000u);
}
// Beam order (extensions not ending in EOS first, then by score descending,
// then in generation order) as one unsigned integer, larger first, so that
// selecting the beam compares integers. Scores are finite and never -0.0
// (see score_entry), so the float order maps exactly onto the integer one.
inline Ext beam_key(float score, uint32_t gen, bool eos) {
  return (uint64_t{!eos} << 63) | (uint64_t{ordered_bits(score)} << 31) | (kMaxGen - gen);
}
inline uint32_t key_gen(Ext key) { return kMaxGen - static_cast<uint32_t>(key & kMaxGen); }
inline float key_score(Ext key) {
  const uint32_t ordered = static_cast<uint32_t>(key >> 31);
  const uint32_t u = ordered & 0x80000000u ? ordered & 0x7fffffffu : ~ordered;
  float score;
  std::memcpy(&score, &u, sizeof score);
  return score;
}

// The indices i in [from, to) with (keys[i] & mask) > bound, in order,
// into out; returns how many. Selects, not a branch each: which keys pass is
// a coin toss for the predictor.
uint32_t list_above(const Ext* keys, uint32_t from, uint32_t to, Ext mask, Ext bound, uint32_t* out) {
  uint32_t n = 0;
  for (uint32_t i = from; i < to; ++i) {
    out[n] = i;
    n += (keys[i] & mask) > bound;
  }
  return n;
}

// Tree order: by rank descending; on equal ranks the shallower first (a parent
// before its children), then in generation order. As one integer, larger
// first (ranks are finite and never -0.0, like scores; depth <= 64 < 2**8,
// gen < 2**20 < 2**24), so that trimming the pool compares integers.
static_assert(PruneLimits::kMaxDepth < 0xffu && PruneLimits::kMaxBeamWidth * PruneLimits::kMaxCandidates <= 0xffffffu,
              "depth and gen fit their fields of kept_key");
inline uint64_t kept_key(float rank, uint32_t depth, uint32_t gen) {
  return (uint64_t{ordered_bits(rank)} << 32) | ((0xffu - depth) << 24) | (0xffffffu - gen);
}

// Output order: by depth, then as kept_key (rank descending, then generation
// order), as one integer, larger first (the depth above the rank: 8 + 32 +
// 24 bits, as in kept_key).
inline uint64_t output_key(const Kept& k) {
  return (uint64_t{0xffu - k.depth} << 56) | (uint64_t{ordered_bits(k.rank)} << 24) | (0xffffffu - k.gen);
}

// Scores the K extensions of one beam entry with score s:
//   s + lw * (logit[j] + ngram[j])   or, without n-gram term,   s + lw * logit[j]
// exactly as DART's float32 expression (logit[j] = logf(p + 1e-10f) * gw and
// ngram[j] = logf(q + 1e-10f) * lambda are computed by the caller). Adding
// +0.0f turns a -0.0 score into +0.0 (equal as floats, so equal as keys)
// and changes no other value.
// Cloned for AVX2 where the CPU has it: the 64-bit keys fill four lanes,
// not two (AVX2 brings no FMA, and contraction is off anyway).
__attribute__((target_clones("avx2", "default"))) NGRAM_NO_FP_CONTRACT void score_entry(
    float s, float lw, const float* logit, const float* ngram, uint32_t k, const int32_t* toks, int64_t eos,
    uint32_t gen0, Ext* out) {
  NGRAM_FP_CONTRACT_OFF_PRAGMA
  if (ngram) {
    for (uint32_t j = 0; j < k; ++j) {
      const float combined = logit[j] + ngram[j];
      out[j] = beam_key(s + lw * combined + 0.0f, gen0 + j, toks[j] == eos);
    }
  } else {
    for (uint32_t j = 0; j < k; ++j) out[j] = beam_key(s + lw * logit[j] + 0.0f, gen0 + j, toks[j] == eos);
  }
}

// Searches the level's candidates in the runs found among ws.runs[0, n)
// (ws.run_found), run i answering into q and m at row ws.suffix_row[i] * k.
// Returns how many were searched; they move to the front, with their rows
// in ws.suffix_row and their match counts in ws.matched_count.
template <class Trie>
uint32_t search_found_runs(const Trie& t, PruneWorkspace& ws, uint32_t len, uint32_t n, uint32_t k, float* q,
                           int32_t* m) {
  uint32_t searched = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (!ws.run_found[i]) continue;
    const size_t at = static_cast<size_t>(ws.suffix_row[i]) * k;
    ws.runs[searched] = ws.runs[i];
    ws.suffix_row[searched] = ws.suffix_row[i];
    ws.run_tables[searched] = &ws.candidates;
    ws.run_q[searched] = q + at;
    ws.run_matched[searched++] = m + at;
  }
  t.lookup_in_runs(len, ws.runs.data(), searched, ws.run_tables.data(), ws.run_q.data(), ws.run_matched.data(),
                   ws.matched_count.data());
  return searched;
}

// The n-gram terms logf(q + 1e-10f) * lambda of the level's candidates after
// each row's context (ws.row_entry: one beam entry per distinct context),
// into ws.ngram_terms (row r at r * k, in the level's candidate order), with q
// the DART-compatible conditional probability (conditional_probs_many). The
// one-token backoff step is computed once per distinct last token. Each step
// runs over all rows before the next (first every run is found, then every
// run searched), so that the memory reads of different rows overlap instead
// of each row waiting for its own chain of them. A matched candidate's q is
// count / count > 0, so q == 0 means unmatched.
template <class Trie>
void level_ngram_terms(const Trie& t, PruneWorkspace& ws, const uint32_t* order, uint32_t cap, uint32_t k,
                       float lambda, float zero_q_term) {
  const uint32_t rows = static_cast<uint32_t>(ws.row_entry.size());
  ws.row_q.assign(static_cast<size_t>(rows) * k, 0.0f);
  ws.row_matched.assign(static_cast<size_t>(rows) * k, 0);
  ws.row_left.assign(rows, k);
  // One run per row at most (the backoff tokens are some rows' last tokens).
  const uint32_t most = std::max(rows, 1u);
  ws.runs.resize(most);
  ws.run_found.resize(most);
  ws.run_q.resize(most);
  ws.run_tables.resize(most);
  ws.run_matched.resize(most);
  ws.matched_count.resize(most);
  auto ctx_of = [&](uint32_t r) { return ws.contexts.data() + static_cast<size_t>(ws.row_entry[r]) * cap; };
  auto len_of = [&](uint32_t r) { return ws.ctx_lens[ws.row_entry[r]]; };
  for (uint32_t len = cap; len >= 2; --len) {
    ws.suffixes.clear();
    ws.suffix_row.clear();
    for (uint32_t r = 0; r < rows; ++r) {
      if (ws.row_left[r] == 0 || len_of(r) < len) continue;
      ws.suffixes.push_back(ctx_of(r) + (len_of(r) - len));
      ws.suffix_row.push_back(r);
    }
    const uint32_t n = static_cast<uint32_t>(ws.suffixes.size());
    find_runs(t, ws.suffixes.data(), n, len, ws.runs.data(), ws.run_found.data());
    const uint32_t searched = search_found_runs(t, ws, len, n, k, ws.row_q.data(), ws.row_matched.data());
    for (uint32_t i = 0; i < searched; ++i) ws.row_left[ws.suffix_row[i]] -= ws.matched_count[i];
  }

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
  ws.suffixes.clear();
  ws.suffix_row.clear();
  for (uint32_t i = 0; i < tokens; ++i) {
    ws.suffixes.push_back(&ws.backoff_token[i]);
    ws.suffix_row.push_back(i);  // token i answers into row i of backoff_q
  }
  find_runs(t, ws.suffixes.data(), tokens, 1, ws.runs.data(), ws.run_found.data());
  search_found_runs(t, ws, 1, tokens, k, ws.backoff_q.data(), ws.backoff_matched.data());

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

// The last min(cap, available) tokens of prefix + the sequence ending at beam
// node x, written to buf[0, n); returns n.
uint32_t context_of(const PruneWorkspace& ws, uint32_t x, const int64_t* prefix, uint64_t prefix_len, uint32_t cap,
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

void fill_nodes(PruneWorkspace& ws, uint32_t n_kept, int32_t root_token, PrunedTree& out) {
  const uint32_t n = n_kept + 1;
  out.tokens.resize(n);
  out.parents.resize(n);
  out.depths.resize(n);
  out.scores.resize(n);
  out.tokens[0] = root_token;
  out.parents[0] = -1;
  out.depths[0] = 0;
  out.scores[0] = 0.0f;
  for (uint32_t i = 0; i < n_kept; ++i) {
    const Kept& k = ws.pool[i];
    const int32_t parent = k.parent == kRoot ? 0 : ws.beam_nodes[k.parent].kept;
    if (parent < 0 || static_cast<uint32_t>(parent) > i)
      throw std::logic_error("prune_tree: kept set is not closed under parents");
    out.tokens[i + 1] = k.token;
    out.parents[i + 1] = parent;
    out.depths[i + 1] = static_cast<int32_t>(k.depth);
    out.scores[i + 1] = k.score;
  }
}

// Orders one level's k candidates by token: order[r] = the index of the
// r-th smallest. Returns a token listed twice, or -1. Up to 64 candidates,
// each one's rank is a count of the smaller ones: k * k compares without a
// branch cost less than a sort's, which the predictor misses half the time.
int32_t order_by_token(const int32_t* tok, uint32_t k, uint32_t* order) {
  if (k <= 64) {
    for (uint32_t j = 0; j < k; ++j) {
      uint32_t rank = 0, same = 0;
      for (uint32_t i = 0; i < k; ++i) {
        rank += tok[i] < tok[j];
        same += tok[i] == tok[j];
      }
      if (same > 1) return tok[j];
      order[rank] = j;
    }
    return -1;
  }
  for (uint32_t j = 0; j < k; ++j) order[j] = j;
  std::sort(order, order + k, [tok](uint32_t a, uint32_t b) { return tok[a] < tok[b]; });
  for (uint32_t r = 1; r < k; ++r)
    if (tok[order[r]] == tok[order[r - 1]]) return tok[order[r]];
  return -1;
}

// " (name)" after a bound's range, when the bound has a name.
std::string bound_name(const char* name) { return name ? std::string(" (") + name + ")" : std::string(); }

// What validate_prune names and bounds a lattice by: prune's arguments, the engine's limits.
const LatticeFields kPruneFields;
const LatticeBounds kEngineBounds;

}  // namespace

void check_lattice_depth(uint64_t depth, const LatticeFields& f, const LatticeBounds& b) {
  if (depth == 0 || depth > b.max_levels)
    throw InvalidArgument(f.name(f.sizes) + " has " + std::to_string(depth) + " levels (D): must be 1.." +
                          std::to_string(b.max_levels) + bound_name(b.levels_bound));
}

void check_lattice_level(uint64_t l, uint64_t k, const LatticeFields& f, const LatticeBounds& b) {
  if (k == 0 || k > b.max_candidates)
    throw InvalidArgument(f.name(f.sizes) + "[" + std::to_string(l) + "] has " + std::to_string(k) +
                          " candidates (K): must be 1.." + std::to_string(b.max_candidates) +
                          bound_name(b.candidates_bound));
}

void check_lattice_values(uint64_t total, uint64_t n_tokens, uint64_t n_probs, const LatticeFields& f) {
  const std::pair<const char*, uint64_t> given[] = {{f.tokens, n_tokens}, {f.probs, n_probs}};
  for (const auto& [field, n] : given)
    if (n != total)
      throw InvalidArgument(f.name(field) + ": " + std::to_string(n) + " values, expected sum(" + f.sizes +
                            ") = " + std::to_string(total));
}

void validate_prune(const TrieIndex& t, const PruneInput& in, const PruneParams& params, PruneWorkspace& ws) {
  const uint64_t vocab = t.vocab_size();
  if (in.prefix_len == 0) throw InvalidArgument("prefix is empty: need at least one token (its last is the root)");
  check_tokens(t, in.prefix, in.prefix_len, "prefix");
  check_lattice_depth(in.depth, kPruneFields, kEngineBounds);
  if (in.level_offsets[0] != 0) throw InvalidArgument("level_offsets[0] must be 0");
  for (uint32_t l = 0; l < in.depth; ++l) {
    const uint64_t lo = in.level_offsets[l], hi = in.level_offsets[l + 1];
    check_lattice_level(l, hi > lo ? hi - lo : 0, kPruneFields, kEngineBounds);
  }
  const uint64_t total = in.level_offsets[in.depth];
  ws.tokens.resize(total);
  ws.order.resize(total);
  for (uint32_t l = 0; l < in.depth; ++l) {
    const uint64_t lo = in.level_offsets[l];
    const uint32_t k = static_cast<uint32_t>(in.level_offsets[l + 1] - lo);
    const int64_t* tk = in.tokens + lo;
    const float* pr = in.probs + lo;
    bool ok = true;
    for (uint32_t j = 0; j < k; ++j) ok &= tk[j] >= 0 && static_cast<uint64_t>(tk[j]) < vocab;
    if (!ok) check_tokens(t, tk, k, at("topk_tokens", l).c_str());
    for (uint32_t j = 0; j < k; ++j) {
      if (!(pr[j] >= 0.0f && pr[j] <= 1.0f))
        throw InvalidArgument(at("topk_probs", l) + "[" + std::to_string(j) + "] = " + num(pr[j]) +
                              ": must be a probability in [0, 1]");
      ws.tokens[lo + j] = static_cast<int32_t>(tk[j]);
    }
    const int32_t twice = order_by_token(ws.tokens.data() + lo, k, ws.order.data() + lo);
    if (twice >= 0)
      throw InvalidArgument(at("topk_tokens", l) + " lists token " + std::to_string(twice) +
                            " twice: candidates of one level must be distinct");
  }
  if (params.beam_width < 1 || params.beam_width > PruneLimits::kMaxBeamWidth)
    throw InvalidArgument("beam_width = " + std::to_string(params.beam_width) + ": must be 1.." +
                          std::to_string(PruneLimits::kMaxBeamWidth));
  if (params.max_nodes < 0 || params.max_nodes > PruneLimits::kMaxNodes)
    throw InvalidArgument("max_nodes = " + std::to_string(params.max_nodes) + ": must be 0.." +
                          std::to_string(PruneLimits::kMaxNodes));
  check_weight(params.ngram_weight, "ngram_weight");
  check_weights(params.level_weights, in.depth, "level_weights");
  check_weights(params.logit_weights, in.depth, "logit_weights");
  if (params.eos_token_id && (*params.eos_token_id < -1 || *params.eos_token_id >= static_cast<int64_t>(vocab)))
    throw InvalidArgument("eos_token_id = " + std::to_string(*params.eos_token_id) + ": must be -1 (none) or in [0, " +
                          std::to_string(vocab) + ")");
}

void encode_tree(PrunedTree& out, PruneWorkspace& ws) {
  const uint32_t n = out.size();
  if (out.parents.size() != n) throw InvalidArgument("tree: tokens and parents differ in length");
  if (n == 0) throw InvalidArgument("tree: no root");
  if (out.parents[0] != -1) throw InvalidArgument("tree: parents[0] must be -1 (the root)");
  out.depths.assign(n, 0);
  uint32_t max_depth = 0;
  for (uint32_t i = 1; i < n; ++i) {
    const int32_t p = out.parents[i];
    if (p < 0 || static_cast<uint32_t>(p) >= i)
      throw InvalidArgument("tree: parents[" + std::to_string(i) + "] = " + std::to_string(p) +
                            " must name an earlier node");
    out.depths[i] = out.depths[p] + 1;
    max_depth = std::max(max_depth, static_cast<uint32_t>(out.depths[i]));
  }
  if (out.scores.size() != n) out.scores.assign(n, 0.0f);
  // tree_mask: a node's row is its parent's row plus itself.
  out.tree_mask.assign(static_cast<size_t>(n) * n, 0);
  uint8_t* mask = out.tree_mask.data();
  mask[0] = 1;
  for (uint32_t i = 1; i < n; ++i) {
    std::memcpy(mask + static_cast<size_t>(i) * n, mask + static_cast<size_t>(out.parents[i]) * n, i);
    mask[static_cast<size_t>(i) * n + i] = 1;
  }

  // Children lists (CSR), each sorted by token, then a depth-first walk that
  // meets the leaves in lexicographic order of their paths.
  std::vector<int32_t>& start = ws.child_start;
  std::vector<int32_t>& list = ws.child_list;
  std::vector<int32_t>& stack = ws.dfs_stack;
  start.assign(n + 1, 0);
  for (uint32_t i = 1; i < n; ++i) ++start[out.parents[i] + 1];
  for (uint32_t i = 0; i < n; ++i) start[i + 1] += start[i];
  list.resize(n);
  {
    // Fill using dfs_stack as the per-parent cursor.
    stack.assign(start.begin(), start.end() - 1);
    for (uint32_t i = 1; i < n; ++i) list[stack[out.parents[i]]++] = static_cast<int32_t>(i);
  }
  const int32_t* tok = out.tokens.data();
  for (uint32_t i = 0; i < n; ++i) {
    if (start[i + 1] - start[i] > 1)
      std::sort(list.begin() + start[i], list.begin() + start[i + 1],
                [tok](int32_t a, int32_t b) { return tok[a] < tok[b]; });
  }
  uint32_t leaves = 0;
  for (uint32_t i = 0; i < n; ++i) leaves += start[i + 1] == start[i];
  const uint32_t width = max_depth + 1;
  out.n_leaves = leaves;
  out.retrieve_width = width;
  out.retrieve_indices.assign(static_cast<size_t>(leaves) * width, -1);
  stack.clear();
  stack.push_back(0);
  uint32_t row = 0;
  while (!stack.empty()) {
    const int32_t x = stack.back();
    stack.pop_back();
    if (start[x + 1] == start[x]) {
      int32_t* r = out.retrieve_indices.data() + static_cast<size_t>(row++) * width;
      for (int32_t y = x; y >= 0; y = out.parents[y]) r[out.depths[y]] = y;
      continue;
    }
    for (int32_t c = start[x + 1] - 1; c >= start[x]; --c) stack.push_back(list[c]);
  }
}

void prune_tree(const TrieIndex& t, const PruneInput& in, const PruneParams& params, PruneWorkspace& ws,
                PrunedTree& out, const Interrupt& stop) {
  prune_tree_nodes(t, in, params, ws, out, stop);
  encode_tree(out, ws);
}

namespace {

// The state of one search between its steps.
struct Search {
  const TrieIndex& t;
  const PruneInput& in;
  const PruneParams& params;
  PruneWorkspace& ws;
  uint32_t cap;          // context tokens the n-gram term looks at: order - 1
  const float* lw;       // level weights, D of them
  const float* gw;       // logit weights
  int64_t eos;
  float zero_q_term;     // the n-gram term of q = 0
  float max_term;        // and of q = 1, the largest: logf(1 + 1e-10f) * lambda
  bool pool_full = false;  // the pool holds max_nodes entries, the worst of rank `threshold`
  float threshold = 0.0f;
};

// DART's default weights, computed once.
struct DefaultWeights {
  float lw[PruneLimits::kMaxDepth], gw[PruneLimits::kMaxDepth];
  DefaultWeights() {
    for (uint32_t l = 0; l < PruneLimits::kMaxDepth; ++l) lw[l] = default_level_weight(l), gw[l] = default_logit_weight(l);
  }
};

// The drafter's term logf(p + 1e-10f) * gw[l] depends on the candidate only:
// once per lattice entry, into ws.logit_terms.
void drafter_terms(Search& s) {
  const uint32_t depth = s.in.depth;
  s.ws.logit_terms.resize(s.in.level_offsets[depth]);
  for (uint32_t l = 0; l < depth; ++l) {
    for (uint64_t i = s.in.level_offsets[l]; i < s.in.level_offsets[l + 1]; ++i)
      s.ws.logit_terms[i] = std::log(s.in.probs[i] + kEps) * s.gw[l];
  }
}

// Every beam entry's context but those ws.entry_skip marks, deduplicated
// into rows (ws.entry_row, ws.row_entry): a 64-bit key of the tokens first,
// then the tokens themselves.
void level_contexts(Search& s, uint32_t b_count) {
  PruneWorkspace& ws = s.ws;
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

// Once the pool is full, a beam entry none of whose extensions can be kept
// needs no lookup. An extension's n-gram term is at most max_term, that of q
// = 1 (q <= 1, so q + 1e-10f <= 1 + 1e-10f, and logf, the multiplications
// and the additions all round monotonically), so the entry's score with its
// level's best drafter term and max_term bounds every extension's score.
// Scores never rise along a path (every term is <= 0), so a rank is its
// score: when the bound is not above the pool's worst rank (threshold, which
// only rises), neither these extensions nor any of their descendants can be
// kept. They still take beam places, but only by their number: each scores
// at most the threshold, below every extension that can still be kept, and
// keeps its EOS flag, so any score up to the threshold leaves each of its
// comparisons with an extension that can be kept as it was. The entry's
// extensions get max_term (their scores are then their bounds, at most the
// threshold), and its descendants are skipped in turn. (A trie whose counts
// give q > 1, a corrupted file, breaks the bound: the tree is still closed
// under parents, but may differ from the one computed without skipping.)
void mark_unkeepable(Search& s, uint32_t l, uint64_t off, uint32_t k) {
  PruneWorkspace& ws = s.ws;
  const uint32_t b_count = static_cast<uint32_t>(ws.beam.size());
  ws.entry_skip.assign(b_count, 0);
  if (!s.pool_full) return;
  const float* logit = ws.logit_terms.data() + off;
  const float best_logit = *std::max_element(logit, logit + k);
  const int32_t no_token = -1;
  for (uint32_t b = 0; b < b_count; ++b) {
    if (ws.beam[b] == kRoot) continue;  // a full pool comes after level 0: not reached
    const BeamNode& node = ws.beam_nodes[ws.beam[b]];
    Ext bound;
    score_entry(node.score, s.lw[l], &best_logit, &s.max_term, 1, &no_token, -1, 0, &bound);
    ws.entry_skip[b] = !(std::min(key_score(bound), node.rank) > s.threshold);
  }
}

// The n-gram terms of level l's k candidates for every distinct context of
// the beam (ws.ngram_terms, one row per context; the entries mark_unkeepable
// marks share one more row, of max_term).
void level_lookups(Search& s, uint32_t l, uint64_t off, uint32_t k) {
  PruneWorkspace& ws = s.ws;
  const uint32_t* order = ws.order.data() + off;
  const int32_t* toks = ws.tokens.data() + off;
  ws.sorted_tokens.resize(k);
  for (uint32_t r = 0; r < k; ++r) ws.sorted_tokens[r] = toks[order[r]];
  ws.candidates.build(ws.sorted_tokens.data(), k);
  ws.found.resize(k);
  mark_unkeepable(s, l, off, k);
  const uint32_t b_count = static_cast<uint32_t>(ws.beam.size());
  level_contexts(s, b_count);
  const size_t rows = ws.row_entry.size();
  ws.ngram_terms.resize((rows + 1) * k);
  // One visit per level: the lookups of all its contexts run on the trie's
  // own representation.
  s.t.visit([&](const auto& trie) {
    level_ngram_terms(trie, ws, order, s.cap, k, s.params.ngram_weight, s.zero_q_term);
  });
  std::fill_n(ws.ngram_terms.data() + rows * k, k, s.max_term);
  for (uint32_t b = 0; b < b_count; ++b)
    if (ws.entry_skip[b]) ws.entry_row[b] = static_cast<uint32_t>(rows);
}

// Every extension of the beam at level l, as its beam key, into ws.ext;
// returns how many (beam entries x k).
uint32_t score_level(Search& s, uint32_t l, uint64_t off, uint32_t k, bool use_ngram) {
  PruneWorkspace& ws = s.ws;
  const uint32_t b_count = static_cast<uint32_t>(ws.beam.size());
  const int32_t* toks = ws.tokens.data() + off;
  const float* logit = ws.logit_terms.data() + off;
  ws.ext.resize(static_cast<size_t>(b_count) * k);
  uint32_t n_ext = 0;
  for (uint32_t b = 0; b < b_count; ++b) {
    const uint32_t x = ws.beam[b];
    const float score = x == kRoot ? 0.0f : ws.beam_nodes[x].score;
    const float* ngram = use_ngram ? ws.ngram_terms.data() + static_cast<size_t>(ws.entry_row[b]) * k : nullptr;
    score_entry(score, s.lw[l], logit, ngram, k, toks, s.eos, b * k, ws.ext.data() + n_ext);
    n_ext += k;
  }
  ws.ext.resize(n_ext);
  return n_ext;
}

// The next beam: the best beam_width extensions, sorted (largest key first)
// into ext[0, n_beam) while the rest stream past. After the first few an
// extension rarely beats the beam's worst, so this branch predicts well where
// a partition's comparisons are coin tosses; one that does is inserted from
// the bottom, usually a short way. The extension it displaces takes its slot,
// so every extension stays in ws.ext (the rest become pool candidates; their
// order past n_beam does not matter, every later order being total).
// Returns n_beam.
uint32_t select_beam(Search& s, uint32_t n_ext) {
  PruneWorkspace& ws = s.ws;
  const uint32_t n_beam = std::min(static_cast<uint32_t>(s.params.beam_width), n_ext);
  Ext* ext = ws.ext.data();
  std::sort(ext, ext + n_beam, std::greater<Ext>());
  ws.listed.resize(n_ext);
  uint32_t* listed = ws.listed.data();
  if (n_beam == 0) return 0;
  // Only those above the first worst can enter (the worst only rises).
  const uint32_t n_listed = list_above(ext, n_beam, n_ext, ~Ext{0}, ext[n_beam - 1], listed);
  for (uint32_t f = 0; f < n_listed; ++f) {
    const uint32_t i = listed[f];
    const Ext x = ext[i];
    if (x <= ext[n_beam - 1]) continue;
    ext[i] = ext[n_beam - 1];
    uint32_t at = n_beam - 1;
    for (; at > 0 && ext[at - 1] < x; --at) ext[at] = ext[at - 1];
    ext[at] = x;
  }
  return n_beam;
}

// Every extension is a candidate node; those entering the beam become beam
// nodes (their children name them as parent), and the next beam. A full
// pool's worst entry precedes every candidate of this (deeper) level with a
// rank not above its own: those cannot be kept, and only beam entries need
// the bookkeeping below. Scores compare as the score bits of their keys do.
void keep_candidates(Search& s, uint32_t l, uint64_t off, uint32_t k, uint32_t n_ext, uint32_t n_beam) {
  PruneWorkspace& ws = s.ws;
  const int32_t* toks = ws.tokens.data() + off;
  const Ext* ext = ws.ext.data();
  const uint32_t first_node = static_cast<uint32_t>(ws.beam_nodes.size());
  ws.next_beam.resize(n_beam);
  // Room for every extension; the entries are written field by field where
  // they lie (a whole struct built and then copied stalls on its wide load
  // of the narrow stores), and the pool cut back to those written.
  const size_t pool_before = ws.pool.size();
  ws.beam_nodes.resize(first_node + n_beam);
  ws.pool.resize(pool_before + n_ext);
  BeamNode* nodes = ws.beam_nodes.data();
  Kept* pool = ws.pool.data() + pool_before;
  uint32_t n_pool = 0;
  auto visit = [&](uint32_t i) {
    const float score = key_score(ext[i]);
    const uint32_t gen = key_gen(ext[i]);
    const uint32_t b = gen / k, j = gen - b * k;
    const uint32_t parent = ws.beam[b];
    const float parent_rank = parent == kRoot ? std::numeric_limits<float>::infinity() : nodes[parent].rank;
    const float rank = std::min(score, parent_rank);
    int32_t beam_id = -1;
    if (i < n_beam) {
      beam_id = static_cast<int32_t>(first_node + i);
      BeamNode& node = nodes[first_node + i];
      node.token = toks[j];
      node.parent = parent;
      node.score = score;
      node.rank = rank;
      node.kept = -1;
      ws.next_beam[i] = first_node + i;
    }
    if (s.pool_full && !(rank > s.threshold)) return;
    Kept& kept = pool[n_pool++];
    kept.key = kept_key(rank, l + 1, gen);
    kept.rank = rank;
    kept.score = score;
    kept.depth = l + 1;
    kept.gen = gen;
    kept.parent = parent;
    kept.token = toks[j];
    kept.beam = beam_id;
  };
  for (uint32_t i = 0; i < n_beam; ++i) visit(i);
  if (!s.pool_full) {
    for (uint32_t i = n_beam; i < n_ext; ++i) visit(i);
  } else {
    const Ext score_bits = ~(Ext{1} << 63);  // the key less its EOS bit
    const Ext bound = (beam_key(s.threshold + 0.0f, 0, false) & score_bits) | kMaxGen;
    const uint32_t n_listed = list_above(ext, n_beam, n_ext, score_bits, bound, ws.listed.data());
    for (uint32_t f = 0; f < n_listed; ++f) visit(ws.listed[f]);
  }
  ws.pool.resize(pool_before + n_pool);
  std::swap(ws.beam, ws.next_beam);
}

// Keeps only the best max_nodes candidates so far: a prefix of the final
// order, so trimming early changes nothing.
void trim_pool(Search& s) {
  PruneWorkspace& ws = s.ws;
  const uint32_t max_nodes = static_cast<uint32_t>(s.params.max_nodes);
  const size_t n = ws.pool.size();
  if (n > max_nodes) {
    // The worst kept is the max_nodes-th largest key (keys are distinct),
    // found among the keys alone, then the pool compacted to those at or
    // above it (with selects, not a branch each).
    ws.pool_keys.resize(n);
    for (size_t i = 0; i < n; ++i) ws.pool_keys[i] = ws.pool[i].key;
    std::nth_element(ws.pool_keys.begin(), ws.pool_keys.begin() + (max_nodes - 1), ws.pool_keys.end(),
                     std::greater<uint64_t>());
    const uint64_t worst = ws.pool_keys[max_nodes - 1];
    Kept* pool = ws.pool.data();
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      const bool keep = pool[i].key >= worst;
      if (pool[i].key == worst) s.threshold = pool[i].rank;
      pool[kept] = pool[i];
      kept += keep;
    }
    ws.pool.resize(kept);
    s.pool_full = true;
  } else if (n == max_nodes && !s.pool_full) {
    s.pool_full = true;
    s.threshold = ws.pool[0].rank;
    for (const Kept& kp : ws.pool) s.threshold = std::min(s.threshold, kp.rank);
  }
}

// The kept candidates in output order, as out's nodes.
void emit_nodes(Search& s, PrunedTree& out) {
  PruneWorkspace& ws = s.ws;
  // The pool's keys are not needed any more: each becomes its output key.
  for (Kept& kp : ws.pool) kp.key = output_key(kp);
  std::sort(ws.pool.begin(), ws.pool.end(), [](const Kept& a, const Kept& b) { return a.key > b.key; });
  const uint32_t n_kept = static_cast<uint32_t>(ws.pool.size());
  // Map beam nodes to their output index (parents are placed before children).
  for (uint32_t i = 0; i < n_kept; ++i)
    if (ws.pool[i].beam >= 0) ws.beam_nodes[ws.pool[i].beam].kept = static_cast<int32_t>(i + 1);
  fill_nodes(ws, n_kept, static_cast<int32_t>(s.in.prefix[s.in.prefix_len - 1]), out);
}

}  // namespace

void prune_tree_nodes(const TrieIndex& t, const PruneInput& in, const PruneParams& params, PruneWorkspace& ws,
                      PrunedTree& out, const Interrupt& stop) {
  validate_prune(t, in, params, ws);
  static const DefaultWeights defaults;
  const float lambda = params.ngram_weight;
  Search s{t, in, params, ws, t.order() - 1,
           params.level_weights.empty() ? defaults.lw : params.level_weights.data(),
           params.logit_weights.empty() ? defaults.gw : params.logit_weights.data(),
           params.eos_token_id.value_or(t.eos_id()), std::log(0.0f + kEps) * lambda,
           std::log(1.0f + kEps) * lambda};
  drafter_terms(s);
  ws.beam_nodes.clear();
  ws.pool.clear();
  ws.beam.assign(1, kRoot);
  for (uint32_t l = 0; l < in.depth && params.max_nodes > 0; ++l) {
    stop.check();
    const uint64_t off = in.level_offsets[l];
    const uint32_t k = static_cast<uint32_t>(in.level_offsets[l + 1] - off);
    // DART skips the lookup when lambda == 0: logf(q + eps) * 0 is -0.0, and
    // x + -0.0 == x, so leaving the term out is the same float.
    const bool use_ngram = (l > 0 || params.ngram_on_first_level) && lambda != 0.0f;
    if (use_ngram) level_lookups(s, l, off, k);
    const uint32_t n_ext = score_level(s, l, off, k, use_ngram);
    const uint32_t n_beam = select_beam(s, n_ext);
    keep_candidates(s, l, off, k, n_ext, n_beam);
    trim_pool(s);
  }
  stop.check();  // once more before `out` is written: a stopped call leaves it as it was
  emit_nodes(s, out);
}

void prune_tree_batch(const TrieIndex& t, const std::vector<PruneInput>& in, const PruneParams& params,
                      uint32_t threads, std::vector<PrunedTree>& out, const Interrupt& stop) {
  out.resize(in.size());
  run_batch<PruneWorkspace>(
      in.size(), threads, "requests",
      [&](size_t i, PruneWorkspace& ws) { prune_tree(t, in[i], params, ws, out[i], stop); }, stop);
}

}  // namespace ngram
