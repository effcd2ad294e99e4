// The tree RPCs' codecs for Python: each request encoded whole and each
// response decoded whole by the one codec of its message
// (prune_tree_codec.h, propose_tree_codec.h, tree_codec.h), so that
// NgramClient writes no protobuf by hand and splits no message between
// Python and C++.
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "arrays.h"
#include "errors.h"
#include "lattice_arg.h"
#include "param_conversion.h"
#include "propose_tree_codec.h"
#include "prune_tree_codec.h"
#include "tree_codec.h"
#include "tree_object.h"

namespace py = pybind11;
using namespace ngram;
using namespace ngram_py;

void bind_codecs(py::module_& m) {
  m.def(
      "prune_tree_request",
      [](const std::string& index, const std::string& fingerprint, bool with_scores, const py::dict& params,
         const py::handle& requests) {
        std::string out = wire::prune_tree_head(index, fingerprint, given_prune_params(params), with_scores);
        if (requests.is_none()) return py::bytes(out);
        Lattice r;
        std::vector<uint32_t> sizes;
        size_t i = 0;
        for (const py::handle q : py::reinterpret_borrow<py::iterable>(requests)) {
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
      py::arg("index"), py::arg("tokenizer_fingerprint"), py::arg("with_scores"), py::arg("params"),
      py::arg("requests") = py::none(),
      "A serialized PruneTreeRequest (cpp/python/prune_tree_codec.h): index, fingerprint, the given `params` "
      "(prune's keywords, converted as prune converts them; None values not given), with_scores, and one "
      "PruneInput per request of a prune_batch call (dicts or tuples; None: the head alone, for "
      "LatticeBatch.request). Values are the host's to check.");

  m.def(
      "propose_tree_request",
      [](const std::string& index, const std::string& fingerprint, const py::dict& params,
         const py::iterable& contexts) {
        std::string out =
            wire::propose_tree_head(index, fingerprint, given_propose_params(params));
        Ids ids;
        size_t i = 0;
        for (const py::handle c : contexts) {
          try {
            ids.load(c, "context");
            ids.require_rank(1, "context", "[n]");
          } catch (const InvalidArgument& e) {
            throw InvalidArgument("contexts[" + std::to_string(i) + "]: " + e.what());
          }
          wire::put_propose_input(out, ids.data(), ids.size());
          ++i;
        }
        return py::bytes(out);
      },
      py::arg("index"), py::arg("tokenizer_fingerprint"), py::arg("params"), py::arg("contexts"),
      "A serialized ProposeTreeRequest (cpp/python/propose_tree_codec.h): index, fingerprint, the given "
      "`params` (propose's keywords, converted as propose converts them; None values not given) and one "
      "ProposeInput per context. Values are the host's to check.");

  m.def(
      "decode_trees",
      [](const py::buffer& data, const std::string& what, const std::string& sent) {
        const py::buffer_info info = data.request();
        std::vector<std::unique_ptr<TreeObject>> trees;
        {
          py::gil_scoped_release nogil;
          wire::decode_tree_response(
              static_cast<const uint8_t*>(info.ptr), static_cast<size_t>(info.size * info.itemsize),
              [&](size_t) {
                trees.push_back(new_tree());
                return trees.back()->tree.get();
              },
              what.c_str(), sent.c_str());
        }
        py::list out(trees.size());
        for (size_t i = 0; i < trees.size(); ++i) out[i] = py::cast(std::move(trees[i]));
        return out;
      },
      py::arg("response"), py::arg("what") = "PruneTreeResponse", py::arg("sent") = "lattices",
      "A serialized PruneTreeResponse's or ProposeTreeResponse's trees (cpp/python/tree_codec.h) as DraftTrees, "
      "encoded as prune encodes them (scores NaN where the host sent none); ValueError naming the byte for a "
      "malformed message.");
}
