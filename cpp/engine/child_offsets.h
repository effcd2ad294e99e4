// A level's child offsets off[0..entries]: the children of entry i are
// entries [off[i], off[i+1]) of the next level. One type per representation
// (trie_layout.h's ChildOffsetRep), and ChildOffsets / ChildOffsetWriter
// hold whichever the layout chose, so level code never asks which level it is.
#pragma once
#include <cstdint>
#include <memory>

#include "elias_fano.h"
#include "packed_array.h"
#include "trie_layout.h"

namespace ngram {

// Plainly packed offsets.
class PlainOffsetsView {
 public:
  PlainOffsetsView() = default;
  explicit PlainOffsetsView(PackedView v) : v_(v) {}
  uint64_t size() const { return v_.size(); }
  uint64_t operator[](uint64_t i) const { return v_[i]; }
  void pair(uint64_t i, uint64_t* a, uint64_t* b) const {
    *a = v_[i];
    *b = v_[i + 1];
  }

 private:
  PackedView v_;
};

// The offsets of one level, in the representation its layout gives.
class ChildOffsets {
 public:
  ChildOffsets() = default;
  explicit ChildOffsets(PlainOffsetsView v) : rep_(ChildOffsetRep::kPlain), plain_(v) {}
  explicit ChildOffsets(EliasFanoView v) : rep_(ChildOffsetRep::kEliasFano), ef_(v) {}

  bool empty() const { return rep_ == ChildOffsetRep::kNone; }
  bool elias_fano() const { return rep_ == ChildOffsetRep::kEliasFano; }
  // f(off[i]) for every offset in order, Elias-Fano decoded in one pass
  // (`missing` past a corrupted high part).
  template <class F>
  void for_each(F f, uint64_t missing) const {
    if (rep_ == ChildOffsetRep::kEliasFano) {
      ef_.for_each(f, missing);
    } else if (rep_ == ChildOffsetRep::kPlain) {
      for (uint64_t i = 0; i < plain_.size(); ++i) f(plain_[i]);
    }
  }
  // off[i] and off[i+1].
  void pair(uint64_t i, uint64_t* a, uint64_t* b) const {
    if (rep_ == ChildOffsetRep::kPlain) plain_.pair(i, a, b);
    else ef_.pair(i, a, b);
  }
  uint64_t operator[](uint64_t i) const { return rep_ == ChildOffsetRep::kPlain ? plain_[i] : ef_[i]; }

 private:
  ChildOffsetRep rep_ = ChildOffsetRep::kNone;
  PlainOffsetsView plain_;
  EliasFanoView ef_;
};

// Streams off[0..n) in the layout's representation into its sections' sinks
// (kPlain: one; kEliasFano: low, high, select), in level_sections() order.
template <typename Sink>
class ChildOffsetWriter {
 public:
  // n offsets in [0, u].
  ChildOffsetWriter(ChildOffsetRep rep, uint64_t n, uint64_t u, const Sink* sinks) {
    if (rep == ChildOffsetRep::kPlain) plain_ = std::make_unique<PackedWriter<Sink>>(bits_for(u), sinks[0]);
    if (rep == ChildOffsetRep::kEliasFano) ef_ = std::make_unique<EliasFanoWriter<Sink>>(n, u, sinks[0], sinks[1], sinks[2]);
  }
  void push(uint64_t v) {
    if (plain_) plain_->push(v);
    else ef_->push(v);
  }
  void finish() {
    if (plain_) plain_->finish();
    else ef_->finish();
  }

 private:
  std::unique_ptr<PackedWriter<Sink>> plain_;
  std::unique_ptr<EliasFanoWriter<Sink>> ef_;
};

}  // namespace ngram
