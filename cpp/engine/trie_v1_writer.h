// TrieV1Writer: the writer of format version 1 (trie_v1.h, the type that
// reads it), streaming sorted per-level arrays into a trie file. It lays
// out exactly TrieV1::level_sections, the list the reader requires. Sizes
// and count tables are known up front, so every section's offset is fixed at
// construction and each level's arrays are written as they arrive; the file
// appears under its final name only when complete (section_file.h: write,
// fsync, rename).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ngram {

class SectionFile;
class SectionWriter;
struct LevelStream;

struct LevelSpec {
  uint64_t size = 0;                   // entries (level 1: vocab_size)
  std::vector<uint64_t> count_values;  // distinct counts, strictly ascending
  std::vector<uint64_t> count_frequencies;  // entries with each count (chooses the rank layout)
};

class TrieV1Writer {
 public:
  TrieV1Writer(std::string path, uint32_t order, uint64_t vocab_size, int64_t eos_id, std::string meta_json,
               std::vector<LevelSpec> levels);
  ~TrieV1Writer();  // removes the temporary file unless finish() succeeded
  TrieV1Writer(const TrieV1Writer&) = delete;
  TrieV1Writer& operator=(const TrieV1Writer&) = delete;

  // Appends n entries of level k, in the level's order. tokens: last token of
  // each entry (ignored for level 1, whose entries are the token ids 0..V-1);
  // counts: each entry's count (must be in the level's count table);
  // n_children: entries of level k+1 below each entry (ignored for k = order).
  void append(uint32_t k, uint64_t n, const int32_t* tokens, const uint64_t* counts,
              const uint64_t* n_children);

  // Checks that every level is complete, writes the header, fsyncs and renames
  // the temporary file to `path`.
  void finish();

  uint64_t file_size() const { return file_size_; }

 private:
  std::string path_;
  std::unique_ptr<SectionFile> file_;  // the temporary file until finish() (section_file.h)
  bool finished_ = false;
  uint32_t order_;
  uint64_t vocab_size_;
  int64_t eos_id_;
  uint64_t file_size_ = 0;
  std::vector<LevelSpec> specs_;
  std::vector<std::unique_ptr<LevelStream>> levels_;
  std::vector<std::unique_ptr<SectionWriter>> streams_;  // one per section, table order
};

}  // namespace ngram
