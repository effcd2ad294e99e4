// Bindings of DART tree pruning (see cpp/engine/prune_tree.h): Python objects
// converted to the engine's types, the GIL released while the engine works,
// the tree returned as a PrunedTree whose arrays view the engine's output.
// The engine checks every value and limit; this file only converts.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstring>
#include <memory>
#include <sstream>
#include <type_traits>
#include <string>
#include <vector>

#include "arrays.h"
#include "fastcall.h"
#include "errors.h"
#include "prune_params.h"
#include "prune_wire.h"
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

// A float32 array's values into `out` (reused: no allocation once grown);
// None leaves it empty (DART's defaults).
void weights(const py::handle& w, const char* field, std::vector<float>& out) {
  out.clear();
  if (w.is_none()) return;
  if (const float* f = native_floats(w); f && py::detail::array_proxy(w.ptr())->nd == 1) {
    out.assign(f, f + py::detail::array_proxy(w.ptr())->dimensions[0]);
    return;
  }
  F32Array a = floats(w, field, "weights");
  if (a.ndim() != 1) throw InvalidArgument(std::string(field) + " must be 1-D [D], got shape " + shape_str(a));
  out.assign(a.data(), a.data() + a.shape(0));
}

// prune's keyword parameters, in this order; a null handle is one not given
// (the engine's default).
constexpr std::array<const char*, 7> kParamNames = {
    "beam_width", "max_nodes", "ngram_weight", "level_weights", "logit_weights", "eos_token_id",
    "ngram_on_first_level"};
using ParamHandles = std::array<py::handle, kParamNames.size()>;

void load_params(const ParamHandles& v, PruneParams& p) {
  std::vector<float> level = std::move(p.level_weights), logit = std::move(p.logit_weights);
  p = PruneParams{};  // the defaults; the weights' buffers are kept
  p.level_weights = std::move(level);
  p.logit_weights = std::move(logit);
  static const std::string beam_range = "1.." + std::to_string(PruneLimits::kMaxBeamWidth),
                           nodes_range = "0.." + std::to_string(PruneLimits::kMaxNodes);
  if (v[0]) p.beam_width = integer(v[0], "beam_width", beam_range);
  if (v[1]) p.max_nodes = integer(v[1], "max_nodes", nodes_range);
  if (v[2]) {
    const double w = PyFloat_Check(v[2].ptr()) ? PyFloat_AS_DOUBLE(v[2].ptr()) : PyFloat_AsDouble(v[2].ptr());
    if (w == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      throw InvalidArgument("ngram_weight must be a number, got " + std::string(py::repr(v[2])));
    }
    p.ngram_weight = static_cast<float>(w);
  }
  weights(v[3] ? v[3] : py::none(), "level_weights", p.level_weights);
  weights(v[4] ? v[4] : py::none(), "logit_weights", p.logit_weights);
  if (v[5] && !v[5].is_none()) {
    if (py::isinstance<py::bool_>(v[5]) || !PyIndex_Check(v[5].ptr()))
      throw InvalidArgument("eos_token_id must be an integer or None, got " + std::string(py::repr(v[5])));
    p.eos_token_id = integer(v[5], "eos_token_id", "-1 (none) or in [0, vocab_size)");
  }
  if (v[6]) {
    const int truth = PyObject_IsTrue(v[6].ptr());
    if (truth < 0) throw py::error_already_set();
    p.ngram_on_first_level = truth != 0;
  }
}


}  // namespace

namespace ngram_py {

ngram::PruneParams make_params(const py::handle& beam_width, const py::handle& max_nodes, const py::handle& ngram_weight,
                        const py::handle& level_weights, const py::handle& logit_weights, const py::handle& eos,
                        const py::handle& ngram_on_first_level) {
  ngram::PruneParams p;
  load_params({beam_width, max_nodes, ngram_weight, level_weights, logit_weights, eos, ngram_on_first_level}, p);
  return p;
}

}  // namespace ngram_py

