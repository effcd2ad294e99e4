// Corpus proposals: a draft tree grown from the trie alone, for models with
// no drafter. From the sequence so far, the tree holds the likeliest
// continuations, best-first by path probability, where a continuation's
// probability combines the trie's counts after every stored suffix length
// of the sequence (the corpus source) and the sequence's own earlier
// occurrences (the prompt-lookup source). docs/PROPOSALS.md is the
// specification (scores, tie rules, node order, limits); this file is its
// single definition in code.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "interrupt.h"
#include "prune_tree.h"
#include "run_top_cache.h"
#include "trie_index.h"

namespace ngram {

// Every bound on a proposal request, in one place (checked by validate_propose).
struct ProposeLimits {
  static constexpr uint32_t kMaxNodes = PruneLimits::kMaxNodes;  // nodes kept, root excluded
  static constexpr uint32_t kMaxDepth = PruneLimits::kMaxDepth;
  static constexpr uint32_t kMaxBranch = 32;            // continuations per node
  static constexpr uint64_t kMaxContext = 1u << 20;     // tokens of one sequence
  static constexpr uint32_t kMaxMatch = 32;             // lookup_min_match's bound
  // The document source keeps the most recent occurrences of the matched
  // suffix only: recent text predicts better, and the count bounds the work.
  static constexpr uint32_t kMaxOccurrences = 256;
};

// The parameters of a proposal. The defaults are the measured best of
// docs/PROPOSALS.md, the only definition of them: the Python module exports
// them (PROPOSE_DEFAULTS) and the server leaves unset fields at these values.
struct ProposeParams {
  int64_t max_nodes = 64;
  int64_t max_depth = 8;
  int64_t max_branch = 8;      // each node's best continuations considered
  float min_prob = 1e-4f;      // nodes whose path probability is below are not kept
  float backoff = 0.4f;        // a suffix one token shorter weighs this much less
  bool corpus = true;          // continuations from the trie
  bool lookup = true;          // continuations from the sequence's own earlier occurrences
  float lookup_weight = 1.0f;  // the document source's probabilities are scaled by this
  int64_t lookup_min_match = 1;  // the shortest suffix the document source matches
};

// The kept tree, in PrunedTree's layout (prune_tree.h): node 0 is the root
// (the sequence's last token); the others follow by depth, within one depth
// in the order they were chosen; scores are path probabilities (1 for the
// root).
using ProposedTree = PrunedTree;

struct ProposeWorkspace;

// Throws InvalidArgument naming the field at fault: an empty or too long
// context, ids outside [0, vocab), integers or floats outside their range.
void validate_propose(const TrieIndex& t, const int64_t* context, uint64_t n, const ProposeParams& params);

// Validates, then proposes. `ws` may be reused across calls (one per thread).
// `stop` is checked once the root's matches in the context are found (a
// scan of the whole context), then every few dozen nodes chosen, and before
// `out` is written; once it says stop, the call throws Interrupted, leaving
// `out` unwritten.
void propose_tree(const TrieIndex& t, const int64_t* context, uint64_t n, const ProposeParams& params,
                  ProposeWorkspace& ws, ProposedTree& out, const Interrupt& stop = Interrupt());

// Prompt lookup alone, with no trie: propose_tree's document source over a
// vocabulary of vocab_size ids (params.corpus is ignored). What a client
// proposes while its trie host is out of reach. `stop` as in propose_tree.
void propose_lookup(uint64_t vocab_size, const int64_t* context, uint64_t n, const ProposeParams& params,
                    ProposeWorkspace& ws, ProposedTree& out, const Interrupt& stop = Interrupt());

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
                   uint32_t threads, std::vector<ProposedTree>& out, const Interrupt& stop = Interrupt());

