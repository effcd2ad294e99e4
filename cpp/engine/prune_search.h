// The state of one tree-pruning search (prune_tree.h) between its steps:
// the beam search's (prune_tree.cc) and its level lookups'
// (prune_lookups.cc). Engine-internal: not part of the API.
#pragma once
#include <cstdint>
#include <vector>

#include "lattice.h"
#include "lookup_steps.h"
#include "prune_tree.h"
#include "runs.h"

namespace ngram {

constexpr float kEps = 1e-10f;  // DART's guard inside logf(p + 1e-10f)

// Scratch space of one pruning thread. Reusing one across calls avoids every
// allocation once it has grown to the largest request.
struct PruneState {
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

  CheckedLattice lattice;             // the lattice narrowed to int32, each level's order by token
  std::vector<float> logit_terms;     // per lattice entry: logf(p + 1e-10f) * gw[l]
  std::vector<Ext> ext;
  std::vector<BeamNode> beam_nodes;
  std::vector<uint32_t> beam, next_beam;  // beam node indices
  std::vector<uint32_t> listed;       // indices into ext that pass a bound
  std::vector<Kept> pool;
  std::vector<uint64_t> pool_keys;    // the pool's keys, to find the worst kept (trim_pool)

  // The level lookups' (prune_lookups.cc).
  std::vector<int32_t> contexts;      // per beam entry: its context (order-1 tokens)
  std::vector<uint32_t> ctx_lens;
  std::vector<uint64_t> ctx_keys;     // a hash of the context, to find equal ones fast
  std::vector<uint8_t> entry_skip;    // per beam entry: none of its extensions can be kept (no lookup)
  std::vector<uint32_t> entry_row;    // per beam entry: the row of its context
  std::vector<uint32_t> row_entry;    // per row (distinct context): the first beam entry with it
  std::vector<int32_t> sorted_tokens;  // the level's candidates in token order
  CandidateTable candidates;          // the level's sorted_tokens, hashed
  // Per row, K entries each, in sorted-candidate order: q and the matched
  // length so far, and how many candidates are still unmatched.
  std::vector<float> row_q;
  std::vector<int32_t> row_matched;
  std::vector<uint32_t> row_left;
  std::vector<int32_t> row_backoff;   // per row: its backoff token's index, -1 for none
  LookupScratch steps;
  std::vector<float> ngram_terms;     // per row: logf(q + 1e-10f) * lambda, K entries in lattice order
  std::vector<uint32_t> found;        // indices of candidates with q != 0
  // Per level: the one-token-context lookups, shared by every context that
  // ends in the same token (DART's backoff step).
  std::vector<int32_t> backoff_token;
  std::vector<float> backoff_q;
  std::vector<int32_t> backoff_matched;
};

// One search's inputs and running state.
struct PruneSearch {
  const PruneInput& in;
  const PruneParams& params;
  PruneState& ws;
  uint32_t cap;          // context tokens the n-gram term looks at: order - 1
  const float* lw;       // level weights, D of them
  const float* gw;       // logit weights
  int64_t eos;
  float zero_q_term;     // the n-gram term of q = 0
  float max_term;        // and of q = 1, the largest: logf(1 + 1e-10f) * lambda
  bool pool_full = false;  // the pool holds max_nodes entries, the worst of rank `threshold`
  float threshold = 0.0f;
};

// The n-gram terms of a level's k candidates (lattice entries from `off`)
// for every distinct context of the beam entries that ws.entry_skip does
// not mark (ws.ngram_terms, one row per context, ws.entry_row naming each
// entry's); the marked entries share one more row, of max_term.
// Index: a TrieIndex, or NoTrie.
template <class Index>
void level_lookups(PruneSearch& s, const Index& t, uint64_t off, uint32_t k);

}  // namespace ngram
