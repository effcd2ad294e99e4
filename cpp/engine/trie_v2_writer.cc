#include "trie_v2_writer.h"

#include <cstring>
#include <optional>
#include <vector>

#include "chunked_elias_fano.h"
#include "count_ranks.h"
#include "dense_runs.h"
#include "errors.h"
#include "packed_array.h"
#include "section_file.h"
#include "trie_layout.h"
#include "trie_v1.h"
#include "trie_v2.h"

namespace ngram {
namespace {

// The byte budget of level 2's bitmaps (dense_runs.h): their extra bytes
// over the sequence's, per stored n-gram of all levels. Enough for the runs
// of the most frequent context tokens, which most lookups search, at a few
// percent of the file's bytes (CHANGELOG.md has the measurements).
constexpr double kDenseBudgetPerNgram = 0.06;

// The file being written, streamed: sections one after another at 64-byte
// aligned offsets behind the header and section table (written last), each
// through its SectionWriter (section_file.h), checksummed as it goes.
// Unless commit() ran, the temporary file is removed.
class SectionSequence {
 public:
  SectionSequence(const std::string& path, uint64_t sections)
      : file_(path), off_(align_up(sizeof(FileHeader) + sections * sizeof(SectionEntry))) {}

  void begin(SectionKind kind, uint32_t level) {
    SectionEntry e{};
    e.kind = static_cast<uint32_t>(kind);
    e.level = level;
    e.offset = off_;
    cur_.emplace(file_, e);
  }
  void bytes(const void* p, uint64_t n) { cur_->bytes(p, n); }
  void word(uint64_t w) { cur_->word(w); }
  // Ends the section begun last, which the layout says has `count`
  // elements of `width` bits: its bytes must be exactly that many.
  void end(const SectionShape& s) {
    SectionEntry e = cur_->entry();
    const uint64_t want = section_bytes(s.kind, s.count, s.width);
    if (static_cast<uint32_t>(s.kind) != e.kind || cur_->written() != want)
      throw FormatError(file_.path() + ": internal error: section " + section_kind_name(e.kind) + " of level " +
                        std::to_string(e.level) + " has " + std::to_string(cur_->written()) + " bytes, laid out " +
                        std::to_string(want));
    e.length = want;
    e.count = s.count;
    e.width = s.width;
    table.push_back(e);
    off_ = align_up(off_ + want);
  }
  // Writes the header and the table, syncs, renames into place; the file's size.
  uint64_t commit(const FileHeader& h) { return file_.commit(h, table, off_); }

  std::vector<SectionEntry> table;

