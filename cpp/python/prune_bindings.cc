// Bindings of DART tree pruning (see cpp/engine/prune_tree.h).
#include <pybind11/pybind11.h>

namespace py = pybind11;

void bind_prune(py::module_& m) { (void)m; }
