// The writer of format version 2 (docs/FORMAT.md, "Version 2"; trie_v2.h,
// the type that reads it), from a version-1 trie (mapped or in RAM). It
// lays out exactly TrieV2::level_sections, the list the reader requires:
// each k-gram's last token becomes its rank among the continuations of its
// own (k-1)-suffix context (level 2: among the tokens that occur), coded in
// chunked Elias-Fano; counts get two tiers of escapes; every level's child
// offsets are Elias-Fano coded. The input must be suffix-closed (every
// stored k-gram's suffix stored too), as counted tries are; the writer
// refuses one that is not, naming the k-gram.
#pragma once
#include <cstdint>
#include <string>

#include "trie_index.h"

namespace ngram {

// Writes `path` atomically (temporary file, fsync, rename) from `source`,
// with `meta_json` as its meta section. Returns the file's size. Sections
// are streamed into the file as they are made (docs/FORMAT.md, "Version 2").
uint64_t write_trie_v2(const TrieIndex& source, const std::string& path, const std::string& meta_json);

}  // namespace ngram
