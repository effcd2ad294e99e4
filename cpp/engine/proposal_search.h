// A proposal's best-first search (propose.h): starting from the root, the
// candidate with the highest path probability is chosen next, until
// max_nodes are chosen or none is left; a node's continuations come from
// the corpus source (corpus_source.h) and the document source
// (document_source.h), a continuation's two scores combined as
// ContinuationScores::combine says.
// A chosen node is expanded only once its path probability times a bound
// of its continuations' scores reaches the best candidate's.
// docs/PROPOSALS.md is the specification (tie rules, node order).
// Engine-internal: included by propose.cc only.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "continuation_scores.h"
#include "corpus_source.h"
#include "document_source.h"
#include "draft_tree.h"
#include "interrupt.h"
#include "propose.h"

namespace ngram {

// The search's scratch, reused across proposals (one per thread).
struct SearchScratch {
  struct Node {          // a node of the tree, in the order chosen
    int32_t token;
    int32_t parent;      // index into nodes, -1 for the root
    uint32_t depth;
    float prob;          // path probability
    uint32_t corpus;     // its row of suffix entries (CorpusSource)
    DocumentSource::Matches document;  // its occurrences in the context
  };
  struct Candidate {     // a continuation not yet chosen
    // Its path probability, depth and parent (an index into nodes) in one
    // word that orders candidates as the search does but for the token: the
    // probability's bits (a positive float's order), then 127 - depth, then
    // 8191 - parent, so that one comparison settles nearly every pair.
    uint64_t rank;
    int32_t token;
    uint32_t hints;      // the corpus source's hints of its suffix entries
    uint32_t next;       // its parent's next continuation: children[next], none at family_end[parent]
    static constexpr uint32_t kDepthBits = 7, kParentBits = 13;
    static uint64_t make_rank(float prob, uint32_t depth, uint32_t parent) {
      uint32_t bits;
      std::memcpy(&bits, &prob, 4);
      return (uint64_t{bits} << (kDepthBits + kParentBits)) |
             (uint64_t{(1u << kDepthBits) - 1 - depth} << kParentBits) | ((1u << kParentBits) - 1 - parent);
    }
    float prob() const {
      const uint32_t bits = static_cast<uint32_t>(rank >> (kDepthBits + kParentBits));
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    uint32_t depth() const {
      const uint32_t mask = (1u << kDepthBits) - 1;
      return mask - (static_cast<uint32_t>(rank >> kParentBits) & mask);
    }
    uint32_t parent() const {
      const uint32_t mask = (1u << kParentBits) - 1;
      return mask - (static_cast<uint32_t>(rank) & mask);
    }
  };
  static_assert(ProposeLimits::kMaxDepth < (1u << Candidate::kDepthBits), "a depth fits the rank");
  static_assert(ProposeLimits::kMaxNodes < (1u << Candidate::kParentBits), "a parent fits the rank");
  struct Child {         // a continuation of an expanded node, its family in best-first order
    int32_t token;
    float prob;
    uint32_t hints;
  };

  std::vector<Node> nodes;
  // The frontier holds each expanded node's best continuation not chosen
  // yet, sorted worst first (a few dozen: inserting into the sorted array
  // costs less than a heap's sift-down on every choice); choosing the last
  // offers the next of its family.
  std::vector<Candidate> frontier;
  std::vector<Child> children;         // the expanded nodes' continuations, family by family
  std::vector<uint32_t> family_end;    // by node: the end of its family in children
  std::vector<uint32_t> unexpanded;    // chosen nodes not expanded yet: a heap by probability
  std::vector<float> expand_key;       // by node: its probability times its continuations' bound
  std::vector<int32_t> tail;           // the sequence's last order-1 tokens at the node
  std::vector<uint32_t> order, place;  // output order: chosen index by output index, and back
  ContinuationScores scores;           // the node being expanded's
};

// The scratch of one proposing thread: the search's and its sources'.
struct ProposeState {
  SearchScratch search;
  CorpusScratch corpus;
  DocumentSource document;
};

// One proposal's search over the representation Trie.
template <class Trie>
class ProposalSearch {
 public:
  using Node = SearchScratch::Node;
  using Candidate = SearchScratch::Candidate;
  using Child = SearchScratch::Child;

