// The beam search of tree pruning (prune_tree.h), its steps in order:
// validate_prune, drafter_terms, then per level mark_unkeepable and the
// level's lookups (prune_lookups.cc), score_level, select_beam,
// keep_candidates, trim_pool, and at the end emit_nodes; prune_tree adds
// the encoding (draft_tree.h).
#include "prune_tree.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>

#include "parallel_batch.h"
#include "prune_search.h"

namespace ngram {

template class Workspace<PruneState>;

namespace {

using State = PruneState;
using Ext = State::Ext;
using BeamNode = State::BeamNode;
using Kept = State::Kept;
constexpr uint32_t kRoot = State::kRoot;
constexpr uint32_t kMaxGen = 0x7fffffffu;  // gen < beam_width * K <= 2**20

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
// not two. The score must be the float32 value DART computes: the build
// turns off fusing its multiply and add into one FMA (CMakeLists.txt).
__attribute__((target_clones("avx2", "default"))) void score_entry(
    float s, float lw, const float* logit, const float* ngram, uint32_t k, const int32_t* toks, int64_t eos,
    uint32_t gen0, Ext* out) {
  if (ngram) {
    for (uint32_t j = 0; j < k; ++j) {
      const float combined = logit[j] + ngram[j];
      out[j] = beam_key(s + lw * combined + 0.0f, gen0 + j, toks[j] == eos);
    }
  } else {
    for (uint32_t j = 0; j < k; ++j) out[j] = beam_key(s + lw * logit[j] + 0.0f, gen0 + j, toks[j] == eos);
  }
}

void fill_nodes(State& ws, uint32_t n_kept, int32_t root_token, DraftTree& out) {
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

// DART's default weights, computed once.
struct DefaultWeights {
  float lw[PruneLimits::kMaxDepth], gw[PruneLimits::kMaxDepth];
  DefaultWeights() {
    for (uint32_t l = 0; l < PruneLimits::kMaxDepth; ++l) lw[l] = default_level_weight(l), gw[l] = default_logit_weight(l);
  }
};

// The drafter's term logf(p + 1e-10f) * gw[l] depends on the candidate only:
// once per lattice entry, into ws.logit_terms.
void drafter_terms(PruneSearch& s) {
  const uint32_t depth = s.in.depth;
  s.ws.logit_terms.resize(s.in.level_offsets[depth]);
  for (uint32_t l = 0; l < depth; ++l) {
    for (uint64_t i = s.in.level_offsets[l]; i < s.in.level_offsets[l + 1]; ++i)
      s.ws.logit_terms[i] = std::log(s.in.probs[i] + kEps) * s.gw[l];
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
void mark_unkeepable(PruneSearch& s, uint32_t l, uint64_t off, uint32_t k) {
  State& ws = s.ws;
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

// Every extension of the beam at level l, as its beam key, into ws.ext;
// returns how many (beam entries x k).
uint32_t score_level(PruneSearch& s, uint32_t l, uint64_t off, uint32_t k, bool use_ngram) {
  State& ws = s.ws;
  const uint32_t b_count = static_cast<uint32_t>(ws.beam.size());
  const int32_t* toks = ws.lattice.tokens.data() + off;
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
uint32_t select_beam(PruneSearch& s, uint32_t n_ext) {
  State& ws = s.ws;
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
void keep_candidates(PruneSearch& s, uint32_t l, uint64_t off, uint32_t k, uint32_t n_ext, uint32_t n_beam) {
  State& ws = s.ws;
  const int32_t* toks = ws.lattice.tokens.data() + off;
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
void trim_pool(PruneSearch& s) {
  State& ws = s.ws;
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
void emit_nodes(PruneSearch& s, DraftTree& out) {
  State& ws = s.ws;
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

namespace {

template <class Index>
void validate(const Index& t, const PruneInput& in, const PruneParams& params, PruneWorkspace& ws) {
  check_lattice(t.vocab_size(), in, ws.state().lattice);
  check_prune_params(params, in.depth, t.vocab_size());
}

template <class Index>
void prune_nodes(const Index& t, const PruneInput& in, const PruneParams& params, PruneWorkspace& w, DraftTree& out,
                 const Interrupt& stop) {
  validate(t, in, params, w);
  State& ws = w.state();
  static const DefaultWeights defaults;
  const float lambda = params.ngram_weight;
  PruneSearch s{in, params, ws, t.order() - 1,
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
    if (use_ngram) {
      mark_unkeepable(s, l, off, k);
      level_lookups(s, t, off, k);
    }
    const uint32_t n_ext = score_level(s, l, off, k, use_ngram);
    const uint32_t n_beam = select_beam(s, n_ext);
    keep_candidates(s, l, off, k, n_ext, n_beam);
    trim_pool(s);
  }
  stop.check();  // once more before `out` is written: a stopped call leaves it as it was
  emit_nodes(s, out);
}

template <class Index>
void prune_batch(const Index& t, const std::vector<PruneInput>& in, const PruneParams& params, uint32_t threads,
                 std::vector<DraftTree>& out, const Interrupt& stop) {
  out.resize(in.size());
  run_batch<PruneWorkspace>(
      in.size(), threads, "requests",
      [&](size_t i, PruneWorkspace& ws) { prune_tree(t, in[i], params, ws, out[i], stop); }, stop);
}

}  // namespace

void validate_prune(const TrieIndex& t, const PruneInput& in, const PruneParams& params, PruneWorkspace& ws) {
  validate(t, in, params, ws);
}

void prune_tree(const TrieIndex& t, const PruneInput& in, const PruneParams& params, PruneWorkspace& ws,
                DraftTree& out, const Interrupt& stop) {
  prune_nodes(t, in, params, ws, out, stop);
  encode_tree(out);
}

void prune_tree(const NoTrie& t, const PruneInput& in, const PruneParams& params, PruneWorkspace& ws,
                DraftTree& out, const Interrupt& stop) {
  prune_nodes(t, in, params, ws, out, stop);
  encode_tree(out);
}

void prune_tree_nodes(const TrieIndex& t, const PruneInput& in, const PruneParams& params, PruneWorkspace& ws,
                      DraftTree& out, const Interrupt& stop) {
  prune_nodes(t, in, params, ws, out, stop);
}

void prune_tree_batch(const TrieIndex& t, const std::vector<PruneInput>& in, const PruneParams& params,
                      uint32_t threads, std::vector<DraftTree>& out, const Interrupt& stop) {
  prune_batch(t, in, params, threads, out, stop);
}

void prune_tree_batch(const NoTrie& t, const std::vector<PruneInput>& in, const PruneParams& params,
                      uint32_t threads, std::vector<DraftTree>& out, const Interrupt& stop) {
  prune_batch(t, in, params, threads, out, stop);
}

}  // namespace ngram