namespace {

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
void load_request(const py::handle& r, Lattice& out) {
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
std::string request_error(size_t i, const std::string& msg) {
  return "requests[" + std::to_string(i) + "]" + (msg.rfind("must be", 0) == 0 ? " " : ": ") + msg;
}


}  // namespace

namespace {

// prune's body: the lattice and parameters converted (into a per-thread
// PruneParams, whose weight buffers are reused), the engine run without the
// GIL, the tree returned. With_trie_arg: called as _engine.prune(trie,
// ...) (an _engine.Trie or NoTrie), else as the method trie.prune(...).
template <bool with_trie_arg>
PyObject* prune_fastcall(PyObject* self, PyObject* const* in, Py_ssize_t nargsf, PyObject* kwnames) {
  constexpr size_t kLead = with_trie_arg ? 4 : 3;
  constexpr size_t kArgs = kLead + kParamNames.size() + 1;  // the last: timeout
  static const Signature<kArgs> signature = [] {
    std::array<const char*, kArgs> names{};
    const char* lead[] = {"trie", "prefix", "topk_tokens", "topk_probs"};
    for (size_t i = 0; i < kLead; ++i) names[i] = lead[4 - kLead + i];
    for (size_t i = 0; i < kParamNames.size(); ++i) names[kLead + i] = kParamNames[i];
    names[kArgs - 1] = "timeout";
    return Signature<kArgs>("prune", names, kLead);
  }();
  PyObject* args[kArgs];
  if (!signature.bind(in, nargsf, kwnames, args)) return nullptr;
  return translate_exceptions([&]() -> PyObject* {
    const CallTimeout deadline(args[kArgs - 1], "prune", "tree");
    const py::handle trie = with_trie_arg ? args[0] : self;
    constexpr size_t p = with_trie_arg ? 1 : 0;
    Lattice r;
    r.load(args[p], args[p + 1], args[p + 2]);
    ParamHandles given;
    for (size_t i = 0; i < given.size(); ++i) given[i] = args[kLead + i];
    thread_local PruneParams params;  // no Python objects inside: safe to keep per thread
    load_params(given, params);
    auto tree = new_tree();
    with_trie(trie, "prune", [&](const auto& t) {
      py::gil_scoped_release nogil;
      thread_local PruneWorkspace ws;  // one per Python thread: no allocation once warmed up
      deadline.run([&] { prune_tree(t, r.input, params, ws, *tree->tree, deadline.interrupt()); });
    });
    return py::cast(std::move(tree)).release().ptr();
  });
}

}  // namespace

void bind_prune(py::module_& m) {
  py::class_<TreeObject, std::unique_ptr<TreeObject>>(m, "PrunedTree", R"(A draft tree of 1 + n nodes; node 0 is the root (the prefix's last token).

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
        return "PrunedTree(nodes=" + std::to_string(t.size() - 1) + ", depth=" + std::to_string(t.retrieve_width - 1) +
               ", leaves=" + std::to_string(t.n_leaves) + ")";
      });

  m.def(
      "encode_tree",
      [](const py::handle& tokens, const py::handle& parents, const py::handle& scores) {
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
        {
          py::gil_scoped_release nogil;
          encode_tree(*tr);
        }
        return obj;
      },
      py::arg("tokens"), py::arg("parents"), py::arg("scores") = py::none(),
      "A PrunedTree from its node tokens and parents (node 0 the root, parents before children), encoded as "
      "prune encodes its trees; scores None (or of another length): zeros.");