  // index: the owner of the trie's RunTopCache and RunBounds (nullptr for a
  // trie with no runs).
  ProposalSearch(const Trie& trie, const TrieIndex* index, const int64_t* context, uint64_t n,
                 const ProposeParams& p, ProposeState& ws, const Interrupt& stop)
      : corpus_(trie, index, p.discount, p.order_weight, ws.corpus), document_(ws.document), ws_(ws.search),
        ctx_(context), n_(n), p_(p), stop_(stop), branch_(static_cast<uint32_t>(p.max_branch)),
        root_branch_(static_cast<uint32_t>(p.root_branch)) {
    document_.start(context, n, static_cast<uint32_t>(p.lookup_min_match), p.lookup_weight, p.lookup_decay,
                    p.lookup_prior);
  }

  void run(DraftTree& out);

 private:
  void start();
  void prepare(uint32_t v);
  float bound(uint32_t v);
  void expand(uint32_t v);
  void offer(uint32_t v, uint32_t j);
  uint32_t fill_tail(uint32_t v);
  void write(DraftTree& out);
  uint32_t suffix_len(uint32_t depth) const {
    return static_cast<uint32_t>(std::min<uint64_t>(corpus_.max_len(), n_ + depth));
  }
  // The suffix length the corpus source conditions on at a depth (0 without it).
  uint32_t corpus_len(uint32_t depth) const { return p_.corpus ? suffix_len(depth) : 0; }

