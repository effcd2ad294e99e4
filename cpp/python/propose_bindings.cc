// Bindings of corpus proposals (see cpp/engine/propose.h): the context and
// keyword parameters converted to the engine's types, the GIL released while
// the engine works, the tree returned as a DraftTree. The engine checks
// every value and limit; this file only converts.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "arrays.h"
#include "errors.h"
#include "param_conversion.h"
#include "propose.h"
#include "timeout.h"
#include "tree_object.h"
#include "trie_index.h"

namespace py = pybind11;
using namespace ngram;
using namespace ngram_py;

namespace {

// The `timeout` keyword among propose's, a null handle when not given.
py::handle timeout(const py::kwargs& kw) {
  return py::handle(PyDict_GetItemString(kw.ptr(), "timeout"));  // borrowed
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

  m.attr("PROPOSE_DEFAULTS") = propose_params_dict(ProposeParams{}, true);

  m.def(
      "propose_params",
      [](const py::kwargs& kw) {
        const ProposeParams p = given_propose_params(kw, "propose_params", false, false).values;
        check_propose_params(p);
        return propose_params_dict(p, false);
      },
      "propose's keyword parameters converted and checked as propose converts and checks them, unset ones at "
      "the engine's defaults, as a dict (floats as the float32 the engine reads); ValueError naming the field, "
      "TypeError for an unknown name.");

  auto propose = [](const TrieIndex& t, const py::handle& context, const py::kwargs& kw) {
    const CallTimeout deadline(timeout(kw), "propose", "tree");
    Ids ids;
    load_context(context, "context", ids);
    const ProposeParams params = given_propose_params(kw, "propose", true, false).values;
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
      "last token is the root), as a DraftTree whose scores are path probabilities. Keywords: max_nodes, "
      "max_depth, max_branch, min_prob, corpus, lookup, lookup_weight, lookup_min_match, discount, lookup_decay, lookup_prior "
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
        const ProposeParams params = given_propose_params(kw, "propose", true, false).values;
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
        const ProposeParams params = given_propose_params(kw, "propose", true, false).values;
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
