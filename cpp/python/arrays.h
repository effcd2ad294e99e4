// Conversions from Python objects to the engine's types, shared by every
// binding. They convert and check only what a conversion needs (a dtype, a
// rank, a Python type); the engine checks values and limits.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <limits>
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

// A numpy array's element type, when its bytes are in this machine's order
// and C-contiguous (what a caller's arrays almost always are): npy_api's
// type number; -1 for anything else. Read from the object, without the
// conversions py::array's accessors make.
inline int plain_array_type(const py::handle& h) {
  if (!py::isinstance<py::array>(h)) return -1;
  const auto* a = py::detail::array_proxy(h.ptr());
  const auto* d = py::detail::array_descriptor_proxy(a->descr);
  if (d->byteorder == '>' || !(a->flags & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_) ||
      !(a->flags & py::detail::npy_api::NPY_ARRAY_ALIGNED_))
    return -1;
  return d->type_num;
}

// The data of a float32 array in native order, C-contiguous; else nullptr.
inline const float* native_floats(const py::handle& h) {
  return plain_array_type(h) == py::detail::npy_api::NPY_FLOAT_
             ? reinterpret_cast<const float*>(py::detail::array_proxy(h.ptr())->data)
             : nullptr;
}

// A new C-ordered numpy array of `rank` <= 2 dimensions, made by numpy's C
// API directly (py::array's constructors allocate its shape and strides on
// the heap first: a per-query cost where one query is the whole call).
template <class T>
py::array_t<T> new_array(int rank, py::ssize_t rows, py::ssize_t cols = 0) {
  auto& api = py::detail::npy_api::get();
  Py_intptr_t dims[2] = {rows, cols};
  PyObject* descr = py::dtype::of<T>().release().ptr();  // a reference numpy's constructor steals
  PyObject* a = api.PyArray_NewFromDescr_(api.PyArray_Type_, descr, rank, dims, nullptr, nullptr, 0, nullptr);
  if (!a) throw py::error_already_set();
  return py::reinterpret_steal<py::array_t<T>>(a);
}

// The one rule on what a numeric argument's array may hold, for every
// array argument of every binding: real numbers (numpy kinds f, i, u).
// Any other dtype is refused naming the field and the dtype, never cast: a
// cast would drop a complex number's imaginary part, read True as 1, parse
// strings, or call each object's __float__; a void (record) array, a
// datetime or a timedelta holds no plain numbers at all.
inline void require_real(const py::array& a, const std::string& field) {
  const char kind = a.dtype().kind();
  if (kind == 'f' || kind == 'i' || kind == 'u') return;
  throw ngram::InvalidArgument(field + ": dtype " + std::string(py::str(a.dtype())) +
                               " is not a real number type");
}

// Token ids as the engine's int64, from any integer array or sequence. A
// C-contiguous int64 array is used where it lies; so is an int32 one (what
// tokenizers and the golden data give), for the queries that take int32 ids,
// and widened on first use of data() for the others, which costs less than
// numpy's conversion into a new array. Floats are refused, not truncated,
// as is whatever require_real refuses; `[]` (numpy's float64 when empty) is
// an empty list of ids.
class Ids {
 public:
  Ids() = default;
  Ids(const py::handle& h, const std::string& field) { load(h, field); }

  void load(const py::handle& h, const std::string& field) {
    data_ = nullptr;
    int32_ = nullptr;
    if (use_native(h)) return;
    py::array a = py::reinterpret_steal<py::array>(py::handle());
    if (py::isinstance<py::array>(h)) {
      a = py::reinterpret_borrow<py::array>(h);
    } else {
      a = py::array::ensure(h);
      if (!a) {
        PyErr_Clear();
        throw ngram::InvalidArgument(field + ": token ids must be integers, got " +
                                     std::string(py::str(py::type::of(h).attr("__name__"))));
      }
      if (use_native(a)) return;
    }
    const char kind = a.dtype().kind();
    if (kind == 'f' && a.size() == 0) {
      array_ = py::array_t<int64_t>(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()));
      data_ = static_cast<const int64_t*>(array_.data());
      return;
    }
    if (kind == 'O' && !py::isinstance<py::array>(h))  // numpy's dtype for a list holding an int outside int64
      throw ngram::InvalidArgument(field + ": token ids must be integers in [-2**63, 2**63), got " +
                                   std::string(py::repr(h)).substr(0, 200));
    require_real(a, field);
    if (kind == 'f')
      throw ngram::InvalidArgument(field + ": token ids must be integers, got dtype " +
                                   std::string(py::str(a.dtype())));
    if (kind == 'u' && a.itemsize() == 8 && a.size() > 0) {
      const py::object top = a.attr("max")();
      if (top.cast<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        throw ngram::InvalidArgument(field + ": token id " + std::string(py::str(top)) + " out of range");
    }
    array_ = py::cast<I64Array>(a);  // another order, type or layout: a converted copy
    data_ = static_cast<const int64_t*>(array_.data());
  }

