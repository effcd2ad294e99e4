// Functions called once per draft step (prune, propose, conditional_probs)
// as plain CPython METH_FASTCALL | METH_KEYWORDS functions rather than
// pybind11 ones: their Python overhead is part of every step's latency, and
// pybind11's dispatcher (keyword names matched by strcmp, then each
// argument's caster) costs about a microsecond more per call. The other
// functions that take prune's or propose's parameters are fast-call too,
// so that every one has the signature made from the engine's table
// (param_conversion.h). Everything else stays pybind11.
#pragma once
#include <pybind11/pybind11.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace ngram_py {

namespace py = pybind11;

// A function's parameter names (interned once, so that the keyword names of
// a call, interned by the compiler, match by pointer), how many of them may
// be passed by position, and how many of those are required (all, unless
// `required` says fewer).
template <size_t N>
class Signature {
 public:
  Signature(const char* function, std::array<const char*, N> names, size_t positional, size_t required = SIZE_MAX)
      : function_(function), names_(names), positional_(positional), required_(std::min(required, positional)) {}

  // Fills args[i] (borrowed) with parameter i's value, nullptr where it is
  // not given. Returns false with a TypeError set, as Python words it, for
  // extra positional arguments, an unknown or repeated keyword, or a missing
  // positional parameter.
  bool bind(PyObject* const* in, Py_ssize_t nargsf, PyObject* kwnames, PyObject* (&args)[N]) const {
    if (!interned_[0] && !intern()) return false;
    const size_t n_pos = static_cast<size_t>(PyVectorcall_NARGS(nargsf));
    if (n_pos > positional_) {
      PyErr_Format(PyExc_TypeError, "%s() takes %zu positional arguments but %zu were given", function_,
                   positional_, n_pos);
      return false;
    }
    for (size_t i = 0; i < N; ++i) args[i] = i < n_pos ? in[i] : nullptr;
    const Py_ssize_t n_kw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < n_kw; ++k) {
      PyObject* name = PyTuple_GET_ITEM(kwnames, k);
      const size_t i = find(name);
      if (i == N) {
        PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", function_, name);
        return false;
      }
      if (args[i]) {
        PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", function_, names_[i]);
        return false;
      }
      args[i] = in[n_pos + static_cast<size_t>(k)];
    }
    for (size_t i = 0; i < required_; ++i) {
      if (!args[i]) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", function_, names_[i]);
        return false;
      }
    }
    return true;
  }

 private:
  bool intern() const {
    for (size_t i = 0; i < N; ++i)
      if (!(interned_[i] = PyUnicode_InternFromString(names_[i]))) return false;  // kept for the process
    return true;
  }
  size_t find(PyObject* name) const {
    for (size_t i = 0; i < N; ++i)
      if (name == interned_[i]) return i;
    for (size_t i = 0; i < N; ++i)  // a name built at run time (e.g. **{"beam" + "_width": 4})
      if (PyUnicode_Compare(name, interned_[i]) == 0) return i;
    return N;
  }

  const char* function_;
  std::array<const char*, N> names_;
  size_t positional_;
  size_t required_;
  mutable std::array<PyObject*, N> interned_{};
};

// Runs body (which returns a new reference) with C++ exceptions turned into
// Python ones by the module's translators, as pybind11's own functions do.
template <class Body>
PyObject* translate_exceptions(Body&& body) {
  try {
    return body();
  } catch (...) {
    py::detail::try_translate_exceptions();
    return nullptr;
  }
}

// The C++ object of a pybind11-bound class's instance, or nullptr when `obj`
// is not one (pybind11's caster reached without its per-call type search).
template <class T>
T* bound_object(PyObject* obj) {
  static py::detail::type_info* const type = py::detail::get_type_info(typeid(T));
  if (!type || !PyObject_TypeCheck(obj, type->type)) return nullptr;
  auto vh = reinterpret_cast<py::detail::instance*>(obj)->get_value_and_holder(type, false);
  return vh ? vh.template value_ptr<T>() : nullptr;
}

// A METH_FASTCALL | METH_KEYWORDS C function.
using FastCall = PyObject* (*)(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames);

// `call` as the module-level function `name` of `scope` (self: nullptr) or,
// with `method_of`, a method of that class; `doc` its docstring (a head
// "name(...)\n--\n\n" is its signature for help() and inspect). The
// definition and the docstring are kept for the process, as CPython needs.
inline void add_fastcall(py::handle scope, const char* name, FastCall call, std::string doc,
                         py::handle method_of = py::handle()) {
  auto* def = new PyMethodDef{name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(call)),
                              METH_FASTCALL | METH_KEYWORDS, (new std::string(std::move(doc)))->c_str()};
  py::object f;
  if (method_of)
    f = py::reinterpret_steal<py::object>(PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(method_of.ptr()), def));
  else
    f = py::reinterpret_steal<py::object>(PyCFunction_NewEx(def, nullptr, py::getattr(scope, "__name__").ptr()));
  if (!f) throw py::error_already_set();
  py::setattr(method_of ? method_of : scope, name, f);
}

}  // namespace ngram_py
