// prune's and propose's keyword parameters as the engine's PruneParams and
// ProposeParams: the one conversion of every binding that takes them (the
// searches, LatticeBatch.prune, and the request codecs, which also keep
// which ones were given), the signature text of the bindings that take
// either set, and both tables as Python sees them (PRUNE_FIELDS,
// PROPOSE_FIELDS). Values are converted here (ValueError naming the
// parameter for a wrong type); their ranges are the engine's to check.
#pragma once
#include <pybind11/pybind11.h>

#include <array>
#include <cstddef>
#include <string>

#include "propose_params.h"
#include "prune_params.h"

namespace ngram_py {

// prune's keyword parameters, in kPruneFields' order; a null handle or None
// is one not given: the table's default (for eos_token_id, unset: the
// trie's EOS).
using PruneParamHandles = std::array<pybind11::handle, ngram::kPruneFieldCount>;
// propose's, in kProposeFields' order; a null handle or None: the default.
using ProposeParamHandles = std::array<pybind11::handle, ngram::kProposeFieldCount>;

// Into p (its weight buffers reused: no allocation once grown).
void load_prune_params(const PruneParamHandles& given, ngram::PruneParams& p);
// Into p, the defaults first.
void load_propose_params(const ProposeParamHandles& given, ngram::ProposeParams& p);

// A fast-call binding that takes a table's keywords (fastcall.h): its
// parameter names, `lead` then the table's names then `trail`, so that a
// row added to the table is a keyword of every such binding.
template <class Field, size_t N, size_t L, size_t T>
std::array<const char*, L + N + T> call_names(const Field (&table)[N], const std::array<const char*, L>& lead,
                                              const std::array<const char*, T>& trail) {
  std::array<const char*, L + N + T> names{};
  for (size_t i = 0; i < L; ++i) names[i] = lead[i];
  for (size_t i = 0; i < N; ++i) names[L + i] = table[i].name;
  for (size_t i = 0; i < T; ++i) names[L + N + i] = trail[i];
  return names;
}
template <size_t L, size_t T>
auto prune_call_names(const std::array<const char*, L>& lead, const std::array<const char*, T>& trail) {
  return call_names(ngram::kPruneFields, lead, trail);
}
template <size_t L, size_t T>
auto propose_call_names(const std::array<const char*, L>& lead, const std::array<const char*, T>& trail) {
  return call_names(ngram::kProposeFields, lead, trail);
}
// Its arguments args[first + i] (nullptr: not given) as the table's handles.
template <size_t N>
std::array<pybind11::handle, N> call_handles(PyObject* const* args, size_t first) {
  std::array<pybind11::handle, N> h;
  for (size_t i = 0; i < N; ++i) h[i] = args[first + i];
  return h;
}
inline PruneParamHandles prune_handles(PyObject* const* args, size_t first) {
  return call_handles<ngram::kPruneFieldCount>(args, first);
}
inline ProposeParamHandles propose_handles(PyObject* const* args, size_t first) {
  return call_handles<ngram::kProposeFieldCount>(args, first);
}
// Its docstring: a head that CPython reads as the signature
// ("name(lead, *, beam_width=20, ..., trail)\n--\n\n", each default the
// table's), so that help() and inspect.signature show every parameter,
// then `doc`. `lead` and `trail` are written as Python writes them
// ("$self, trie, out, rows=None"; "timeout=None").
std::string prune_call_doc(const std::string& name, const std::string& lead, const std::string& trail,
                           const std::string& doc);
std::string propose_call_doc(const std::string& name, const std::string& lead, const std::string& trail,
                             const std::string& doc);

// The parameters of a request sent to a host: the values, and which were
// given (None: not given), so that the host's defaults (the engine's) fill
// the rest. Bit i of `given`: row i of the parameter set's table.
template <class Params>
struct GivenParams {
  Params values;
  uint32_t given = 0;
  bool has(uint32_t i) const { return (given >> i) & 1; }
};
using GivenPruneParams = GivenParams<ngram::PruneParams>;
using GivenProposeParams = GivenParams<ngram::ProposeParams>;

// From a dict of prune's keywords; an unknown name is a TypeError naming
// the known ones.
GivenPruneParams given_prune_params(const pybind11::handle& params);

// prune's parameters as a dict, in kPruneFields' order (weights as lists,
// eos_token_id None when unset); with `defaults_only`, only those with one
// default value (the integers and the scalar weight: PRUNE_DEFAULTS).
pybind11::dict prune_params_dict(const ngram::PruneParams& p, bool defaults_only);

// From a dict of propose's keywords over the engine's defaults (None: not
// given); an unknown name is a TypeError naming the known ones.
GivenProposeParams given_propose_params(const pybind11::handle& params);

// propose's parameters as a dict, in kProposeFields' order; floats as the
// decimal they were written as (1e-4, not 9.99999975e-05) when `as_written`,
// else as the float32 the engine reads.
pybind11::dict propose_params_dict(const ngram::ProposeParams& p, bool as_written);

// PRUNE_FIELDS and PROPOSE_FIELDS: each table whole, a dict per row (name;
// type: int, float, bool, or list for a weight per level; default; low and
// high, inclusive, None where unbounded or a switch; help), in the wire's
// field order, for what presents the parameters (ngram_service.params).
void bind_param_tables(pybind11::module_& m);

}  // namespace ngram_py
