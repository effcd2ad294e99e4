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
  // pybind's bool without conversion: True, False and numpy's bools; "no" or 1 is no switch.
  py::detail::make_caster<bool> caster;
  if (!caster.load(h, false))
    throw InvalidArgument(std::string(field) + " must be True or False, got " + std::string(py::repr(h)));
  return static_cast<bool>(caster);
}

// A float32 as the decimal it was written as (1e-4, not 9.99999975e-05).
double written(float v) { return std::stod(number_text(v)); }

}  // namespace

// A table's integer fields' ranges as their messages write them ("1..1024"), made once.
template <class Field, size_t N>
static const std::string& integer_range(const Field (&table)[N], uint32_t i) {
  static const std::array<std::string, N> ranges = [&table] {
    std::array<std::string, N> r;
    for (size_t j = 0; j < N; ++j)
      if (table[j].integer) r[j] = std::to_string(table[j].lo) + ".." + std::to_string(table[j].hi);
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
      p.*f.integer = integer(h, f.name, integer_range(kPruneFields, i));
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
      p.*f.flag = truth(h, f.name);  // True or False, as propose's switches: "no" is no True
    }
  }
}

void load_propose_params(const ProposeParamHandles& v, ProposeParams& p) {
  p = ProposeParams{};
  for (uint32_t i = 0; i < kProposeFieldCount; ++i) {
    const ProposeField& f = kProposeFields[i];
    const py::handle h = v[i];
    if (!h || h.is_none()) continue;  // not given: the table's default
    if (f.integer) p.*f.integer = integer(h, f.name, integer_range(kProposeFields, i));
    else if (f.unit) p.*f.unit = static_cast<float>(real(h, f.name));
    else p.*f.flag = truth(h, f.name);
  }
}

// A float default as Python writes it (1.0, not 1: a float in help()).
static std::string float_text(float v) {
  std::string s = number_text(v);
  return s.find_first_of(".en") == std::string::npos ? s + ".0" : s;
}

// A default as Python writes it in a signature.
static std::string default_text(const PruneField& f, const PruneParams& d) {
  if (f.integer) return std::to_string(d.*f.integer);
  if (f.weight) return float_text(d.*f.weight);
  if (f.flag) return d.*f.flag ? "True" : "False";
  return "None";  // a weight per level (DART's), the token (the trie's)
}
static std::string default_text(const ProposeField& f, const ProposeParams& d) {
  if (f.integer) return std::to_string(d.*f.integer);
  if (f.unit) return float_text(d.*f.unit);
  return d.*f.flag ? "True" : "False";
}

// The docstring of a binding that takes a table's keywords (param_conversion.h).
template <class Params, class Field, size_t N>
static std::string call_doc(const Field (&table)[N], const std::string& name, const std::string& lead,
                            const std::string& trail, const std::string& doc) {
  const Params defaults;
  std::string s = name + "(" + lead + (lead.empty() ? "*" : ", *");
  for (const Field& f : table) s += std::string(", ") + f.name + "=" + default_text(f, defaults);
  if (!trail.empty()) s += ", " + trail;
  return s + ")\n--\n\n" + doc;
}

std::string prune_call_doc(const std::string& name, const std::string& lead, const std::string& trail,
                           const std::string& doc) {
  return call_doc<PruneParams>(kPruneFields, name, lead, trail, doc);
}

std::string propose_call_doc(const std::string& name, const std::string& lead, const std::string& trail,
                             const std::string& doc) {
  return call_doc<ProposeParams>(kProposeFields, name, lead, trail, doc);
}

// A dict's keywords as a table's handles (None: not given); returns which
// were given (bit i: row i). An unknown name is a TypeError naming `call`
// and the table's names.
template <class Field, size_t N>
static uint32_t dict_handles(const Field (&table)[N], const py::handle& params, const char* call,
                             std::array<py::handle, N>& h) {
  uint32_t given = 0;
  for (const auto& item : py::reinterpret_borrow<py::dict>(params)) {
    const std::string key = py::str(item.first);
    uint32_t i = 0;
    while (i < N && key != table[i].name) ++i;
    if (i == N) {
      std::string known;
      for (const Field& f : table) known += std::string(known.empty() ? "" : ", ") + f.name;
      throw py::type_error(std::string(call) + ": unexpected keyword '" + key + "'; parameters are " + known);
    }
    if (!item.second.is_none()) {
      h[i] = item.second;
      given |= 1u << i;
    }
  }
  return given;
}

GivenPruneParams given_prune_params(const py::handle& params) {
  PruneParamHandles h{};
  GivenPruneParams g;
  g.given = dict_handles(kPruneFields, params, "prune", h);
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

GivenProposeParams given_propose_params(const py::handle& params) {
  ProposeParamHandles h{};
  GivenProposeParams g;
  g.given = dict_handles(kProposeFields, params, "propose", h);
  load_propose_params(h, g.values);
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