  CorpusSource<Trie> corpus_;
  DocumentSource& document_;
  SearchScratch& ws_;
  const int64_t* ctx_;
  const uint64_t n_;
  const ProposeParams& p_;
  const Interrupt& stop_;
  const uint32_t branch_;
  const uint32_t root_branch_;
};

// Puts c into the frontier, sorted worst first: after every candidate it
// beats. The best-first order is higher path probability first, ties by
// smaller depth, then the earlier chosen parent, then the smaller token;
// but no two candidates in the frontier share a parent (a family offers its
// next only once its last is chosen), so their ranks differ and decide.
// By insertion from the best end: most offers land near it (a node is
// expanded when its best child about beats the frontier's best), so that
// few candidates move.
inline void frontier_insert(std::vector<SearchScratch::Candidate>& frontier, const SearchScratch::Candidate& c) {
  frontier.push_back(c);
  SearchScratch::Candidate* f = frontier.data();
  size_t i = frontier.size() - 1;
  for (; i > 0 && f[i - 1].rank > c.rank; --i) f[i] = f[i - 1];
  f[i] = c;
}

template <class Trie>
void ProposalSearch<Trie>::start() {
  SearchScratch& ws = ws_;
  ws.nodes.clear();
  ws.frontier.clear();
  ws.children.clear();
  ws.family_end.clear();
  ws.unexpanded.clear();
  // The root: the context's last token; its suffixes looked up in full.
  Node root{};
  root.token = static_cast<int32_t>(ctx_[n_ - 1]);
  root.parent = -1;
  root.prob = 1.0f;
  ws.nodes.push_back(root);
  ws.family_end.push_back(0);
  const uint32_t L = fill_tail(0);
  ws.nodes[0].corpus = corpus_.root(ws.tail.data(), L);
  if (p_.lookup) ws.nodes[0].document = document_.root();
  stop_.check();  // the document source's scan reads the whole context
}

// ws.tail = the sequence's last L tokens at node v, L the suffix length the
// corpus source conditions on there (returned): the path up to the root,
// then the context.
template <class Trie>
uint32_t ProposalSearch<Trie>::fill_tail(uint32_t v) {
  SearchScratch& ws = ws_;
  const uint32_t L = corpus_len(ws.nodes[v].depth);
  ws.tail.resize(std::max<uint32_t>(L, 1));
  uint32_t i = L;
  uint32_t u = v;
  while (i > 0 && u != 0) {
    ws.tail[--i] = ws.nodes[u].token;
    u = static_cast<uint32_t>(ws.nodes[u].parent);
  }
  for (uint64_t c = n_; i > 0;) ws.tail[--i] = static_cast<int32_t>(ctx_[--c]);
  return L;
}

// A chosen node's state in both sources: what its bound and its expansion
// read. Leaves ws.tail filled for it.
template <class Trie>
void ProposalSearch<Trie>::prepare(uint32_t v) {
  SearchScratch& ws = ws_;
  const uint32_t L = fill_tail(v);
  Node& node = ws.nodes[v];
  const uint32_t parent_row = v != 0 ? ws.nodes[node.parent].corpus : 0;
  corpus_.prepare(node.corpus, v == 0, parent_row, node.token, ws.tail.data(), L);
  if (p_.lookup && v != 0) node.document = document_.child(ws.nodes[node.parent].document, node.token);
}

// A bound of every continuation's score at node v (after prepare(v)): the
// sources' bounds combined, or either alone, whichever is larger (a
// continuation's score is one of the three, each increasing in its
// sources' scores).
template <class Trie>
float ProposalSearch<Trie>::bound(uint32_t v) {
  const Node& node = ws_.nodes[v];
  const float c = corpus_.bound(node.corpus, ws_.tail.data(), corpus_len(node.depth));
  const float d = p_.lookup && node.document.size > 0 ? document_.bound(node.document) : 0.0f;
  return std::max({c, d, ContinuationScores::combine(c, d)});
}

template <class Trie>
void ProposalSearch<Trie>::expand(uint32_t v) {
  SearchScratch& ws = ws_;
  const uint32_t depth = ws.nodes[v].depth;
  const uint32_t L = fill_tail(v);

  // The root's children are the likeliest nodes of all: it considers more.
  const uint32_t width = v == 0 ? root_branch_ : branch_;
  ws.scores.clear();
  if (L > 0) corpus_.score(ws.nodes[v].corpus, ws.tail.data(), L, width, ws.scores);
  if (p_.lookup) document_.score(ws.nodes[v].document, width, ws.scores);
  const float prob = ws.nodes[v].prob;
  const uint32_t first = static_cast<uint32_t>(ws.children.size());
  const uint32_t kept = ws.scores.select(width);
  for (uint32_t j = 0; j < kept; ++j) {
    const float child = prob * ws.scores.score(j);
    if (!(child >= p_.min_prob) || child <= 0.0f) break;  // the rest score no higher
    ws.children.push_back({ws.scores.token(j), child, 0});
  }
  const uint32_t end = static_cast<uint32_t>(ws.children.size());
  if (first == end) return;
  // The family in the frontier's order: by path probability, ties by the
  // smaller token. The scores' order already is that but where two scores'
  // products round to one probability.
  Child* family = ws.children.data();
  for (uint32_t j = first + 1; j < end; ++j) {
    if (family[j - 1].prob != family[j].prob || family[j - 1].token < family[j].token) continue;  // in order
    const Child x = family[j];
    uint32_t i = j;
    for (; i > first && family[i - 1].prob == x.prob && family[i - 1].token > x.token; --i) family[i] = family[i - 1];
    family[i] = x;
  }
  corpus_.family_hints(family, first, end, L, corpus_len(depth + 1));
  ws.family_end[v] = end;
  offer(v, first);
}

// Puts the continuation children[j] of node v into the frontier.
template <class Trie>
void ProposalSearch<Trie>::offer(uint32_t v, uint32_t j) {
  const Child& child = ws_.children[j];
  Candidate c;
  c.rank = Candidate::make_rank(child.prob, ws_.nodes[v].depth + 1, v);
  c.token = child.token;
  c.hints = child.hints;
  c.next = j + 1;
  frontier_insert(ws_.frontier, c);
}

template <class Trie>
void ProposalSearch<Trie>::run(DraftTree& out) {
  SearchScratch& ws = ws_;
  start();
  const uint32_t max_nodes = static_cast<uint32_t>(p_.max_nodes);
  const uint32_t max_depth = static_cast<uint32_t>(p_.max_depth);
  ws.expand_key.clear();
  auto lower_prob = [&](uint32_t a, uint32_t b) {
    const float pa = ws.expand_key[a], pb = ws.expand_key[b];
    return pa != pb ? pa < pb : a > b;
  };
  ws.expand_key.resize(1);
  prepare(0);
  ws.expand_key[0] = ws.nodes[0].prob * bound(0);
  if (max_depth > 0 && max_nodes > 0 && ws.expand_key[0] > 0.0f) ws.unexpanded.push_back(0);
  while (ws.nodes.size() - 1 < max_nodes) {
    // One node is chosen per turn, and at most one expanded per node chosen
    // (each reading one run per suffix length), so that a check every 32
    // turns bounds the work past a stop; the counter is the tree's size.
    if ((ws.nodes.size() & 31) == 0) stop_.check();
    // A chosen node is expanded once the best candidate no longer beats
    // the bound of its children's probabilities.
    while (!ws.unexpanded.empty() &&
           (ws.frontier.empty() || ws.expand_key[ws.unexpanded.front()] >= ws.frontier.back().prob())) {
      std::pop_heap(ws.unexpanded.begin(), ws.unexpanded.end(), lower_prob);
      const uint32_t v = ws.unexpanded.back();
      ws.unexpanded.pop_back();
      expand(v);
    }
    if (ws.frontier.empty()) break;
    const Candidate c = ws.frontier.back();
    ws.frontier.pop_back();
    const uint32_t parent = c.parent();
    if (c.next < ws.family_end[parent]) offer(parent, c.next);
    Node node{};
    node.token = c.token;
    node.parent = static_cast<int32_t>(parent);
    node.depth = c.depth();
    node.prob = c.prob();
    node.corpus = corpus_.own_row(c.hints, c.token);
    ws.nodes.push_back(node);
    const uint32_t v = static_cast<uint32_t>(ws.nodes.size() - 1);
    ws.expand_key.push_back(0.0f);  // expand_key[v]
    ws.family_end.push_back(0);     // family_end[v], set if v is expanded
    if (node.depth < max_depth) {
      prepare(v);
      ws.expand_key[v] = node.prob * bound(v);
      if (ws.expand_key[v] > 0.0f) {
        ws.unexpanded.push_back(v);
        std::push_heap(ws.unexpanded.begin(), ws.unexpanded.end(), lower_prob);
      }
    }
  }
  stop_.check();  // once more before `out` is written: a stopped call leaves it as it was
  write(out);
}

// The chosen nodes by depth, within one depth in the order chosen.
template <class Trie>
void ProposalSearch<Trie>::write(DraftTree& out) {
  SearchScratch& ws = ws_;
  const uint32_t n = static_cast<uint32_t>(ws.nodes.size());
  // A counting sort by depth keeps the chosen order within a depth.
  uint32_t first[ProposeLimits::kMaxDepth + 2] = {};
  for (uint32_t i = 0; i < n; ++i) ++first[ws.nodes[i].depth + 1];
  for (uint32_t d = 1; d <= ProposeLimits::kMaxDepth + 1; ++d) first[d] += first[d - 1];
  std::vector<uint32_t>& order = ws.order;
  std::vector<uint32_t>& place = ws.place;  // chosen index -> output index
  order.resize(n);
  place.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t at = first[ws.nodes[i].depth]++;
    order[at] = i;
    place[i] = at;
  }
  out.tokens.resize(n);
  out.parents.resize(n);
  out.scores.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    const Node& node = ws.nodes[order[i]];
    out.tokens[i] = node.token;
    out.parents[i] = node.parent < 0 ? -1 : static_cast<int32_t>(place[node.parent]);
    out.scores[i] = node.prob;
  }
}

}  // namespace ngram
