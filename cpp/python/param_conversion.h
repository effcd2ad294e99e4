// prune's and propose's keyword parameters as the engine's PruneParams and
// ProposeParams: the one conversion of every binding that takes them (the
// searches, LatticeBatch.prune, and the request codecs, which also keep
// which ones were given). Values are converted here (ValueError naming the
// parameter for a wrong type); their ranges are the engine's to check.
#pragma once
#include <pybind11/pybind11.h>

#include <array>

#include "propose_params.h"
#include "prune_params.h"

namespace ngram_py {

// prune's keyword parameters, in kPruneFields' order; a null handle (or
// None, but for eos_token_id, where None means the trie's) is one not
// given: the engine's default.
using PruneParamHandles = std::array<pybind11::handle, ngram::kPruneFieldCount>;

// Into p (its weight buffers reused: no allocation once grown).
void load_prune_params(const PruneParamHandles& given, ngram::PruneParams& p);
ngram::PruneParams make_params(const pybind11::handle& beam_width, const pybind11::handle& max_nodes,
                               const pybind11::handle& ngram_weight, const pybind11::handle& level_weights,
                               const pybind11::handle& logit_weights, const pybind11::handle& eos,
                               const pybind11::handle& ngram_on_first_level);

// The parameters of a request sent to a host: the values, and which were
// given (None: not given), so that the host's defaults (the engine's) fill
// the rest.
struct GivenPruneParams {
  ngram::PruneParams values;
  uint32_t given = 0;  // bit i: kPruneFields[i] was given
  bool has(uint32_t i) const { return (given >> i) & 1; }
};
// From a dict of prune's keywords; an unknown name is a TypeError naming
// the known ones.
GivenPruneParams given_prune_params(const pybind11::handle& params);

// prune's parameters as a dict, in kPruneFields' order (weights as lists,
// eos_token_id None when unset); with `defaults_only`, only those with one
// default value (the integers and the scalar weight: PRUNE_DEFAULTS).
pybind11::dict prune_params_dict(const ngram::PruneParams& p, bool defaults_only);

struct GivenProposeParams {
  ngram::ProposeParams values;
  uint32_t given = 0;  // bit i: kProposeFields[i] was given
  bool has(uint32_t i) const { return (given >> i) & 1; }
};
// From a dict (or kwargs) of propose's keywords over the engine's defaults.
// `call` names the caller in a TypeError for an unknown name; "timeout" is
// passed over when `skip_timeout`; None values are not given when
// `none_unset`, else a ValueError.
GivenProposeParams given_propose_params(const pybind11::handle& params, const char* call, bool skip_timeout,
                                        bool none_unset);

// propose's parameters as a dict, in kProposeFields' order; floats as the
// decimal they were written as (1e-4, not 9.99999975e-05) when `as_written`,
// else as the float32 the engine reads.
pybind11::dict propose_params_dict(const ngram::ProposeParams& p, bool as_written);

}  // namespace ngram_py
