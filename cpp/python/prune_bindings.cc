// Bindings of DART tree pruning (see cpp/engine/prune_tree.h): Python objects
// converted to the engine's types, the GIL released while the engine works,
// the tree returned as a DraftTree whose arrays view the engine's output.
// The engine checks every value and limit; this file only converts.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <type_traits>
#include <string>
#include <vector>

#include "arrays.h"
#include "fastcall.h"
#include "errors.h"
#include "lattice_arg.h"
#include "param_conversion.h"
#include "checks.h"
#include "lattice_batch.h"
#include "prune_tree.h"
#include "trie_arg.h"
#include "timeout.h"
#include "tree_object.h"
#include "trie_index.h"

namespace py = pybind11;
using namespace ngram;
using namespace ngram_py;


namespace {

// prune's body: the lattice and parameters converted (into a per-thread
// PruneParams, whose weight buffers are reused), the engine run without the
// GIL, the tree returned. With_trie_arg: called as _engine.prune(trie,
// ...) (an _engine.Trie or NoTrie), else as the method trie.prune(...).
template <bool with_trie_arg>
PyObject* prune_fastcall(PyObject* self, PyObject* const* in, Py_ssize_t nargsf, PyObject* kwnames) {
  constexpr size_t kLead = with_trie_arg ? 4 : 3;
  constexpr size_t kArgs = kLead + kPruneFieldCount + 1;  // the last: timeout
  static const Signature<kArgs> signature = [] {
    const char* lead[] = {"trie", "prefix", "topk_tokens", "topk_probs"};
    std::array<const char*, kLead> names{};
    for (size_t i = 0; i < kLead; ++i) names[i] = lead[4 - kLead + i];
    return Signature<kArgs>("prune", prune_call_names(names, std::array<const char*, 1>{"timeout"}), kLead);
  }();
  PyObject* args[kArgs];
  if (!signature.bind(in, nargsf, kwnames, args)) return nullptr;
  return translate_exceptions([&]() -> PyObject* {
    const CallTimeout deadline(args[kArgs - 1], "prune", "tree");
    const py::handle trie = with_trie_arg ? args[0] : self;
    constexpr size_t p = with_trie_arg ? 1 : 0;
    Lattice r;
    r.load(args[p], args[p + 1], args[p + 2]);
    thread_local PruneParams params;  // no Python objects inside: safe to keep per thread
    load_prune_params(prune_handles(args, kLead), params);
    auto tree = new_tree();
    with_trie(trie, "prune", [&](const auto& t) {
      py::gil_scoped_release nogil;
      thread_local PruneWorkspace ws;  // one per Python thread: no allocation once warmed up
      deadline.run([&] { prune_tree(t, r.input, params, ws, *tree->tree, deadline.interrupt()); });
    });
    return py::cast(std::move(tree)).release().ptr();
  });
}

// prune_batch(trie, requests, *, <prune's keywords>, threads=None, timeout=None).
PyObject* prune_batch_fastcall(PyObject*, PyObject* const* in, Py_ssize_t nargsf, PyObject* kwnames) {
  constexpr size_t kArgs = 2 + kPruneFieldCount + 2;
  static const Signature<kArgs> signature(
      "prune_batch", prune_call_names(std::array<const char*, 2>{"trie", "requests"},
                                      std::array<const char*, 2>{"threads", "timeout"}),
      2);
  PyObject* args[kArgs];
  if (!signature.bind(in, nargsf, kwnames, args)) return nullptr;
  return translate_exceptions([&]() -> PyObject* {
    const CallTimeout deadline(args[kArgs - 1], "prune_batch", "trees");
    std::vector<std::unique_ptr<Lattice>> reqs;
    for (const py::handle r : py::reinterpret_borrow<py::iterable>(args[1])) {
      const size_t i = reqs.size();
      reqs.push_back(std::make_unique<Lattice>());
      try {
        load_request(r, *reqs.back());
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(request_error(i, e.what()));
      }
    }
    const py::handle threads = args[kArgs - 2];
    int64_t n_threads = 0;
    if (threads && !threads.is_none()) n_threads = integer(threads, "threads", "0..4096 or None");
    if (n_threads < 0 || n_threads > 4096)
      throw InvalidArgument("threads must be in 0..4096 or None, got " + std::to_string(n_threads));
    PruneParams params;
    load_prune_params(prune_handles(args, 2), params);
    std::vector<PruneInput> inputs(reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) inputs[i] = reqs[i]->input;
    std::vector<DraftTree> out;
    with_trie(args[0], "prune_batch", [&](const auto& t) {
      py::gil_scoped_release nogil;
      deadline.run([&] {
        prune_tree_batch(t, inputs, params, static_cast<uint32_t>(n_threads), out, deadline.interrupt());
      });
    });
    return tree_list(out).release().ptr();
  });
}

// prune_params(*, <prune's keywords>): the parameters as prune converts them.
PyObject* prune_params_fastcall(PyObject*, PyObject* const* in, Py_ssize_t nargsf, PyObject* kwnames) {
  static const Signature<kPruneFieldCount> signature(
      "prune_params", prune_call_names(std::array<const char*, 0>{}, std::array<const char*, 0>{}), 0);
  PyObject* args[kPruneFieldCount];
  if (!signature.bind(in, nargsf, kwnames, args)) return nullptr;
  return translate_exceptions([&]() -> PyObject* {
    PruneParams p;
    load_prune_params(prune_handles(args, 0), p);
    return prune_params_dict(p, false).release().ptr();
  });
}

// Replaces the encoded tree's retrieve rows by `rows` when they are the same
// rows in another order (a tree made elsewhere keeps its own leaf order);
// InvalidArgument otherwise.
void keep_leaf_order(DraftTree& t, const I32Array& rows) {
  const size_t width = t.retrieve_width;
  if (rows.ndim() != 2 || static_cast<size_t>(rows.shape(0)) != t.n_leaves || static_cast<size_t>(rows.shape(1)) != width)
    throw InvalidArgument("retrieve_indices: shape " + shape_str(rows) + ", the tree's leaves and depth need [" +
                          std::to_string(t.n_leaves) + ", " + std::to_string(width) + "]");
  std::vector<std::vector<int32_t>> given(t.n_leaves), encoded(t.n_leaves);
  for (size_t r = 0; r < t.n_leaves; ++r) {
    given[r].assign(rows.data() + r * width, rows.data() + (r + 1) * width);
    encoded[r].assign(t.retrieve_indices.begin() + static_cast<std::ptrdiff_t>(r * width),
                      t.retrieve_indices.begin() + static_cast<std::ptrdiff_t>((r + 1) * width));
  }
  std::vector<std::vector<int32_t>> sorted_given = given;
  std::sort(sorted_given.begin(), sorted_given.end());
  std::sort(encoded.begin(), encoded.end());
  if (sorted_given != encoded)
    throw InvalidArgument("retrieve_indices: not the tree's root-to-leaf paths (each leaf once, -1 padded)");
  for (size_t r = 0; r < t.n_leaves; ++r) std::copy(given[r].begin(), given[r].end(), t.retrieve_indices.begin() + static_cast<std::ptrdiff_t>(r * width));
}

}  // namespace

