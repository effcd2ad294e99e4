// libFuzzer target: arbitrary bytes as a trie file. The bytes are opened
// from memory (what a file read into RAM gives) without and with checksum
// verification; what opens is queried. Passes when nothing crashes and no
// read leaves the buffer (AddressSanitizer); a refusal is a FormatError.
// Seeds: tries the tests build (fuzz/run_fuzz.py writes them).
#include <cstdint>
#include <string>

#include "errors.h"
#include "fuzz_queries.h"
#include "trie_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The file is the first part; the queries read what follows a 4-byte
  // length (0 when absent: the file is the whole input).
  std::string file(reinterpret_cast<const char*>(data), size);
  for (bool verify : {false, true}) {
    std::shared_ptr<ngram::TrieIndex> t;
    try {
      t = ngram::TrieIndex::from_buffer(file, "fuzz.ngt", verify);
    } catch (const ngram::FormatError&) {
      continue;
    }
    ngram_fuzz::g_check_answers = verify;
    // Queries come from the file's own bytes, read backwards: deterministic
    // and different for every input.
    std::string q(file.rbegin(), file.rend());
    ngram_fuzz::Bytes in(reinterpret_cast<const uint8_t*>(q.data()), std::min<size_t>(q.size(), 512));
    ngram_fuzz::fuzz_queries(*t, in);
    try {
      t->verify_checksums();
    } catch (const ngram::FormatError&) {
      if (verify) ngram_fuzz::fail("verified at open, refused by verify_checksums");
    }
  }
  return 0;
}
