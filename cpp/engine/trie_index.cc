#include "trie_index.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "crc32c.h"
#include "errors.h"
#include "mapped_files.h"

namespace ngram {
namespace {

// Runs f, an open's step; an error leaving it gets the file's name in
// front. The messages inside say what is wrong with the file, not which.
template <class F>
void naming(const std::string& name, F f) {
  try {
    f();
  } catch (const FormatError& e) {
    throw FormatError(name + ": " + e.what());
  }
}

std::string too_short(uint64_t size) {
  return "not a trie file: " + std::to_string(size) + " bytes, shorter than the 64-byte header";
}

// What a file that is not a regular one is.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

// The file at `path` opened for reading, and its size; a regular file only.
// O_NONBLOCK: opening a FIFO (or a device) must not wait for a writer, so
// that a wrong path fails at once instead of hanging its caller; it changes
// nothing for a regular file. Throws FormatError without the file's name
// (naming() adds it).
int open_regular(const std::string& path, uint64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw FormatError(std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw FormatError(std::string("cannot stat: ") + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw FormatError(std::string("is ") + file_kind(st.st_mode) + ", not a regular file");
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

}  // namespace

std::string read_file_head(const std::string& path, size_t n) {
  std::string head(n, '\0');
  naming(path, [&] {
    uint64_t size;
    const int fd = open_regular(path, &size);
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd, head.data() + done, n - done, static_cast<off_t>(done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        const int e = errno;
        ::close(fd);
        throw FormatError(std::string("read failed: ") + std::strerror(e));
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    ::close(fd);
    head.resize(done);
  });
  return head;
}

TrieIndex::~TrieIndex() {
  if (mapped_ && base_) {
    forget_mapping(base_);
    munmap(const_cast<uint8_t*>(base_), size_);
  }
}

std::shared_ptr<TrieIndex> TrieIndex::open(const std::string& path, Load load, bool verify) {
  std::shared_ptr<TrieIndex> t(new TrieIndex());
  t->path_ = path;
  naming(path, [&] {
    const int fd = open_regular(path, &t->size_);
    if (t->size_ < sizeof(FileHeader)) {
      ::close(fd);
      throw FormatError(too_short(t->size_));
    }
    if (load == Load::kMap) {
      void* p = mmap(nullptr, t->size_, PROT_READ, MAP_SHARED, fd, 0);
      int e = errno;
      ::close(fd);
      if (p == MAP_FAILED) throw FormatError(std::string("mmap failed: ") + std::strerror(e));
      t->base_ = static_cast<const uint8_t*>(p);
      t->mapped_ = true;
      note_mapping(p, t->size_, path);
    } else {
      try {
        t->owned_ = allocate_anonymous(t->size_);
      } catch (...) {
        ::close(fd);
        throw;
      }
      uint8_t* dst = t->owned_.get();
      uint64_t done = 0;
      while (done < t->size_) {
        ssize_t r = ::pread(fd, dst + done, t->size_ - done, static_cast<off_t>(done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
          int e = errno;
          ::close(fd);
          throw FormatError("read failed at byte " + std::to_string(done) + ": " +
                            (r == 0 ? "unexpected end of file" : std::strerror(e)));
        }
        done += static_cast<uint64_t>(r);
      }
      ::close(fd);
      t->base_ = dst;
    }
    t->parse(load, verify);
  });
  return t;
}

std::shared_ptr<TrieIndex> TrieIndex::from_buffer(std::string bytes, const std::string& name, bool verify) {
  std::shared_ptr<TrieIndex> t(new TrieIndex());
  t->path_ = name;
  t->size_ = bytes.size();
  naming(name, [&] {
    if (t->size_ < sizeof(FileHeader)) throw FormatError(too_short(t->size_));
    t->owned_ = allocate_anonymous(t->size_);
    std::memcpy(t->owned_.get(), bytes.data(), t->size_);
    t->base_ = t->owned_.get();
    t->parse(Load::kRam, verify);
  });
  return t;
}

void TrieIndex::parse(Load load, bool verify) {
  if (std::memcmp(base_, kZstdMagic, sizeof(kZstdMagic)) == 0)
    throw FormatError("a zstd-compressed trie (ngram-build --compress, for shipping): it must be "
                      "decompressed before it can be mapped (zstd -d " + path_ + " -o PLAIN.ngt, then serve "
                      "PLAIN.ngt; in Python NgramIndex.open decompresses it into RAM)");
  table_ = SectionTable(base_, size_);
  // The representation, chosen here once: by the file's version (the table
  // admits 1 and 2) and, for version 1, by where the image lies. Checksums
  // are verified after the structure, before a version-1 trie decodes.
  if (table_.header().version == kFormatVersion2) {
    rep_.emplace<TrieV2>(table_);
    if (verify) check_sections();
    return;
  }
  TrieV1 parsed(table_);
  if (verify) check_sections();
  if (load == Load::kRam) rep_.emplace<TrieV1Ram>(std::move(parsed));
  else rep_.emplace<TrieV1>(std::move(parsed));
}

uint64_t TrieIndex::total_tokens() const {
  std::call_once(totals_once_, [this] {
    visit([this](const auto& trie) {
      for (uint64_t i = 0; i < trie.size(1); ++i) {
        const uint64_t c = trie.count(1, i);
        total_tokens_ += c;
        distinct_unigrams_ += c != 0;
      }
    });
  });
  return total_tokens_;
}

uint64_t TrieIndex::ngram_count(uint32_t k) const {
  if (k != 1) return visit([k](const auto& trie) { return trie.size(k); });
  total_tokens();
  return distinct_unigrams_;
}

const RunBounds& TrieIndex::run_bounds() const {
  run_bounds_.reserve([this] {
    std::vector<uint64_t> sizes;
    visit([&](const auto& trie) {
      for (uint32_t k = 1; k < trie.order(); ++k) sizes.push_back(trie.size(k));
    });
    return sizes;
  });
  return run_bounds_;
}

void TrieIndex::verify_checksums() const {
  naming(path_, [this] { check_sections(); });
}

void TrieIndex::check_sections() const {
  for (const SectionEntry& s : table_.entries()) {
    if (crc32c(base_ + s.offset, s.length) != s.crc)
      throw FormatError("section " + section_name(s) + ": checksum mismatch (corrupted data)");
  }
}

}  // namespace ngram
