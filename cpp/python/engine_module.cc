// pybind11 bindings of the engine: arrays in, arrays out, the GIL released
// around every query. The Python-facing API (NgramIndex) wraps this module.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "crc32c.h"
#include "dart_trie.h"
#include "arrays.h"
#include "fastcall.h"
#include "errors.h"
#include "interrupt.h"
#include "param_conversion.h"
#include "queries.h"
#include "search_simd.h"
#include "timeout.h"
#include "trie_index.h"
#include "trie_v1_writer.h"
#include "trie_v2_writer.h"

namespace py = pybind11;
using namespace ngram;
using namespace ngram_py;

namespace {


py::tuple conditional_probs_py(const TrieIndex& t, const py::handle& contexts_in, const py::handle& candidates_in,
                               const py::handle& timeout) {
  const CallTimeout deadline(timeout, "conditional_probs", "probabilities");
  const Ids contexts(contexts_in, "contexts"), candidates(candidates_in, "candidates");
  contexts.require_rank(2, "contexts", "[B, C]");
  candidates.require_rank(2, "candidates", "[B, K]");
  const uint64_t b = contexts.shape(0), c = contexts.shape(1), k = candidates.shape(1);
  if (candidates.shape(0) != b)
    throw InvalidArgument("contexts has " + std::to_string(b) + " rows, candidates " +
                          std::to_string(candidates.shape(0)) + ": batch sizes must match");
  py::array_t<float> probs = new_array<float>(2, b, k);
  py::array_t<int32_t> matched = new_array<int32_t>(2, b, k);
  float* pp = probs.mutable_data();
  int32_t* mp = matched.mutable_data();
  const Interrupt& stop = deadline.interrupt();
  if (contexts.int32_data() && candidates.int32_data()) {  // the lookups' own type: no copy
    const int32_t* cp = contexts.int32_data();
    const int32_t* wp = candidates.int32_data();
    py::gil_scoped_release nogil;
    deadline.run([&] { conditional_probs(t, cp, b, c, wp, k, pp, mp, stop); });
  } else {
    const int64_t* cp = contexts.data();
    const int64_t* wp = candidates.data();
    py::gil_scoped_release nogil;
    deadline.run([&] { conditional_probs(t, cp, b, c, wp, k, pp, mp, stop); });
  }
  return py::make_tuple(probs, matched);
}

PyObject* conditional_probs_fastcall(PyObject* self, PyObject* const* in, Py_ssize_t nargsf, PyObject* kwnames) {
  static const Signature<3> signature("conditional_probs", {"contexts", "candidates", "timeout"}, 2);
  PyObject* args[3];
  if (!signature.bind(in, nargsf, kwnames, args)) return nullptr;
  return translate_exceptions([&]() -> PyObject* {
    const TrieIndex* t = bound_object<TrieIndex>(self);
    if (!t) throw py::type_error("conditional_probs: not an initialized _engine.Trie");
    return conditional_probs_py(*t, args[0], args[1], args[2]).release().ptr();
  });
}

}  // namespace

void bind_prune(py::module_& m);  // prune_bindings.cc
void bind_batches(py::module_& m);  // batch_bindings.cc
void bind_propose(py::module_& m);  // propose_bindings.cc
void bind_codecs(py::module_& m);  // codec_bindings.cc

