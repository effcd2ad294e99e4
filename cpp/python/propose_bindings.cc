// Bindings of corpus proposals (see cpp/engine/propose.h): the context and
// keyword parameters converted to the engine's types, the GIL released while
// the engine works, the tree returned as a PrunedTree. The engine checks
// every value and limit; this file only converts.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "arrays.h"
#include "errors.h"
#include "propose.h"
#include "timeout.h"
#include "tree_object.h"
#include "trie_index.h"

namespace py = pybind11;
using namespace ngram;
using namespace ngram_py;

namespace {

double real(const py::handle& h, const char* field) {
  if (py::isinstance<py::bool_>(h) || !(PyFloat_Check(h.ptr()) || PyIndex_Check(h.ptr()) ||
                                        py::hasattr(h, "__float__")))
    throw InvalidArgument(std::string(field) + " must be a number, got " + std::string(py::repr(h)));
  const double v = PyFloat_AsDouble(h.ptr());
  if (v == -1.0 && PyErr_Occurred()) throw py::error_already_set();
  return v;
}

bool truth(const py::handle& h, const char* field) {
  if (!py::isinstance<py::bool_>(h))
    throw InvalidArgument(std::string(field) + " must be True or False, got " + std::string(py::repr(h)));
  return h.ptr() == Py_True;
}

// propose's keyword parameters over the defaults; an unknown name is refused
// naming the known ones. `timeout` is the call's, not the search's (timeout()).
ProposeParams propose_params(const py::kwargs& kw) {
  ProposeParams p;
  for (const auto& item : kw) {
    const std::string key = py::str(item.first);
    const py::handle v = item.second;
    if (key == "timeout") continue;
    if (key == "max_nodes") p.max_nodes = integer(v, "max_nodes", "0.." + std::to_string(ProposeLimits::kMaxNodes));
    else if (key == "max_depth") p.max_depth = integer(v, "max_depth", "0.." + std::to_string(ProposeLimits::kMaxDepth));
    else if (key == "max_branch") p.max_branch = integer(v, "max_branch", "1.." + std::to_string(ProposeLimits::kMaxBranch));
    else if (key == "lookup_min_match")
      p.lookup_min_match = integer(v, "lookup_min_match", "1.." + std::to_string(ProposeLimits::kMaxMatch));
    else if (key == "min_prob") p.min_prob = static_cast<float>(real(v, "min_prob"));
    else if (key == "backoff") p.backoff = static_cast<float>(real(v, "backoff"));
    else if (key == "lookup_weight") p.lookup_weight = static_cast<float>(real(v, "lookup_weight"));
    else if (key == "corpus") p.corpus = truth(v, "corpus");
    else if (key == "lookup") p.lookup = truth(v, "lookup");
    else
      throw py::type_error("propose: unexpected keyword '" + key +
                           "'; parameters are max_nodes, max_depth, max_branch, min_prob, backoff, corpus, "
                           "lookup, lookup_weight, lookup_min_match, timeout");
  }
  return p;
}

// The `timeout` keyword among propose's, a null handle when not given.
py::handle timeout(const py::kwargs& kw) {
  return py::handle(PyDict_GetItemString(kw.ptr(), "timeout"));  // borrowed
}

// A float32 default as the decimal it was written as (1e-4, not 9.99999975e-05).
double as_written(float v) {
  std::ostringstream s;
  s << v;
  return std::stod(s.str());
}

// A context as int64 ids: 1-D, its own field name in errors.
void load_context(const py::handle& h, const std::string& field, Ids& ids) {
  ids.load(h, field);
  ids.require_rank(1, field, "[N]");
}

}  // namespace