 private:
  SectionFile file_;
  uint64_t off_;
  std::optional<SectionWriter> cur_;
};

// Words into the section being written (none when f is null: a pass that
// writes another of a writer's outputs).
struct FileSink {
  SectionSequence* f;
  void operator()(uint64_t w) const {
    if (f) f->word(w);
  }
};
struct VectorSink {
  std::vector<uint64_t>* words;
  void operator()(uint64_t w) const { words->push_back(w); }
};

// The layout's shape of section `kind` of the level described by s.
SectionShape layout_of(const LevelShapeV2& s, SectionKind kind) {
  for (const SectionShape& x : TrieV2::level_sections(s))
    if (x.kind == kind) return x;
  throw FormatError("internal error: level " + std::to_string(s.level) + " has no section " +
                    section_kind_name(static_cast<uint32_t>(kind)));
}

// Values packed with `width` bits each, written as section `kind`.
void write_packed(SectionSequence& f, const LevelShapeV2& s, SectionKind kind, const std::vector<uint64_t>& values) {
  const SectionShape shape = layout_of(s, kind);
  f.begin(kind, s.level);
  PackedWriter<FileSink> w(shape.width, FileSink{&f});
  for (uint64_t v : values) w.push(v);
  w.finish();
  f.end(shape);
}

// The tiered count ranks of a level (count_ranks.h, TieredRankView): its
// table of `nvalues` distinct counts and `entries` ranks into it, which
// for_each_rank(fn) passes to fn in entry order. Each section comes from its
// own pass over the ranks, so that none is held.
template <class ForEachRank>
void write_count_sections(const uint64_t* values, uint64_t nvalues, uint64_t entries, ForEachRank for_each_rank,
                          LevelShapeV2& sh, SectionSequence& f) {
  std::vector<uint64_t> freq(nvalues, 0);
  for_each_rank([&](uint64_t r) {
    if (r >= freq.size()) throw FormatError("level " + std::to_string(sh.level) + ": a count rank out of range");
    ++freq[r];
  });
  const TieredRankLayout tl = choose_tiered_rank_layout(entries, freq, sh.level > 1);
  const uint64_t c1 = (uint64_t{1} << tl.first_width) - 1, c2 = (uint64_t{1} << tl.second_width) - 1;
  uint64_t n1 = 0, n2 = 0;
  for (uint64_t r = 0; r < freq.size(); ++r) {
    if (r >= c1) n1 += freq[r];
    if (r >= c1 + c2) n2 += freq[r];
  }
  sh.count_values = nvalues;
  sh.rank_width = tl.first_width;
  sh.escapes = n1;
  sh.rank2_width = tl.second_width;
  sh.escapes2 = n2;
  const uint32_t k = sh.level;
  f.begin(SectionKind::kCountValues, k);
  f.bytes(values, nvalues * 8);
  f.end(layout_of(sh, SectionKind::kCountValues));
  // One pass per section: `each(rank, sink)` for every entry in order.
  auto pass = [&](SectionKind kind, auto each) {
    const SectionShape shape = layout_of(sh, kind);
    f.begin(kind, k);
    PackedWriter<FileSink> w(shape.width, FileSink{&f});
    for_each_rank([&](uint64_t r) { each(r, w); });
    w.finish();
    f.end(shape);
  };
  pass(SectionKind::kCountRanks, [&](uint64_t r, auto& w) { w.push(r < c1 ? r : c1); });
  uint64_t i = 0, before = 0;  // entries so far, escape codes before them
  pass(SectionKind::kCountEscapeIndex, [&](uint64_t r, auto& w) {
    if (i++ % kEscapeBlock == 0) w.push(before);
    before += r >= c1;
  });
  pass(SectionKind::kCountRanks2, [&](uint64_t r, auto& w) {
    if (r >= c1) w.push(r - c1 < c2 ? r - c1 : c2);
  });
  uint64_t e = 0, before2 = 0;  // escaped entries so far, second-tier escape codes before them
  pass(SectionKind::kCountRanks2Index, [&](uint64_t r, auto& w) {
    if (r < c1) return;
    if (e++ % kEscapeBlock == 0) w.push(before2);
    before2 += r - c1 >= c2;
  });
  pass(SectionKind::kCountEscapes, [&](uint64_t r, auto& w) {
    if (r >= c1 + c2) w.push(r - c1 - c2);
  });
}

// Level 1's child offsets, plainly packed, for the tokens that occur (a
// token that does not has no children): each one's first child, then the
// size of level 2.
void write_used_child_offsets(const TrieV1& src, const LevelShapeV2& sh, SectionSequence& f) {
  const LevelV1& L = src.level(1);
  std::vector<uint64_t> offsets;
  for (uint64_t t = 0; t < L.size; ++t)
    if (L.count(t) != 0) offsets.push_back(L.child_offsets[t]);
  offsets.push_back(src.level(2).size);
  write_packed(f, sh, SectionKind::kChildOffsets, offsets);
}

// Level k's child offsets, Elias-Fano coded: one pass per section.
void write_child_offsets(const TrieV1& src, const LevelShapeV2& sh, SectionSequence& f) {
  const LevelV1& L = src.level(sh.level);
  const uint64_t n = L.size + 1, u = src.level(sh.level + 1).size;
  const SectionKind kinds[3] = {SectionKind::kChildLow, SectionKind::kChildHigh, SectionKind::kChildSelect};
  for (int part = 0; part < 3; ++part) {
    f.begin(kinds[part], sh.level);
    EliasFanoWriter<FileSink> w(n, u, FileSink{part == 0 ? &f : nullptr}, FileSink{part == 1 ? &f : nullptr},
                                FileSink{part == 2 ? &f : nullptr});
    for (uint64_t i = 0; i < n; ++i) w.push(L.child_offsets[i]);
    w.finish();
    f.end(layout_of(sh, kinds[part]));
  }
}

// A packed array built front to back and then read: the suffix indices.
struct PackedVector {
  std::vector<uint64_t> words;
  uint32_t width = 1;
  uint64_t size = 0;
  PackedView view() const { return PackedView(reinterpret_cast<const uint8_t*>(words.data()), size, width); }
};

// write_trie_v2 from a version-1 trie's arrays (mapped or decoded alike).
uint64_t write_from_v1(const TrieV1& src, uint64_t vocab, int64_t eos_id, const std::string& path,
                       const std::string& meta_json) {
  const uint32_t order = src.order();
  // The sections each level has do not depend on its sizes: the table's length is known up front.
  uint64_t nsec = 1;
  for (uint32_t k = 1; k <= order; ++k) {
    LevelShapeV2 s;
    s.level = k;
    s.order = order;
    nsec += TrieV2::level_sections(s).size();
  }
  SectionSequence f(path, nsec);
  f.begin(SectionKind::kMeta, 0);
  f.bytes(meta_json.data(), meta_json.size());
  f.end({SectionKind::kMeta, meta_json.size(), 8});

  // Which tokens occur, and each one's rank among them.
  const LevelV1& uni = src.level(1);
  std::vector<uint64_t> used_rank(vocab);
  uint64_t used = 0;
  for (uint64_t t = 0; t < vocab; ++t) {
    used_rank[t] = used;
    used += uni.count(t) != 0;
  }
  uint64_t ngrams = used;
  for (uint32_t k = 2; k <= order; ++k) ngrams += src.level(k).size;

  std::vector<LevelShapeV2> shapes(order);
  // suffix: per entry of the level before, the index of its suffix (its
  // n-gram without the first token) in the level before that.
  PackedVector suffix;
  for (uint32_t k = 1; k <= order; ++k) {
    const LevelV1& L = src.level(k);
    LevelShapeV2& sh = shapes[k - 1];
    sh.level = k;
    sh.order = order;
    sh.size = L.size;
    sh.next_size = k < order ? src.level(k + 1).size : 0;
    sh.vocab_size = vocab;
    sh.used_tokens = used;
    if (k == 1) {
      // The tokens that occur, in token order; version 1's table holds a
      // leading 0 (rank 0) when some token does not, which this one drops.
      const uint64_t zero = L.count_value_count > 0 && L.count_values[0] == 0 ? 1 : 0;
      write_count_sections(L.count_values + zero, L.count_value_count - zero, used,
                           [&](auto fn) {
                             for (uint64_t t = 0; t < vocab; ++t)
                               if (uni.count(t) != 0) fn(L.count_ranks[t] - zero);
                           },
                           sh, f);
    } else {
      write_count_sections(L.count_values, L.count_value_count, L.size,
                           [&](auto fn) {
                             for (uint64_t i = 0; i < L.size; ++i) fn(L.count_ranks[i]);
                           },
                           sh, f);
    }
    if (k == 1) {
      std::vector<uint64_t> bits, ranks;
      for (uint64_t t = 0; t < vocab; ++t) {
        if (t % 64 == 0) {
          ranks.push_back(used_rank[t]);
          bits.push_back(0);
        }
        if (uni.count(t) != 0) bits.back() |= uint64_t{1} << (t % 64);
      }
      f.begin(SectionKind::kUsedTokens, 1);
      for (uint64_t w : bits) f.word(w);
      f.word(0);
      f.end(layout_of(sh, SectionKind::kUsedTokens));
      write_packed(f, sh, SectionKind::kUsedTokenRanks, ranks);
      if (k < order) write_used_child_offsets(src, sh, f);
      continue;
    }
    const LevelV1& parent = src.level(k - 1);
    // Level 2: the runs stored as bitmaps instead of in the sequence.
    std::vector<uint64_t> dense, dense_bits;
    const uint64_t bitmap_words = dense_bitmap_bits(used) / 64;
    if (k == 2) {
      std::vector<uint64_t> run_sizes(parent.size);
      for (uint64_t p = 0; p < parent.size; ++p) {
        uint64_t lo, hi;
        src.children(1, p, &lo, &hi);
        run_sizes[p] = hi - lo;
      }
      dense = dense_runs_to_store(run_sizes, used, static_cast<uint64_t>(kDenseBudgetPerNgram * ngrams));
      dense_bits.assign(dense.size() * bitmap_words, 0);
      for (uint64_t p : dense) sh.dense_entries += run_sizes[p];
      sh.dense_runs = dense.size();
    }
    // Tokens as ranks: S = base of the run + rank, strictly increasing,
    // streamed into token_bits.
    f.begin(SectionKind::kTokenBits, k);
    ChunkedEliasFanoWriter<FileSink> seq(FileSink{&f});
    const bool keep_suffix = k < order;  // the next level reads it
    PackedVector next;
    next.width = bits_for(k == 2 ? vocab - 1 : parent.size);
    next.size = keep_suffix ? L.size : 0;
    PackedWriter<VectorSink> next_w(next.width, VectorSink{&next.words});
    const PackedView suffix_of = suffix.view();
    uint64_t base = 0, next_dense = 0;
    for (uint64_t p = 0; p < parent.size; ++p) {
      uint64_t lo, hi;
      src.children(k - 1, p, &lo, &hi);
      if (lo == hi) continue;
      uint64_t slo = 0, shi = 0;  // the run of p's suffix context in level k-1
      if (k >= 3) src.children(k - 2, suffix_of[p], &slo, &shi);
      const bool is_dense = next_dense < dense.size() && dense[next_dense] == p;
      uint64_t* bitmap = is_dense ? dense_bits.data() + next_dense * bitmap_words : nullptr;
      if (is_dense) ++next_dense;
      uint64_t last = 0;
      for (uint64_t i = lo; i < hi; ++i) {
        const uint64_t w = L.token(i);
        uint64_t x, at;
        if (k == 2) {
          if (w >= vocab || uni.count(w) == 0)
            throw InvalidArgument(path + ": level 2 entry " + std::to_string(i) + " ends in token " +
                                  std::to_string(w) + ", which has count 0: not suffix-closed");
          x = used_rank[w];
          at = w;
        } else {
          at = parent.lower_bound_token(slo, shi, w);
          if (at >= shi || parent.token(at) != w)
            throw InvalidArgument(path + ": level " + std::to_string(k) + " entry " + std::to_string(i) +
                                  ": its suffix (the " + std::to_string(k - 1) +
                                  "-gram without its first token) is not stored; format version 2 needs "
                                  "every suffix of a stored n-gram (write format version 1 instead)");
          x = at - slo;
        }
        if (keep_suffix) next_w.push(at);
        if (bitmap) {
          bitmap[x / 64] |= uint64_t{1} << (x % 64);
          continue;
        }
        last = base + x;
        seq.push(last);
      }
      if (!bitmap) base = last + 1;
    }
    seq.finish();
    sh.token_bits = seq.bit_count;
    sh.token_end_width = bits_for(seq.ends.empty() ? 0 : seq.ends.back());
    f.end(layout_of(sh, SectionKind::kTokenBits));
    write_packed(f, sh, SectionKind::kTokenStarts, seq.starts);
    write_packed(f, sh, SectionKind::kTokenEnds, seq.ends);
    if (k == 2) {
      // Each bitmap's rank samples: its set bits before every block.
      std::vector<uint64_t> dense_ranks;
      for (uint64_t d = 0; d < dense.size(); ++d) {
        uint64_t ones = 0;
        for (uint64_t w = 0; w < bitmap_words; ++w) {
          if (w % (kDenseBlock / 64) == 0) dense_ranks.push_back(ones);
          ones += static_cast<uint64_t>(__builtin_popcountll(dense_bits[d * bitmap_words + w]));
        }
      }
      write_packed(f, sh, SectionKind::kDenseRuns, dense);
      f.begin(SectionKind::kDenseBits, 2);
      for (uint64_t w : dense_bits) f.word(w);
      f.word(0);
      f.end(layout_of(sh, SectionKind::kDenseBits));
      write_packed(f, sh, SectionKind::kDenseRanks, dense_ranks);
    }
    if (keep_suffix) next_w.finish();
    suffix = std::move(next);
    if (k < order) write_child_offsets(src, sh, f);
  }

  // The sections written must be the layout's, in its order.
  size_t at = 1;
  for (uint32_t k = 1; k <= order; ++k)
    for (const SectionShape& s : TrieV2::level_sections(shapes[k - 1])) {
      const SectionEntry& e = f.table[at++];
      if (e.kind != static_cast<uint32_t>(s.kind) || e.level != k || e.count != s.count || e.width != s.width)
        throw FormatError(path + ": internal error: section " + std::to_string(at - 1) + " is not the layout's");
    }
  return f.commit(make_header(kFormatVersion2, order, vocab, eos_id));
}

// What each representation writes as version 2: a version-1 trie its
// conversion; a version-2 trie nothing.
uint64_t write_v2_of(const TrieV1& trie, const TrieIndex& source, const std::string& path,
                     const std::string& meta_json) {
  return write_from_v1(trie, source.vocab_size(), source.eos_id(), path, meta_json);
}
uint64_t write_v2_of(const TrieV2&, const TrieIndex& source, const std::string&, const std::string&) {
  throw InvalidArgument(source.path() + ": format version " + std::to_string(source.version()) +
                        ", write_trie_v2 reads a version-1 trie");
}

}  // namespace

uint64_t write_trie_v2(const TrieIndex& source, const std::string& path, const std::string& meta_json) {
  return source.visit([&](const auto& trie) -> uint64_t { return write_v2_of(trie, source, path, meta_json); });
}

}  // namespace ngram
