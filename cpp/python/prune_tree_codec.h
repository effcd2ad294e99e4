// PruneTreeRequest (proto/ngram/v1/ngram.proto), written from the engine's
// types: the one encoder of the message on the client side (NgramClient's
// prune and prune_batch, dart_client's RemotePruner through
// LatticeBatch.request). The request is its head (index, fingerprint,
// params, with_scores: fields 1, 2, 3, 5) followed by one PruneInput (field
// 4) per lattice; protobuf reads fields in any order. The response is
// tree_codec.h's. tests/test_wire.py and tests/test_offload.py check the
// bytes against protobuf's own encoder.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lattice.h"
#include "param_conversion.h"
#include "wire.h"

namespace ngram_py::wire {

// PruneParams (always written, as protobuf writes a message field that is
// set, even when empty): the given fields only, so that the host's
// defaults fill the rest; field i + 1 is kPruneFields[i]. The integers are
// int64 on the wire, as in the table, so every value goes to the host's
// check. Weight lists are written when not empty, the flag when true (it
// has no presence on the wire).
inline std::string prune_params_bytes(const GivenPruneParams& g) {
  const ngram::PruneParams& p = g.values;
  std::string out;
  for (uint32_t i = 0; i < ngram::kPruneFieldCount; ++i) {
    const ngram::PruneField& f = ngram::kPruneFields[i];
    if (f.integer) {
      if (g.has(i)) put_varint_field(out, i + 1, static_cast<uint64_t>(p.*f.integer));
    } else if (f.weight) {
      if (g.has(i)) put_float_field(out, i + 1, p.*f.weight);
    } else if (f.weights) {
      put_packed(out, i + 1, (p.*f.weights).data(), (p.*f.weights).size());
    } else if (f.token) {
      if (p.*f.token) put_varint_field(out, i + 1, static_cast<uint64_t>(*(p.*f.token)));
    } else if (p.*f.flag) {
      put_varint_field(out, i + 1, 1);
    }
  }
  return out;
}

// The request's head: everything but its inputs.
inline std::string prune_tree_head(const std::string& index, const std::string& fingerprint,
                                   const GivenPruneParams& params, bool with_scores) {
  std::string out = tree_request_head(index, fingerprint, prune_params_bytes(params));
  if (with_scores) put_varint_field(out, 5, 1);
  return out;
}

// PruneInput's size and its bytes (fields 1-4; empty ones left out).
inline size_t prune_input_size(const ngram::PruneInput& in) {
  const uint64_t c = in.level_offsets[in.depth] - in.level_offsets[0];
  return packed_size<int64_t>(1, in.prefix_len) + packed_size<uint32_t>(2, in.depth) + packed_size<int64_t>(3, c) +
         packed_size<float>(4, c);
}

// PruneTreeRequest's field 4 holding `in`; `sizes` is scratch for the level sizes.
inline void put_prune_input(std::string& out, const ngram::PruneInput& in, std::vector<uint32_t>& sizes) {
  const size_t n = prune_input_size(in);
  put_varint(out, 4 << 3 | kLen);
  put_varint(out, n);
  sizes.resize(in.depth);
  for (uint32_t l = 0; l < in.depth; ++l) sizes[l] = static_cast<uint32_t>(in.level_offsets[l + 1] - in.level_offsets[l]);
  const uint64_t at = in.level_offsets[0], c = in.level_offsets[in.depth] - at;
  put_packed(out, 1, in.prefix, in.prefix_len);
  put_packed(out, 2, sizes.data(), in.depth);
  put_packed(out, 3, in.tokens + at, c);
  put_packed(out, 4, in.probs + at, c);
}

// The whole request: `head` (prune_tree_head's) and one PruneInput per lattice.
inline std::string prune_tree_request(const std::string& head, const std::vector<ngram::PruneInput>& inputs) {
  size_t total = head.size();
  for (const ngram::PruneInput& in : inputs) {
    const size_t n = prune_input_size(in);
    total += varint_size(4 << 3 | kLen) + varint_size(n) + n;
  }
  std::string out;
  out.reserve(total);
  out.append(head);
  std::vector<uint32_t> sizes;
  for (const ngram::PruneInput& in : inputs) put_prune_input(out, in, sizes);
  return out;
}

}  // namespace ngram_py::wire
