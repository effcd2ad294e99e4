// The GPU worker's offload (dart_client.pruner) in a fixed handful of calls a
// batch, none per lattice or per node: the lattices as the device packed them
// become a PruneTreeRequest's bytes or the engine's own search; the trees (a
// PruneTreeResponse's bytes, or the engine's) become one packed array of the
// batch's tree tensors, copied to the device at once. The wire is
// proto/ngram/v1/ngram.proto's; tests/test_offload.py checks these bytes
// against protobuf's own encoder and decoder.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "arrays.h"
#include "errors.h"
#include "fastcall.h"
#include "param_conversion.h"
#include "prune_tree_codec.h"
#include "tree_codec.h"
#include "tree_object.h"
#include "lattice_batch.h"
#include "prune_tree.h"
#include "trie_arg.h"
#include "trie_index.h"

namespace py = pybind11;
using namespace ngram;
using namespace ngram_py;
using namespace ngram_py::wire;

namespace {

// ---- the batch's lattices ---------------------------------------------------

// The last `n` ids of a context (a list of ints, an integer array or any
// sequence of integers) into out.
void context_tail(const py::handle& ctx, size_t i, size_t n, std::vector<int64_t>& out) {
  out.clear();
  auto fail = [&](const std::string& why) {
    throw InvalidArgument("tokens[" + std::to_string(i) + "]: " + why);
  };
  if (PyList_Check(ctx.ptr())) {
    const Py_ssize_t len = PyList_GET_SIZE(ctx.ptr());
    if (len == 0) fail("empty: need at least the root token");
    for (Py_ssize_t j = std::max<Py_ssize_t>(0, len - static_cast<Py_ssize_t>(n)); j < len; ++j) {
      PyObject* v = PyList_GET_ITEM(ctx.ptr(), j);
      if (!PyLong_Check(v)) fail("token ids must be integers, got " + std::string(py::repr(v)));
      int overflow = 0;
      const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
      if (overflow) fail("token id " + std::string(py::str(v)) + " out of range");
      out.push_back(x);
    }
    return;
  }
  const Ids ids(ctx, "tokens[" + std::to_string(i) + "]");
  if (ids.ndim() != 1) fail("must be 1-D, got shape " + shape_str(ids.array()));
  if (ids.size() == 0) fail("empty: need at least the root token");
  const int64_t* d = ids.data();
  for (uint64_t j = ids.size() > n ? ids.size() - n : 0; j < ids.size(); ++j) out.push_back(d[j]);
}

// B lattices as dart_client packs them, fitted by the engine (lattice_batch.h).
LatticeBatch fit_lattices(const py::sequence& contexts, const py::array& packed_in, int64_t order, int64_t vocab) {
  if (order < 1) throw InvalidArgument("order must be >= 1, got " + std::to_string(order));
  if (vocab < 1) throw InvalidArgument("vocab_size must be >= 1, got " + std::to_string(vocab));
  if (plain_array_type(packed_in) != py::detail::npy_api::NPY_INT32_ || packed_in.ndim() != 3 ||
      packed_in.shape(2) % 2 != 0)
    throw InvalidArgument("packed lattices must be a C-contiguous int32 array [B, D, 2K] (ids, then the "
                          "probabilities' float32 bits), got dtype " + std::string(py::str(packed_in.dtype())) +
                          " shape " + shape_str(packed_in));
  const uint32_t batch = static_cast<uint32_t>(packed_in.shape(0));
  const uint32_t D = static_cast<uint32_t>(packed_in.shape(1)), K = static_cast<uint32_t>(packed_in.shape(2) / 2);
  if (static_cast<size_t>(py::len(contexts)) != batch)
    throw InvalidArgument(std::to_string(batch) + " lattices but " + std::to_string(py::len(contexts)) +
                          " token sequences");
  const size_t n = static_cast<size_t>(std::max<int64_t>(1, order - 1));
  const int32_t* packed = static_cast<const int32_t*>(packed_in.data());
  LatticeBatch L(n, static_cast<uint64_t>(vocab));
  std::vector<int64_t> tail;
  for (uint32_t b = 0; b < batch; ++b) {
    context_tail(contexts[b], b, n, tail);
    L.add_packed(tail.data(), tail.size(), packed + static_cast<size_t>(b) * D * 2 * K, D, K);
  }
  return L;
}

// Row indices into a batch: None for all rows, else an integer array.
std::vector<uint32_t> rows_of(const py::handle& rows, uint32_t batch) {
  std::vector<uint32_t> out;
  if (rows.is_none()) {
    out.resize(batch);
    for (uint32_t i = 0; i < batch; ++i) out[i] = i;
    return out;
  }
  Ids ids(rows, "rows");
  if (ids.ndim() != 1) throw InvalidArgument("rows must be 1-D");
  out.reserve(ids.size());
  for (uint64_t i = 0; i < ids.size(); ++i) {
    const int64_t r = ids.data()[i];
    if (r < 0 || r >= batch) throw InvalidArgument("rows[" + std::to_string(i) + "] = " + std::to_string(r) +
                                                   " outside the batch of " + std::to_string(batch));
    out.push_back(static_cast<uint32_t>(r));
  }
  return out;
}

// `head` (a serialized PruneTreeRequest without inputs) followed by one
// PruneInput (field 4) per row: prune_tree_codec.h's request.
py::bytes request_bytes(const LatticeBatch& L, const py::bytes& head, const std::vector<uint32_t>& rows) {
  std::vector<PruneInput> inputs(rows.size());
  std::vector<std::vector<uint64_t>> offsets(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (L.depth(rows[i]) == 0)
      throw InvalidArgument("lattice " + std::to_string(rows[i]) + " has no level the trie serves");
    inputs[i] = L.input(rows[i], offsets[i]);
  }
  return py::bytes(prune_tree_request(head, inputs));
}

// ---- the batch's trees ------------------------------------------------------

struct TreeBatch {
  std::vector<DraftTree> trees;
  std::vector<uint8_t> filled;
  explicit TreeBatch(uint32_t b) : trees(b), filled(b, 0) {}

