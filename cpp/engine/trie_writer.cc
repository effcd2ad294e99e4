#include "trie_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "count_ranks.h"
#include "crc32c.h"
#include "elias_fano.h"
#include "errors.h"
#include "packed_array.h"
#include "trie_format.h"

namespace ngram {

// A section's byte stream: buffered, written at its fixed offset, checksummed.
struct SectionStream {
  SectionEntry entry{};
  int fd = -1;
  const std::string* path = nullptr;
  uint64_t written = 0;
  uint32_t crc = 0;
  std::vector<uint8_t> buf;

  void write(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    buf.insert(buf.end(), p, p + n);
    if (buf.size() >= (1u << 20)) flush();
  }
  void word(uint64_t w) { write(&w, 8); }
  void flush() {
    crc = crc32c_extend(crc, buf.data(), buf.size());
    size_t done = 0;
    while (done < buf.size()) {
      ssize_t r = ::pwrite(fd, buf.data() + done, buf.size() - done,
                           static_cast<off_t>(entry.offset + written + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw FormatError(*path + ": write failed: " + std::strerror(errno));
      done += static_cast<size_t>(r);
    }
    written += buf.size();
    buf.clear();
  }
};

struct WordSink {
  SectionStream* stream;
  void operator()(uint64_t w) const { stream->word(w); }
};

struct LevelStream {
  uint64_t appended = 0;
  uint64_t child_total = 0;
  SectionStream* tokens = nullptr;
  SectionStream* ranks = nullptr;
  SectionStream* childs = nullptr;
  std::unique_ptr<PackedWriter<WordSink>> tok_w, rank_w, sample_w, escape_w, escape_index_w;
  uint64_t escape_code = 0, escapes = 0;
  std::unique_ptr<EliasFanoWriter<WordSink>> child_w;  // levels >= 2
  std::unique_ptr<PackedWriter<WordSink>> child_plain_w;  // level 1
  uint64_t child_high_bits = 0;
};

TrieWriter::TrieWriter(std::string path, uint32_t order, uint64_t vocab_size, int64_t eos_id,
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

  // Lay out every section now: meta, then per level values, ranks, tokens, child offsets.
  uint32_t nsec = 1;
  for (uint32_t k = 1; k <= order_; ++k) nsec += 4 + 2 * (k >= 2) + (k < order_) * (k == 1 ? 1 : 3);
  uint64_t off = align_up(sizeof(FileHeader) + uint64_t{nsec} * sizeof(SectionEntry));
  auto add = [&](SectionKind kind, uint32_t level, uint64_t count, uint32_t width, uint64_t length) {
    auto s = std::make_unique<SectionStream>();
    s->entry.kind = static_cast<uint32_t>(kind);
    s->entry.level = level;
    s->entry.offset = off;
    s->entry.length = length;
    s->entry.count = count;
    s->entry.width = width;
    s->path = &tmp_path_;
    off = align_up(off + length);
    streams_.push_back(std::move(s));
    return streams_.back().get();
  };
  SectionStream* meta = add(SectionKind::kMeta, 0, meta_json.size(), 8, meta_json.size());
  const uint32_t tok_width = bits_for(vocab_size_ - 1);
  for (uint32_t k = 1; k <= order_; ++k) {
    const LevelSpec& spec = specs_[k - 1];
    auto st = std::make_unique<LevelStream>();
    SectionStream* values = add(SectionKind::kCountValues, k, spec.count_values.size(), 64, spec.count_values.size() * 8);
    for (uint64_t v : spec.count_values) values->word(v);
    const RankLayout rl = choose_rank_layout(spec.size, spec.count_frequencies, /*allow_escapes=*/k > 1);
    st->ranks = add(SectionKind::kCountRanks, k, spec.size, rl.primary_width, packed_bytes(spec.size, rl.primary_width));
    st->rank_w = std::make_unique<PackedWriter<WordSink>>(rl.primary_width, WordSink{st->ranks});
    st->escape_code = (uint64_t{1} << rl.primary_width) - 1;
    st->escapes = rl.escapes;
    SectionStream* esc = add(SectionKind::kCountEscapes, k, rl.escapes, rl.full_width, packed_bytes(rl.escapes, rl.full_width));
    st->escape_w = std::make_unique<PackedWriter<WordSink>>(rl.full_width, WordSink{esc});
    const uint64_t blocks = (spec.size + kEscapeBlock - 1) / kEscapeBlock;
    const uint32_t iw = bits_for(rl.escapes);
    SectionStream* idx = add(SectionKind::kCountEscapeIndex, k, blocks, iw, packed_bytes(blocks, iw));
    st->escape_index_w = std::make_unique<PackedWriter<WordSink>>(iw, WordSink{idx});
    if (k >= 2) {
      st->tokens = add(SectionKind::kTokens, k, spec.size, tok_width, packed_bytes(spec.size, tok_width));
      st->tok_w = std::make_unique<PackedWriter<WordSink>>(tok_width, WordSink{st->tokens});
      const uint64_t n_samples = (spec.size + kSampleEvery - 1) / kSampleEvery;
      SectionStream* samples = add(SectionKind::kTokenSamples, k, n_samples, 32, packed_bytes(n_samples, 32));
      st->sample_w = std::make_unique<PackedWriter<WordSink>>(32, WordSink{samples});
    }
    if (k == 1 && k < order_) {
      const uint32_t w = bits_for(specs_[k].size);
      SectionStream* plain = add(SectionKind::kChildOffsets, k, spec.size + 1, w, packed_bytes(spec.size + 1, w));
      st->child_plain_w = std::make_unique<PackedWriter<WordSink>>(w, WordSink{plain});
      st->child_plain_w->push(0);
    } else if (k < order_) {
      const uint64_t n = spec.size + 1, u = specs_[k].size;
      const uint32_t l = ef_low_bits(n, u);
      st->child_high_bits = ef_high_bits(n, u, l);
      const uint64_t n_select = (n + kSelectEvery - 1) / kSelectEvery;
      const uint32_t sw = bits_for(st->child_high_bits);
      SectionStream* low = add(SectionKind::kChildLow, k, n, l, packed_bytes(n, l));
      SectionStream* high = add(SectionKind::kChildHigh, k, st->child_high_bits, 1, packed_bytes(st->child_high_bits, 1));
      SectionStream* sel = add(SectionKind::kChildSelect, k, n_select, sw, packed_bytes(n_select, sw));
      st->child_w = std::make_unique<EliasFanoWriter<WordSink>>(n, u, WordSink{low}, WordSink{high}, WordSink{sel});
      st->child_w->push(0);
    }
    levels_.push_back(std::move(st));
  }
  file_size_ = off;
  if (streams_.size() != nsec) throw InvalidArgument("internal error: section count");

  tmp_path_ = path_ + ".tmp-" + std::to_string(::getpid());
  fd_ = ::open(tmp_path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd_ < 0) throw FormatError(tmp_path_ + ": cannot create: " + std::strerror(errno));
  for (auto& s : streams_) s->fd = fd_;
  meta->write(meta_json.data(), meta_json.size());
}

TrieWriter::~TrieWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_ && !tmp_path_.empty()) ::unlink(tmp_path_.c_str());
}

void TrieWriter::append(uint32_t k, uint64_t n, const int32_t* tokens, const uint64_t* counts,
                        const uint64_t* n_children) {
  if (finished_) throw InvalidArgument("append after finish");
  if (k < 1 || k > order_) throw InvalidArgument("level " + std::to_string(k) + " out of range");
  LevelStream& L = *levels_[k - 1];
  const LevelSpec& spec = specs_[k - 1];
  const std::string what = "level " + std::to_string(k);
  if (n > spec.size - L.appended)
    throw InvalidArgument(what + ": more entries than the " + std::to_string(spec.size) + " declared");
  if (L.tok_w && !tokens) throw InvalidArgument(what + ": tokens are required");
  const bool has_children = L.child_w || L.child_plain_w;
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
      if (L.child_w) L.child_w->push(L.child_total);
      else L.child_plain_w->push(L.child_total);
    }
  }
  L.appended += n;
}

