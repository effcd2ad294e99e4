// Reader for trie files saved by DART's TrieNgram::save (little endian):
//   u64 order, u64 node_count, then per node in id order
//   i32 token, u64 parent, i32 freq, u64 n_children, n_children x (i32 token, u64 child_id)
// Node 0 is the root. Only (token, parent, freq) are kept: the children lists
// repeat what the parent links say, and are checked against them in count.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ngram {

struct DartNodes {
  uint64_t order = 0;
  std::vector<int32_t> token;
  std::vector<uint64_t> parent;
  std::vector<int64_t> freq;
  std::vector<uint32_t> depth;  // root 0
};

// Streams the file once; throws FormatError naming the byte offset and node
// on truncation or inconsistency (a parent id not below the node's id, a
// child count that disagrees with the parent links, a depth over `order`).
DartNodes read_dart_trie(const std::string& path);

}  // namespace ngram
