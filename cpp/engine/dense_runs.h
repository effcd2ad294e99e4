// Format version 2, level 2: the longest runs of bigrams (the children of
// the most frequent tokens, which most queries search) stored as bitmaps
// over the ranks of the tokens that occur, instead of in the level's
// chunked Elias-Fano sequence (docs/FORMAT.md, "Dense runs"). Membership
// and the position in the run are then a bit test, a rank sample and a few
// popcounts, where the sequence needs a bisection of chunk ends and a scan
// of a chunk. The writer picks them longest first within a byte budget
// (dense_runs_to_store).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "elias_fano.h"
#include "packed_array.h"

namespace ngram {

constexpr uint64_t kDenseBlock = 512;  // bits of a bitmap per rank sample

// Bits of one bitmap over `used` ranks: whole blocks, so that each bitmap's
// rank samples start at a multiple of its number of blocks.
inline uint64_t dense_bitmap_bits(uint64_t used) { return (used + kDenseBlock - 1) / kDenseBlock * kDenseBlock; }
inline uint64_t dense_blocks(uint64_t used) { return dense_bitmap_bits(used) / kDenseBlock; }

// The extra bytes (bitmap plus rank samples, minus the Elias-Fano bits the
// run would take in the sequence, estimated as one Elias-Fano list) of
// storing a run of m ranks out of `used` as a bitmap.
inline int64_t dense_run_extra_bytes(uint64_t m, uint64_t used) {
  const uint32_t l = ef_low_bits(m, used);
  const uint64_t ef_bits = m * l + m + (used >> l) + 1;
  const uint64_t bitmap_bits = dense_bitmap_bits(used) + dense_blocks(used) * bits_for(used);
  return (static_cast<int64_t>(bitmap_bits) - static_cast<int64_t>(ef_bits)) / 8;
}

// The writer's choice: given the length of every run of level 2 (the
// children of level-1 entry p: runs[p]), the parents whose runs become
// bitmaps, ascending. Runs are taken longest first while the extra bytes of
// all taken stay within budget_bytes (a run whose bitmap is the smaller
// coding adds a negative amount); runs longer than `used` cannot occur.
inline std::vector<uint64_t> dense_runs_to_store(const std::vector<uint64_t>& runs, uint64_t used,
                                                 uint64_t budget_bytes) {
  std::vector<uint64_t> order;
  for (uint64_t p = 0; p < runs.size(); ++p)
    if (runs[p] > 0 && runs[p] <= used) order.push_back(p);
  std::stable_sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) { return runs[a] > runs[b]; });
  std::vector<uint64_t> out;
  int64_t spent = 0;
  for (uint64_t p : order) {
    const int64_t extra = dense_run_extra_bytes(runs[p], used);
    if (spent + extra > static_cast<int64_t>(budget_bytes)) break;
    spent += extra;
    out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  return out;
}

class DenseRunsView {
 public:
  DenseRunsView() = default;
  // bits: the bitmaps (each dense_bitmap_bits(used) bits, 64-bit aligned);
  // ranks: their rank samples; first[d]: the first entry of run d, ascending;
  // before[d]: the entries of the runs before run d (D + 1 values).
  DenseRunsView(const uint8_t* bits, PackedView ranks, uint64_t used, std::vector<uint64_t> first,
                std::vector<uint64_t> before)
      : words_(reinterpret_cast<const uint64_t*>(bits)), ranks_(ranks), used_(used),
        words_per_run_(dense_bitmap_bits(used) / 64), blocks_(dense_blocks(used)), first_(std::move(first)),
        before_(std::move(before)) {}

  uint64_t count() const { return first_.size(); }

  // The dense run made of entries [lo, hi) (hi > lo), or -1 if it is not one.
  int64_t find(uint64_t lo) const {
    if (first_.empty()) return -1;
    const auto it = std::lower_bound(first_.begin(), first_.end(), lo);
    return it != first_.end() && *it == lo ? it - first_.begin() : -1;
  }

  // The index in the level's Elias-Fano sequence of entry i, which is in
  // no dense run: i less the entries of the dense runs before it.
  uint64_t sequence_index(uint64_t i) const {
    if (first_.empty()) return i;
    return i - before_[std::lower_bound(first_.begin(), first_.end(), i) - first_.begin()];
  }

  // Whether run d holds rank x; *r: how many of its ranks are below x.
  bool rank(uint64_t d, uint64_t x, uint64_t* r) const {
    if (x >= used_) return false;
    const uint64_t* w = words_ + d * words_per_run_;
    const uint64_t b = x / kDenseBlock, last = x / 64;
    uint64_t c = ranks_[d * blocks_ + b];
    for (uint64_t k = b * (kDenseBlock / 64); k < last; ++k) c += static_cast<uint64_t>(__builtin_popcountll(w[k]));
    const uint64_t word = w[last];
    c += static_cast<uint64_t>(__builtin_popcountll(word & ((uint64_t{1} << (x % 64)) - 1)));
    *r = c;
    return (word >> (x % 64)) & 1;
  }

  // The r-th smallest rank in run d (used_ if there is none: a corrupted file).
  uint64_t select(uint64_t d, uint64_t r) const {
    const uint64_t* w = words_ + d * words_per_run_;
    uint64_t lo = 0, hi = blocks_;  // the last block whose sample is <= r
    while (hi - lo > 1) {
      const uint64_t mid = (lo + hi) / 2;
      if (ranks_[d * blocks_ + mid] <= r) lo = mid;
      else hi = mid;
    }
    if (blocks_ == 0) return used_;
    uint64_t left = r - std::min(r, ranks_[d * blocks_ + lo]);
    for (uint64_t k = lo * (kDenseBlock / 64); k < words_per_run_; ++k) {
      const uint64_t c = static_cast<uint64_t>(__builtin_popcountll(w[k]));
      if (left < c) return std::min(used_, k * 64 + select_in_word(w[k], left));
      left -= c;
    }
    return used_;
  }

 private:
  const uint64_t* words_ = nullptr;
  PackedView ranks_;
  uint64_t used_ = 0, words_per_run_ = 0, blocks_ = 0;
  std::vector<uint64_t> first_, before_;
};

}  // namespace ngram
