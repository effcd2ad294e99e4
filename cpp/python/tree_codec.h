// PruneTreeResponse and ProposeTreeResponse (proto/ngram/v1/ngram.proto):
// both are `repeated PrunedTreeNodes trees = 1`, read here into the engine's
// DraftTree and encoded by its encode_tree: the one decoder of both
// responses on the client side. tests/test_wire.py and tests/test_offload.py
// check it against protobuf's own encoder.
#pragma once
#include <cstdint>
#include <string>

#include "draft_tree.h"
#include "wire.h"

namespace ngram_py::wire {

// A response's trees, in order: tree(i) gives the DraftTree to fill for the
// i-th (nullptr: more trees than expected, an error); its tokens, parents
// and scores are read (scores NaN when the host sent none), then encoded by
// the engine's encode_tree. `what` names the message in errors
// ("PruneTreeResponse" or "ProposeTreeResponse"), `sent` what the request
// sent ("lattices", "contexts"). Returns the number of trees.
template <class TreeAt>
size_t decode_tree_response(const uint8_t* data, size_t size, TreeAt tree, const char* what = "PruneTreeResponse",
                            const char* sent = "lattices") {
  WireReader msg(data, size, what);
  size_t i = 0;
  while (!msg.done()) {
    const auto [field, wt] = msg.tag();
    if (field != 1 || wt != kLen) {
      msg.skip(wt);
      continue;
    }
    const auto [p, n] = msg.bytes();
    ngram::DraftTree* t = tree(i);
    if (!t)
      throw InvalidArgument(std::string(what) + ": more trees than the " + std::to_string(i) + " " + sent + " sent");
    t->tokens.clear();
    t->parents.clear();
    t->scores.clear();
    const std::string trees_field = std::string(what) + ".trees";
    WireReader node(p, n, trees_field.c_str(), static_cast<size_t>(p - data));
    while (!node.done()) {
      const auto [f, w] = node.tag();
      if (f == 1) node.read_fixed32s(w, t->tokens);
      else if (f == 2) node.read_fixed32s(w, t->parents);
      else if (f == 3) node.read_fixed32s(w, t->scores);
      else node.skip(w);
    }
    const std::string at = trees_field + "[" + std::to_string(i) + "]: ";
    if (t->tokens.size() != t->parents.size() || t->tokens.empty())
      throw InvalidArgument(at + std::to_string(t->tokens.size()) + " tokens, " + std::to_string(t->parents.size()) +
                            " parents");
    if (t->scores.size() != t->tokens.size()) t->scores.assign(t->tokens.size(), __builtin_nanf(""));
    try {
      ngram::encode_tree(*t);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(at + e.what());
    }
    ++i;
  }
  return i;
}

}  // namespace ngram_py::wire
