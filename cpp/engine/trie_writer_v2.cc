#include "trie_writer_v2.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "chunked_elias_fano.h"
#include "count_ranks.h"
#include "crc32c.h"
#include "errors.h"
#include "packed_array.h"
#include "trie_layout.h"

namespace ngram {
namespace {

struct VectorSink {
  std::vector<uint64_t>* words;
  void operator()(uint64_t w) const { words->push_back(w); }
};

// Values packed with `width` bits each, the trailing zero word included.
std::vector<uint64_t> pack(const std::vector<uint64_t>& values, uint32_t width) {
  std::vector<uint64_t> words;
  PackedWriter<VectorSink> w(width, VectorSink{&words});
  for (uint64_t v : values) w.push(v);
  w.finish();
  return words;
}

// One level's sections, by kind, as words (count values: u64 each).
using LevelWords = std::map<SectionKind, std::vector<uint64_t>>;

// The tiered count ranks of level k (count_ranks.h, TieredRankView).
void count_sections(const Level& L, bool allow_escapes, LevelShape& shape, LevelWords& out) {
  std::vector<uint64_t> freq(L.count_value_count, 0), ranks(L.size);
  for (uint64_t i = 0; i < L.size; ++i) {
    const uint64_t r = L.count_ranks[i];
    if (r >= freq.size()) throw FormatError("level " + std::to_string(shape.level) + ": a count rank out of range");
    ranks[i] = r;
    ++freq[r];
  }
  const TieredRankLayout tl = choose_tiered_rank_layout(L.size, freq, allow_escapes);
  const uint64_t c1 = (uint64_t{1} << tl.first_width) - 1, c2 = (uint64_t{1} << tl.second_width) - 1;
  std::vector<uint64_t> first, dir1, second, dir2, full;
  first.reserve(L.size);
  for (uint64_t i = 0; i < L.size; ++i) {
    if (i % kEscapeBlock == 0) dir1.push_back(second.size());
    const uint64_t r = ranks[i];
    if (r < c1) {
      first.push_back(r);
      continue;
    }
    first.push_back(c1);
    if (second.size() % kEscapeBlock == 0) dir2.push_back(full.size());
    if (r - c1 < c2) {
      second.push_back(r - c1);
    } else {
      second.push_back(c2);
      full.push_back(r - c1 - c2);
    }
  }
  shape.count_values = L.count_value_count;
  shape.rank_width = tl.first_width;
  shape.escapes = second.size();
  shape.rank2_width = tl.second_width;
  shape.escapes2 = full.size();
  out[SectionKind::kCountValues] = std::vector<uint64_t>(L.count_values, L.count_values + L.count_value_count);
  out[SectionKind::kCountRanks] = pack(first, tl.first_width);
  out[SectionKind::kCountEscapeIndex] = pack(dir1, bits_for(second.size()));
  out[SectionKind::kCountRanks2] = pack(second, tl.second_width);
  out[SectionKind::kCountRanks2Index] = pack(dir2, bits_for(full.size()));
  out[SectionKind::kCountEscapes] = pack(full, bits_for(L.count_value_count ? L.count_value_count - 1 : 0));
}

void child_offset_sections(const TrieIndex& src, uint32_t k, LevelWords& out) {
  const Level& L = src.level(k);
  const uint64_t n = L.size + 1, u = src.level(k + 1).size;
  std::vector<uint64_t> low, high, sel;
  EliasFanoWriter<VectorSink> w(n, u, VectorSink{&low}, VectorSink{&high}, VectorSink{&sel});
  for (uint64_t i = 0; i < n; ++i) w.push(L.child_offsets[i]);
  w.finish();
  out[SectionKind::kChildLow] = std::move(low);
  out[SectionKind::kChildHigh] = std::move(high);
  out[SectionKind::kChildSelect] = std::move(sel);
}

// The byte budget of level 2's bitmaps (dense_runs.h): their extra bytes
// over the sequence's, per stored n-gram of all levels. 0.04 bytes keeps the
// shared corpus trie near 1.68 bytes per n-gram (the limit: 1.7)
// while its bitmaps hold the runs of the most frequent context tokens.
constexpr double kDenseBudgetPerNgram = 0.04;

}  // namespace

uint64_t write_trie_v2(const TrieIndex& src, const std::string& path, const std::string& meta_json) {
  if (src.version() != kFormatVersion)
    throw InvalidArgument(src.path() + ": format version " + std::to_string(src.version()) +
                          ", write_trie_v2 reads a version-1 trie");
  const uint32_t order = src.order();
  const uint64_t vocab = src.vocab_size();
  std::vector<LevelShape> shapes(order);
  std::vector<LevelWords> words(order);
  // Level 1: which tokens occur, and how many before each word of that bit vector.
  std::vector<uint64_t> used_rank(vocab);
  uint64_t used = 0;
  {
    const Level& uni = src.level(1);
    std::vector<uint64_t> bits((vocab + 63) / 64 + 1, 0), ranks;
    for (uint64_t t = 0; t < vocab; ++t) {
      if (t % 64 == 0) ranks.push_back(used);
      used_rank[t] = used;
      if (uni.count(t) != 0) {
        bits[t / 64] |= uint64_t{1} << (t % 64);
        ++used;
      }
    }
    bits.resize((vocab + 63) / 64);
    bits.push_back(0);
    words[0][SectionKind::kUsedTokens] = std::move(bits);
    words[0][SectionKind::kUsedTokenRanks] = pack(ranks, bits_for(vocab));
  }
  // suffix[i]: for entry i of the level before, the index of its suffix
  // (its n-gram without the first token) in the level before that.
  std::vector<uint64_t> suffix, next_suffix;
  for (uint32_t k = 1; k <= order; ++k) {
    const Level& L = src.level(k);
    LevelShape& sh = shapes[k - 1];
    sh.version = kFormatVersion2;
    sh.level = k;
    sh.order = order;
    sh.size = L.size;
    sh.next_size = k < order ? src.level(k + 1).size : 0;
    sh.vocab_size = vocab;
    sh.used_tokens = used;
    count_sections(L, k > 1, sh, words[k - 1]);
    if (k < order) child_offset_sections(src, k, words[k - 1]);
    if (k == 1) continue;
    const Level& parent = src.level(k - 1);
    // Level 2: the runs stored as bitmaps instead of in the sequence.
    std::vector<uint64_t> dense;
    std::vector<uint64_t> dense_bits, dense_ranks;
    if (k == 2) {
      std::vector<uint64_t> run_sizes(parent.size);
      uint64_t ngrams = used;
      for (uint32_t j = 2; j <= order; ++j) ngrams += src.level(j).size;
      for (uint64_t p = 0; p < parent.size; ++p) {
        uint64_t lo, hi;
        src.children(1, p, &lo, &hi);
        run_sizes[p] = hi - lo;
      }
      dense = dense_runs_to_store(run_sizes, used, static_cast<uint64_t>(kDenseBudgetPerNgram * ngrams));
      dense_bits.assign(dense.size() * dense_bitmap_bits(used) / 64, 0);
      for (uint64_t d = 0; d < dense.size(); ++d) sh.dense_entries += run_sizes[dense[d]];
      sh.dense_runs = dense.size();
    }
    // Tokens as ranks: S = base of the run + rank, strictly increasing.
    ChunkedEliasFanoBuilder seq;
    next_suffix.assign(L.size, 0);
    uint64_t base = 0;
    uint64_t next_dense = 0;  // index into dense
    for (uint64_t p = 0; p < parent.size; ++p) {
      uint64_t lo, hi;
      src.children(k - 1, p, &lo, &hi);
      if (lo == hi) continue;
      uint64_t slo = 0, shi = 0;  // the run of p's suffix context in level k-1
      if (k >= 3) src.children(k - 2, suffix[p], &slo, &shi);
      const bool is_dense = next_dense < dense.size() && dense[next_dense] == p;
      uint64_t* bitmap = is_dense ? dense_bits.data() + next_dense * (dense_bitmap_bits(used) / 64) : nullptr;
      if (is_dense) ++next_dense;
      uint64_t last = 0;
      for (uint64_t i = lo; i < hi; ++i) {
        const uint64_t w = L.tokens[i];
        uint64_t x, at;
        if (k == 2) {
          if (src.level(1).count(w) == 0)
            throw InvalidArgument(path + ": level 2 entry " + std::to_string(i) + " ends in token " +
                                  std::to_string(w) + ", which has count 0: not suffix-closed");
          x = used_rank[w];
          at = w;
        } else {
          at = parent.tokens.lower_bound(slo, shi, w);
          if (at >= shi || parent.tokens[at] != w)
            throw InvalidArgument(path + ": level " + std::to_string(k) + " entry " + std::to_string(i) +
                                  ": its suffix (the " + std::to_string(k - 1) +
                                  "-gram without its first token) is not stored; format version 2 needs "
                                  "every suffix of a stored n-gram (write format version 1 instead)");
          x = at - slo;
        }
        next_suffix[i] = at;
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
    if (k == 2) {
      // Each bitmap's rank samples: its set bits before every block.
      const uint64_t per_run = dense_bitmap_bits(used) / 64;
      for (uint64_t d = 0; d < dense.size(); ++d) {
        uint64_t ones = 0;
        for (uint64_t w = 0; w < per_run; ++w) {
          if (w % (kDenseBlock / 64) == 0) dense_ranks.push_back(ones);
          ones += static_cast<uint64_t>(__builtin_popcountll(dense_bits[d * per_run + w]));
        }
      }
      words[1][SectionKind::kDenseRuns] = pack(dense, bits_for(vocab - 1));
      dense_bits.push_back(0);
      words[1][SectionKind::kDenseBits] = std::move(dense_bits);
      words[1][SectionKind::kDenseRanks] = pack(dense_ranks, bits_for(used));
    }
    suffix.swap(next_suffix);
    sh.token_bits = seq.bit_count;
    sh.token_end_width = bits_for(seq.ends.empty() ? 0 : seq.ends.back());
    seq.words.resize((seq.bit_count + 63) / 64);
    seq.words.push_back(0);
    words[k - 1][SectionKind::kTokenBits] = std::move(seq.words);
    words[k - 1][SectionKind::kTokenStarts] = pack(seq.starts, bits_for(seq.bit_count));
    words[k - 1][SectionKind::kTokenEnds] = pack(seq.ends, sh.token_end_width);
  }

  // Lay out: meta, then each level's sections in level_sections() order.
  std::vector<SectionEntry> table;
  std::vector<const uint8_t*> data;
  uint64_t nsec = 1;
  for (uint32_t k = 1; k <= order; ++k) nsec += level_sections(shapes[k - 1]).size();
  uint64_t off = align_up(sizeof(FileHeader) + nsec * sizeof(SectionEntry));
  auto add = [&](SectionKind kind, uint32_t level, uint64_t count, uint32_t width, const void* bytes,
                 uint64_t have) {
    SectionEntry e{};
    e.kind = static_cast<uint32_t>(kind);
    e.level = level;
    e.offset = off;
    e.length = section_bytes(kind, count, width);
    e.count = count;
    e.width = width;
    if (have != e.length)
      throw FormatError(path + ": internal error: section " + section_kind_name(e.kind) + " of level " +
                        std::to_string(level) + " has " + std::to_string(have) + " bytes, laid out " +
                        std::to_string(e.length));
    e.crc = crc32c(bytes, e.length);
    off = align_up(off + e.length);
    table.push_back(e);
    data.push_back(static_cast<const uint8_t*>(bytes));
  };
  add(SectionKind::kMeta, 0, meta_json.size(), 8, meta_json.data(), meta_json.size());
  for (uint32_t k = 1; k <= order; ++k)
    for (const SectionShape& s : level_sections(shapes[k - 1])) {
      const std::vector<uint64_t>& w = words[k - 1].at(s.kind);
      add(s.kind, k, s.count, s.width, w.data(), w.size() * 8);
    }
  const uint64_t file_size = off;

  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kFormatVersion2;
  h.order = order;
  h.vocab_size = vocab;
  h.eos_id = src.eos_id();
  h.section_count = static_cast<uint32_t>(table.size());
  h.section_table_offset = sizeof(FileHeader);
  h.file_length = file_size;
  h.header_crc = crc32c_extend(crc32c(&h, sizeof(h)), table.data(), table.size() * sizeof(SectionEntry));

  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) throw FormatError(tmp + ": cannot create: " + std::strerror(errno));
  auto put = [&](const void* p, uint64_t n, uint64_t at) {
    const auto* b = static_cast<const uint8_t*>(p);
    uint64_t done = 0;
    while (done < n) {
      const ssize_t r = ::pwrite(fd, b + done, n - done, static_cast<off_t>(at + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        const int e = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        throw FormatError(tmp + ": write failed: " + std::strerror(e));
      }
      done += static_cast<uint64_t>(r);
    }
  };
  put(&h, sizeof(h), 0);
  put(table.data(), table.size() * sizeof(SectionEntry), sizeof(h));
  for (size_t i = 0; i < table.size(); ++i) put(data[i], table[i].length, table[i].offset);
  if (::ftruncate(fd, static_cast<off_t>(file_size)) != 0 || ::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw FormatError(tmp + ": cannot finish: " + std::strerror(e));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw FormatError(path + ": cannot rename into place: " + std::strerror(e));
  }
  return file_size;
}

}  // namespace ngram
