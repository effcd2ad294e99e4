#include "propose.h"

#include <string>
#include <type_traits>

#include "checks.h"
#include "errors.h"
#include "no_trie.h"
#include "parallel_batch.h"
#include "proposal_search.h"
#include "queries.h"

namespace ngram {

template class Workspace<ProposeState>;

void validate_propose(const TrieIndex& t, const int64_t* context, uint64_t n, const ProposeParams& p) {
  check_context_length(n);
  check_tokens(t, context, n, "context");
  check_propose_params(p);
}

void propose_tree_nodes(const TrieIndex& t, const int64_t* context, uint64_t n, const ProposeParams& params,
                        ProposeWorkspace& ws, DraftTree& out, const Interrupt& stop) {
  validate_propose(t, context, n, params);
  t.visit([&](const auto& trie) {
    using Trie = std::decay_t<decltype(trie)>;
    ProposalSearch<Trie>(trie, &t, context, n, params, ws.state(), stop).run(out);
  });
}

void propose_tree(const TrieIndex& t, const int64_t* context, uint64_t n, const ProposeParams& params,
                  ProposeWorkspace& ws, DraftTree& out, const Interrupt& stop) {
  propose_tree_nodes(t, context, n, params, ws, out, stop);
  encode_tree(out);
}

void propose_lookup(uint64_t vocab_size, const int64_t* context, uint64_t n, const ProposeParams& params,
                    ProposeWorkspace& ws, DraftTree& out, const Interrupt& stop) {
  check_vocab_size(vocab_size);
  check_context_length(n);
  check_token_ids(vocab_size, context, n, "context");
  check_propose_params(params);
  ProposeParams lookup = params;
  lookup.corpus = false;
  ProposalSearch<NoTrie>(NoTrie(vocab_size), nullptr, context, n, lookup, ws.state(), stop).run(out);
  encode_tree(out);
}

void propose_batch(const TrieIndex& t, const std::vector<ProposeInput>& in, const ProposeParams& params,
                   uint32_t threads, std::vector<DraftTree>& out, const Interrupt& stop) {
  out.resize(in.size());
  run_batch<ProposeWorkspace>(
      in.size(), threads, "contexts",
      [&](size_t i, ProposeWorkspace& ws) { propose_tree(t, in[i].context, in[i].size, params, ws, out[i], stop); },
      stop);
}

}  // namespace ngram
