#include "param_conversion.h"

#include <pybind11/numpy.h>

#include <pybind11/stl.h>

#include <array>
#include <string>
#include <vector>

#include "arrays.h"
#include "checks.h"
#include "errors.h"

namespace py = pybind11;
using namespace ngram;

namespace ngram_py {

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

// A float32 as the decimal it was written as (1e-4, not 9.99999975e-05).
double written(float v) { return std::stod(number_text(v)); }

}  // namespace

// An integer field's range as its messages write it ("1..1024"), made once.
static const std::string& integer_range(uint32_t i) {
  static const std::array<std::string, kPruneFieldCount> ranges = [] {
    std::array<std::string, kPruneFieldCount> r;
    for (uint32_t j = 0; j < kPruneFieldCount; ++j)
      if (kPruneFields[j].integer) r[j] = std::to_string(kPruneFields[j].lo) + ".." + std::to_string(kPruneFields[j].hi);
    return r;
  }();
  return ranges[i];
}

void load_prune_params(const PruneParamHandles& v, PruneParams& p) {
  std::vector<float> level = std::move(p.level_weights), logit = std::move(p.logit_weights);
  p = PruneParams{};  // the defaults; the weights' buffers are kept
  p.level_weights = std::move(level);
  p.logit_weights = std::move(logit);
  for (uint32_t i = 0; i < kPruneFieldCount; ++i) {
    const PruneField& f = kPruneFields[i];
    const py::handle h = v[i];
    if (f.weights) {
      weights(h ? h : py::none(), f.name, p.*f.weights);
      continue;
    }
    if (!h) continue;
    if (f.integer) {
      p.*f.integer = integer(h, f.name, integer_range(i));
    } else if (f.weight) {
      const double w = PyFloat_Check(h.ptr()) ? PyFloat_AS_DOUBLE(h.ptr()) : PyFloat_AsDouble(h.ptr());
      if (w == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        throw InvalidArgument(std::string(f.name) + " must be a number, got " + std::string(py::repr(h)));
      }
      p.*f.weight = static_cast<float>(w);
    } else if (f.token) {
      if (h.is_none()) continue;
      if (py::isinstance<py::bool_>(h) || !PyIndex_Check(h.ptr()))
        throw InvalidArgument(std::string(f.name) + " must be an integer or None, got " + std::string(py::repr(h)));
      p.*f.token = integer(h, f.name, "-1 (none) or in [0, vocab_size)");
    } else {
      const int truth = PyObject_IsTrue(h.ptr());
      if (truth < 0) throw py::error_already_set();
      p.*f.flag = truth != 0;
    }
  }
}

ngram::PruneParams make_params(const py::handle& beam_width, const py::handle& max_nodes, const py::handle& ngram_weight,
                               const py::handle& level_weights, const py::handle& logit_weights, const py::handle& eos,
                               const py::handle& ngram_on_first_level) {
  ngram::PruneParams p;
  load_prune_params({beam_width, max_nodes, ngram_weight, level_weights, logit_weights, eos, ngram_on_first_level},
                    p);
  return p;
}

GivenPruneParams given_prune_params(const py::handle& params) {
  PruneParamHandles h{};
  GivenPruneParams g;
  for (const auto& item : py::reinterpret_borrow<py::dict>(params)) {
    const std::string key = py::str(item.first);
    uint32_t i = 0;
    while (i < kPruneFieldCount && key != kPruneFields[i].name) ++i;
    if (i == kPruneFieldCount) {
      std::string known;
      for (const PruneField& f : kPruneFields) known += std::string(known.empty() ? "" : ", ") + f.name;
      throw py::type_error("prune: unexpected keyword '" + key + "'; parameters are " + known);
    }
    if (!item.second.is_none()) {
      h[i] = item.second;
      g.given |= 1u << i;
    }
  }
  load_prune_params(h, g.values);
  return g;
}

py::dict prune_params_dict(const PruneParams& p, bool defaults_only) {
  py::dict out;
  for (const PruneField& f : kPruneFields) {
    if (f.integer) out[f.name] = p.*f.integer;
    else if (f.weight) out[f.name] = static_cast<double>(p.*f.weight);
    else if (defaults_only) continue;
    else if (f.weights) out[f.name] = p.*f.weights;
    else if (f.token) out[f.name] = p.*f.token ? py::object(py::int_(*(p.*f.token))) : py::object(py::none());
    else out[f.name] = p.*f.flag;
  }
  return out;
}

GivenProposeParams given_propose_params(const py::handle& params, const char* call, bool skip_timeout,
                                        bool none_unset) {
  GivenProposeParams g;
  ProposeParams& p = g.values;
  for (const auto& item : py::reinterpret_borrow<py::dict>(params)) {
    const std::string key = py::str(item.first);
    const py::handle v = item.second;
    if (skip_timeout && key == "timeout") continue;
    if (none_unset && v.is_none()) continue;
    uint32_t i = 0;
    while (i < kProposeFieldCount && key != kProposeFields[i].name) ++i;
    if (i == kProposeFieldCount) {
      std::string known;
      for (const ProposeField& f : kProposeFields) known += std::string(known.empty() ? "" : ", ") + f.name;
      throw py::type_error(std::string(call) + ": unexpected keyword '" + key + "'; parameters are " + known +
                           (skip_timeout ? ", timeout" : ""));
    }
    const ProposeField& f = kProposeFields[i];
    if (f.integer) p.*f.integer = integer(v, f.name, std::to_string(f.lo) + ".." + std::to_string(f.hi));
    else if (f.unit) p.*f.unit = static_cast<float>(real(v, f.name));
    else p.*f.flag = truth(v, f.name);
    g.given |= 1u << i;
  }
  return g;
}

py::dict propose_params_dict(const ProposeParams& p, bool as_written) {
  py::dict out;
  for (const ProposeField& f : kProposeFields) {
    if (f.integer) out[f.name] = p.*f.integer;
    else if (f.unit) out[f.name] = as_written ? written(p.*f.unit) : static_cast<double>(p.*f.unit);
    else out[f.name] = p.*f.flag;
  }
  return out;
}

}  // namespace ngram_py