  py::class_<NoTrie>(m, "NoTrie", R"(No trie: a vocabulary of ids and nothing stored (cpp/engine/no_trie.h).

Where a search takes a trie, NoTrie(vocab_size) prunes by the drafter alone:
ids in [0, vocab_size), every n-gram lookup finding nothing, no EOS unless the
call names one; with ngram_weight 0 exactly the tree any trie of that
vocabulary gives.)")
      .def(py::init([](const py::handle& vocab_size) {
             const int64_t v = integer(vocab_size, "vocab_size", "1..2147483648");
             check_vocab_size(v < 0 ? 0 : static_cast<uint64_t>(v));
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
  py::dict d;
  d["beam_width"] = defaults.beam_width;
  d["max_nodes"] = defaults.max_nodes;
  d["ngram_weight"] = defaults.ngram_weight;
  m.attr("PRUNE_DEFAULTS") = d;

  m.def("default_level_weight", &default_level_weight, py::arg("level"));
  m.def("default_logit_weight", &default_logit_weight, py::arg("level"));

  m.def(
      "prune_request",
      [](const py::bytes& head, const py::iterable& requests) {
        std::string out(head);
        Lattice r;
        std::vector<uint32_t> sizes;
        size_t i = 0;
        for (const py::handle q : requests) {
          try {
            load_request(q, r);
          } catch (const InvalidArgument& e) {
            throw InvalidArgument(request_error(i, e.what()));
          }
          wire::put_prune_input(out, r.input, sizes);
          ++i;
        }
        return py::bytes(out);
      },
      py::arg("head"), py::arg("requests"),
      "A serialized PruneTreeRequest: head (its other fields, serialized) followed by one PruneInput per "
      "request of a prune_batch call (dicts or tuples), converted as prune converts them; values are the "
      "server's to check.");

  m.def(
      "decode_prune_trees",
      [](const py::buffer& data) {
        const py::buffer_info info = data.request();
        std::vector<std::unique_ptr<TreeObject>> trees;
        {
          py::gil_scoped_release nogil;
          wire::decode_prune_response(
              static_cast<const uint8_t*>(info.ptr), static_cast<size_t>(info.size * info.itemsize),
              [&](size_t) {
                trees.push_back(new_tree());
                return trees.back()->tree.get();
              });
        }
        py::list out(trees.size());
        for (size_t i = 0; i < trees.size(); ++i) out[i] = py::cast(std::move(trees[i]));
        return out;
      },
      py::arg("response"),
      "A serialized PruneTreeResponse's trees as PrunedTrees, encoded as prune encodes them (scores NaN where "
      "the host sent none); ValueError naming the byte for a malformed message.");

  m.def(
      "prune_params",
      [](const py::handle& beam_width, const py::handle& max_nodes, const py::handle& ngram_weight,
         const py::handle& level_weights, const py::handle& logit_weights, const py::handle& eos_token_id,
         const py::handle& ngram_on_first_level) {
        const PruneParams p = make_params(beam_width, max_nodes, ngram_weight, level_weights, logit_weights,
                                          eos_token_id, ngram_on_first_level);
        py::dict out;
        out["beam_width"] = p.beam_width;
        out["max_nodes"] = p.max_nodes;
        out["ngram_weight"] = p.ngram_weight;
        out["level_weights"] = p.level_weights;
        out["logit_weights"] = p.logit_weights;
        out["eos_token_id"] = p.eos_token_id ? py::object(py::int_(*p.eos_token_id)) : py::object(py::none());
        out["ngram_on_first_level"] = p.ngram_on_first_level;
        return out;
      },
      py::kw_only(), py::arg("beam_width") = defaults.beam_width, py::arg("max_nodes") = defaults.max_nodes,
      py::arg("ngram_weight") = defaults.ngram_weight, py::arg("level_weights") = py::none(),
      py::arg("logit_weights") = py::none(), py::arg("eos_token_id") = py::none(),
      py::arg("ngram_on_first_level") = false,
      "prune's keyword parameters converted as prune converts them, as a dict (weights as lists, "
      "eos_token_id None for the trie's).");

  // prune: a fast-call function (fastcall.h), as _engine.prune(trie, ...)
  // and as the method Trie.prune(...) that NgramIndex.prune is. One
  // signature text for both, its defaults from PruneParams.
  static const std::string prune_signature = [&defaults] {
    std::ostringstream s;
    s << "prefix, topk_tokens, topk_probs, *, beam_width=" << defaults.beam_width
      << ", max_nodes=" << defaults.max_nodes << ", ngram_weight=" << defaults.ngram_weight
      << ", level_weights=None, logit_weights=None, eos_token_id=None, ngram_on_first_level=False, "
         "timeout=None)\n"
         "DART tree pruning of one lattice (see ngram_service.tree.prune).";
    return s.str();
  }();
  static const std::string prune_function_doc = "prune(trie, " + prune_signature;
  static const std::string prune_method_doc = "prune(" + prune_signature;
  static PyMethodDef prune_function = {
      "prune", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&prune_fastcall<true>)),
      METH_FASTCALL | METH_KEYWORDS, prune_function_doc.c_str()};
  static PyMethodDef prune_method = {
      "prune", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&prune_fastcall<false>)),
      METH_FASTCALL | METH_KEYWORDS, prune_method_doc.c_str()};
  add_fastcall(m, &prune_function);
  add_fastcall(m, &prune_method, m.attr("Trie"));

  m.def(
      "prune_batch",
      [](const py::handle& trie, const py::iterable& requests, const py::handle& threads, const py::handle& beam_width,
         const py::handle& max_nodes, const py::handle& ngram_weight, const py::handle& level_weights,
         const py::handle& logit_weights, const py::handle& eos_token_id, const py::handle& ngram_on_first_level,
         const py::handle& timeout) {
        const CallTimeout deadline(timeout, "prune_batch", "trees");
        std::vector<std::unique_ptr<Lattice>> reqs;
        for (const py::handle r : requests) {
          const size_t i = reqs.size();
          reqs.push_back(std::make_unique<Lattice>());
          try {
            load_request(r, *reqs.back());
          } catch (const InvalidArgument& e) {
            throw InvalidArgument(request_error(i, e.what()));
          }
        }
        int64_t n_threads = 0;
        if (!threads.is_none()) {
          if (py::isinstance<py::bool_>(threads) || !PyIndex_Check(threads.ptr()) ||
              (n_threads = integer(threads, "threads", "0..4096 or None")) < 0 || n_threads > 4096)
            throw InvalidArgument("threads must be a non-negative integer or None, got " +
                                  std::string(py::repr(threads)));
        }
        const PruneParams params = make_params(beam_width, max_nodes, ngram_weight, level_weights, logit_weights,
                                               eos_token_id, ngram_on_first_level);
        std::vector<PruneInput> inputs(reqs.size());
        for (size_t i = 0; i < reqs.size(); ++i) inputs[i] = reqs[i]->input;
        std::vector<DraftTree> out;
        with_trie(trie, "prune_batch", [&](const auto& t) {
          py::gil_scoped_release nogil;
          deadline.run([&] {
            prune_tree_batch(t, inputs, params, static_cast<uint32_t>(n_threads), out, deadline.interrupt());
          });
        });
        py::list res(out.size());
        for (size_t i = 0; i < out.size(); ++i) {
          auto obj = new_tree();
          *obj->tree = std::move(out[i]);
          res[i] = py::cast(std::move(obj));
        }
        return res;
      },
      py::arg("trie"), py::arg("requests"), py::kw_only(), py::arg("threads") = py::none(),
      py::arg("beam_width") = defaults.beam_width, py::arg("max_nodes") = defaults.max_nodes,
      py::arg("ngram_weight") = defaults.ngram_weight, py::arg("level_weights") = py::none(),
      py::arg("logit_weights") = py::none(), py::arg("eos_token_id") = py::none(),
      py::arg("ngram_on_first_level") = false, py::arg("timeout") = py::none(),
      "Many requests on `threads` threads (None: all cores), see ngram_service.tree.prune_batch.");
}
