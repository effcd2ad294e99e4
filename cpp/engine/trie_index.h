// TrieIndex: a read-only trie file (mapped or in RAM) and its
// representation, chosen once when the file is opened: TrieV1 (version 1 as
// mapped), TrieV1Ram (version 1 decoded into RAM) or TrieV2 (version 2).
// Opening checks the header, the section table and every section's bounds,
// so that no later read leaves the file. The queries (queries.h,
// prune_tree.h) are written once over the representation and reach it
// through visit().
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "anonymous_memory.h"
#include "run_bounds.h"
#include "run_top_cache.h"
#include "section_table.h"
#include "trie_format.h"
#include "trie_v1.h"
#include "trie_v2.h"

namespace ngram {

// The first n bytes of the file at `path` (fewer when it is shorter),
// opened as TrieIndex::open opens one: a regular file only, never waiting.
// What a caller reads to tell a compressed trie from a plain one before
// opening it. Throws FormatError naming the path.
std::string read_file_head(const std::string& path, size_t n);

class TrieIndex {
 public:
  enum class Load { kMap, kRam };

  // Opens a plain trie file. kMap maps it; kRam reads it into memory.
  // verify_checksums also checks every section's CRC (reads the whole file).
  // Only a regular file is opened, and opening never waits: a FIFO, a
  // directory or a device is refused at once with a FormatError naming the
  // path and what it is.
  static std::shared_ptr<TrieIndex> open(const std::string& path, Load load, bool verify_checksums);
  // Takes ownership of an in-memory image of a trie file (e.g. decompressed).
  static std::shared_ptr<TrieIndex> from_buffer(std::string bytes, const std::string& name,
                                                bool verify_checksums);
  ~TrieIndex();
  TrieIndex(const TrieIndex&) = delete;
  TrieIndex& operator=(const TrieIndex&) = delete;

  // f(representation), the one chosen at open: a TrieV1, TrieV1Ram or TrieV2.
  // A query visits once and runs its lookups on that type.
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), rep_);
  }

  uint32_t order() const { return table_.order(); }
  uint32_t version() const { return table_.header().version; }
  uint64_t vocab_size() const { return table_.vocab_size(); }
  int64_t eos_id() const { return table_.header().eos_id; }
  const std::string& meta_json() const { return table_.meta(); }
  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  bool mapped() const { return mapped_; }
  // Bytes held beside the file's image: the arrays a version-1 trie read
  // into RAM decodes at open (TrieV1Ram); 0 when mapped.
  uint64_t decoded_bytes() const {
    return visit([](const auto& trie) { return trie.decoded_bytes(); });
  }
  // What this trie takes read into RAM, mapped or not: the file's image and
  // what TrieV1Ram decodes beside it.
  uint64_t ram_bytes() const {
    return size_ + visit([](const auto& trie) { return trie.ram_decode_bytes(); });
  }
  uint64_t ngram_count(uint32_t k) const;  // distinct stored k-grams
  const std::vector<SectionEntry>& sections() const { return table_.entries(); }
  // Sum of unigram counts: the number of tokens the trie was built from.
  // Computed on first use (it reads all of level 1), not at open.
  uint64_t total_tokens() const;

  // Recomputes every section's CRC; throws FormatError naming the first bad one.
  void verify_checksums() const;

  // The most frequent continuations of the long runs that proposals have
  // read, kept while the trie is open (run_top_cache.h).
  RunTopCache& run_tops() const { return run_tops_; }
  // Each run's largest continuation probability, as far as proposals have
  // computed it (run_bounds.h); its slots are allocated on the first call.
  const RunBounds& run_bounds() const;

 private:
  using Representation = std::variant<TrieV1, TrieV1Ram, TrieV2>;

  TrieIndex() = default;
  // Checks the image and makes its representation (the open, less the I/O).
  void parse(Load load, bool verify);
  void check_sections() const;  // verify_checksums, its errors without the file name

  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;
  // The image when not mapped.
  AnonymousMemory owned_{nullptr, AnonymousMemoryDeleter{0}};
  SectionTable table_;
  Representation rep_;  // chosen by parse(); open() returns no TrieIndex without it
  mutable std::once_flag totals_once_;
  mutable uint64_t total_tokens_ = 0;
  mutable uint64_t distinct_unigrams_ = 0;
  mutable RunTopCache run_tops_;
  RunBounds run_bounds_;
};

}  // namespace ngram
