// Conversions from Python objects to the engine's types, shared by every
// binding. They convert and check only what a conversion needs (a dtype, a
// rank, a Python type); the engine checks values and limits.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "errors.h"

namespace ngram_py {

namespace py = pybind11;
using I32Array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using I64Array = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
using U64Array = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>;
using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

// numpy's spelling of a shape: "(2, 3)", "(4,)".
inline std::string shape_str(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

// Token ids as the engine's int64, from any integer array or sequence. A
// C-contiguous int64 array is used where it lies; an int32 one (what
// tokenizers and the golden data give) is widened here, which costs less than
// numpy's conversion into a new array. Floats are refused, not truncated;
// `[]` (numpy's float64 when empty) is an empty list of ids.
class Ids {
 public:
  Ids() = default;
  Ids(const py::handle& h, const std::string& field) { load(h, field); }

  void load(const py::handle& h, const std::string& field) {
    if (py::isinstance<py::array>(h)) {
      array_ = py::reinterpret_borrow<py::array>(h);
    } else {
      array_ = py::array::ensure(h);
      if (!array_) {
        PyErr_Clear();
        throw ngram::InvalidArgument(field + ": token ids must be integers, got " +
                                     std::string(py::str(py::type::of(h).attr("__name__"))));
      }
    }
    const char kind = array_.dtype().kind();
    const bool c_order = array_.flags() & py::array::c_style;
    if (kind == 'i' && array_.itemsize() == 8 && c_order) {
      data_ = static_cast<const int64_t*>(array_.data());
      return;
    }
    if (kind == 'i' && array_.itemsize() == 4 && c_order) {
      const int32_t* p = static_cast<const int32_t*>(array_.data());
      wide_.assign(p, p + array_.size());
      data_ = wide_.data();
      return;
    }
    if (kind == 'f' && array_.size() == 0) {
      array_ = py::array_t<int64_t>(std::vector<py::ssize_t>(array_.shape(), array_.shape() + array_.ndim()));
      data_ = static_cast<const int64_t*>(array_.data());
      return;
    }
    if (kind == 'O')  // numpy's dtype for a list holding an int outside int64
      throw ngram::InvalidArgument(field + ": token ids must be integers in [-2**63, 2**63), got " +
                                   std::string(py::repr(h)).substr(0, 200));
    if (kind != 'i' && kind != 'u')
      throw ngram::InvalidArgument(field + ": token ids must be integers, got dtype " +
                                   std::string(py::str(array_.dtype())));
    if (kind == 'u' && array_.itemsize() == 8 && array_.size() > 0) {
      const py::object top = array_.attr("max")();
      if (top.cast<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        throw ngram::InvalidArgument(field + ": token id " + std::string(py::str(top)) + " out of range");
    }
    array_ = py::cast<I64Array>(array_);
    data_ = static_cast<const int64_t*>(array_.data());
  }

  const py::array& array() const { return array_; }
  const int64_t* data() const { return data_; }
  uint64_t size() const { return static_cast<uint64_t>(array_.size()); }
  int ndim() const { return static_cast<int>(array_.ndim()); }
  uint64_t shape(int i) const { return static_cast<uint64_t>(array_.shape(i)); }
  // Throws unless the ids form a `rank`-D array; `what` names the axes ("[B, C]").
  void require_rank(int rank, const std::string& field, const char* what) const {
    if (ndim() != rank)
      throw ngram::InvalidArgument(field + " must be " + std::to_string(rank) + "-D " + what + ", got shape " +
                                   shape_str(array_));
  }

 private:
  py::array array_;           // the input (kept alive) or its int64 conversion
  std::vector<int64_t> wide_; // the widened int32 ids
  const int64_t* data_ = nullptr;
};

// float32 numbers from any array or sequence of numbers.
inline F32Array floats(const py::handle& h, const std::string& field, const char* what) {
  try {
    return py::cast<F32Array>(h);
  } catch (const py::cast_error&) {
  } catch (const py::error_already_set&) {
  }
  throw ngram::InvalidArgument(field + ": " + what + " must be numbers");
}

// A Python int (or numpy integer), never a bool or a float. One that does
// not fit int64 cannot reach the engine's check, so it is refused here in the
// engine's words: the field, the value, and `range`, the field's valid range.
inline int64_t integer(const py::handle& h, const char* field, const std::string& range) {
  if (py::isinstance<py::bool_>(h) || !PyIndex_Check(h.ptr()))
    throw ngram::InvalidArgument(std::string(field) + " must be an integer, got " + std::string(py::repr(h)));
  const py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(h.ptr()));
  if (!i) throw py::error_already_set();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (overflow) throw ngram::InvalidArgument(std::string(field) + " = " + std::string(py::str(i)) + ": must be " + range);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  return v;
}

}  // namespace ngram_py
