#include "draft_tree.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "errors.h"

namespace ngram {

namespace {

// The encoder's scratch, one per thread: children lists and the walk's stack.
struct EncodeScratch {
  std::vector<int32_t> child_start, child_list, stack;
};

}  // namespace

void encode_tree(DraftTree& out) {
  thread_local EncodeScratch scratch;
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
  std::vector<int32_t>& start = scratch.child_start;
  std::vector<int32_t>& list = scratch.child_list;
  std::vector<int32_t>& stack = scratch.stack;
  start.assign(n + 1, 0);
  for (uint32_t i = 1; i < n; ++i) ++start[out.parents[i] + 1];
  for (uint32_t i = 0; i < n; ++i) start[i + 1] += start[i];
  list.resize(n);
  {
    // Fill using the stack as the per-parent cursor.
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

TreeBatchLayout TreeBatchLayout::of(const DraftTree* trees, uint64_t batch) {
  TreeBatchLayout d;
  d.batch = batch;
  for (uint64_t i = 0; i < batch; ++i) {
    d.nodes = std::max<uint64_t>(d.nodes, trees[i].size());
    d.leaves = std::max<uint64_t>(d.leaves, trees[i].n_leaves);
    d.width = std::max<uint64_t>(d.width, trees[i].retrieve_width);
  }
  return d;
}

void TreeBatchLayout::pack(const DraftTree* trees, uint8_t* out) const {
  const uint64_t B = batch, N = nodes, L = leaves, W = width;
  int64_t* tok = reinterpret_cast<int64_t*>(out + tokens_at());
  int64_t* pos = reinterpret_cast<int64_t*>(out + depths_at());
  int64_t* par = reinterpret_cast<int64_t*>(out + parents_at());
  int64_t* ret = reinterpret_cast<int64_t*>(out + retrieve_at());
  uint8_t* mask = out + mask_at();
  std::fill(tok, tok + 2 * B * N, 0);               // tokens and depths
  std::fill(par, par + B * N + B * L * W, -1);      // parents and retrieve_indices
  std::memset(mask, 0, B * N * N);
  for (uint64_t b = 0; b < B; ++b) {
    const DraftTree& t = trees[b];
    const uint64_t n = t.size();
    for (uint64_t i = 0; i < n; ++i) {
      tok[b * N + i] = t.tokens[i];
      pos[b * N + i] = t.depths[i];
      par[b * N + i] = t.parents[i];
      std::memcpy(mask + (b * N + i) * N, t.tree_mask.data() + i * n, n);
    }
    for (uint64_t i = n; i < N; ++i) mask[(b * N + i) * N + i] = 1;  // padding sees itself
    for (uint64_t r = 0; r < t.n_leaves; ++r)
      for (uint64_t c = 0; c < t.retrieve_width; ++c)
        ret[(b * L + r) * W + c] = t.retrieve_indices[r * t.retrieve_width + c];
  }
}

}  // namespace ngram
