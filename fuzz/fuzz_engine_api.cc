// libFuzzer target: the engine's query API (conditional probabilities,
// top-k, counts, tree pruning) with arbitrary arrays and parameters on a
// valid trie ($NGRAM_FUZZ_TRIE). Passes when every call either refuses with
// InvalidArgument or answers within the invariants of fuzz_queries.h, and
// nothing reads or writes out of bounds (AddressSanitizer, UBSan).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "fuzz_queries.h"
#include "trie_index.h"

namespace {
std::shared_ptr<ngram::TrieIndex> g_trie;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* path = std::getenv("NGRAM_FUZZ_TRIE");
  if (!path) {
    std::fprintf(stderr, "set NGRAM_FUZZ_TRIE to a trie file (fuzz/run_fuzz.py does)\n");
    std::exit(2);
  }
  g_trie = ngram::TrieIndex::open(path, ngram::TrieIndex::Load::kMap, true);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ngram_fuzz::Bytes in(data, size);
  ngram_fuzz::fuzz_queries(*g_trie, in);
  return 0;
}
