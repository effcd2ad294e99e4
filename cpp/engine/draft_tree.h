// The draft tree: the one result type of tree pruning (prune_tree.h) and of
// corpus proposals (propose.h), the tree a target model verifies in one
// pass. Its encoding (depths, tree_mask, retrieve_indices, as DART encodes
// a tree) is computed here from the nodes alone, and a batch of trees is
// laid out here as the one packed array every client reads
// (TreeBatchLayout). docs/PRUNING.md is the specification of the fields.
#pragma once
#include <cstdint>
#include <vector>

namespace ngram {

// Node 0 is the root; every parent precedes its children. Prune orders the
// others by depth, within one depth by rank; proposals by depth, within one
// depth in the order chosen.
struct DraftTree {
  std::vector<int32_t> tokens;    // [n]
  std::vector<int32_t> parents;   // [n], -1 for the root
  std::vector<int32_t> depths;    // [n], 0 for the root
  std::vector<float> scores;      // [n]: prune's search scores (0 for the root), proposals' path probabilities (1)
  std::vector<uint8_t> tree_mask; // [n, n] row-major: row i marks i and its ancestors
  // [n_leaves, width]: one row per leaf, node indices root to leaf, -1 padded;
  // leaves in lexicographic order of their token paths; width = max depth + 1.
  std::vector<int32_t> retrieve_indices;
  uint32_t n_leaves = 0;
  uint32_t retrieve_width = 0;
  uint32_t size() const { return static_cast<uint32_t>(tokens.size()); }
};

// DART's encoding of a tree given its tokens and parents (node 0 the root,
// parents[0] = -1, every parent before its children): depths, tree_mask and
// retrieve_indices; scores of another length than the tokens become zeros.
// The single definition, used by the searches and by clients that receive
// only tokens and parents over the wire. Its scratch is the calling
// thread's own. Throws InvalidArgument for a parent list that is not such a
// tree.
void encode_tree(DraftTree& tree);

// The packed layout of a batch of B encoded trees, the one array a GPU
// worker copies to its device at once: with N the most nodes, L the most
// leaves and W the deepest path + 1 of the batch (each at least 1),
//   int64 tokens [B, N] (0 padded), int64 depths [B, N] (0 padded),
//   int64 parents [B, N] (-1 padded), int64 retrieve_indices [B, L, W] (-1
//   padded), then bool tree_mask [B, N, N] (a padding node marks only itself),
// each array right after the one before, the int64 ones 8-byte aligned.
struct TreeBatchLayout {
  uint64_t batch = 0, nodes = 1, leaves = 1, width = 1;

  // The layout that holds these trees.
  static TreeBatchLayout of(const DraftTree* trees, uint64_t batch);
  // Byte offsets of the arrays, and the whole size.
  uint64_t tokens_at() const { return 0; }
  uint64_t depths_at() const { return 8 * batch * nodes; }
  uint64_t parents_at() const { return 16 * batch * nodes; }
  uint64_t retrieve_at() const { return 24 * batch * nodes; }
  uint64_t mask_at() const { return retrieve_at() + 8 * batch * leaves * width; }
  uint64_t bytes() const { return mask_at() + batch * nodes * nodes; }
  // Writes the trees (`batch` of them, fitting this layout) into out, bytes() long.
  void pack(const DraftTree* trees, uint8_t* out) const;
};

}  // namespace ngram
