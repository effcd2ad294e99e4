// DART tree pruning: from a draft lattice (top-k tokens and probabilities per
// draft position) and a prefix, a beam search scored by the drafter's
// probabilities and the trie's conditional probabilities, keeping the best
// nodes as a draft tree for one verification pass. docs/PRUNING.md is the
// specification (scores, tie rules, node order, limits); this file is its
// single definition in code.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "interrupt.h"
#include "queries.h"
#include "trie_index.h"

namespace ngram {

// Every bound on a prune request, in one place (checked by validate_prune).
struct PruneLimits {
  static constexpr uint32_t kMaxDepth = 64;        // D: draft positions
  static constexpr uint32_t kMaxCandidates = 1024; // K: candidates per position
  static constexpr uint32_t kMaxBeamWidth = 1024;
  static constexpr uint32_t kMaxNodes = 4096;      // nodes kept, root excluded
  static constexpr float kMaxWeight = 1e6f;        // level, logit and n-gram weights lie in [0, kMaxWeight]
};

// The parameters of a search. The defaults are DART's production settings,
// the only definition of them: the Python module exports them (as
// PRUNE_DEFAULTS) and the server leaves unset fields at these values. The
// integers are as wide as any caller's, so that validate_prune alone judges
// their range.
struct PruneParams {
  int64_t beam_width = 20;
  int64_t max_nodes = 60;
  float ngram_weight = 0.5f;
  // D entries each, or empty for DART's defaults: float32((l+1)**-0.7) and
  // float32(0.9**l).
  std::vector<float> level_weights;
  std::vector<float> logit_weights;
  // Extensions ending in this token rank after all others in the beam; -1:
  // no such rule; unset: the trie's EOS id (its header's, -1 when none).
  std::optional<int64_t> eos_token_id;
  // false: level 0 is scored by the drafter alone (DART's production build).
  bool ngram_on_first_level = false;
};

// One draft lattice. Level l's K_l candidates are tokens[level_offsets[l] ..
// level_offsets[l+1]) with their probabilities at the same positions.
struct PruneInput {
  const int64_t* prefix = nullptr;  // the context; prefix[prefix_len-1] becomes the root
  uint64_t prefix_len = 0;
  const int64_t* tokens = nullptr;
  const float* probs = nullptr;
  const uint64_t* level_offsets = nullptr;  // depth + 1 entries, level_offsets[0] == 0
  uint32_t depth = 0;                       // D
};

// The kept tree. Node 0 is the root (the prefix's last token); the others
// follow by depth, within one depth by rank (score descending, then the order
// in which the search generated them). Parents always precede children.
struct PrunedTree {
  std::vector<int32_t> tokens;    // [n]
  std::vector<int32_t> parents;   // [n], -1 for the root
  std::vector<int32_t> depths;    // [n], 0 for the root
  std::vector<float> scores;      // [n], 0 for the root
  std::vector<uint8_t> tree_mask; // [n, n] row-major: row i marks i and its ancestors
  // [n_leaves, width]: one row per leaf, node indices root to leaf, -1 padded;
  // leaves in lexicographic order of their token paths; width = max depth + 1.
  std::vector<int32_t> retrieve_indices;
  uint32_t n_leaves = 0;
  uint32_t retrieve_width = 0;
  uint32_t size() const { return static_cast<uint32_t>(tokens.size()); }
};

// Scratch space of one pruning thread. Reusing one across calls avoids every
// allocation once it has grown to the largest request.
struct PruneWorkspace {
  // One extension of a beam entry at the current level, as its beam order in
  // one integer (larger first): bit 63 set when it does not end in EOS, bits
  // 31..62 its score mapped to an order-preserving unsigned, bits 0..30
  // 0x7fffffff - gen, with gen = entry * K + j its generation order.
  using Ext = uint64_t;
  // BeamNode and Kept are left unset when made: keep_candidates writes
  // every field in place.
  struct BeamNode {     // a sequence that was in the beam
    BeamNode() {}
    int32_t token;
    uint32_t parent;    // index into beam_nodes; kRoot for level 0 entries
    float score;
    float rank;         // its rank key (see Kept)
    int32_t kept;       // its index in the output tree, -1 while unknown
  };
  struct Kept {         // a candidate for the output tree
    Kept() {}
    uint64_t key;       // its place in the tree order as one integer (kept_key)
    float rank;         // min(score, parent's rank): equals the score (see PRUNING.md)
    float score;
    uint32_t depth;     // 1..D
    uint32_t gen;       // generation order within its level
    uint32_t parent;    // beam node index or kRoot
    int32_t token;
    int32_t beam;       // beam node index when it entered the beam, else -1
  };
  static constexpr uint32_t kRoot = 0xffffffffu;

