#include "trie_index.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <new>
#include <string>

#include "crc32c.h"
#include "errors.h"
#include "lookup_v2.h"
#include "search_simd.h"

namespace ngram {
namespace {

std::string section_name(const SectionEntry& s) {
  return std::string(section_kind_name(s.kind)) + (s.level ? " (level " + std::to_string(s.level) + ")" : "");
}

}  // namespace

// A RAM image is read by lookups that jump across hundreds of megabytes: on
// 4 KB pages nearly every jump also misses the TLB. Anonymous memory asked
// for with MADV_HUGEPAGE (before it is touched) gets 2 MB pages where the
// kernel has them (transparent huge pages "always" or "madvise"). Only the
// image's whole 2 MB pages: the mapping ends at the image's last 4 KB page,
// so that a last, partly filled huge page does not count 2 MB in RAM (on the
// shared corpus that was 0.3 bytes per n-gram of a version-2 trie).
std::unique_ptr<uint8_t, TrieIndex::ImageDeleter> TrieIndex::allocate_anonymous(uint64_t bytes) {
  constexpr uint64_t kHuge = 2ull << 20, kPage = 4096;
  const uint64_t len = std::max<uint64_t>((bytes + kPage - 1) / kPage * kPage, kPage);
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (bytes >= kHuge) madvise(p, bytes / kHuge * kHuge, MADV_HUGEPAGE);  // advice only: without huge pages it still works
#endif
  return std::unique_ptr<uint8_t, ImageDeleter>(static_cast<uint8_t*>(p), ImageDeleter{len});
}

uint8_t* TrieIndex::allocate_image(uint64_t bytes) {
  owned_ = allocate_anonymous(bytes);
  return owned_.get();
}

void TrieIndex::ImageDeleter::operator()(uint8_t* p) const {
  if (p) munmap(p, bytes);
}

TrieIndex::~TrieIndex() {
  if (mapped_ && base_) munmap(const_cast<uint8_t*>(base_), size_);
}

std::shared_ptr<TrieIndex> TrieIndex::open(const std::string& path, Load load, bool verify) {
  std::shared_ptr<TrieIndex> t(new TrieIndex());
  t->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FormatError(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw FormatError(path + ": cannot stat: " + std::strerror(e));
  }
  t->size_ = static_cast<uint64_t>(st.st_size);
  if (t->size_ < sizeof(FileHeader)) {
    ::close(fd);
    throw FormatError(path + ": not a trie file: " + std::to_string(t->size_) +
                      " bytes, shorter than the 64-byte header");
  }
  if (load == Load::kMap) {
    void* p = mmap(nullptr, t->size_, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    ::close(fd);
    if (p == MAP_FAILED) throw FormatError(path + ": mmap failed: " + std::strerror(e));
    t->base_ = static_cast<const uint8_t*>(p);
    t->mapped_ = true;
  } else {
    uint8_t* dst;
    try {
      dst = t->allocate_image(t->size_);
    } catch (...) {
      ::close(fd);
      throw;
    }
    uint64_t done = 0;
    while (done < t->size_) {
      ssize_t r = ::pread(fd, dst + done, t->size_ - done, static_cast<off_t>(done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        int e = errno;
        ::close(fd);
        throw FormatError(path + ": read failed at byte " + std::to_string(done) + ": " +
                          (r == 0 ? "unexpected end of file" : std::strerror(e)));
      }
      done += static_cast<uint64_t>(r);
    }
    ::close(fd);
    t->base_ = dst;
  }
  t->parse();
  if (verify) t->verify_checksums();
  if (load == Load::kRam) t->decode_for_ram();
  return t;
}

std::shared_ptr<TrieIndex> TrieIndex::from_buffer(std::string bytes, const std::string& name,
                                                  bool verify) {
  std::shared_ptr<TrieIndex> t(new TrieIndex());
  t->path_ = name;
  t->size_ = bytes.size();
  if (t->size_ < sizeof(FileHeader))
    throw FormatError(name + ": not a trie file: " + std::to_string(t->size_) +
                      " bytes, shorter than the 64-byte header");
  uint8_t* image = t->allocate_image(t->size_);
  std::memcpy(image, bytes.data(), t->size_);
  t->base_ = image;
  t->parse();
  if (verify) t->verify_checksums();
  t->decode_for_ram();
  return t;
}

void TrieIndex::parse() {
  const std::string& p = path_;
  std::memcpy(&header_, base_, sizeof(FileHeader));
  if (std::memcmp(header_.magic, kMagic, sizeof(kMagic)) != 0) {
    static constexpr uint8_t kZstdMagic[4] = {0x28, 0xb5, 0x2f, 0xfd};
    if (std::memcmp(base_, kZstdMagic, sizeof(kZstdMagic)) == 0)
      throw FormatError(p + ": a zstd-compressed trie (ngram-build --compress, for shipping): it must be "
                            "decompressed before it can be mapped (zstd -d " + p + " -o PLAIN.ngt, then serve "
                            "PLAIN.ngt; in Python NgramIndex.open decompresses it into RAM)");
    throw FormatError(p + ": not a trie file (bad magic)");
  }
  if (header_.version != kFormatVersion && header_.version != kFormatVersion2)
    throw FormatError(p + ": format version " + std::to_string(header_.version) +
                      ", this engine reads versions " + std::to_string(kFormatVersion) + " and " +
                      std::to_string(kFormatVersion2));
  if (header_.file_length != size_)
    throw FormatError(p + ": truncated or padded: header says " + std::to_string(header_.file_length) +
                      " bytes, file has " + std::to_string(size_));
  if (header_.order < 1 || header_.order > kMaxOrder)
    throw FormatError(p + ": order " + std::to_string(header_.order) + " out of range [1, " +
                      std::to_string(kMaxOrder) + "]");
  if (header_.vocab_size < 1 || header_.vocab_size > (uint64_t{1} << 31))
    throw FormatError(p + ": vocab_size " + std::to_string(header_.vocab_size) + " out of range");
  if (header_.section_table_offset != sizeof(FileHeader) || header_.section_count > 4096 ||
      sizeof(FileHeader) + uint64_t{header_.section_count} * sizeof(SectionEntry) > size_)
    throw FormatError(p + ": section table out of bounds");
  sections_.resize(header_.section_count);
  if (!sections_.empty())  // no memcpy to data() == nullptr (UB even for 0 bytes; found by fuzz_trie_reader)
    std::memcpy(sections_.data(), base_ + sizeof(FileHeader), sections_.size() * sizeof(SectionEntry));
  {
    FileHeader h = header_;
    h.header_crc = 0;
    uint32_t crc = crc32c(&h, sizeof(h));
    crc = crc32c_extend(crc, sections_.data(), sections_.size() * sizeof(SectionEntry));
    if (crc != header_.header_crc) throw FormatError(p + ": header checksum mismatch (corrupted header)");
  }

  const uint32_t n = header_.order;
  levels_.assign(n, Level{});
  // Each level's sections by kind; which a level must have is trie_layout.h's to say.
  constexpr uint32_t kKinds = static_cast<uint32_t>(SectionKind::kDenseRanks) + 1;
  const uint32_t version = header_.version;
  using KindSlots = std::array<const SectionEntry*, kKinds>;
  std::vector<KindSlots> by_kind(n, KindSlots{});
  const SectionEntry* meta = nullptr;
  for (const SectionEntry& s : sections_) {
    const std::string what = p + ": section " + section_name(s);
    if (s.offset % kSectionAlign != 0) throw FormatError(what + ": misaligned offset");
    if (s.offset > size_ || s.length > size_ - s.offset) throw FormatError(what + ": extends past the end of the file");
    const auto kind = static_cast<SectionKind>(s.kind);
    if (kind == SectionKind::kMeta) {
      if (meta) throw FormatError(what + ": duplicated");
      meta = &s;
      continue;
    }
    if (s.level < 1 || s.level > n) throw FormatError(what + ": level out of range");
    if (s.kind < static_cast<uint32_t>(SectionKind::kCountValues) || s.kind >= kKinds)
      throw FormatError(what + ": unknown section kind");
    const SectionEntry*& slot = by_kind[s.level - 1][s.kind];
    if (slot) throw FormatError(what + ": duplicated");
    slot = &s;
    if (kind == SectionKind::kCountValues) {
      if (s.width != 64 || s.count > s.length / 8 || s.length != s.count * 8)
        throw FormatError(what + ": length does not match its count");
    } else {
      const uint32_t min_width = kind == SectionKind::kChildLow ? 0 : 1;  // EF low bits may be 0
      if (s.width < min_width || s.width > 64 || s.count > (uint64_t{1} << 40) ||
          s.length != packed_bytes(s.count, s.width))
        throw FormatError(what + ": length does not match its count and width");
    }
  }
  if (!meta) throw FormatError(p + ": no meta section");
  meta_.assign(reinterpret_cast<const char*>(base_ + meta->offset), meta->length);

  auto section = [&](uint32_t k, SectionKind kind) { return by_kind[k - 1][static_cast<uint32_t>(kind)]; };
  for (uint32_t k = 1; k <= n; ++k) {
    const std::string what = p + ": level " + std::to_string(k);
    const SectionEntry *v = section(k, SectionKind::kCountValues), *r = section(k, SectionKind::kCountRanks);
    const SectionEntry *re = section(k, SectionKind::kCountEscapes), *ri = section(k, SectionKind::kCountEscapeIndex);
    const SectionEntry *r2 = section(k, SectionKind::kCountRanks2), *r2i = section(k, SectionKind::kCountRanks2Index);
    if (!v || !r || !re || !ri || (version == kFormatVersion2 && (!r2 || !r2i)))
      throw FormatError(what + ": count sections missing");
    auto rank_width_ok = [](uint32_t w) { return (w & (w - 1)) == 0 && w <= 32; };
    if (!rank_width_ok(r->width) || (r2 && !rank_width_ok(r2->width)))
      throw FormatError(what + ": count rank sections differ in size");
    Level& L = levels_[k - 1];
    auto packed = [&](const SectionEntry* s) { return PackedView(base_ + s->offset, s->count, s->width); };
    // Level 1 has an entry per token; version 2 counts only those that occur.
    const bool by_used_rank = k == 1 && version == kFormatVersion2;
    L.size = by_used_rank ? header_.vocab_size : r->count;
    if (k == 1 && L.size != header_.vocab_size) throw FormatError(what + ": size differs from vocab_size");
    LevelShape shape;
    std::vector<uint64_t> dense_first, dense_before;  // version 2, level 2 (read_dense_runs)
    shape.version = version;
    shape.level = k;
    shape.order = n;
    shape.size = L.size;
    const SectionEntry* next_ranks = k < n ? section(k + 1, SectionKind::kCountRanks) : nullptr;
    shape.next_size = next_ranks ? next_ranks->count : 0;
    shape.vocab_size = header_.vocab_size;
    shape.count_values = v->count;
    shape.rank_width = r->width;
    shape.escapes = re->count;
    if (version == kFormatVersion2) {  // its free parameters, from the sections that carry them
      shape.escapes = r2->count;
      shape.rank2_width = r2->width;
      shape.escapes2 = re->count;
      const SectionEntry *tb = section(k, SectionKind::kTokenBits), *te = section(k, SectionKind::kTokenEnds);
      shape.token_bits = tb ? tb->count : 0;
      shape.token_end_width = te ? te->width : 1;
      const SectionEntry *ub = section(k, SectionKind::kUsedTokens), *ur = section(k, SectionKind::kUsedTokenRanks);
      if (k == 1 && ub && ur) {  // their sizes are checked with the rest below
        L.used = UsedTokens{packed(ub), packed(ur)};
        shape.used_tokens = L.used.count();
      }
      if (k == 2) read_dense_runs(section(k, SectionKind::kDenseRuns), shape, dense_first, dense_before);
    }
    // Exactly the layout's sections, each with the layout's count and width.
    const std::vector<SectionShape> want = level_sections(shape);
    std::array<bool, kKinds> wanted{};
    for (const SectionShape& w : want) wanted[static_cast<uint32_t>(w.kind)] = true;
    for (uint32_t kind = static_cast<uint32_t>(SectionKind::kCountValues); kind < kKinds; ++kind)
      if ((by_kind[k - 1][kind] != nullptr) != wanted[kind])
        throw FormatError(what + ": " + layout_missing_message(static_cast<SectionKind>(kind)));
    for (const SectionShape& w : want) {
      const SectionEntry* s = section(k, w.kind);
      if (s->count != w.count || s->width != w.width) throw FormatError(what + ": " + layout_size_message(w.kind));
    }
    if (v->count == 0 && r->count > 0) throw FormatError(what + ": empty count table");
    L.count_values = reinterpret_cast<const uint64_t*>(base_ + v->offset);
    L.count_value_count = v->count;
    for (uint64_t i = 1; i < v->count; ++i)
      if (L.count_values[i] <= L.count_values[i - 1]) throw FormatError(what + ": count table not ascending");
    L.version = version;
    L.by_used_rank = by_used_rank;
    if (version == kFormatVersion) {
      L.count_ranks = RankView(packed(r), packed(re), packed(ri));
    } else {
      L.count_ranks_v2 = TieredRankView(RankView(packed(r), PackedView(), packed(ri)),
                                        RankView(packed(r2), packed(re), packed(r2i)));
    }
    if (const SectionEntry* db = section(k, SectionKind::kDenseBits))
      L.dense = DenseRunsView(base_ + db->offset, packed(section(k, SectionKind::kDenseRanks)), shape.used_tokens,
                              std::move(dense_first), std::move(dense_before));
    if (const SectionEntry* tb = section(k, SectionKind::kTokenBits))
      L.token_ranks = ChunkedEliasFanoView(L.size - std::min(L.size, shape.dense_entries), base_ + tb->offset, tb->count,
                                           packed(section(k, SectionKind::kTokenStarts)),
                                           packed(section(k, SectionKind::kTokenEnds)));
    if (const SectionEntry* t = section(k, SectionKind::kTokens)) L.tokens = packed(t);
    if (const SectionEntry* sm = section(k, SectionKind::kTokenSamples)) {
      L.token_samples = reinterpret_cast<const uint32_t*>(base_ + sm->offset);
      L.sample_count = sm->count;
    }
    switch (child_offset_rep(k, n)) {
      case ChildOffsetRep::kNone:
        break;
      case ChildOffsetRep::kPlain:
        L.child_offsets = ChildOffsets(PlainOffsetsView(packed(section(k, SectionKind::kChildOffsets))));
        break;
      case ChildOffsetRep::kEliasFano: {
        const SectionEntry *low = section(k, SectionKind::kChildLow), *high = section(k, SectionKind::kChildHigh);
        L.child_offsets = ChildOffsets(EliasFanoView(packed(low), base_ + high->offset, high->count,
                                                     packed(section(k, SectionKind::kChildSelect)), low->width));
        break;
      }
    }
  }
  for (uint32_t k = 1; k < n; ++k) {
    const Level& L = levels_[k - 1];
    const uint64_t parents = L.by_used_rank ? L.used.count() : L.size;
    if (L.child_offsets[0] != 0 || L.child_offsets[parents] != levels_[k].size)
      throw FormatError(p + ": level " + std::to_string(k) + ": child offsets do not span level " +
                        std::to_string(k + 1));
  }
  ram_decode_bytes_ = decode_plan_bytes();
}

namespace {

// The widths decode_for_ram gives level k's tokens, count ranks and child
// offsets; 0 for what it leaves as the file has it.
//
// Tokens of levels >= 2 become 32-bit words: the token above, its count rank
// below in the bits the token leaves (Level::key_shift). The vector search
// reads a token with one gather and a shift instead of a gather, a multiply,
// a shift and a mask, and a hit's count rank from the line it has just read
// instead of a miss in another array (search_kernel.inc). Only tokens
// narrower than 32 bits are (any vocabulary of at most 2^31 tokens).
uint32_t decoded_token_width(const Level& L) {
  const bool decoded = L.version == kFormatVersion && L.tokens.size() > 0 && L.tokens.width() < kTokenWordBits;
  return decoded ? kTokenWordBits : 0;
}
// Escaped count ranks of a level whose tokens are not decoded (level 1).
// Wide enough for count_value_count itself, which stands for a corrupted
// rank (count_v1 answers 0 for it, as for the corrupted rank in the file).
uint32_t decoded_rank_width(const Level& L) {
  return L.version == kFormatVersion && L.count_ranks.has_escapes() && decoded_token_width(L) == 0
             ? bits_for(L.count_value_count)
             : 0;
}
uint32_t decoded_offset_width(const Level& L, const Level* next) {
  return L.version == kFormatVersion && next && L.child_offsets.elias_fano() ? bits_for(next->size) : 0;
}

}  // namespace

uint64_t TrieIndex::decode_plan_bytes() const {
  uint64_t bytes = 0;
  for (uint32_t k = 1; k <= header_.order; ++k) {
    const Level& L = levels_[k - 1];
    const Level* next = k < header_.order ? &levels_[k] : nullptr;
    if (const uint32_t w = decoded_rank_width(L)) bytes += packed_bytes(L.size, w);
    if (const uint32_t w = decoded_offset_width(L, next)) bytes += packed_bytes(L.size + 1, w);
    if (const uint32_t w = decoded_token_width(L)) bytes += packed_bytes(L.tokens.size(), w);
  }
  return bytes;
}

void TrieIndex::decode_for_ram() {
  const uint64_t bytes = ram_decode_bytes_;
  if (bytes == 0) return;
  decoded_ = allocate_anonymous(bytes);
  uint8_t* out = decoded_.get();
  // Packs the `count` values that each(push) pushes, `width` bits each, at out.
  auto write = [&out](uint64_t count, uint32_t width, const auto& each) {
    uint8_t* start = out;
    PackedWriter w(width, [&out](uint64_t x) {
      std::memcpy(out, &x, 8);
      out += 8;
    });
    each([&w](uint64_t v) { w.push(v); });
    w.finish();
    return PackedView(start, count, width);
  };
  for (uint32_t k = 1; k <= header_.order; ++k) {
    Level& L = levels_[k - 1];
    const Level* next = k < header_.order ? &levels_[k] : nullptr;
    if (const uint32_t w = decoded_rank_width(L)) {
      const uint64_t corrupted = L.count_value_count;  // fits w bits; counts 0
      const RankView& file = L.count_ranks;
      L.count_ranks = RankView::plain(write(L.size, w, [&](const auto& push) {
        file.for_each([&](uint64_t r) { push(r < corrupted ? r : corrupted); });
      }));
    }
    if (const uint32_t w = decoded_offset_width(L, next)) {
      // Clamped to the next level as children() clamps what it reads.
      const uint64_t end = next->size;
      const ChildOffsets& file = L.child_offsets;
      L.child_offsets = ChildOffsets(PlainOffsetsView(write(L.size + 1, w, [&](const auto& push) {
        file.for_each([&](uint64_t v) { push(std::min(v, end)); }, end);
      })));
    }
    if (const uint32_t w = decoded_token_width(L)) {
      // A rank that does not fit below the token, or a corrupted one (count_v1
      // then reads the file's, and answers 0 for a corrupted one), is escaped.
      const PackedView file = L.tokens;
      const uint32_t shift = w - file.width();
      const uint64_t escape = (uint64_t{1} << shift) - 1;
      const uint64_t values = L.count_value_count;
      L.tokens = write(file.size(), w, [&](const auto& push) {
        uint64_t i = 0;
        L.count_ranks.for_each([&](uint64_t r) { push((file[i++] << shift) | (r < escape && r < values ? r : escape)); });
      });
      L.key_shift = shift;
      L.rank_escape = escape;
    }
  }
}

void TrieIndex::read_dense_runs(const SectionEntry* s, LevelShape& shape, std::vector<uint64_t>& first,
                                std::vector<uint64_t>& before) const {
  shape.used_tokens = levels_[0].used.count();
  if (!s) return;  // the layout check names the missing section
  const std::string what = path_ + ": level 2: dense run ";
  const PackedView parents(base_ + s->offset, s->count, s->width);
  before.push_back(0);
  for (uint64_t d = 0; d < parents.size(); ++d) {
    const uint64_t p = parents[d];
    if (p >= levels_[0].size || (d > 0 && p <= parents[d - 1]))
      throw FormatError(what + std::to_string(d) + ": parent " + std::to_string(p) +
                        " out of range or not ascending");
    uint64_t lo, hi;
    children(1, p, &lo, &hi);
    if (hi <= lo || hi - lo > shape.used_tokens)
      throw FormatError(what + std::to_string(d) + ": " + std::to_string(hi - lo) +
                        " children, a bitmap holds 1 to " + std::to_string(shape.used_tokens));
    first.push_back(lo);
    before.push_back(before.back() + (hi - lo));
  }
  shape.dense_runs = parents.size();
  shape.dense_entries = before.back();
}

uint64_t TrieIndex::total_tokens() const {
  std::call_once(totals_once_, [this] {
    const Level& uni = levels_[0];
    for (uint64_t i = 0; i < uni.size; ++i) {
      const uint64_t c = uni.count(i);
      total_tokens_ += c;
      distinct_unigrams_ += c != 0;
    }
  });
  return total_tokens_;
}

namespace {

// Per lane j, a branch-free bisection of the sorted values at(base[j]) ..
// at(base[j] + n[j] - 1) towards v[j], all lanes in lockstep until each has
// one candidate left; lanes already at n[j] <= 1 add zero.
template <typename At>
void bisect_lanes(At at, const uint32_t* v, uint32_t m, uint64_t* base, uint64_t* n) {
  for (bool more = true; more;) {
    more = false;
    for (uint32_t j = 0; j < m; ++j) {
      const uint64_t half = n[j] / 2;
      base[j] += half & -static_cast<uint64_t>(at(base[j] + half) < v[j]);
      n[j] -= half;
      more |= n[j] > 1;
    }
  }
}

// Samples before index a are below v, the one at a (if any) is not: the
// answer lies in ((a-1) * S, a * S] clipped to the run [lo, hi) (min/max,
// not branches: at the run's first sample the lower end falls below lo, past
// its last the upper end above hi).
void sample_block(uint64_t lo, uint64_t hi, uint64_t a, uint64_t* b_lo, uint64_t* b_hi) {
  const uint64_t top = a * kSampleEvery + 1;
  *b_lo = std::max(lo, top - std::min(top, kSampleEvery));
  *b_hi = std::min(hi, top);
}

}  // namespace

// Below 8 tokens the vector search's spare lanes cost more than it saves.
uint64_t Level::find_many(uint64_t lo, uint64_t hi, const uint32_t* v, uint32_t m, uint64_t* out) const {
  uint64_t hits = 0;
  if (m >= 8 && hi > lo && simd_search() != SimdSearch::kNone && find_many_simd(*this, lo, hi, v, m, out, &hits))
    return hits;
  lower_bound_many_portable(lo, hi, v, m, out);
  // tokens[hi] is in bounds (the packed section's trailing word).
  for (uint32_t j = 0; j < m; ++j) hits |= static_cast<uint64_t>((out[j] < hi) & (token(out[j]) == v[j])) << j;
  return hits;
}

void Level::find_many_runs(uint32_t runs, const uint64_t* lo, const uint64_t* hi, const uint32_t* v, uint32_t m,
                           uint64_t* out, uint64_t* hits) const {
  if (runs > 1 && m >= 8 && simd_search() != SimdSearch::kNone &&
      find_many_runs_simd(*this, runs, lo, hi, v, m, out, hits))
    return;
  for (uint32_t r = 0; r < runs; ++r) hits[r] = find_many(lo[r], hi[r], v, m, out + r * m);
}

void Level::lower_bound_many_portable(uint64_t lo, uint64_t hi, const uint32_t* v, uint32_t m, uint64_t* out) const {
  if (lo >= hi) {
    for (uint32_t j = 0; j < m; ++j) out[j] = lo;
    return;
  }
  if (hi - lo <= 2 * kSampleEvery) {
    for (uint32_t j = 0; j < m; ++j) out[j] = lo;
    for (uint64_t n = hi - lo; n > 1;) {
      const uint64_t half = n / 2;
      for (uint32_t j = 0; j < m; ++j) out[j] += half & -static_cast<uint64_t>(token(out[j] + half) < v[j]);
      n -= half;
    }
    for (uint32_t j = 0; j < m; ++j) out[j] += token(out[j]) < v[j];
    return;
  }
  // Samples inside the run: indices [s_lo, s_hi); at least two, as the run
  // is longer than 2 * kSampleEvery.
  const uint64_t s_lo = (lo + kSampleEvery - 1) / kSampleEvery;
  uint64_t s_hi = (hi - 1) / kSampleEvery + 1;
  if (s_hi > sample_count) s_hi = sample_count;  // only in a corrupted file
  if (s_hi <= s_lo) {
    for (uint32_t j = 0; j < m; ++j) out[j] = lower_bound_token(lo, hi, v[j]);
    return;
  }
  uint64_t a[kMaxBatch];  // per token: the first sample index >= v[j] (s_hi if none)
  for (uint32_t j = 0; j < m; ++j) a[j] = s_lo;
  for (uint64_t n = s_hi - s_lo; n > 1;) {
    const uint64_t half = n / 2;
    for (uint32_t j = 0; j < m; ++j) a[j] += half & -static_cast<uint64_t>(token_samples[a[j] + half] < v[j]);
    n -= half;
  }
  for (uint32_t j = 0; j < m; ++j) {
    a[j] += token_samples[a[j]] < v[j];
    uint64_t b_lo, b_hi;
    sample_block(lo, hi, a[j], &b_lo, &b_hi);
    out[j] = lower_bound_token(b_lo, b_hi, v[j]);
  }
}

void Level::lower_bound_runs(const uint64_t* lo, const uint64_t* hi, const uint32_t* v, uint32_t m,
                             uint64_t* out) const {
  // Long runs first narrow to one block of kSampleEvery through the samples
  // (the bisection of lower_bound_many_portable, each lane its own range;
  // a lane whose range is down to one sample adds zero).
  uint64_t base[kMaxBatch], n[kMaxBatch];
  bool is_long[kMaxBatch];
  bool any_long = false;
  for (uint32_t j = 0; j < m; ++j) {
    const uint64_t s_lo = (lo[j] + kSampleEvery - 1) / kSampleEvery;
    const uint64_t s_hi = std::min((hi[j] - (hi[j] > 0)) / kSampleEvery + 1, sample_count);
    const bool long_run = hi[j] > lo[j] && hi[j] - lo[j] > 2 * kSampleEvery && s_hi > s_lo;
    base[j] = long_run ? s_lo : 0;
    n[j] = long_run ? s_hi - s_lo : 1;
    is_long[j] = long_run;
    any_long |= long_run;
  }
  if (any_long) {
    bisect_lanes([this](uint64_t i) { return uint64_t{token_samples[i]}; }, v, m, base, n);
  }
  for (uint32_t j = 0; j < m; ++j) {
    uint64_t b_lo = lo[j], b_hi = std::max(lo[j], hi[j]);
    if (is_long[j]) {
      sample_block(lo[j], hi[j], base[j] + (token_samples[base[j]] < v[j]), &b_lo, &b_hi);
    }
    base[j] = b_lo;
    n[j] = b_hi - b_lo;
  }
  // Then a bisection of the tokens of each lane's block (or short run).
  bisect_lanes([this](uint64_t i) { return token(i); }, v, m, base, n);
  // tokens[base] is in bounds also when a run is empty (base <= size, and
  // the packed section ends with a spare word).
  for (uint32_t j = 0; j < m; ++j) out[j] = base[j] + ((n[j] > 0) & (token(base[j]) < v[j]));
}

uint64_t TrieIndex::ngram_count(uint32_t k) const {
  if (k != 1) return levels_[k - 1].size;
  total_tokens();
  return distinct_unigrams_;
}

void TrieIndex::verify_checksums() const {
  for (const SectionEntry& s : sections_) {
    if (crc32c(base_ + s.offset, s.length) != s.crc)
      throw FormatError(path_ + ": section " + section_name(s) + ": checksum mismatch (corrupted data)");
  }
}

uint64_t TrieIndex::used_token(uint64_t r) const {
  // The last word whose rank sample is <= r, then the bit within it.
  const UsedTokens& used = levels_[0].used;
  const uint64_t words = used.ranks.size();
  uint64_t lo = 0, hi = words;
  while (hi - lo > 1) {
    const uint64_t mid = (lo + hi) / 2;
    if (used.ranks[mid] <= r) lo = mid;
    else hi = mid;
  }
  if (words == 0) return UINT64_MAX;
  uint64_t word;
  std::memcpy(&word, used.bits.data() + lo * 8, 8);
  const uint64_t left = r - used.ranks[lo];
  if (left >= static_cast<uint64_t>(__builtin_popcountll(word))) return UINT64_MAX;
  return lo * 64 + select_in_word(word, left);
}

void TrieIndex::run_tokens(const int32_t* suffix, uint32_t len, uint64_t lo, uint64_t hi, int32_t* out) const {
  if (header_.version == kFormatVersion2) {
    run_tokens_v2(*this, suffix, len, lo, hi, out);
    return;
  }
  const Level& next = levels_[len];
  for (uint64_t i = lo; i < hi; ++i) out[i - lo] = static_cast<int32_t>(next.token(i));
}

bool TrieIndex::find(const int32_t* toks, uint32_t len, uint64_t* index) const {
  bool found;
  find_many(&toks, 1, len, index, &found);
  return found;
}

void TrieIndex::find_many(const int32_t* const* toks, uint32_t n, uint32_t len, uint64_t* index, bool* found) const {
  if (header_.version == kFormatVersion2) {
    for (uint32_t i = 0; i < n; ++i) found[i] = find_v2(*this, toks[i], len, &index[i]);
    return;
  }
  for (uint32_t done = 0; done < n; done += Level::kMaxBatch) {
    const uint32_t m = std::min(n - done, Level::kMaxBatch);
    const int32_t* const* tk = toks + done;
    uint64_t* node = index + done;
    bool* ok = found + done;
    if (len == 0 || len > header_.order) {
      std::fill(ok, ok + m, false);
      continue;
    }
    const Level& first = levels_[0];
    for (uint32_t i = 0; i < m; ++i) {
      node[i] = static_cast<uint32_t>(tk[i][0]);
      ok[i] = node[i] < first.size && first.count_v1(node[i]) != 0;  // version 1 only, from here on
    }
    uint64_t lo[Level::kMaxBatch], hi[Level::kMaxBatch], pos[Level::kMaxBatch];
    uint32_t v[Level::kMaxBatch];
    for (uint32_t k = 1; k < len; ++k) {
      for (uint32_t i = 0; i < m; ++i) {
        lo[i] = hi[i] = 0;
        if (ok[i]) children(k, node[i], &lo[i], &hi[i]);
        v[i] = static_cast<uint32_t>(tk[i][k]);
      }
      const Level& next = levels_[k];
      next.lower_bound_runs(lo, hi, v, m, pos);
      for (uint32_t i = 0; i < m; ++i) {
        ok[i] = ok[i] && pos[i] < hi[i] && next.token(pos[i]) == v[i];
        node[i] = pos[i];
      }
    }
  }
}

}  // namespace ngram
