// The numpy array types the bindings take: C-contiguous, converted to the
// engine's element type when needed (dtypes are checked in Python first).
#pragma once
#include <pybind11/numpy.h>

namespace ngram_py {

namespace py = pybind11;
using I32Array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using I64Array = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
using U64Array = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>;
using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

}  // namespace ngram_py