void bind_propose(py::module_& m) {
  py::class_<ProposeLimits>(m, "ProposeLimits")
      .def_readonly_static("max_nodes", &ProposeLimits::kMaxNodes)
      .def_readonly_static("max_depth", &ProposeLimits::kMaxDepth)
      .def_readonly_static("max_branch", &ProposeLimits::kMaxBranch)
      .def_readonly_static("max_context", &ProposeLimits::kMaxContext)
      .def_readonly_static("max_match", &ProposeLimits::kMaxMatch)
      .def_readonly_static("max_occurrences", &ProposeLimits::kMaxOccurrences);

  const ProposeParams defaults;
  py::dict d;
  d["max_nodes"] = defaults.max_nodes;
  d["max_depth"] = defaults.max_depth;
  d["max_branch"] = defaults.max_branch;
  d["min_prob"] = as_written(defaults.min_prob);
  d["backoff"] = as_written(defaults.backoff);
  d["corpus"] = defaults.corpus;
  d["lookup"] = defaults.lookup;
  d["lookup_weight"] = as_written(defaults.lookup_weight);
  d["lookup_min_match"] = defaults.lookup_min_match;
  m.attr("PROPOSE_DEFAULTS") = d;

  auto propose = [](const TrieIndex& t, const py::handle& context, const py::kwargs& kw) {
    const CallTimeout deadline(timeout(kw), "propose", "tree");
    Ids ids;
    load_context(context, "context", ids);
    const ProposeParams params = propose_params(kw);
    auto tree = new_tree();
    {
      py::gil_scoped_release nogil;
      thread_local ProposeWorkspace ws;
      deadline.run([&] { propose_tree(t, ids.data(), ids.size(), params, ws, *tree->tree, deadline.interrupt()); });
    }
    return tree;
  };
  static const char* propose_doc =
      "A draft tree of the corpus' and the context's likeliest continuations of `context` (int [N], N >= 1; its "
      "last token is the root), as a PrunedTree whose scores are path probabilities. Keywords: max_nodes, "
      "max_depth, max_branch, min_prob, backoff, corpus, lookup, lookup_weight, lookup_min_match "
      "(PROPOSE_DEFAULTS; docs/PROPOSALS.md), and timeout (seconds, None: no limit; TimeoutError once it "
      "passes). ValueError naming the field for bad input.";
  m.def("propose", propose, py::arg("trie"), py::arg("context"), propose_doc);
  m.attr("Trie").attr("propose") = py::cpp_function(
      [propose](const TrieIndex& t, const py::handle& context, const py::kwargs& kw) { return propose(t, context, kw); },
      py::name("propose"), py::is_method(m.attr("Trie")), py::arg("context"), propose_doc);

  m.def(
      "propose_lookup",
      [](const py::handle& context, const py::handle& vocab_size, const py::kwargs& kw) {
        const CallTimeout deadline(timeout(kw), "propose_lookup", "tree");
        Ids ids;
        load_context(context, "context", ids);
        const int64_t vocab = integer(vocab_size, "vocab_size", "1..2147483648");
        if (vocab < 1) throw InvalidArgument("vocab_size = " + std::to_string(vocab) + ": must be in 1..2147483648");
        const ProposeParams params = propose_params(kw);
        auto tree = new_tree();
        {
          py::gil_scoped_release nogil;
          thread_local ProposeWorkspace ws;
          deadline.run([&] {
            propose_lookup(static_cast<uint64_t>(vocab), ids.data(), ids.size(), params, ws, *tree->tree,
                           deadline.interrupt());
          });
        }
        return tree;
      },
      py::arg("context"), py::arg("vocab_size"),
      "Prompt lookup alone, no trie: propose's tree from the context's own earlier occurrences, ids in "
      "[0, vocab_size); the same keywords (corpus is ignored).");

  m.def(
      "propose_batch",
      [](const TrieIndex& t, const py::iterable& contexts, const py::handle& threads, const py::kwargs& kw) {
        const CallTimeout deadline(timeout(kw), "propose_batch", "trees");
        std::vector<Ids> ids;
        for (const py::handle c : contexts) {
          ids.emplace_back();
          try {
            load_context(c, "context", ids.back());
          } catch (const InvalidArgument& e) {
            throw InvalidArgument("contexts[" + std::to_string(ids.size() - 1) + "]: " + e.what());
          }
        }
        int64_t n_threads = 0;
        if (!threads.is_none()) n_threads = integer(threads, "threads", "0..4096 or None");
        if (n_threads < 0 || n_threads > 4096)
          throw InvalidArgument("threads = " + std::to_string(n_threads) + ": must be in 0..4096 or None");
        const ProposeParams params = propose_params(kw);
        std::vector<ProposeInput> in(ids.size());
        for (size_t i = 0; i < ids.size(); ++i) in[i] = {ids[i].data(), ids[i].size()};
        std::vector<DraftTree> out;
        {
          py::gil_scoped_release nogil;
          deadline.run([&] {
            propose_batch(t, in, params, static_cast<uint32_t>(n_threads), out, deadline.interrupt());
          });
        }
        py::list res(out.size());
        for (size_t i = 0; i < out.size(); ++i) {
          auto obj = new_tree();
          *obj->tree = std::move(out[i]);
          res[i] = py::cast(std::move(obj));
        }
        return res;
      },
      py::arg("trie"), py::arg("contexts"), py::kw_only(), py::arg("threads") = py::none(),
      "propose for many contexts on `threads` threads (None: all cores), the GIL released; the same keywords.");
}