  // The ids as int64 (an int32 input widened on first use).
  const int64_t* data() const {
    if (!data_ && int32_) {
      wide_.assign(int32_, int32_ + size());
      data_ = wide_.data();
    }
    return data_;
  }
  // The ids where they lie when the input is a native int32 array, else nullptr.
  const int32_t* int32_data() const { return int32_; }
  const py::array& array() const { return array_; }
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
  // The input (kept alive) or its int64 conversion; null until loaded (a
  // default py::array would be a new empty numpy array).
  py::array array_ = py::reinterpret_steal<py::array>(py::handle());
  const int32_t* int32_ = nullptr;     // the input's ids, when it is a native int32 array
  mutable std::vector<int64_t> wide_;  // int32_ widened
  mutable const int64_t* data_ = nullptr;

  // Uses a C-contiguous int64 or int32 array in this machine's byte order where it lies.
  bool use_native(const py::handle& h) {
    const int type = plain_array_type(h);
    if (type != py::detail::npy_api::NPY_INT64_ && type != py::detail::npy_api::NPY_INT32_) return false;
    array_ = py::reinterpret_borrow<py::array>(h);
    void* at = py::detail::array_proxy(h.ptr())->data;
    if (type == py::detail::npy_api::NPY_INT64_)
      data_ = static_cast<const int64_t*>(at);
    else
      int32_ = static_cast<const int32_t*>(at);
    return true;
  }
};

// float32 numbers from any array or sequence of numbers. A float64 beyond
// float32's range is refused here, naming the value given: the cast would
// make it inf (with numpy's overflow warning), and the engine would then
// refuse inf, a value the caller never wrote.
inline F32Array floats(const py::handle& h, const std::string& field, const char* what) {
  if (native_floats(h)) return py::reinterpret_borrow<F32Array>(h);  // used where it lies
  py::array a = py::array::ensure(h);
  if (a) require_real(a, field);
  if (a && a.dtype().kind() == 'f' && a.itemsize() == 8) {
    using F64Array = py::array_t<double, py::array::c_style | py::array::forcecast>;
    const F64Array d = F64Array::ensure(a);
    if (!d) throw py::error_already_set();
    for (py::ssize_t i = 0; i < d.size(); ++i) {
      const double x = d.data()[i];
      if (std::isfinite(x) && std::fabs(x) > std::numeric_limits<float>::max()) {
        std::string at;
        for (py::ssize_t dim = d.ndim() - 1, rest = i; dim >= 0; --dim) {
          at = "[" + std::to_string(rest % d.shape(dim)) + "]" + at;
          rest /= d.shape(dim);
        }
        throw ngram::InvalidArgument(field + at + " = " + std::string(py::repr(py::float_(x))) +
                                     ": beyond float32's range (largest " +
                                     std::string(py::repr(py::float_(std::numeric_limits<float>::max()))) + ")");
      }
    }
  }
  PyErr_Clear();  // ensure() failing leaves an error: the cast below says what the field needs
  try {
    return py::cast<F32Array>(a ? py::handle(a) : h);
  } catch (const py::cast_error&) {
  } catch (const py::error_already_set&) {
  }
  throw ngram::InvalidArgument(field + ": " + what + " must be numbers");
}

// An integer array of any shape as T (C-contiguous; converted when it is
// another integer type), from any array or sequence: require_real's rule,
// and floats refused rather than truncated.
template <class T>
py::array_t<T, py::array::c_style | py::array::forcecast> integers(const py::handle& h, const std::string& field) {
  py::array a = py::array::ensure(h);
  if (!a) {
    PyErr_Clear();
    throw ngram::InvalidArgument(field + ": must be integers, got " +
                                 std::string(py::str(py::type::of(h).attr("__name__"))));
  }
  require_real(a, field);
  if (a.dtype().kind() == 'f' && a.size() > 0)
    throw ngram::InvalidArgument(field + ": must be integers, got dtype " + std::string(py::str(a.dtype())));
  return py::cast<py::array_t<T, py::array::c_style | py::array::forcecast>>(a);
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
