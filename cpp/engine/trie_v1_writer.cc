#include "trie_v1_writer.h"

#include <algorithm>
#include <cstring>

#include "count_ranks.h"
#include "child_offsets.h"
#include "errors.h"
#include "packed_array.h"
#include "section_file.h"
#include "trie_format.h"
#include "trie_layout.h"
#include "trie_v1.h"

namespace ngram {

struct WordSink {
  SectionWriter* stream;
  void operator()(uint64_t w) const { stream->word(w); }
};

struct LevelStream {
  uint64_t appended = 0;
  uint64_t child_total = 0;
  std::unique_ptr<PackedWriter<WordSink>> tok_w, rank_w, sample_w, escape_w, escape_index_w;
  uint64_t escape_code = 0, escapes = 0;
  std::unique_ptr<ChildOffsetWriter<WordSink>> child_w;  // levels < order
};

TrieV1Writer::TrieV1Writer(std::string path, uint32_t order, uint64_t vocab_size, int64_t eos_id,
                           std::string meta_json, std::vector<LevelSpec> levels)
    : path_(std::move(path)), order_(order), vocab_size_(vocab_size), eos_id_(eos_id),
      specs_(std::move(levels)) {
  if (order_ < 1 || order_ > kMaxOrder) throw InvalidArgument("order must be in 1.." + std::to_string(kMaxOrder));
  if (vocab_size_ < 1 || vocab_size_ > (uint64_t{1} << 31)) throw InvalidArgument("vocab_size out of range");
  if (specs_.size() != order_) throw InvalidArgument("need one LevelSpec per order");
  if (specs_[0].size != vocab_size_) throw InvalidArgument("level 1 size must equal vocab_size");
  for (uint32_t k = 0; k < order_; ++k) {
    const auto& v = specs_[k].count_values;
    if (v.empty() && specs_[k].size > 0)
      throw InvalidArgument("level " + std::to_string(k + 1) + ": empty count table");
    for (size_t i = 1; i < v.size(); ++i)
      if (v[i] <= v[i - 1])
        throw InvalidArgument("level " + std::to_string(k + 1) + ": count table not strictly ascending");
    const auto& f = specs_[k].count_frequencies;
    uint64_t total = 0;
    for (uint64_t x : f) total += x;
    if (f.size() != v.size() || total != specs_[k].size)
      throw InvalidArgument("level " + std::to_string(k + 1) + ": count frequencies must sum to the level's size");
  }

  // Lay out every section now: meta, then each level's as TrieV1::level_sections lists them.
  std::vector<LevelShape> shapes;
  std::vector<RankLayout> rank_layouts;
  uint64_t nsec = 1;
  for (uint32_t k = 1; k <= order_; ++k) {
    const LevelSpec& spec = specs_[k - 1];
    const RankLayout rl = choose_rank_layout(spec.size, spec.count_frequencies, /*allow_escapes=*/k > 1);
    LevelShape sh;
    sh.level = k;
    sh.order = order_;
    sh.size = spec.size;
    sh.next_size = k < order_ ? specs_[k].size : 0;
    sh.vocab_size = vocab_size_;
    sh.count_values = spec.count_values.size();
    sh.rank_width = rl.primary_width;
    sh.escapes = rl.escapes;
    shapes.push_back(sh);
    rank_layouts.push_back(rl);
    nsec += TrieV1::level_sections(sh).size();
  }
  file_ = std::make_unique<SectionFile>(path_);
  uint64_t off = align_up(sizeof(FileHeader) + nsec * sizeof(SectionEntry));
  auto add = [&](SectionKind kind, uint32_t level, uint64_t count, uint32_t width) {
    SectionEntry e{};
    e.kind = static_cast<uint32_t>(kind);
    e.level = level;
    e.offset = off;
    e.length = section_bytes(kind, count, width);
    e.count = count;
    e.width = width;
    off = align_up(off + e.length);
    streams_.push_back(std::make_unique<SectionWriter>(*file_, e));
    return streams_.back().get();
  };
  SectionWriter* meta = add(SectionKind::kMeta, 0, meta_json.size(), 8);
  std::vector<SectionWriter*> value_streams;  // the count tables, written once laid out
  for (uint32_t k = 1; k <= order_; ++k) {
    const LevelSpec& spec = specs_[k - 1];
    auto st = std::make_unique<LevelStream>();
    std::vector<WordSink> child_sinks;
    for (const SectionShape& sec : TrieV1::level_sections(shapes[k - 1])) {
      SectionWriter* s = add(sec.kind, k, sec.count, sec.width);
      auto packed = [&] { return std::make_unique<PackedWriter<WordSink>>(sec.width, WordSink{s}); };
      switch (sec.kind) {
        case SectionKind::kCountValues: value_streams.push_back(s); break;
        case SectionKind::kCountRanks: st->rank_w = packed(); break;
        case SectionKind::kCountEscapes: st->escape_w = packed(); break;
        case SectionKind::kCountEscapeIndex: st->escape_index_w = packed(); break;
        case SectionKind::kTokens: st->tok_w = packed(); break;
        case SectionKind::kTokenSamples: st->sample_w = packed(); break;
        default: child_sinks.push_back(WordSink{s}); break;  // the child offsets' sections, in order
      }
    }
    st->escape_code = (uint64_t{1} << rank_layouts[k - 1].primary_width) - 1;
    st->escapes = rank_layouts[k - 1].escapes;
    const ChildOffsetRep rep = child_offset_rep(k, order_);
    if (rep != ChildOffsetRep::kNone) {
      st->child_w = std::make_unique<ChildOffsetWriter<WordSink>>(rep, spec.size + 1, specs_[k].size,
                                                                  child_sinks.data());
      st->child_w->push(0);
    }
    levels_.push_back(std::move(st));
  }
  file_size_ = off;
  if (streams_.size() != nsec) throw InvalidArgument("internal error: section count");

  meta->bytes(meta_json.data(), meta_json.size());
  for (uint32_t k = 1; k <= order_; ++k)
    for (uint64_t v : specs_[k - 1].count_values) value_streams[k - 1]->word(v);
}

TrieV1Writer::~TrieV1Writer() = default;  // the file's destructor removes an unfinished one

void TrieV1Writer::append(uint32_t k, uint64_t n, const int32_t* tokens, const uint64_t* counts,
                        const uint64_t* n_children) {
  if (finished_) throw InvalidArgument("append after finish");
  if (k < 1 || k > order_) throw InvalidArgument("level " + std::to_string(k) + " out of range");
  LevelStream& L = *levels_[k - 1];
  const LevelSpec& spec = specs_[k - 1];
  const std::string what = "level " + std::to_string(k);
  if (n > spec.size - L.appended)
    throw InvalidArgument(what + ": more entries than the " + std::to_string(spec.size) + " declared");
  if (L.tok_w && !tokens) throw InvalidArgument(what + ": tokens are required");
  const bool has_children = L.child_w != nullptr;
  if (has_children && !n_children) throw InvalidArgument(what + ": n_children are required");
  const auto& values = spec.count_values;
  for (uint64_t i = 0; i < n; ++i) {
    auto it = std::lower_bound(values.begin(), values.end(), counts[i]);
    if (it == values.end() || *it != counts[i])
      throw InvalidArgument(what + ": count " + std::to_string(counts[i]) + " not in its count table");
    const uint64_t rank = static_cast<uint64_t>(it - values.begin());
    if ((L.appended + i) % kEscapeBlock == 0) L.escape_index_w->push(L.escape_w->count());
    if (rank >= L.escape_code) {
      if (L.escape_w->count() >= L.escapes)
        throw InvalidArgument(what + ": count frequencies understate the count " + std::to_string(counts[i]));
      L.rank_w->push(L.escape_code);
      L.escape_w->push(rank);
    } else {
      L.rank_w->push(rank);
    }
    if (L.tok_w) {
      if (tokens[i] < 0 || static_cast<uint64_t>(tokens[i]) >= vocab_size_)
        throw InvalidArgument(what + ": token " + std::to_string(tokens[i]) + " out of range");
      if ((L.appended + i) % kSampleEvery == 0) L.sample_w->push(static_cast<uint64_t>(tokens[i]));
      L.tok_w->push(static_cast<uint64_t>(tokens[i]));
    }
    if (has_children) {
      L.child_total += n_children[i];
      if (L.child_total > specs_[k].size)
        throw InvalidArgument(what + ": children exceed the size of level " + std::to_string(k + 1));
      L.child_w->push(L.child_total);
    }
  }
  L.appended += n;
}

void TrieV1Writer::finish() {
  if (finished_) return;
  for (uint32_t k = 1; k <= order_; ++k) {
    LevelStream& L = *levels_[k - 1];
    const std::string what = "level " + std::to_string(k);
    if (L.appended != specs_[k - 1].size)
      throw InvalidArgument(what + ": " + std::to_string(L.appended) + " entries appended, " +
                            std::to_string(specs_[k - 1].size) + " declared");
    if (L.child_w && L.child_total != specs_[k].size)
      throw InvalidArgument(what + ": children sum to " + std::to_string(L.child_total) + ", level " +
                            std::to_string(k + 1) + " has " + std::to_string(specs_[k].size));
    if (L.escape_w->count() != L.escapes)
      throw InvalidArgument(what + ": count frequencies do not match the counts appended");
    L.rank_w->finish();
    L.escape_w->finish();
    L.escape_index_w->finish();
    if (L.tok_w) L.tok_w->finish();
    if (L.sample_w) L.sample_w->finish();
    if (L.child_w) L.child_w->finish();
  }
  std::vector<SectionEntry> table;
  for (auto& s : streams_) {
    const SectionEntry& e = s->entry();
    if (s->written() != e.length)
      throw FormatError(file_->tmp_path() + ": internal error: section wrote " + std::to_string(s->written()) +
                        " bytes, laid out " + std::to_string(e.length));
    table.push_back(e);
  }
  file_->commit(make_header(kFormatVersion, order_, vocab_size_, eos_id_), table, file_size_);
  finished_ = true;
}

}  // namespace ngram
