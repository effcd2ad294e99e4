// Bindings of corpus proposals (see cpp/engine/propose.h): the context and
// keyword parameters converted to the engine's types, the GIL released while
// the engine works, the tree returned as a DraftTree. The engine checks
// every value and limit; this file only converts. Every function here is a
// fast-call one whose keywords are kProposeFields' (param_conversion.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "arrays.h"
#include "errors.h"
#include "fastcall.h"
#include "param_conversion.h"
#include "propose.h"
#include "timeout.h"
#include "tree_object.h"
#include "trie_index.h"

namespace py = pybind11;
using namespace ngram;
using namespace ngram_py;

namespace {

// A context as int64 ids: 1-D, its own field name in errors.
void load_context(const py::handle& h, const std::string& field, Ids& ids) {
  ids.load(h, field);
  ids.require_rank(1, field, "[N]");
}

// The trie a proposal searches (propose needs a trie file's representation).
const TrieIndex& trie_index(PyObject* trie, const char* call) {
  if (const TrieIndex* t = bound_object<TrieIndex>(trie)) return *t;
  throw py::type_error(std::string(call) + ": trie must be an _engine.Trie, got " +
                       std::string(py::str(py::type::of(py::handle(trie)).attr("__name__"))));
}

// One tree: the context and propose's keywords (args[first], in
// kProposeFields' order) converted, then search(ids, n, params, workspace,
// tree, interrupt) run without the GIL and the tree returned.
template <class Search>
PyObject* one_tree(const CallTimeout& deadline, PyObject* context, PyObject* const* args, size_t first,
                   Search&& search) {
  Ids ids;
  load_context(context, "context", ids);
  ProposeParams params;
  load_propose_params(propose_handles(args, first), params);
  auto tree = new_tree();
  {
    py::gil_scoped_release nogil;
    thread_local ProposeWorkspace ws;
    deadline.run([&] { search(ids.data(), ids.size(), params, ws, *tree->tree, deadline.interrupt()); });
  }
  return py::cast(std::move(tree)).release().ptr();
}

// propose(trie, context, *, <propose's keywords>, timeout=None); with_trie_arg
// false: the method Trie.propose(context, ...) that NgramIndex.propose is.
template <bool with_trie_arg>
PyObject* propose_fastcall(PyObject* self, PyObject* const* in, Py_ssize_t nargsf, PyObject* kwnames) {
  constexpr size_t kLead = with_trie_arg ? 2 : 1;
  constexpr size_t kArgs = kLead + kProposeFieldCount + 1;  // the last: timeout
  static const Signature<kArgs> signature = [] {
    std::array<const char*, kLead> lead{};
    lead[kLead - 1] = "context";
    if constexpr (with_trie_arg) lead[0] = "trie";
    return Signature<kArgs>("propose", propose_call_names(lead, std::array<const char*, 1>{"timeout"}), kLead);
  }();
  PyObject* args[kArgs];
  if (!signature.bind(in, nargsf, kwnames, args)) return nullptr;
  return translate_exceptions([&]() -> PyObject* {
    const CallTimeout deadline(args[kArgs - 1], "propose", "tree");
    const TrieIndex& t = trie_index(with_trie_arg ? args[0] : self, "propose");
    return one_tree(deadline, args[kLead - 1], args, kLead, [&t](auto&&... a) { propose_tree(t, a...); });
  });
}

// propose_lookup(context, vocab_size, *, <propose's keywords>, timeout=None).
PyObject* propose_lookup_fastcall(PyObject*, PyObject* const* in, Py_ssize_t nargsf, PyObject* kwnames) {
  constexpr size_t kArgs = 2 + kProposeFieldCount + 1;
  static const Signature<kArgs> signature(
      "propose_lookup",
      propose_call_names(std::array<const char*, 2>{"context", "vocab_size"}, std::array<const char*, 1>{"timeout"}),
      2);
  PyObject* args[kArgs];
  if (!signature.bind(in, nargsf, kwnames, args)) return nullptr;
  return translate_exceptions([&]() -> PyObject* {
    const CallTimeout deadline(args[kArgs - 1], "propose_lookup", "tree");
    const int64_t vocab = integer(args[1], "vocab_size", "1..2147483648");
    if (vocab < 1) throw InvalidArgument("vocab_size = " + std::to_string(vocab) + ": must be in 1..2147483648");
    return one_tree(deadline, args[0], args, 2,
                    [vocab](auto&&... a) { propose_lookup(static_cast<uint64_t>(vocab), a...); });
  });
}

// propose_batch(trie, contexts, *, <propose's keywords>, threads=None, timeout=None).
PyObject* propose_batch_fastcall(PyObject*, PyObject* const* in, Py_ssize_t nargsf, PyObject* kwnames) {
  constexpr size_t kArgs = 2 + kProposeFieldCount + 2;
  static const Signature<kArgs> signature(
      "propose_batch", propose_call_names(std::array<const char*, 2>{"trie", "contexts"},
                                          std::array<const char*, 2>{"threads", "timeout"}),
      2);
  PyObject* args[kArgs];
  if (!signature.bind(in, nargsf, kwnames, args)) return nullptr;
  return translate_exceptions([&]() -> PyObject* {
    const CallTimeout deadline(args[kArgs - 1], "propose_batch", "trees");
    const TrieIndex& t = trie_index(args[0], "propose_batch");
    std::vector<Ids> ids;
    for (const py::handle c : py::reinterpret_borrow<py::iterable>(args[1])) {
      ids.emplace_back();
      try {
        load_context(c, "context", ids.back());
      } catch (const InvalidArgument& e) {
        throw InvalidArgument("contexts[" + std::to_string(ids.size() - 1) + "]: " + e.what());
      }
    }
    const py::handle threads = args[kArgs - 2];
    int64_t n_threads = 0;
    if (threads && !threads.is_none()) n_threads = integer(threads, "threads", "0..4096 or None");
    if (n_threads < 0 || n_threads > 4096)
      throw InvalidArgument("threads must be in 0..4096 or None, got " + std::to_string(n_threads));
    ProposeParams params;
    load_propose_params(propose_handles(args, 2), params);
    std::vector<ProposeInput> inputs(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) inputs[i] = {ids[i].data(), ids[i].size()};
    std::vector<DraftTree> out;
    {
      py::gil_scoped_release nogil;
      deadline.run([&] {
        propose_batch(t, inputs, params, static_cast<uint32_t>(n_threads), out, deadline.interrupt());
      });
    }
    return tree_list(out).release().ptr();
  });
}

// propose_params(*, <propose's keywords>): converted and checked as propose does.
PyObject* propose_params_fastcall(PyObject*, PyObject* const* in, Py_ssize_t nargsf, PyObject* kwnames) {
  static const Signature<kProposeFieldCount> signature(
      "propose_params", propose_call_names(std::array<const char*, 0>{}, std::array<const char*, 0>{}), 0);
  PyObject* args[kProposeFieldCount];
  if (!signature.bind(in, nargsf, kwnames, args)) return nullptr;
  return translate_exceptions([&]() -> PyObject* {
    ProposeParams p;
    load_propose_params(propose_handles(args, 0), p);
    check_propose_params(p);
    return propose_params_dict(p, false).release().ptr();
  });
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

  // propose (as _engine.propose(trie, ...) and as the method Trie.propose(...)
  // that NgramIndex.propose is), propose_lookup, propose_batch and
  // propose_params: fast-call functions (fastcall.h) whose keywords and
  // signature text are kProposeFields' (param_conversion.h).
  const std::string propose_doc =
      "A draft tree of the corpus' and the context's likeliest continuations of `context` (int [N], N >= 1; its "
      "last token is the root), as a DraftTree whose scores are path probabilities; parameters as "
      "docs/PROPOSALS.md (None or left out: the default), timeout in seconds (None: no limit; TimeoutError "
      "once it passes). ValueError naming the field for bad input. See ngram_service.proposals.propose.";
  add_fastcall(m, "propose", &propose_fastcall<true>,
               propose_call_doc("propose", "trie, context", "timeout=None", propose_doc));
  add_fastcall(m, "propose", &propose_fastcall<false>,
               propose_call_doc("propose", "$self, context", "timeout=None", propose_doc), m.attr("Trie"));
  add_fastcall(m, "propose_lookup", &propose_lookup_fastcall,
               propose_call_doc("propose_lookup", "context, vocab_size", "timeout=None",
                                "Prompt lookup alone, with no trie: propose's tree from the context's own earlier "
                                "occurrences (ids in [0, vocab_size)), the same parameters (corpus is ignored; "
                                "None or left out: the default) and timeout. What a client proposes while its "
                                "trie host is out of reach."));
  add_fastcall(m, "propose_batch", &propose_batch_fastcall,
               propose_call_doc("propose_batch", "trie, contexts", "threads=None, timeout=None",
                                "propose for many contexts on `threads` threads (None: all cores), the GIL "
                                "released; the same parameters. See ngram_service.proposals.propose_batch."));
  add_fastcall(m, "propose_params", &propose_params_fastcall,
               propose_call_doc("propose_params", "", "",
                                "propose's parameters converted and checked as propose converts and checks "
                                "them (ValueError naming the field), unset ones (or None) at the engine's "
                                "defaults, as a dict; floats as the float32 the engine reads."));
}
