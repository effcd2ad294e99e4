// Corpus proposals: a draft tree grown from the trie alone, for models with
// no drafter. From the sequence so far, the tree holds the likeliest
// continuations, best-first by path probability, where a continuation's
// probability combines the trie's counts after every stored suffix length
// of the sequence (the corpus source) and the sequence's own earlier
// occurrences (the prompt-lookup source). docs/PROPOSALS.md is the
// specification (scores, tie rules, node order, limits); this file is the
// API of its single definition in code: the parameters in
// propose_params.h, the search in proposal_search.h over its two sources,
// corpus_source.h and document_source.h.
#pragma once
#include <cstdint>
#include <vector>

#include "draft_tree.h"
#include "interrupt.h"
#include "propose_params.h"
#include "trie_index.h"
#include "workspace.h"

namespace ngram {

// Scratch space of one proposing thread (workspace.h), its contents the
// search's own (proposal_search.h).
struct ProposeState;
extern template class Workspace<ProposeState>;
using ProposeWorkspace = Workspace<ProposeState>;

// Throws InvalidArgument naming the field at fault: an empty or too long
// context, ids outside [0, vocab), integers or floats outside their range.
void validate_propose(const TrieIndex& t, const int64_t* context, uint64_t n, const ProposeParams& params);

// Validates, then proposes: the kept tree, node 0 the root (the sequence's
// last token), the others by depth, within one depth in the order they
// were chosen; scores are path probabilities (1 for the root). `ws` may be
// reused across calls (one per thread). `stop` is checked once the root's
// matches in the context are found (a scan of the whole context), then
// every few dozen nodes chosen, and before `out` is written; once it says
// stop, the call throws Interrupted, leaving `out` unwritten.
void propose_tree(const TrieIndex& t, const int64_t* context, uint64_t n, const ProposeParams& params,
                  ProposeWorkspace& ws, DraftTree& out, const Interrupt& stop = Interrupt());

// propose_tree without the encoding: out's tokens, parents and scores only
// (what the server sends; its clients encode the tree themselves). The
// encoding's mask is n x n bytes: 16 MiB at 4,096 nodes.
void propose_tree_nodes(const TrieIndex& t, const int64_t* context, uint64_t n, const ProposeParams& params,
                        ProposeWorkspace& ws, DraftTree& out, const Interrupt& stop = Interrupt());

// Prompt lookup alone, with no trie: propose_tree's document source over a
// vocabulary of vocab_size ids (params.corpus is ignored). What a client
// proposes while its trie host is out of reach. `stop` as in propose_tree.
void propose_lookup(uint64_t vocab_size, const int64_t* context, uint64_t n, const ProposeParams& params,
                    ProposeWorkspace& ws, DraftTree& out, const Interrupt& stop = Interrupt());

// Many sequences on `threads` threads (0: the hardware's); out[i] answers
// contexts[i]. An invalid request raises InvalidArgument prefixed
// "contexts[i]: " (the lowest such i) after every thread has finished.
// `stop` is checked before each sequence and inside each (propose_tree);
// once it says stop, no thread starts another sequence and the call throws
// one Interrupted after every thread has finished (run_batch), `out` then
// partly written.
struct ProposeInput {
  const int64_t* context = nullptr;
  uint64_t size = 0;
};
void propose_batch(const TrieIndex& t, const std::vector<ProposeInput>& in, const ProposeParams& params,
                   uint32_t threads, std::vector<DraftTree>& out, const Interrupt& stop = Interrupt());

}  // namespace ngram