PYBIND11_MODULE(_engine, m) {
  m.doc() = "The n-gram trie engine (C++). Use ngram_service.NgramIndex.";
  static py::exception<FormatError> format_error(m, "TrieFormatError", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const FormatError& e) {
      py::set_error(format_error, e.what());
    } catch (const InvalidArgument& e) {
      py::set_error(PyExc_ValueError, e.what());
    } catch (const Interrupted& e) {
      // A call stopped by its deadline (timeout.h words it) or its flag.
      py::set_error(PyExc_TimeoutError, e.what());
    }
  });

  m.attr("FORMAT_VERSION") = kFormatVersion;  // the trie file version TrieWriter (TrieV1Writer) writes
  m.attr("FORMAT_VERSION_2") = kFormatVersion2;  // written by write_trie_v2; both are read
  m.def("write_trie_v2", [](const TrieIndex& source, const std::string& path, py::bytes meta_json) {
        std::string meta = meta_json;
        py::gil_scoped_release nogil;
        return write_trie_v2(source, path, meta);
      }, py::arg("source"), py::arg("path"), py::arg("meta_json"),
      "Writes a format-version-2 trie (docs/FORMAT.md) from an open trie; returns its size.");
  m.attr("ZSTD_MAGIC") = py::bytes(reinterpret_cast<const char*>(kZstdMagic), sizeof(kZstdMagic));
  m.attr("TRIE_MAGIC") = py::bytes(kMagic, sizeof(kMagic));  // a trie file's first bytes
  m.attr("MAX_ORDER") = kMaxOrder;            // the longest n-gram a trie may store

  m.def("token_ids", [](const py::handle& ids, const std::string& field, int rank) {
    const Ids a(ids, field);
    a.require_rank(rank, field, rank == 1 ? "[n]" : "[B, n]");
    return py::array_t<int64_t>(std::vector<py::ssize_t>(a.array().shape(), a.array().shape() + rank), a.data());
  }, py::arg("ids"), py::arg("field"), py::arg("rank"),
     "Token ids as a new C-contiguous int64 array of the given rank, converted as every query converts them "
     "(ValueError naming `field` for floats or another rank).");

  m.def("file_head", [](const std::string& path, size_t n) {
    std::string head;
    {
      py::gil_scoped_release nogil;
      head = read_file_head(path, n);
    }
    return py::bytes(head);
  }, py::arg("path"), py::arg("n"),
     "The first n bytes of a file, opened as Trie.open opens one: TrieFormatError naming the path, at once, "
     "for anything but a regular file (a FIFO, a directory, a device).");

  m.def("read_dart_trie", [](const std::string& path) {
    DartNodes d;
    {
      py::gil_scoped_release nogil;
      d = read_dart_trie(path);
    }
    auto arr = [](auto& v) {
      using T = typename std::decay_t<decltype(v)>::value_type;
      return py::array_t<T>(v.size(), v.data());
    };
    return py::make_tuple(d.order, arr(d.token), arr(d.parent), arr(d.freq), arr(d.depth));
  }, py::arg("path"), "Reads a DART TrieNgram::save file: (order, token, parent, freq, depth) per node.");

  m.def("simd_search", [] { return std::string(simd_search_name(simd_search())); },
        "The vector search lookups use: \"avx512\", \"avx2\" or \"none\" (the portable one): AVX2, or AVX-512 on "
        "an AMD CPU that has it, unless NGRAM_ENGINE_SIMD is \"0\", \"avx2\" or \"avx512\".");

  m.def("crc32c", [](py::bytes data) {
    std::string_view s = data;
    return crc32c(s.data(), s.size());
  });

  py::class_<TrieIndex, std::shared_ptr<TrieIndex>>(m, "Trie")
      .def_static("open", [](const std::string& path, bool in_ram, bool verify) {
            py::gil_scoped_release nogil;
            return TrieIndex::open(path, in_ram ? TrieIndex::Load::kRam : TrieIndex::Load::kMap, verify);
          }, py::arg("path"), py::arg("in_ram") = false, py::arg("verify") = false)
      .def_static("from_bytes", [](py::bytes data, const std::string& name, bool verify) {
            std::string s = data;
            py::gil_scoped_release nogil;
            return TrieIndex::from_buffer(std::move(s), name, verify);
          }, py::arg("data"), py::arg("name"), py::arg("verify") = false)
      .def_property_readonly("order", &TrieIndex::order)
      .def_property_readonly("format_version", &TrieIndex::version)
      .def_property_readonly("vocab_size", &TrieIndex::vocab_size)
      .def_property_readonly("eos_id", &TrieIndex::eos_id)
      .def_property_readonly("meta_json", [](const TrieIndex& t) { return py::bytes(t.meta_json()); })
      .def_property_readonly("path", &TrieIndex::path)
      .def_property_readonly("file_size", &TrieIndex::file_size)
      .def_property_readonly("mapped", &TrieIndex::mapped)
      .def_property_readonly("decoded_bytes", &TrieIndex::decoded_bytes)
      .def_property_readonly("ram_bytes", &TrieIndex::ram_bytes)
      .def_property_readonly("total_tokens", &TrieIndex::total_tokens)
      .def("ngram_count", &TrieIndex::ngram_count, py::arg("k"))
      .def("sections", [](const TrieIndex& t) {
        py::list out;
        for (const SectionEntry& s : t.sections()) {
          py::dict d;
          d["kind"] = section_kind_name(s.kind);
          d["level"] = s.level;
          d["offset"] = s.offset;
          d["length"] = s.length;
          d["count"] = s.count;
          d["width"] = s.width;
          d["crc32c"] = s.crc;
          out.append(d);
        }
        return out;
      })
      .def("verify_checksums", [](const TrieIndex& t) {
        py::gil_scoped_release nogil;
        t.verify_checksums();
      })
      .def("count", [](const TrieIndex& t, const py::handle& ngram_in) {
        const Ids ngram(ngram_in, "ngram");
        ngram.require_rank(1, "ngram", "[n]");
        return count_ngram(t, ngram.data(), ngram.size());
      }, py::arg("ngram"))
      .def("topk", [](const TrieIndex& t, const py::handle& context_in, const py::handle& k_in) {
        const Ids context(context_in, "context");
        context.require_rank(1, "context", "[C]");
        const int64_t k = integer(k_in, "k", "an integer >= 0");
        TopK r;
        {
          py::gil_scoped_release nogil;
          r = topk(t, context.data(), context.size(), k);
        }
        return py::make_tuple(py::array_t<int32_t>(r.tokens.size(), r.tokens.data()),
                              py::array_t<float>(r.probs.size(), r.probs.data()),
                              py::array_t<uint64_t>(r.counts.size(), r.counts.data()), r.matched);
      }, py::arg("context"), py::arg("k"));

  // conditional_probs: a fast-call method (fastcall.h), called once per
  // query by some callers.
  add_fastcall(m, "conditional_probs", &conditional_probs_fastcall,
               "conditional_probs(contexts, candidates, *, timeout=None)\nDART-compatible conditional probabilities "
               "(see ngram_service.NgramIndex.conditional_probs).",
               m.attr("Trie"));
  bind_batches(m);
  bind_prune(m);  // after Trie, whose method prune becomes
  bind_propose(m);  // after Trie and DraftTree
  bind_codecs(m);   // after DraftTree
  ngram_py::bind_param_tables(m);

  // The version-1 writer (TrieV1Writer), as Python has always named it.
  py::class_<TrieV1Writer>(m, "TrieWriter")
      .def(py::init([](const std::string& path, uint32_t order, uint64_t vocab_size, int64_t eos_id,
                       py::bytes meta_json, const std::vector<uint64_t>& sizes,
                       const std::vector<std::vector<uint64_t>>& count_values,
                       const std::vector<std::vector<uint64_t>>& count_frequencies) {
             if (sizes.size() != count_values.size() || sizes.size() != count_frequencies.size())
               throw InvalidArgument("sizes, count_values and count_frequencies differ in length");
             std::vector<LevelSpec> specs(sizes.size());
             for (size_t i = 0; i < sizes.size(); ++i) specs[i] = LevelSpec{sizes[i], count_values[i], count_frequencies[i]};
             return std::make_unique<TrieV1Writer>(path, order, vocab_size, eos_id, std::string(meta_json),
                                                   std::move(specs));
           }),
           py::arg("path"), py::arg("order"), py::arg("vocab_size"), py::arg("eos_id"), py::arg("meta_json"),
           py::arg("sizes"), py::arg("count_values"), py::arg("count_frequencies"))
      .def("append", [](TrieV1Writer& w, uint32_t k, py::object tokens, py::object counts_in, py::object n_children) {
        const U64Array counts = integers<uint64_t>(counts_in, "counts");
        const uint64_t n = counts.ndim() == 1 ? counts.shape(0) : 0;
        if (counts.ndim() != 1) throw InvalidArgument("counts must be 1-D");
        I32Array tok;
        U64Array ch;
        if (!tokens.is_none()) {
          tok = integers<int32_t>(tokens, "tokens");
          if (tok.ndim() != 1 || static_cast<uint64_t>(tok.shape(0)) != n) throw InvalidArgument("tokens must be 1-D like counts");
        }
        if (!n_children.is_none()) {
          ch = integers<uint64_t>(n_children, "n_children");
          if (ch.ndim() != 1 || static_cast<uint64_t>(ch.shape(0)) != n) throw InvalidArgument("n_children must be 1-D like counts");
        }
        const int32_t* tp = tokens.is_none() ? nullptr : tok.data();
        const uint64_t* cp = n_children.is_none() ? nullptr : ch.data();
        if (k >= 2 && !tp) throw InvalidArgument("tokens are required for levels >= 2");
        const uint64_t* vp = counts.data();
        py::gil_scoped_release nogil;
        w.append(k, n, tp, vp, cp);
      }, py::arg("k"), py::arg("tokens"), py::arg("counts"), py::arg("n_children"))
      .def("finish", [](TrieV1Writer& w) {
        py::gil_scoped_release nogil;
        w.finish();
      })
      .def_property_readonly("file_size", &TrieV1Writer::file_size);
}