  std::vector<int32_t> tokens;        // the lattice narrowed to int32 (validate_prune fills it)
  std::vector<float> logit_terms;     // per lattice entry: logf(p + 1e-10f) * gw[l]
  std::vector<Ext> ext;
  std::vector<BeamNode> beam_nodes;
  std::vector<uint32_t> beam, next_beam;  // beam node indices
  std::vector<uint32_t> listed;       // indices into ext that pass a bound
  std::vector<Kept> pool;
  std::vector<uint64_t> pool_keys;    // the pool's keys, to find the worst kept (trim_pool)
  std::vector<int32_t> contexts;      // per beam entry: its context (order-1 tokens)
  std::vector<uint32_t> ctx_lens;
  std::vector<uint64_t> ctx_keys;     // a hash of the context, to find equal ones fast
  std::vector<uint8_t> entry_skip;    // per beam entry: none of its extensions can be kept (no lookup)
  std::vector<uint32_t> entry_row;    // per beam entry: the row of its context
  std::vector<uint32_t> row_entry;    // per row (distinct context): the first beam entry with it
  // Per lattice entry, within each level: the level's candidate indices in
  // token order (validate_prune fills it).
  std::vector<uint32_t> order;
  std::vector<int32_t> sorted_tokens;  // the level's candidates in that order
  CandidateTable candidates;          // the level's sorted_tokens, hashed
  // Per row, K entries each, in sorted-candidate order: q and the matched
  // length so far, and how many candidates are still unmatched.
  std::vector<float> row_q;
  std::vector<int32_t> row_matched;
  std::vector<uint32_t> row_left;
  std::vector<int32_t> row_backoff;   // per row: its backoff token's index, -1 for none
  std::vector<const int32_t*> suffixes;  // the suffixes looked up in one step, and their rows
  std::vector<uint32_t> suffix_row;
  std::vector<Run> runs;              // per suffix looked up: its run of continuations
  std::vector<uint8_t> run_found;
  std::vector<const CandidateTable*> run_tables;  // per run found: the level's candidates (all the same)
  std::vector<float*> run_q;          // per run found: where its q go (lookup_in_runs)
  std::vector<int32_t*> run_matched;  // and its matched lengths
  std::vector<uint32_t> matched_count;
  std::vector<float> ngram_terms;     // per row: logf(q + 1e-10f) * lambda, K entries in lattice order
  std::vector<uint32_t> found;        // indices of candidates with q != 0
  // Per level: the one-token-context lookups, shared by every context that
  // ends in the same token (DART's backoff step).
  std::vector<int32_t> backoff_token;
  std::vector<float> backoff_q;
  std::vector<int32_t> backoff_matched;
  std::vector<int32_t> child_start, child_list, dfs_stack;
};

// How a surface names a lattice's fields in its errors. The defaults are
// prune's arguments (the Python module); the server names its PruneInput
// message's fields, after the input they belong to ("inputs[2]").
struct LatticeFields {
  std::string input;                  // put before each field, with a '.'; empty: none
  const char* sizes = "topk_tokens";  // the field with an entry per level, K_l each
  const char* tokens = "topk_tokens";
  const char* probs = "topk_probs";
  std::string name(const char* field) const { return input.empty() ? field : input + "." + field; }
};

// The bounds of a lattice's shape: the engine's (PruneLimits) unless a
// surface admits less (the server's --max-levels and --max-candidates,
// which its configuration keeps within the engine's). A bound's name, when
// given, ends the error about it: "... must be 1..3 (--max-levels)".
struct LatticeBounds {
  uint64_t max_levels = PruneLimits::kMaxDepth;
  uint64_t max_candidates = PruneLimits::kMaxCandidates;
  const char* levels_bound = nullptr;
  const char* candidates_bound = nullptr;
};

// A lattice's shape, one rule each, the one definition of every surface's
// checks (validate_prune's; the server's PruneTree through lattice_offsets).
// Each throws InvalidArgument naming the field at fault: D levels, in
// 1..max_levels; level l's K candidates, in 1..max_candidates; tokens and
// probs of `total` = sum(K_l) values each.
void check_lattice_depth(uint64_t depth, const LatticeFields& f = {}, const LatticeBounds& b = {});
void check_lattice_level(uint64_t l, uint64_t k, const LatticeFields& f = {}, const LatticeBounds& b = {});
void check_lattice_values(uint64_t total, uint64_t n_tokens, uint64_t n_probs, const LatticeFields& f = {});

// A lattice given as level sizes (K_l = sizes[l], l < depth) and flat
// arrays of n_tokens token ids and n_probs probabilities: its shape checked
// by the three rules above, in that order (the levels before any is read),
// and its PruneInput::level_offsets, the depth + 1 running sums, into
// `offsets`.
template <class Sizes>
void lattice_offsets(const Sizes& sizes, uint64_t depth, uint64_t n_tokens, uint64_t n_probs,
                     std::vector<uint64_t>& offsets, const LatticeFields& f = {}, const LatticeBounds& b = {}) {
  check_lattice_depth(depth, f, b);
  offsets.assign(1, 0);
  for (uint64_t l = 0; l < depth; ++l) {
    const uint64_t k = sizes[l];
    check_lattice_level(l, k, f, b);
    offsets.push_back(offsets.back() + k);
  }
  check_lattice_values(offsets.back(), n_tokens, n_probs, f);
}

// Throws InvalidArgument naming the field at fault: shapes and limits, token
// ids outside [0, vocab), probabilities that are not in [0, 1] (NaN
// included), a token listed twice in one level, weights outside
// [0, kMaxWeight] or not finite, eos_token_id outside [-1, vocab). Leaves
// the lattice's tokens (as int32) and each level's order by token in ws.
void validate_prune(const TrieIndex& t, const PruneInput& in, const PruneParams& params, PruneWorkspace& ws);

// Validates, then prunes. `ws` may be reused across calls (one per thread).
// `stop` is checked as prune_tree_nodes checks it: once it says stop, the
// call throws Interrupted, leaving `out` unwritten.
void prune_tree(const TrieIndex& t, const PruneInput& in, const PruneParams& params, PruneWorkspace& ws,
                PrunedTree& out, const Interrupt& stop = Interrupt());

// prune_tree without the encoding: out's tokens, parents, depths and scores
// only (what the server sends; its clients encode the tree themselves).
// Checks `stop` before each level's lookups and scoring (a level's work is
// bounded by beam_width x K, PruneLimits) and before writing `out`, and
// throws Interrupted, leaving `out` unwritten.
void prune_tree_nodes(const TrieIndex& t, const PruneInput& in, const PruneParams& params, PruneWorkspace& ws,
                      PrunedTree& out, const Interrupt& stop = Interrupt());

// DART's encoding of a tree given its tokens and parents (node 0 the root,
// parents[0] = -1, every parent before its children): depths, tree_mask and
// retrieve_indices (see PrunedTree). The single definition, used by
// prune_tree and by clients that receive only tokens and parents over the
// wire. Throws InvalidArgument for a parent list that is not such a tree.
void encode_tree(PrunedTree& out, PruneWorkspace& ws);

// Many requests on `threads` threads (0: the hardware's); out[i] answers
// in[i]. An invalid request raises InvalidArgument prefixed "requests[i]: "
// (the lowest such i) after every thread has finished. `stop` is checked
// before each request and inside each (prune_tree); once it says stop, no
// thread starts another request and the call throws one Interrupted after
// every thread has finished (run_batch), `out` then partly written.
void prune_tree_batch(const TrieIndex& t, const std::vector<PruneInput>& in, const PruneParams& params,
                      uint32_t threads, std::vector<PrunedTree>& out, const Interrupt& stop = Interrupt());

// DART's default weights for level l.
float default_level_weight(uint32_t l);
float default_logit_weight(uint32_t l);

}  // namespace ngram
