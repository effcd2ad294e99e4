// DART tree pruning: from a draft lattice (top-k tokens and probabilities per
// draft position, lattice.h) and a prefix, a beam search scored by the
// drafter's probabilities and the trie's conditional probabilities, keeping
// the best nodes as a draft tree (draft_tree.h) for one verification pass.
// docs/PRUNING.md is the specification (scores, tie rules, node order,
// limits); this file is its single definition in code.
#pragma once
#include <cstdint>
#include <vector>

#include "draft_tree.h"
#include "interrupt.h"
#include "lattice.h"
#include "no_trie.h"
#include "prune_params.h"
#include "trie_index.h"
#include "workspace.h"

namespace ngram {

// Scratch space of one pruning thread (workspace.h), its contents the
// search's own (prune_search.h).
struct PruneState;
extern template class Workspace<PruneState>;
using PruneWorkspace = Workspace<PruneState>;

// Throws InvalidArgument naming the field at fault: the lattice's
// (check_lattice: shapes and limits, token ids outside [0, vocab),
// probabilities, a token listed twice in one level), then the parameters'
// (check_prune_params). Leaves the lattice's tokens as the search reads
// them in ws.
void validate_prune(const TrieIndex& t, const PruneInput& in, const PruneParams& params, PruneWorkspace& ws);

// Validates, then prunes. `ws` may be reused across calls (one per thread).
// `stop` is checked as prune_tree_nodes checks it: once it says stop, the
// call throws Interrupted, leaving `out` unwritten.
void prune_tree(const TrieIndex& t, const PruneInput& in, const PruneParams& params, PruneWorkspace& ws,
                DraftTree& out, const Interrupt& stop = Interrupt());
// The same without a trie (no_trie.h): ids in [0, t.vocab_size()), every
// n-gram term that of q = 0, no EOS unless params name one.
void prune_tree(const NoTrie& t, const PruneInput& in, const PruneParams& params, PruneWorkspace& ws,
                DraftTree& out, const Interrupt& stop = Interrupt());

// prune_tree without the encoding: out's tokens, parents, depths and scores
// only (what the server sends; its clients encode the tree themselves).
// Checks `stop` before each level's lookups and scoring (a level's work is
// bounded by beam_width x K, PruneLimits) and before writing `out`, and
// throws Interrupted, leaving `out` unwritten.
void prune_tree_nodes(const TrieIndex& t, const PruneInput& in, const PruneParams& params, PruneWorkspace& ws,
                      DraftTree& out, const Interrupt& stop = Interrupt());

// Many requests on `threads` threads (0: the hardware's); out[i] answers
// in[i]. An invalid request raises InvalidArgument prefixed "requests[i]: "
// (the lowest such i) after every thread has finished. `stop` is checked
// before each request and inside each (prune_tree); once it says stop, no
// thread starts another request and the call throws one Interrupted after
// every thread has finished (run_batch), `out` then partly written.
void prune_tree_batch(const TrieIndex& t, const std::vector<PruneInput>& in, const PruneParams& params,
                      uint32_t threads, std::vector<DraftTree>& out, const Interrupt& stop = Interrupt());
void prune_tree_batch(const NoTrie& t, const std::vector<PruneInput>& in, const PruneParams& params,
                      uint32_t threads, std::vector<DraftTree>& out, const Interrupt& stop = Interrupt());

}  // namespace ngram
