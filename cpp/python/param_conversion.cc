#include "param_conversion.h"

#include <pybind11/numpy.h>

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

void load_prune_params(const PruneParamHandles& v, PruneParams& p) {
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
  for (const auto& item : py::reinterpret_borrow<py::dict>(params)) {
    const std::string key = py::str(item.first);
    size_t i = 0;
    while (i < kPruneParamNames.size() && key != kPruneParamNames[i]) ++i;
    if (i == kPruneParamNames.size()) {
      std::string known;
      for (const char* n : kPruneParamNames) known += std::string(known.empty() ? "" : ", ") + n;
      throw py::type_error("prune: unexpected keyword '" + key + "'; parameters are " + known);
    }
    if (!item.second.is_none()) h[i] = item.second;
  }
  GivenPruneParams g;
  load_prune_params(h, g.values);
  g.beam_width = static_cast<bool>(h[0]);
  g.max_nodes = static_cast<bool>(h[1]);
  g.ngram_weight = static_cast<bool>(h[2]);
  return g;
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