  // The packed layout of the batch (draft_tree.h), once every tree is filled.
  TreeBatchLayout layout() const {
    for (size_t i = 0; i < trees.size(); ++i)
      if (!filled[i]) throw InvalidArgument("tree " + std::to_string(i) + " of the batch was never filled");
    return TreeBatchLayout::of(trees.data(), trees.size());
  }
};

// A PruneTreeResponse's trees into rows (in order), encoded by the engine's encoder.
void decode_response(TreeBatch& out, const uint8_t* data, size_t size, const std::vector<uint32_t>& rows) {
  const size_t n = decode_tree_response(
      data, size, [&](size_t i) { return i < rows.size() ? &out.trees[rows[i]] : nullptr; });
  if (n != rows.size())
    throw InvalidArgument("PruneTreeResponse: " + std::to_string(n) + " trees for " + std::to_string(rows.size()) +
                          " lattices");
  for (const uint32_t r : rows) out.filled[r] = 1;
}

// A writable, C-contiguous uint8 numpy array's bytes, or nullptr.
uint8_t* writable_bytes(const py::handle& h, uint64_t& size) {
  if (plain_array_type(h) != py::detail::npy_api::NPY_UBYTE_) return nullptr;
  auto* a = py::detail::array_proxy(h.ptr());
  if (!(a->flags & py::detail::npy_api::NPY_ARRAY_WRITEABLE_)) return nullptr;
  size = static_cast<uint64_t>(py::reinterpret_borrow<py::array>(h).nbytes());
  return reinterpret_cast<uint8_t*>(a->data);
}

// LatticeBatch.prune(trie, out, rows=None, *, <prune's keywords>, threads=0).
PyObject* lattice_batch_prune(PyObject* self, PyObject* const* in, Py_ssize_t nargsf, PyObject* kwnames) {
  constexpr size_t kArgs = 3 + kPruneFieldCount + 1;
  static const Signature<kArgs> signature(
      "prune", prune_call_names(std::array<const char*, 3>{"trie", "out", "rows"}, std::array<const char*, 1>{"threads"}),
      3, 2);
  PyObject* args[kArgs];
  if (!signature.bind(in, nargsf, kwnames, args)) return nullptr;
  return translate_exceptions([&]() -> PyObject* {
    const LatticeBatch* lattices = bound_object<LatticeBatch>(self);
    TreeBatch* out = bound_object<TreeBatch>(args[1]);
    if (!lattices) throw py::type_error("LatticeBatch.prune: self is not a LatticeBatch");
    if (!out) throw py::type_error("LatticeBatch.prune: out must be a TreeBatch");
    const LatticeBatch& L = *lattices;
    if (out->trees.size() != L.size()) throw InvalidArgument("the tree batch's size is not the lattices'");
    const std::vector<uint32_t> r = rows_of(args[2] ? py::handle(args[2]) : py::none(), L.size());
    PruneParams params;
    load_prune_params(prune_handles(args, 3), params);
    const py::handle threads = args[kArgs - 1];
    const int64_t n_threads = threads && !threads.is_none() ? integer(threads, "threads", "0..4096") : 0;
    std::vector<std::vector<uint64_t>> offsets(r.size());
    std::vector<PruneInput> inputs(r.size());
    for (size_t i = 0; i < r.size(); ++i) {
      if (L.depth(r[i]) == 0) throw InvalidArgument("lattice " + std::to_string(r[i]) + " has no level the trie serves");
      inputs[i] = L.input(r[i], offsets[i]);
    }
    std::vector<DraftTree> trees;
    with_trie(args[0], "LatticeBatch.prune", [&](const auto& t) {
      py::gil_scoped_release nogil;
      prune_tree_batch(t, inputs, params, static_cast<uint32_t>(std::clamp<int64_t>(n_threads, 0, 4096)), trees);
    });
    for (size_t i = 0; i < r.size(); ++i) {
      out->trees[r[i]] = std::move(trees[i]);
      out->filled[r[i]] = 1;
    }
    Py_RETURN_NONE;
  });
}

}  // namespace