void TrieWriter::finish() {
  if (finished_) return;
  for (uint32_t k = 1; k <= order_; ++k) {
    LevelStream& L = *levels_[k - 1];
    const std::string what = "level " + std::to_string(k);
    if (L.appended != specs_[k - 1].size)
      throw InvalidArgument(what + ": " + std::to_string(L.appended) + " entries appended, " +
                            std::to_string(specs_[k - 1].size) + " declared");
    if ((L.child_w || L.child_plain_w) && L.child_total != specs_[k].size)
      throw InvalidArgument(what + ": children sum to " + std::to_string(L.child_total) + ", level " +
                            std::to_string(k + 1) + " has " + std::to_string(specs_[k].size));
    if (L.escape_w->count() != L.escapes)
      throw InvalidArgument(what + ": count frequencies do not match the counts appended");
    L.rank_w->finish();
    L.escape_w->finish();
    L.escape_index_w->finish();
    if (L.tok_w) L.tok_w->finish();
    if (L.sample_w) L.sample_w->finish();
    if (L.child_w) L.child_w->finish(L.child_high_bits);
    if (L.child_plain_w) L.child_plain_w->finish();
  }
  std::vector<SectionEntry> table;
  for (auto& s : streams_) {
    s->flush();
    if (s->written != s->entry.length)
      throw FormatError(tmp_path_ + ": internal error: section wrote " + std::to_string(s->written) +
                        " bytes, laid out " + std::to_string(s->entry.length));
    s->entry.crc = s->crc;
    table.push_back(s->entry);
  }
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kFormatVersion;
  h.order = order_;
  h.vocab_size = vocab_size_;
  h.eos_id = eos_id_;
  h.section_count = static_cast<uint32_t>(table.size());
  h.section_table_offset = sizeof(FileHeader);
  h.file_length = file_size_;
  h.header_crc = 0;
  uint32_t crc = crc32c(&h, sizeof(h));
  h.header_crc = crc32c_extend(crc, table.data(), table.size() * sizeof(SectionEntry));
  std::string head(reinterpret_cast<const char*>(&h), sizeof(h));
  head.append(reinterpret_cast<const char*>(table.data()), table.size() * sizeof(SectionEntry));
  if (::pwrite(fd_, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size()))
    throw FormatError(tmp_path_ + ": write failed: " + std::strerror(errno));
  // Zero padding after the last section is implicit: extend to the full length.
  if (::ftruncate(fd_, static_cast<off_t>(file_size_)) != 0 || ::fsync(fd_) != 0)
    throw FormatError(tmp_path_ + ": cannot finish: " + std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    throw FormatError(path_ + ": cannot rename into place: " + std::strerror(errno));
  finished_ = true;
}

}  // namespace ngram
