#include "section_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "crc32c.h"
#include "errors.h"

namespace ngram {

SectionFile::SectionFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp-" + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd_ < 0) throw FormatError(tmp_ + ": cannot create: " + std::strerror(errno));
}

SectionFile::~SectionFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void SectionFile::put(const void* p, uint64_t n, uint64_t at) {
  const auto* b = static_cast<const uint8_t*>(p);
  uint64_t done = 0;
  while (done < n) {
    const ssize_t r = ::pwrite(fd_, b + done, n - done, static_cast<off_t>(at + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw FormatError(tmp_ + ": write failed: " + std::strerror(errno));
    done += static_cast<uint64_t>(r);
  }
}

uint64_t SectionFile::commit(FileHeader h, const std::vector<SectionEntry>& table, uint64_t length) {
  h.section_count = static_cast<uint32_t>(table.size());
  h.section_table_offset = sizeof(FileHeader);
  h.file_length = length;
  h.header_crc = 0;
  h.header_crc = crc32c_extend(crc32c(&h, sizeof(h)), table.data(), table.size() * sizeof(SectionEntry));
  put(&h, sizeof(h), 0);
  put(table.data(), table.size() * sizeof(SectionEntry), sizeof(h));
  if (::ftruncate(fd_, static_cast<off_t>(length)) != 0 || ::fsync(fd_) != 0)
    throw FormatError(tmp_ + ": cannot finish: " + std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp_.c_str());
    throw FormatError(path_ + ": cannot rename into place: " + std::strerror(e));
  }
  return length;
}

void SectionWriter::flush() {
  if (buf_.empty()) return;
  crc_ = crc32c_extend(crc_, buf_.data(), buf_.size());
  file_->put(buf_.data(), buf_.size(), entry_.offset + written_);
  written_ += buf_.size();
  buf_.clear();
}

}  // namespace ngram
