// The Python DraftTree object (the engine's draft_tree.h as numpy views), shared by the bindings that return trees
// (prune, propose, the wire decoder).
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <type_traits>
#include <vector>

#include "prune_tree.h"

namespace ngram_py {

namespace py = pybind11;
using ngram::DraftTree;

// The Python DraftTree: the engine's tree and, made on first use, numpy
// views of its arrays (each property returns the same array every time). The
// views' base is a capsule sharing the tree, not this object, so that no
// reference cycle keeps either alive.
struct TreeObject {
  std::shared_ptr<DraftTree> tree = std::make_shared<DraftTree>();
  py::object owner;  // the capsule
  py::object arrays[6];

  template <class T>
  py::object& view(int slot, std::vector<T>& v, std::vector<py::ssize_t> shape) {
    if (!arrays[slot]) {
      if (!owner)
        owner = py::capsule(new std::shared_ptr<DraftTree>(tree),
                            [](void* p) { delete static_cast<std::shared_ptr<DraftTree>*>(p); });
      if constexpr (std::is_same_v<T, uint8_t>)
        arrays[slot] = py::array(py::dtype::of<bool>(), std::move(shape), v.data(), owner);
      else
        arrays[slot] = py::array_t<T>(std::move(shape), v.data(), owner);
    }
    return arrays[slot];
  }
  py::ssize_t n() const { return static_cast<py::ssize_t>(tree->size()); }
};

inline std::unique_ptr<TreeObject> new_tree() { return std::make_unique<TreeObject>(); }

// A batch's trees (moved out of `trees`) as a list of Python DraftTrees, in order.
inline py::list tree_list(std::vector<DraftTree>& trees) {
  py::list out(trees.size());
  for (size_t i = 0; i < trees.size(); ++i) {
    auto obj = new_tree();
    *obj->tree = std::move(trees[i]);
    out[i] = py::cast(std::move(obj));
  }
  return out;
}

}  // namespace ngram_py
