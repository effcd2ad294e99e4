#include "anonymous_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>

namespace ngram {

// A RAM image is read by lookups that jump across hundreds of megabytes: on
// 4 KB pages nearly every jump also misses the TLB. Anonymous memory asked
// for with MADV_HUGEPAGE (before it is touched) gets 2 MB pages where the
// kernel has them (transparent huge pages "always" or "madvise"). Only the
// image's whole 2 MB pages: the mapping ends at the image's last 4 KB page,
// so that a last, partly filled huge page does not count 2 MB in RAM.
AnonymousMemory allocate_anonymous(uint64_t bytes) {
  constexpr uint64_t kHuge = 2ull << 20, kPage = 4096;
  const uint64_t len = std::max<uint64_t>((bytes + kPage - 1) / kPage * kPage, kPage);
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (bytes >= kHuge) madvise(p, bytes / kHuge * kHuge, MADV_HUGEPAGE);  // advice only: without huge pages it still works
#endif
  return AnonymousMemory(static_cast<uint8_t*>(p), AnonymousMemoryDeleter{len});
}

void AnonymousMemoryDeleter::operator()(uint8_t* p) const {
  if (p) munmap(p, bytes);
}

}  // namespace ngram