// Scratch space of one proposing thread.
struct ProposeWorkspace {
  static constexpr uint64_t kAbsent = ~uint64_t{0};  // a suffix that is not stored
  static constexpr uint64_t kUnknown = kAbsent - 1;  // not yet looked up
  // Or kInTop | r: if anywhere, among the entries of top_refs[r] (a kept
  // RunTop), looked up there once the node is chosen. Entries of a level
  // are below 2^62; kAbsent and kUnknown have both top bits set.
  static constexpr uint64_t kInTop = uint64_t{1} << 62;
  static constexpr uint32_t kFamilyRow = uint32_t{1} << 31;  // a Candidate::hints flag

  struct Node {          // a node of the tree, in the order chosen
    int32_t token;
    int32_t parent;      // index into nodes, -1 for the root
    uint32_t depth;
    float prob;          // path probability
    uint32_t pos;        // its suffixes' entries: positions[pos + len], len 1..order-1
    uint32_t occ_begin;  // its document occurrences: occurrences[occ_begin, + occ_size)
    uint32_t occ_size;
  };
  struct Candidate {     // a continuation not yet chosen
    // Its path probability, depth and parent (an index into nodes) in one
    // word that orders candidates as the search does but for the token: the
    // probability's bits (a positive float's order), then 127 - depth, then
    // 8191 - parent, so that one comparison settles nearly every pair.
    uint64_t rank;
    int32_t token;
    // Its suffixes' entries as far as known: positions[hints + len]; with
    // kFamilyRow set, its family's row, which holds the first child's token.
    uint32_t hints;
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
  std::vector<uint64_t> positions;
  std::vector<uint32_t> occurrences;   // positions i in the context, the match ending at i
  // The node being expanded's best max_branch continuations so far, each
  // token once with its best score, best first (score_corpus,
  // score_document); apart, so that a token is found by comparing 8 at once.
  int32_t best_token[ProposeLimits::kMaxBranch];
  float best_score[ProposeLimits::kMaxBranch];
  uint32_t best_size = 0;
  // How the node being expanded read its run after each suffix length,
  // and so where its children's entries after that suffix are found.
  enum class RunRead : uint8_t {
    kNone,     // no run: no child follows that suffix (kAbsent)
    kCopied,   // a short run copied whole into run_tokens: searched there
    kTop,      // a long run's RunTop (run_top): looked up in it
    kLater,    // not kept: a chosen child searches the trie (kUnknown)
  };
  std::vector<int32_t> run_tokens[kMaxOrder];  // the short runs copied at this node, by suffix length
  uint64_t run_lo[kMaxOrder];
  RunRead run_read[kMaxOrder];
  const RunTop* run_top[kMaxOrder];
  uint64_t run_top_ref[kMaxOrder];     // kInTop | its index in top_refs, or kUnknown for a list not kept
  std::vector<const RunTop*> top_refs;  // the kept lists this tree's hints point into
  RunTop local_top[kMaxOrder];         // a long run's list when the cache is full, by suffix length
  std::vector<int32_t> tail;           // the sequence's last order-1 tokens at the node
  std::vector<int32_t> next_tokens;
  std::vector<uint64_t> run_counts, run_counts_sorted;  // a long run's counts, read whole once
  std::vector<uint32_t> match_at;       // the root's candidate match ends: where the last token stands
  std::vector<uint32_t> match_lens;     // and their match lengths
  std::vector<uint32_t> order;
  std::vector<float> expand_key;       // by node: its probability times its continuations' bound
  float weights[kMaxOrder];            // backoff ** d
  // The lists this thread has found in a trie's RunTopCache (whose entries
  // never move), direct-mapped by key: most nodes read the same few long
  // runs, and the cache's lock costs more than the rest of the read.
  static constexpr uint32_t kMemoBits = 14;  // 256 KiB a thread
  static constexpr uint32_t kMemoSlots = 1u << kMemoBits;
  uint64_t memo_cache = 0;             // the RunTopCache::id the memo holds lists of
  std::vector<std::pair<uint64_t, const RunTop*>> memo;
  PruneWorkspace encode;
};

}  // namespace ngram
