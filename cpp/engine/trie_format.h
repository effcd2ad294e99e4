// The trie file's fixed structures. docs/FORMAT.md is the byte-by-byte
// specification; this header is its single definition in code.
#pragma once
#include <cstdint>
#include <cstring>

namespace ngram {

constexpr char kMagic[8] = {'N', 'G', 'T', 'R', 'I', 'E', '\r', '\n'};
// A zstd frame's first bytes: a trie compressed for shipping (ngram-build
// --compress), which must be decompressed before it can be mapped.
constexpr uint8_t kZstdMagic[4] = {0x28, 0xb5, 0x2f, 0xfd};
constexpr uint32_t kFormatVersion = 1;    // the first format; still read and written
constexpr uint32_t kFormatVersion2 = 2;   // tokens as ranks in chunked Elias-Fano, two-tier count ranks
constexpr uint32_t kMaxOrder = 16;
constexpr uint64_t kSectionAlign = 64;

// All integers little endian. 64 bytes at offset 0.
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t order;            // N: the longest n-gram stored
  uint64_t vocab_size;       // token ids are in [0, vocab_size)
  int64_t eos_id;            // -1 when the trie has no EOS token
  uint32_t section_count;
  uint32_t header_crc;       // CRC-32C of header (this field zero) + section table
  uint64_t section_table_offset;
  uint64_t file_length;
  uint64_t reserved;
};
static_assert(sizeof(FileHeader) == 64, "header is 64 bytes");

// A header with the magic and these fields; the section table's fields are
// the writer's to fill (SectionFile::commit).
inline FileHeader make_header(uint32_t version, uint32_t order, uint64_t vocab_size, int64_t eos_id) {
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = version;
  h.order = order;
  h.vocab_size = vocab_size;
  h.eos_id = eos_id;
  return h;
}

enum class SectionKind : uint32_t {
  kMeta = 1,         // UTF-8 JSON: tokenizer, corpus manifest, build parameters
  kCountValues = 2,  // u64[count]: the distinct count values of a level, ascending
  kCountRanks = 3,   // packed, width b in {1,2,4,8,16,32}: per entry, the rank of
                     // its count in kCountValues, or the escape code 2^b - 1
                     // (see count_ranks.h)
  kTokens = 4,       // packed: per entry (levels >= 2), its last token
  kChildLow = 5,     // child offsets off[0..entries], Elias-Fano coded (see
                     // elias_fano.h): the low bits, packed, width = l (may be 0).
                     // Children of entry i are entries [off[i], off[i+1]) of
                     // the next level.
  kTokenSamples = 6, // u32 (packed, width 32): tokens[i * kSampleEvery], so a
                     // search in a long run of children touches few cache lines
  kChildHigh = 7,    // child offsets: the high-part bit vector (packed, width 1)
  kChildSelect = 8,  // child offsets: position of every kSelectEvery-th set bit
  kCountEscapes = 9, // packed: the full ranks of the escaped entries, in order
  kCountEscapeIndex = 10,  // packed: escapes before each block of kEscapeBlock entries
  kChildOffsets = 11,  // level 1 only (dense, small, read by every lookup):
                       // the child offsets plainly packed, entries + 1 of them
  // Version 2 only (docs/FORMAT.md, "Version 2"):
  kUsedTokens = 12,       // level 1: bit t set when token t occurs (count > 0)
  kUsedTokenRanks = 13,   // level 1: set bits of kUsedTokens before each 64-bit word
  kCountRanks2 = 14,      // the second tier of count ranks, one per escaped entry
  kCountRanks2Index = 15, // second-tier escapes before each block of 64 escaped entries
  kTokenBits = 16,        // levels >= 2: the token ranks' chunked Elias-Fano bit streams
  kTokenStarts = 17,      // levels >= 2: each chunk's first bit in kTokenBits, and the end
  kTokenEnds = 18,        // levels >= 2: each chunk's last value
  kDenseRuns = 19,        // level 2: the level-1 entries whose runs of children are bitmaps
  kDenseBits = 20,        // level 2: those runs' bitmaps over the used tokens' ranks
  kDenseRanks = 21,       // level 2: set bits of each bitmap before each block of 512 bits
};

constexpr uint64_t kSampleEvery = 16;

// The name of a section kind, as docs/FORMAT.md and error messages use it.
inline const char* section_kind_name(uint32_t kind) {
  switch (static_cast<SectionKind>(kind)) {
    case SectionKind::kMeta: return "meta";
    case SectionKind::kCountValues: return "count_values";
    case SectionKind::kCountRanks: return "count_ranks";
    case SectionKind::kTokens: return "tokens";
    case SectionKind::kChildLow: return "child_low";
    case SectionKind::kTokenSamples: return "token_samples";
    case SectionKind::kChildHigh: return "child_high";
    case SectionKind::kChildSelect: return "child_select";
    case SectionKind::kCountEscapes: return "count_escapes";
    case SectionKind::kCountEscapeIndex: return "count_escape_index";
    case SectionKind::kChildOffsets: return "child_offsets";
    case SectionKind::kUsedTokens: return "used_tokens";
    case SectionKind::kUsedTokenRanks: return "used_token_ranks";
    case SectionKind::kCountRanks2: return "count_ranks2";
    case SectionKind::kCountRanks2Index: return "count_ranks2_index";
    case SectionKind::kTokenBits: return "token_bits";
    case SectionKind::kTokenStarts: return "token_starts";
    case SectionKind::kTokenEnds: return "token_ends";
    case SectionKind::kDenseRuns: return "dense_runs";
    case SectionKind::kDenseBits: return "dense_bits";
    case SectionKind::kDenseRanks: return "dense_ranks";
  }
  return "unknown";
}

// 48 bytes per section, right after the header.
struct SectionEntry {
  uint32_t kind;
  uint32_t level;     // 1..order (0 for kMeta)
  uint64_t offset;    // from the start of the file, a multiple of kSectionAlign
  uint64_t length;    // bytes
  uint64_t count;     // elements
  uint32_t width;     // bits per element (64 for kCountValues, 8 for kMeta)
  uint32_t crc;       // CRC-32C of the section's `length` bytes
  uint64_t reserved;
};
static_assert(sizeof(SectionEntry) == 48, "section entry is 48 bytes");

inline uint64_t align_up(uint64_t v) { return (v + kSectionAlign - 1) / kSectionAlign * kSectionAlign; }

}  // namespace ngram