void bind_batches(py::module_& m) {
  py::class_<LatticeBatch>(m, "LatticeBatch", R"(A batch of draft lattices fitted to a trie's vocabulary.

LatticeBatch(contexts, packed, order, vocab_size): contexts are B token
sequences (lists of ints or integer arrays; the last token is each tree's
root); packed is int32 [B, D, 2K] as the device wrote it, per level the K
candidate ids then their float32 probabilities' bits. The engine fits them
(cpp/engine/lattice_batch.h): each context keeps its last max(1, order - 1)
tokens, cut after its last id outside [0, vocab_size); candidates outside
[0, vocab_size) are dropped, and the levels after the first one left empty;
a lattice whose root or first level the trie cannot serve has depth 0.)")
      .def(py::init([](const py::sequence& contexts, const py::array& packed, int64_t order, int64_t vocab) {
             return fit_lattices(contexts, packed, order, vocab);
           }),
           py::arg("contexts"), py::arg("packed"), py::arg("order"), py::arg("vocab_size"))
      .def_property_readonly("depths", [](const LatticeBatch& L) {
        py::array_t<int32_t> out(static_cast<py::ssize_t>(L.size()));
        std::copy(L.depths().begin(), L.depths().end(), out.mutable_data());
        return out;
      }, "Levels kept per lattice (int32 [B]); 0: not servable by the trie.")
      .def_property_readonly("max_ids", [](const LatticeBatch& L) {
        return py::array_t<int64_t>(static_cast<py::ssize_t>(L.size()), L.max_ids().data());
      }, "The largest id of each lattice's context tail and candidates, before fitting (int64 [B]).")
      .def_property_readonly("batch", [](const LatticeBatch& L) { return L.size(); })
      .def_property_readonly("vocab_size", [](const LatticeBatch& L) { return L.vocab_size(); },
                             "The vocabulary the lattices were fitted to.")
      .def_property_readonly("served", [](const LatticeBatch& L) {
        return std::count_if(L.depths().begin(), L.depths().end(), [](uint32_t d) { return d > 0; });
      }, "Lattices of depth > 0.")
      .def("request", [](const LatticeBatch& L, const py::bytes& head, const py::handle& rows) {
             return request_bytes(L, head, rows_of(rows, L.size()));
           },
           py::arg("head"), py::arg("rows") = py::none(),
           "A serialized PruneTreeRequest: head (the request's other fields, serialized) followed by one "
           "PruneInput per row (None: every lattice), in order.");

  // LatticeBatch.prune: a fast-call method (fastcall.h) whose keywords and
  // signature text are kPruneFields' (param_conversion.h).
  add_fastcall(m, "prune", &lattice_batch_prune,
               prune_call_doc(
                   "prune", "$self, trie, out, rows=None", "threads=0",
                   "The engine's search of rows (None: all) on trie (an _engine.Trie, or an _engine.NoTrie: the "
                   "drafter alone), each tree into the same row of out (a TreeBatch); parameters as prune's (None "
                   "or left out: the default); threads 0: all cores."),
               m.attr("LatticeBatch"));

  py::class_<TreeBatch>(m, "TreeBatch", R"(The draft trees of a batch, filled by LatticeBatch.prune or decode, packed by pack.

pack's layout (cpp/engine/draft_tree.h, TreeBatchLayout), for B trees, N = most
nodes, L = most leaves, W = deepest path + 1: int64 tokens [B, N] (0 padded),
int64 depths [B, N] (0 padded), int64 parents [B, N] (-1 padded), int64
retrieve_indices [B, L, W] (-1 padded), then bool tree_mask [B, N, N] (a
padding node marks only itself).)")
      .def(py::init<uint32_t>(), py::arg("batch"))
      .def_static("of", [](const py::sequence& trees) {
             TreeBatch out(static_cast<uint32_t>(py::len(trees)));
             for (size_t i = 0; i < out.trees.size(); ++i) {
               const py::handle t = trees[i];
               const TreeObject* obj = bound_object<TreeObject>(t.ptr());
               if (!obj) throw py::type_error("trees[" + std::to_string(i) + "] is not a DraftTree");
               out.trees[i] = *obj->tree;
               out.filled[i] = 1;
             }
             return out;
           }, py::arg("trees"),
           "A batch of the engine's trees (DraftTree objects, copied), ready to pack.")
      .def("__len__", [](const TreeBatch& t) { return t.trees.size(); })
      .def("decode",
           [](TreeBatch& out, const py::buffer& data, const py::handle& rows) {
             const py::buffer_info info = data.request();
             const std::vector<uint32_t> r = rows_of(rows, static_cast<uint32_t>(out.trees.size()));
             const uint8_t* p = static_cast<const uint8_t*>(info.ptr);
             const size_t n = static_cast<size_t>(info.size * info.itemsize);
             py::gil_scoped_release nogil;
             decode_response(out, p, n, r);
           },
           py::arg("response"), py::arg("rows") = py::none(),
           "A serialized PruneTreeResponse's trees into rows (None: all), in order; ValueError naming the "
           "byte for a malformed message, the count for too few or too many trees.")
      .def("pack",
           [](const TreeBatch& t, const py::handle& out) {
             const TreeBatchLayout d = t.layout();
             const uint64_t bytes = d.bytes();
             uint64_t have = 0;
             uint8_t* buf = out.is_none() ? nullptr : writable_bytes(out, have);
             if (!out.is_none() && !buf) throw InvalidArgument("out must be a writable C-contiguous uint8 array");
             py::object array = py::reinterpret_borrow<py::object>(out);
             if (!buf || have < bytes) {  // a new array, twice as large as the one given
               auto a = new_array<uint8_t>(1, static_cast<py::ssize_t>(std::max(bytes, 2 * have)));
               buf = a.mutable_data();
               array = std::move(a);
             }
             const py::ssize_t B = static_cast<py::ssize_t>(t.trees.size()), N = d.nodes, L = d.leaves,
                               W = d.width;
             py::array_t<int64_t> sizes({static_cast<py::ssize_t>(3), B});
             {
               py::gil_scoped_release nogil;
               d.pack(t.trees.data(), buf);
               int64_t* o = sizes.mutable_data();
               for (py::ssize_t b = 0; b < B; ++b) {
                 o[b] = t.trees[b].size();
                 o[B + b] = t.trees[b].n_leaves;
                 o[2 * B + b] = t.trees[b].retrieve_width;
               }
             }
             py::array_t<int64_t> nodes({static_cast<py::ssize_t>(3), B, N},
                                        reinterpret_cast<int64_t*>(buf + d.tokens_at()), array);
             py::array_t<int64_t> retrieve({B, L, W}, reinterpret_cast<int64_t*>(buf + d.retrieve_at()), array);
             py::array mask(py::dtype::of<bool>(), {B, N, N}, buf + d.mask_at(), array);
             py::dict at;  // the layout's byte offsets, for readers of a copy of the array
             at["tokens"] = d.tokens_at();
             at["depths"] = d.depths_at();
             at["parents"] = d.parents_at();
             at["retrieve"] = d.retrieve_at();
             at["mask"] = d.mask_at();
             return py::make_tuple(array, bytes, sizes, nodes, retrieve, mask, at);
           },
           py::arg("out") = py::none(),
           "The trees in the packed layout, written into out (a writable uint8 array) when it is large "
           "enough, else into a new array. Returns (array, bytes used, sizes int64 [3, B]: each tree's "
           "nodes, leaves and deepest path + 1, then views of the array: tokens, depths and parents as "
           "int64 [3, B, N], retrieve_indices int64 [B, L, W], tree_mask bool [B, N, N], then the byte "
           "offsets of the arrays: a dict with keys tokens, depths, parents, retrieve, mask).");
}
