// ProposeTreeRequest (proto/ngram/v1/ngram.proto), written from the engine's
// types: the one encoder of the message on the client side (NgramClient's
// propose and propose_batch, dart_client's RemoteProposer). The request is
// its head (index, fingerprint, params: fields 1, 2, 3) followed by one
// ProposeInput (field 4) per context. The response is tree_codec.h's.
// tests/test_propose_rpc.py checks the bytes against protobuf's own encoder.
#pragma once
#include <cstdint>
#include <string>

#include "param_conversion.h"
#include "wire.h"

namespace ngram_py::wire {

// ProposeParams (always written): the given fields only, so that the host's
// defaults fill the rest; kProposeFields[i] is field kProposeFields[i].field.
inline std::string propose_params_bytes(const GivenProposeParams& g) {
  const ngram::ProposeParams& p = g.values;
  std::string out;
  for (uint32_t i = 0; i < ngram::kProposeFieldCount; ++i) {
    if (!g.has(i)) continue;
    const ngram::ProposeField& f = ngram::kProposeFields[i];
    if (f.integer) put_varint_field(out, f.field, static_cast<uint64_t>(p.*f.integer));
    else if (f.unit) put_float_field(out, f.field, p.*f.unit);
    else put_varint_field(out, f.field, p.*f.flag);
  }
  return out;
}

// The request's head: everything but its contexts.
inline std::string propose_tree_head(const std::string& index, const std::string& fingerprint,
                                     const GivenProposeParams& params) {
  return tree_request_head(index, fingerprint, propose_params_bytes(params));
}

// ProposeTreeRequest's field 4 holding one context's ids (sfixed64, packed;
// an empty context leaves the field out, as protobuf does).
inline void put_propose_input(std::string& out, const int64_t* ids, uint64_t n) {
  put_varint(out, 4 << 3 | kLen);
  put_varint(out, packed_size<int64_t>(1, n));
  put_packed(out, 1, ids, n);
}

}  // namespace ngram_py::wire