void bind_prune(py::module_& m) {
  py::class_<TreeObject, std::unique_ptr<TreeObject>>(m, "DraftTree", R"(A draft tree of 1 + n nodes; node 0 is the root (the prefix's last token).

The engine's one tree (cpp/engine/draft_tree.h): what prune, propose and the
clients' decoders return.

Nodes are ordered by depth, within one depth by score descending (ties in the
order the search generated them); every parent precedes its children. The
arrays are views of the engine's output (docs/PRUNING.md):
tokens, parents (-1 for the root), depths, scores: [1 + n];
tree_mask: bool [1 + n, 1 + n], row i marks i and its ancestors;
retrieve_indices: int32 [leaves, max depth + 1], root-to-leaf node indices, -1 padded.)")
      .def_property_readonly("tokens", [](TreeObject& t) { return t.view(0, t.tree->tokens, {t.n()}); })
      .def_property_readonly("parents", [](TreeObject& t) { return t.view(1, t.tree->parents, {t.n()}); })
      .def_property_readonly("depths", [](TreeObject& t) { return t.view(2, t.tree->depths, {t.n()}); })
      .def_property_readonly("tree_position_ids", [](TreeObject& t) { return t.view(2, t.tree->depths, {t.n()}); },
                             "Position offset of each node from the root (= depths), as DART names it.")
      .def_property_readonly("scores", [](TreeObject& t) { return t.view(3, t.tree->scores, {t.n()}); })
      .def_property_readonly("tree_mask", [](TreeObject& t) { return t.view(4, t.tree->tree_mask, {t.n(), t.n()}); })
      .def_property_readonly("retrieve_indices", [](TreeObject& t) {
        return t.view(5, t.tree->retrieve_indices,
                      {static_cast<py::ssize_t>(t.tree->n_leaves), static_cast<py::ssize_t>(t.tree->retrieve_width)});
      })
      .def_property_readonly("n_nodes", [](const TreeObject& t) { return t.n() - 1; },
                             "Nodes kept, the root excluded.")
      .def("paths", [](const TreeObject& obj) {
        const DraftTree& t = *obj.tree;
        std::vector<py::tuple> out(t.size());
        out[0] = py::tuple();
        for (uint32_t i = 1; i < t.size(); ++i) {
          const py::tuple& up = out[t.parents[i]];
          py::tuple p(up.size() + 1);
          for (size_t j = 0; j < up.size(); ++j) p[j] = up[j];
          p[up.size()] = py::int_(t.tokens[i]);
          out[i] = std::move(p);
        }
        return py::list(py::cast(out));
      }, "The token path (root excluded) of every node, in node order; () for the root.")
      .def("__repr__", [](const TreeObject& obj) {
        const DraftTree& t = *obj.tree;
        return "DraftTree(nodes=" + std::to_string(t.size() - 1) + ", depth=" + std::to_string(t.retrieve_width - 1) +
               ", leaves=" + std::to_string(t.n_leaves) + ")";
      });

  m.def(
      "encode_tree",
      [](const py::handle& tokens, const py::handle& parents, const py::handle& scores,
         const py::handle& retrieve_indices) {
        I32Array tok = integers<int32_t>(tokens, "tokens"), par = integers<int32_t>(parents, "parents");
        if (tok.ndim() != 1 || par.ndim() != 1) throw InvalidArgument("tree: tokens and parents must be 1-D");
        auto obj = new_tree();
        DraftTree* tr = obj->tree.get();
        tr->tokens.assign(tok.data(), tok.data() + tok.shape(0));
        tr->parents.assign(par.data(), par.data() + par.shape(0));
        if (!scores.is_none()) {
          F32Array sc = floats(scores, "scores", "scores");
          if (sc.ndim() != 1) throw InvalidArgument("tree: scores must be 1-D");
          tr->scores.assign(sc.data(), sc.data() + sc.shape(0));
        }
        I32Array rows;
        if (!retrieve_indices.is_none()) rows = integers<int32_t>(retrieve_indices, "retrieve_indices");
        {
          py::gil_scoped_release nogil;
          encode_tree(*tr);
        }
        if (!retrieve_indices.is_none()) keep_leaf_order(*tr, rows);
        return obj;
      },
      py::arg("tokens"), py::arg("parents"), py::arg("scores") = py::none(), py::arg("retrieve_indices") = py::none(),
      "A DraftTree from its node tokens and parents (node 0 the root, parents before children), encoded as "
      "prune encodes its trees; scores None (or of another length): zeros. retrieve_indices: the tree's own "
      "rows when it was made elsewhere (DART's tree_search orders its leaves otherwise), kept in their order; "
      "ValueError unless they are the tree's root-to-leaf paths, each once.");

  py::class_<NoTrie>(m, "NoTrie", R"(No trie: a vocabulary of ids and nothing stored (cpp/engine/no_trie.h).

Where a search takes a trie, NoTrie(vocab_size) prunes by the drafter alone:
ids in [0, vocab_size), every n-gram lookup finding nothing, no EOS unless the
call names one; with ngram_weight 0 exactly the tree any trie of that
vocabulary gives.)")
      .def(py::init([](const py::handle& vocab_size) {
             const int64_t v = integer(vocab_size, "vocab_size", "1..2147483648");
             if (v < 1) throw InvalidArgument("vocab_size = " + std::to_string(v) + ": must be in 1..2147483648");
             check_vocab_size(static_cast<uint64_t>(v));
             return NoTrie(static_cast<uint64_t>(v));
           }),
           py::arg("vocab_size"))
      .def_property_readonly("vocab_size", &NoTrie::vocab_size)
      .def_property_readonly("order", &NoTrie::order)
      .def("__repr__", [](const NoTrie& t) { return "NoTrie(vocab_size=" + std::to_string(t.vocab_size()) + ")"; });

  m.def(
      "fit_lattice",
      [](const py::handle& prefix, const py::handle& topk_tokens, const py::handle& topk_probs, int64_t order,
         int64_t vocab) -> py::object {
        if (order < 1) throw InvalidArgument("order must be >= 1, got " + std::to_string(order));
        if (vocab < 1) throw InvalidArgument("vocab_size must be >= 1, got " + std::to_string(vocab));
        Lattice r;
        r.load(prefix, topk_tokens, topk_probs);
        LatticeBatch fitted(static_cast<uint64_t>(std::max<int64_t>(1, order - 1)), static_cast<uint64_t>(vocab));
        if (fitted.add(r.input) == 0) return py::none();
        std::vector<uint64_t> offsets;
        const PruneInput in = fitted.input(0, offsets);
        py::list toks, probs;
        for (uint32_t l = 0; l < in.depth; ++l) {
          const auto k = static_cast<py::ssize_t>(offsets[l + 1] - offsets[l]);
          toks.append(py::array_t<int64_t>(k, in.tokens + offsets[l]));
          probs.append(py::array_t<float>(k, in.probs + offsets[l]));
        }
        return py::make_tuple(py::array_t<int64_t>(static_cast<py::ssize_t>(in.prefix_len), in.prefix), toks, probs);
      },
      py::arg("prefix"), py::arg("topk_tokens"), py::arg("topk_probs"), py::arg("order"), py::arg("vocab_size"),
      "One lattice (as prune takes it) fitted to a trie of `order` and `vocab_size` as the GPU worker's pruners "
      "fit theirs (cpp/engine/lattice_batch.h): (prefix, level tokens, level probabilities), or None when the "
      "trie cannot serve its root or first level.");

  m.def(
      "fit_context",
      [](const py::handle& context, int64_t vocab) {
        Ids ids;
        ids.load(context, "context");
        ids.require_rank(1, "context", "[N]");
        if (vocab < 1) throw InvalidArgument("vocab_size must be >= 1, got " + std::to_string(vocab));
        return fitted_context_start(ids.data(), ids.size(), ids.size(), static_cast<uint64_t>(vocab));
      },
      py::arg("context"), py::arg("vocab_size"),
      "Where a context fitted to a trie of `vocab_size` ids starts: after its last id outside [0, vocab_size); "
      "len(context) when its last token (the root) is outside (cpp/engine/lattice_batch.h).");

  py::class_<PruneLimits>(m, "PruneLimits")
      .def_readonly_static("max_depth", &PruneLimits::kMaxDepth)
      .def_readonly_static("max_candidates", &PruneLimits::kMaxCandidates)
      .def_readonly_static("max_beam_width", &PruneLimits::kMaxBeamWidth)
      .def_readonly_static("max_nodes", &PruneLimits::kMaxNodes)
      .def_readonly_static("max_weight", &PruneLimits::kMaxWeight);

  const PruneParams defaults;
  m.attr("PRUNE_DEFAULTS") = prune_params_dict(defaults, true);

  m.def("default_level_weight", &default_level_weight, py::arg("level"));
  m.def("default_logit_weight", &default_logit_weight, py::arg("level"));

  // prune (as _engine.prune(trie, ...) and as the method Trie.prune(...)
  // that NgramIndex.prune is), prune_batch and prune_params: fast-call
  // functions (fastcall.h) whose keywords and signature text are
  // kPruneFields' (param_conversion.h).
  const std::string prune_doc = "DART tree pruning of one lattice (see ngram_service.tree.prune).";
  add_fastcall(m, "prune", &prune_fastcall<true>,
               prune_call_doc("prune", "trie, prefix, topk_tokens, topk_probs", "timeout=None", prune_doc));
  add_fastcall(m, "prune", &prune_fastcall<false>,
               prune_call_doc("prune", "$self, prefix, topk_tokens, topk_probs", "timeout=None", prune_doc),
               m.attr("Trie"));
  add_fastcall(m, "prune_batch", &prune_batch_fastcall,
               prune_call_doc("prune_batch", "trie, requests", "threads=None, timeout=None",
                              "Many requests on `threads` threads (None: all cores), see "
                              "ngram_service.tree.prune_batch."));
  add_fastcall(m, "prune_params", &prune_params_fastcall,
               prune_call_doc("prune_params", "", "",
                              "prune's keyword parameters converted as prune converts them, as a dict (weights as "
                              "lists, eos_token_id None for the trie's); None or left out: the default."));
}
