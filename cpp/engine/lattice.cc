#include "lattice.h"

#include <algorithm>
#include <utility>

#include "checks.h"
#include "errors.h"

namespace ngram {

namespace {

std::string at(const char* field, uint32_t l) { return std::string(field) + "[" + std::to_string(l) + "]"; }

// " (name)" after a bound's range, when the bound has a name.
std::string bound_name(const char* name) { return name ? std::string(" (") + name + ")" : std::string(); }

// Orders one level's k candidates by token: order[r] = the index of the
// r-th smallest. Returns a token listed twice, or -1. Up to 64 candidates,
// each one's rank is a count of the smaller ones: k * k compares without a
// branch cost less than a sort's, which the predictor misses half the time.
int32_t order_by_token(const int32_t* tok, uint32_t k, uint32_t* order) {
  if (k <= 64) {
    for (uint32_t j = 0; j < k; ++j) {
      uint32_t rank = 0, same = 0;
      for (uint32_t i = 0; i < k; ++i) {
        rank += tok[i] < tok[j];
        same += tok[i] == tok[j];
      }
      if (same > 1) return tok[j];
      order[rank] = j;
    }
    return -1;
  }
  for (uint32_t j = 0; j < k; ++j) order[j] = j;
  std::sort(order, order + k, [tok](uint32_t a, uint32_t b) { return tok[a] < tok[b]; });
  for (uint32_t r = 1; r < k; ++r)
    if (tok[order[r]] == tok[order[r - 1]]) return tok[order[r]];
  return -1;
}

// What check_lattice names and bounds a lattice by: prune's arguments, the engine's limits.
const LatticeFields kLatticeFields;
const LatticeBounds kEngineBounds;

}  // namespace

void check_lattice_depth(uint64_t depth, const LatticeFields& f, const LatticeBounds& b) {
  if (depth == 0 || depth > b.max_levels)
    throw InvalidArgument(f.name(f.sizes) + " has " + std::to_string(depth) + " levels (D): must be 1.." +
                          std::to_string(b.max_levels) + bound_name(b.levels_bound));
}

void check_lattice_level(uint64_t l, uint64_t k, const LatticeFields& f, const LatticeBounds& b) {
  if (k == 0 || k > b.max_candidates)
    throw InvalidArgument(f.name(f.sizes) + "[" + std::to_string(l) + "] has " + std::to_string(k) +
                          " candidates (K): must be 1.." + std::to_string(b.max_candidates) +
                          bound_name(b.candidates_bound));
}

void check_lattice_values(uint64_t total, uint64_t n_tokens, uint64_t n_probs, const LatticeFields& f) {
  const std::pair<const char*, uint64_t> given[] = {{f.tokens, n_tokens}, {f.probs, n_probs}};
  for (const auto& [field, n] : given)
    if (n != total)
      throw InvalidArgument(f.name(field) + ": " + std::to_string(n) + " values, expected sum(" + f.sizes +
                            ") = " + std::to_string(total));
}

void check_lattice(uint64_t vocab, const PruneInput& in, CheckedLattice& out) {
  if (in.prefix_len == 0) throw InvalidArgument("prefix is empty: need at least one token (its last is the root)");
  check_token_ids(vocab, in.prefix, in.prefix_len, "prefix");
  check_lattice_depth(in.depth, kLatticeFields, kEngineBounds);
  if (in.level_offsets[0] != 0) throw InvalidArgument("level_offsets[0] must be 0");
  for (uint32_t l = 0; l < in.depth; ++l) {
    const uint64_t lo = in.level_offsets[l], hi = in.level_offsets[l + 1];
    check_lattice_level(l, hi > lo ? hi - lo : 0, kLatticeFields, kEngineBounds);
  }
  const uint64_t total = in.level_offsets[in.depth];
  out.tokens.resize(total);
  out.order.resize(total);
  for (uint32_t l = 0; l < in.depth; ++l) {
    const uint64_t lo = in.level_offsets[l];
    const uint32_t k = static_cast<uint32_t>(in.level_offsets[l + 1] - lo);
    const int64_t* tk = in.tokens + lo;
    const float* pr = in.probs + lo;
    bool ok = true;
    for (uint32_t j = 0; j < k; ++j) ok &= tk[j] >= 0 && static_cast<uint64_t>(tk[j]) < vocab;
    if (!ok) check_token_ids(vocab, tk, k, at("topk_tokens", l).c_str());
    for (uint32_t j = 0; j < k; ++j) {
      if (!(pr[j] >= 0.0f && pr[j] <= 1.0f))
        throw InvalidArgument(at("topk_probs", l) + "[" + std::to_string(j) + "] = " + number_text(pr[j]) +
                              ": must be a probability in [0, 1]");
      out.tokens[lo + j] = static_cast<int32_t>(tk[j]);
    }
    const int32_t twice = order_by_token(out.tokens.data() + lo, k, out.order.data() + lo);
    if (twice >= 0)
      throw InvalidArgument(at("topk_tokens", l) + " lists token " + std::to_string(twice) +
                            " twice: candidates of one level must be distinct");
  }
}

}  // namespace ngram
