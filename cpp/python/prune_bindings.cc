// Bindings of DART tree pruning (see cpp/engine/prune_tree.h): arrays in,
// arrays out, the GIL released while the engine works. ngram_service/tree.py
// is the Python-facing API over these two functions.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>
#include <vector>

#include "arrays.h"
#include "errors.h"
#include "prune_tree.h"
#include "trie_index.h"

namespace py = pybind11;
using namespace ngram;
using namespace ngram_py;

namespace {


std::string shape_str(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

uint32_t to_u32(int64_t v, const char* field, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    throw InvalidArgument(std::string(field) + " = " + std::to_string(v) + ": must be " + std::to_string(lo) + ".." +
                          std::to_string(hi));
  return static_cast<uint32_t>(v);
}

std::vector<float> weights(const py::object& w, const char* field) {
  if (w.is_none()) return {};
  F32Array a = py::cast<F32Array>(w);
  if (a.ndim() != 1) throw InvalidArgument(std::string(field) + " must be 1-D [D], got shape " + shape_str(a));
  return std::vector<float>(a.data(), a.data() + a.shape(0));
}

PruneParams make_params(const TrieIndex& t, int64_t beam_width, int64_t max_nodes, double ngram_weight,
                        const py::object& level_weights, const py::object& logit_weights, const py::object& eos,
                        bool ngram_on_first_level) {
  PruneParams p;
  p.beam_width = to_u32(beam_width, "beam_width", 1, PruneLimits::kMaxBeamWidth);
  p.max_nodes = to_u32(max_nodes, "max_nodes", 0, PruneLimits::kMaxNodes);
  p.ngram_weight = static_cast<float>(ngram_weight);
  p.level_weights = weights(level_weights, "level_weights");
  p.logit_weights = weights(logit_weights, "logit_weights");
  p.eos_token_id = eos.is_none() ? t.eos_id() : py::cast<int64_t>(eos);
  p.ngram_on_first_level = ngram_on_first_level;
  return p;
}

// Token ids as the engine's int64: an int64 array as it is; a C-contiguous
// int32 one (the golden data's, and what tokenizers often give) widened
// here, which costs less than numpy's conversion into a new array.
struct Ids {
  py::array array;             // the input (kept alive) or its int64 conversion
  std::vector<int64_t> wide;   // the widened int32 ids
  const int64_t* data = nullptr;

  void load(const py::handle& h) {
    if (py::isinstance<py::array_t<int32_t>>(h)) {
      auto a = py::reinterpret_borrow<py::array_t<int32_t>>(h);
      if (a.flags() & py::array::c_style) {
        array = a;
        wide.assign(a.data(), a.data() + a.size());
        data = wide.data();
        return;
      }
    }
    I64Array a = py::cast<I64Array>(h);
    array = a;
    data = a.data();
  }
};

// One request's arrays, kept alive while the engine reads them.
struct Request {
  Ids prefix, tokens;
  F32Array probs;
  std::vector<uint64_t> offsets;
  PruneInput input;
};

// tokens/probs: both 2-D [D, K] with level_offsets None, or both 1-D (the
// levels concatenated) with level_offsets [D + 1].
void make_request(const py::handle& prefix, const py::handle& tokens, const py::handle& probs,
                  const py::handle& level_offsets, Request& r) {
  r.prefix.load(prefix);
  r.tokens.load(tokens);
  r.probs = py::cast<F32Array>(probs);
  if (r.prefix.array.ndim() != 1)
    throw InvalidArgument("prefix must be 1-D [P], got shape " + shape_str(r.prefix.array));
  if (level_offsets.is_none()) {
    if (r.tokens.array.ndim() != 2)
      throw InvalidArgument("topk_tokens must be 2-D [D, K], got shape " + shape_str(r.tokens.array));
    if (r.probs.ndim() != 2 || r.probs.shape(0) != r.tokens.array.shape(0) ||
        r.probs.shape(1) != r.tokens.array.shape(1))
      throw InvalidArgument("topk_probs has shape " + shape_str(r.probs) + ", topk_tokens " + shape_str(r.tokens.array) +
                            ": they must match");
    const uint64_t d = r.tokens.array.shape(0), k = r.tokens.array.shape(1);
    if (d > PruneLimits::kMaxDepth)
      throw InvalidArgument("topk_tokens has " + std::to_string(d) + " levels (D): must be 1.." +
                            std::to_string(PruneLimits::kMaxDepth));
    r.offsets.resize(d + 1);
    for (uint64_t l = 0; l <= d; ++l) r.offsets[l] = l * k;
  } else {
    U64Array off = py::cast<U64Array>(level_offsets);
    if (r.tokens.array.ndim() != 1 || r.probs.ndim() != 1 || off.ndim() != 1 || off.shape(0) < 1)
      throw InvalidArgument("per-level candidates: topk_tokens and topk_probs must be 1-D and level_offsets 1-D [D + 1]");
    if (r.probs.shape(0) != r.tokens.array.shape(0))
      throw InvalidArgument("topk_probs has " + std::to_string(r.probs.shape(0)) + " entries, topk_tokens " +
                            std::to_string(r.tokens.array.shape(0)) + ": they must match");
    if (static_cast<uint64_t>(off.shape(0)) - 1 > PruneLimits::kMaxDepth)
      throw InvalidArgument("topk_tokens has " + std::to_string(off.shape(0) - 1) + " levels (D): must be 1.." +
                            std::to_string(PruneLimits::kMaxDepth));
    r.offsets.assign(off.data(), off.data() + off.shape(0));
    for (size_t l = 1; l < r.offsets.size(); ++l)
      if (r.offsets[l] < r.offsets[l - 1]) throw InvalidArgument("level_offsets must be non-decreasing");
    if (r.offsets.back() != static_cast<uint64_t>(r.tokens.array.shape(0)))
      throw InvalidArgument("level_offsets ends at " + std::to_string(r.offsets.back()) + " but there are " +
                            std::to_string(r.tokens.array.shape(0)) + " candidates");
  }
  r.input.prefix = r.prefix.data;
  r.input.prefix_len = r.prefix.array.shape(0);
  r.input.tokens = r.tokens.data;
  r.input.probs = r.probs.data();
  r.input.level_offsets = r.offsets.data();
  r.input.depth = static_cast<uint32_t>(r.offsets.size() - 1);
}

// (tokens, parents, depths, scores, tree_mask, retrieve_indices)
py::tuple to_python(const PrunedTree& tr) {
  const py::ssize_t n = tr.size();
  py::array_t<bool> mask({n, n});
  std::memcpy(mask.mutable_data(), tr.tree_mask.data(), tr.tree_mask.size());
  py::array_t<int32_t> retrieve({static_cast<py::ssize_t>(tr.n_leaves), static_cast<py::ssize_t>(tr.retrieve_width)});
  std::memcpy(retrieve.mutable_data(), tr.retrieve_indices.data(), tr.retrieve_indices.size() * sizeof(int32_t));
  return py::make_tuple(py::array_t<int32_t>(n, tr.tokens.data()), py::array_t<int32_t>(n, tr.parents.data()),
                        py::array_t<int32_t>(n, tr.depths.data()), py::array_t<float>(n, tr.scores.data()), mask,
                        retrieve);
}

}  // namespace

void bind_prune(py::module_& m) {
  m.def(
      "encode_tree",
      [](I32Array tokens, I32Array parents, F32Array scores) {
        if (tokens.ndim() != 1 || parents.ndim() != 1 || scores.ndim() != 1)
          throw InvalidArgument("tree: tokens, parents and scores must be 1-D");
        PrunedTree tr;
        tr.tokens.assign(tokens.data(), tokens.data() + tokens.shape(0));
        tr.parents.assign(parents.data(), parents.data() + parents.shape(0));
        tr.scores.assign(scores.data(), scores.data() + scores.shape(0));
        {
          py::gil_scoped_release nogil;
          thread_local PruneWorkspace ws;
          encode_tree(tr, ws);
        }
        return to_python(tr);
      },
      py::arg("tokens"), py::arg("parents"), py::arg("scores"),
      "DART's encoding of a tree from its node tokens and parents: (tokens, parents, depths, scores, "
      "tree_mask, retrieve_indices).");

  py::class_<PruneLimits>(m, "PruneLimits")
      .def_readonly_static("max_depth", &PruneLimits::kMaxDepth)
      .def_readonly_static("max_candidates", &PruneLimits::kMaxCandidates)
      .def_readonly_static("max_beam_width", &PruneLimits::kMaxBeamWidth)
      .def_readonly_static("max_nodes", &PruneLimits::kMaxNodes)
      .def_readonly_static("max_weight", &PruneLimits::kMaxWeight);

  m.def("default_level_weight", &default_level_weight, py::arg("level"));
  m.def("default_logit_weight", &default_logit_weight, py::arg("level"));

  m.def(
      "prune",
      [](const TrieIndex& t, py::object prefix, py::object tokens, py::object probs, py::object level_offsets,
         int64_t beam_width, int64_t max_nodes, double ngram_weight, py::object level_weights,
         py::object logit_weights, py::object eos_token_id, bool ngram_on_first_level) {
        const PruneParams params = make_params(t, beam_width, max_nodes, ngram_weight, level_weights, logit_weights,
                                               eos_token_id, ngram_on_first_level);
        Request r;
        make_request(prefix, tokens, probs, level_offsets, r);
        // One workspace per Python thread: no allocation once warmed up.
        thread_local PruneWorkspace ws;
        thread_local PrunedTree tree;
        {
          py::gil_scoped_release nogil;
          prune_tree(t, r.input, params, ws, tree);
        }
        return to_python(tree);
      },
      py::arg("trie"), py::arg("prefix"), py::arg("topk_tokens"), py::arg("topk_probs"), py::arg("level_offsets"),
      py::arg("beam_width"), py::arg("max_nodes"), py::arg("ngram_weight"), py::arg("level_weights"),
      py::arg("logit_weights"), py::arg("eos_token_id"), py::arg("ngram_on_first_level"),
      "DART tree pruning of one lattice: (tokens, parents, depths, scores, tree_mask, retrieve_indices).");

  m.def(
      "prune_batch",
      [](const TrieIndex& t, py::sequence requests, int64_t beam_width, int64_t max_nodes, double ngram_weight,
         py::object level_weights, py::object logit_weights, py::object eos_token_id, bool ngram_on_first_level,
         int64_t threads) {
        const PruneParams params = make_params(t, beam_width, max_nodes, ngram_weight, level_weights, logit_weights,
                                               eos_token_id, ngram_on_first_level);
        const uint32_t n_threads = to_u32(threads, "threads", 0, 4096);
        const size_t n = py::len(requests);
        std::vector<Request> reqs(n);
        std::vector<PruneInput> inputs(n);
        for (size_t i = 0; i < n; ++i) {
          py::tuple q = py::cast<py::tuple>(requests[i]);
          if (q.size() != 4) throw InvalidArgument("requests[" + std::to_string(i) + "] must be a 4-tuple");
          try {
            make_request(q[0], q[1], q[2], q[3], reqs[i]);
          } catch (const InvalidArgument& e) {
            throw InvalidArgument("requests[" + std::to_string(i) + "]: " + e.what());
          }
          inputs[i] = reqs[i].input;
        }
        std::vector<PrunedTree> out;
        {
          py::gil_scoped_release nogil;
          prune_tree_batch(t, inputs, params, n_threads, out);
        }
        py::list res(n);
        for (size_t i = 0; i < n; ++i) res[i] = to_python(out[i]);
        return res;
      },
      py::arg("trie"), py::arg("requests"), py::arg("beam_width"), py::arg("max_nodes"), py::arg("ngram_weight"),
      py::arg("level_weights"), py::arg("logit_weights"), py::arg("eos_token_id"), py::arg("ngram_on_first_level"),
      py::arg("threads"),
      "Many (prefix, topk_tokens, topk_probs, level_offsets) requests on `threads` threads (0: all cores).");
}
