// A draft lattice given to a binding (prune, prune_batch, the request
// codec) in the engine's layout: the one conversion of Python lattices.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "arrays.h"
#include "errors.h"
#include "lattice.h"

namespace ngram_py {

namespace py = pybind11;
using ngram::InvalidArgument;
using ngram::PruneInput;

// One lattice in the engine's layout, its arrays kept alive while the engine
// reads them: topk_tokens / topk_probs as [D, K] arrays, or (when K differs
// per level) as lists of D 1-D arrays, concatenated here. What is checked
// here is what converting needs (ranks, and topk_probs shaped as
// topk_tokens); the lattice's shape (levels, candidates per level, their
// bounds) is the engine's, checked in validate_prune (check_lattice_depth,
// check_lattice_level in prune_tree.h).
struct Lattice {
  Ids prefix, tokens;
  F32Array probs = py::reinterpret_steal<F32Array>(py::handle());  // null until loaded
  std::vector<int64_t> level_tokens;  // the levels concatenated (list form)
  std::vector<float> level_probs;
  std::vector<uint64_t> offsets;      // D + 1
  PruneInput input;

  void load(const py::handle& prefix_in, const py::handle& tokens_in, const py::handle& probs_in) {
    prefix.load(prefix_in, "prefix");
    prefix.require_rank(1, "prefix", "[P]");
    const int64_t* tok = nullptr;
    const float* pr = nullptr;
    if (py::isinstance<py::list>(tokens_in) || py::isinstance<py::tuple>(tokens_in)) {
      load_levels(py::reinterpret_borrow<py::sequence>(tokens_in), probs_in);
      tok = level_tokens.data();
      pr = level_probs.data();
    } else {
      tokens.load(tokens_in, "topk_tokens");
      probs = floats(probs_in, "topk_probs", "probabilities");
      tokens.require_rank(2, "topk_tokens", "[D, K]");
      if (probs.ndim() != 2 || static_cast<uint64_t>(probs.shape(0)) != tokens.shape(0) ||
          static_cast<uint64_t>(probs.shape(1)) != tokens.shape(1))
        throw InvalidArgument("topk_probs has shape " + shape_str(probs) + ", topk_tokens " +
                              shape_str(tokens.array()) + ": they must match");
      const uint64_t d = tokens.shape(0), k = tokens.shape(1);
      offsets.resize(d + 1);
      for (uint64_t l = 0; l <= d; ++l) offsets[l] = l * k;
      tok = tokens.data();
      pr = probs.data();
    }
    input.prefix = prefix.data();
    input.prefix_len = prefix.size();
    input.tokens = tok;
    input.probs = pr;
    input.level_offsets = offsets.data();
    input.depth = static_cast<uint32_t>(std::min<size_t>(offsets.size() - 1, UINT32_MAX));
  }

  void load_levels(const py::sequence& levels, const py::handle& probs_in) {
    const size_t d = levels.size();
    const bool probs_listed = py::isinstance<py::list>(probs_in) || py::isinstance<py::tuple>(probs_in) ||
                              py::isinstance<py::array>(probs_in);
    if (!probs_listed || py::len(probs_in) != d) {
      const std::string n = py::hasattr(probs_in, "__len__") ? std::to_string(py::len(probs_in)) : "no";
      throw InvalidArgument("topk_probs has " + n + " levels, topk_tokens " + std::to_string(d) + ": they must match");
    }
    offsets.assign(1, 0);
    level_tokens.clear();
    level_probs.clear();
    Ids t;
    for (size_t l = 0; l < d; ++l) {
      const std::string at = "[" + std::to_string(l) + "]";
      t.load(levels[l], "topk_tokens" + at);
      F32Array p = floats(probs_in[py::int_(l)], "topk_probs" + at, "probabilities");
      if (t.ndim() != 1 || p.ndim() != 1 || t.shape(0) != static_cast<uint64_t>(p.shape(0)))
        throw InvalidArgument("level " + std::to_string(l) + ": topk_tokens" + at + " has shape " +
                              shape_str(t.array()) + ", topk_probs" + at + " " + shape_str(p) +
                              ": each level must be 1-D and both must match");
      level_tokens.insert(level_tokens.end(), t.data(), t.data() + t.size());
      level_probs.insert(level_probs.end(), p.data(), p.data() + p.shape(0));
      offsets.push_back(level_tokens.size());
    }
  }
};

// One request of a batch: a dict with keys prefix, topk_tokens, topk_probs or
// a sequence of those three.
inline void load_request(const py::handle& r, Lattice& out) {
  if (py::isinstance<py::dict>(r)) {
    py::dict d = py::reinterpret_borrow<py::dict>(r);
    py::list extra;
    for (auto item : d) {
      const py::str key = py::str(item.first);
      if (std::string(key) != "prefix" && std::string(key) != "topk_tokens" && std::string(key) != "topk_probs")
        extra.append(item.first);
    }
    if (py::len(extra)) {
      extra.attr("sort")();
      throw InvalidArgument("unknown keys " + std::string(py::repr(extra)) +
                            "; parameters apply to the whole batch");
    }
    for (const char* key : {"prefix", "topk_tokens", "topk_probs"})
      if (!d.contains(key)) throw InvalidArgument(std::string("missing key '") + key + "'");
    out.load(d["prefix"], d["topk_tokens"], d["topk_probs"]);
    return;
  }
  if (!PySequence_Check(r.ptr()) || py::isinstance<py::str>(r) || py::len(r) != 3)
    throw InvalidArgument("must be a dict or a (prefix, topk_tokens, topk_probs) tuple");
  py::sequence s = py::reinterpret_borrow<py::sequence>(r);
  out.load(s[0], s[1], s[2]);
}

// An error of requests[i]; "requests[i] must be ..." reads better without a colon.
inline std::string request_error(size_t i, const std::string& msg) {
  return "requests[" + std::to_string(i) + "]" + (msg.rfind("must be", 0) == 0 ? " " : ": ") + msg;
}

}  // namespace ngram_py
