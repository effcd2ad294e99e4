// A trie file being written, whatever its format version: the one
// definition of how the writers (trie_v1_writer.cc, trie_v2_writer.cc) put
// sections on disk. The file is a temporary one beside its final path until
// commit: sections go to their offsets through buffers, each checksummed as
// it goes (SectionWriter); commit writes the header (its CRC over itself and
// the section table) and the table, cuts the file to its length, syncs and
// renames it into place. Unless commit ran, the temporary file is removed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "trie_format.h"

namespace ngram {

class SectionFile {
 public:
  // Creates `path` + ".tmp-<pid>".
  explicit SectionFile(std::string path);
  ~SectionFile();
  SectionFile(const SectionFile&) = delete;
  SectionFile& operator=(const SectionFile&) = delete;

  // n bytes at offset `at` of the temporary file.
  void put(const void* p, uint64_t n, uint64_t at);
  // Fills in h's section count, table offset, length and CRC, writes it and
  // the table, and puts the file in place, `length` bytes long (zero
  // padding after the last section is implicit). Returns the length.
  uint64_t commit(FileHeader h, const std::vector<SectionEntry>& table, uint64_t length);

  const std::string& path() const { return path_; }
  const std::string& tmp_path() const { return tmp_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

// One section's bytes, streamed through a buffer to their offset in a
// SectionFile and checksummed as they go.
class SectionWriter {
 public:
  SectionWriter(SectionFile& file, const SectionEntry& entry) : file_(&file), entry_(entry) {}
  void bytes(const void* p, uint64_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
    if (buf_.size() >= (1u << 20)) flush();
  }
  void word(uint64_t w) { bytes(&w, 8); }
  void flush();
  uint64_t written() const { return written_; }
  // The entry, its CRC that of the bytes written (flushed first).
  const SectionEntry& entry() {
    flush();
    entry_.crc = crc_;
    return entry_;
  }

 private:
  SectionFile* file_;
  SectionEntry entry_;
  uint64_t written_ = 0;
  uint32_t crc_ = 0;
  std::vector<uint8_t> buf_;
};

}  // namespace ngram
