#include "param_conversion.h"

#include <pybind11/numpy.h>

#include <pybind11/stl.h>

#include <array>
#include <stdexcept>
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
    if (!h || h.is_none()) continue;  // not given: the table's default
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

PruneParamHandles prune_handles(PyObject* const* args, size_t first) {
  PruneParamHandles h;
  for (size_t i = 0; i < h.size(); ++i) h[i] = args[first + i];
  return h;
}

// A default as Python writes it in a signature.
static std::string default_text(const PruneField& f, const PruneParams& d) {
  if (f.integer) return std::to_string(d.*f.integer);
  if (f.weight) return number_text(d.*f.weight);
  if (f.flag) return d.*f.flag ? "True" : "False";
  return "None";  // a weight per level (DART's), the token (the trie's)
}

std::string prune_call_doc(const std::string& name, const std::string& lead, const std::string& trail,
                           const std::string& doc) {
  const PruneParams defaults;
  std::string s = name + "(" + lead + (lead.empty() ? "*" : ", *");
  for (const PruneField& f : kPruneFields) s += std::string(", ") + f.name + "=" + default_text(f, defaults);
  if (!trail.empty()) s += ", " + trail;
  return s + ")\n--\n\n" + doc;
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

namespace ngram_py {

namespace {

py::dict field_row(const char* name, const py::handle& type, const py::object& value, const py::object& low,
                   const py::object& high, const char* help) {
  py::dict row;
  row["name"] = name;
  row["type"] = type;
  row["default"] = value;
  row["low"] = low;
  row["high"] = high;
  row["help"] = help;
  return row;
}

py::dict integer_row(const char* name, int64_t value, int64_t lo, int64_t hi, const char* help) {
  return field_row(name, py::type::of(py::int_()), py::int_(value), py::int_(lo), py::int_(hi), help);
}

// A float's default as the decimal it was written as.
py::dict real_row(const char* name, float value, double lo, double hi, const char* help) {
  return field_row(name, py::type::of(py::float_()), py::float_(written(value)), py::float_(lo), py::float_(hi), help);
}

py::dict flag_row(const char* name, bool value, const char* help) {
  return field_row(name, py::type::of(py::bool_()), py::bool_(value), py::none(), py::none(), help);
}

// A table's rows: its integers and flags alike for both tables, the rest by `other`.
template <class Field, size_t N, class Params, class Other>
py::tuple table_rows(const Field (&table)[N], const Params& d, Other other) {
  py::tuple rows(N);
  for (size_t i = 0; i < N; ++i) {
    const Field& f = table[i];
    if (f.integer) rows[i] = integer_row(f.name, d.*f.integer, f.lo, f.hi, f.help);
    else if (f.flag) rows[i] = flag_row(f.name, d.*f.flag, f.help);
    else rows[i] = other(f);
  }
  return rows;
}

py::tuple prune_fields() {
  const PruneParams d;
  return table_rows(kPruneFields, d, [&d](const PruneField& f) -> py::dict {
    if (f.weight) return real_row(f.name, d.*f.weight, 0.0, PruneLimits::kMaxWeight, f.help);
    if (f.weights)  // None: DART's weights
      return field_row(f.name, py::type::of(py::list()), py::none(), py::float_(0.0),
                       py::float_(PruneLimits::kMaxWeight), f.help);
    // the token: None, the trie's EOS; its upper bound is the trie's vocabulary
    return field_row(f.name, py::type::of(py::int_()), py::none(), py::int_(f.lo), py::none(), f.help);
  });
}

py::tuple propose_fields() {
  const ProposeParams d;
  return table_rows(kProposeFields, d, [&d](const ProposeField& f) -> py::dict {
    if (f.unit) return real_row(f.name, d.*f.unit, 0.0, 1.0, f.help);  // check_unit's range (checks.h)
    // A kind of member added to ProposeField needs its row here.
    throw std::logic_error(std::string("PROPOSE_FIELDS: no row for ") + f.name + "'s kind");
  });
}

}  // namespace

void bind_param_tables(py::module_& m) {
  m.attr("PRUNE_FIELDS") = prune_fields();
  m.attr("PROPOSE_FIELDS") = propose_fields();
}

}  // namespace ngram_py
