// prune's keyword parameters as the engine's PruneParams, shared by the
// bindings that search (prune_bindings.cc, offload_bindings.cc).
#pragma once
#include <pybind11/pybind11.h>

#include "prune_tree.h"

namespace ngram_py {

// A null handle is a parameter not given (the engine's default); values are
// converted as prune converts them (ValueError naming the parameter).
ngram::PruneParams make_params(const pybind11::handle& beam_width, const pybind11::handle& max_nodes,
                               const pybind11::handle& ngram_weight, const pybind11::handle& level_weights,
                               const pybind11::handle& logit_weights, const pybind11::handle& eos,
                               const pybind11::handle& ngram_on_first_level);

}  // namespace ngram_py
