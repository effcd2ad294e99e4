#include "dart_trie.h"

#include <cstdio>
#include <cstring>
#include <memory>

#include "errors.h"

namespace ngram {
namespace {

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "rb")) {
    if (!f_) throw FormatError(path + ": cannot open");
    std::setvbuf(f_, nullptr, _IOFBF, 1 << 20);
  }
  ~Reader() { std::fclose(f_); }
  template <typename T>
  T get(const char* what, uint64_t node) {
    T v;
    if (std::fread(&v, sizeof(T), 1, f_) != 1)
      throw FormatError(path_ + ": truncated DART trie at byte " + std::to_string(pos_) + " (reading " + what +
                        (node == UINT64_MAX ? std::string() : " of node " + std::to_string(node)) + ")");
    pos_ += sizeof(T);
    return v;
  }
  bool at_end() { return std::fgetc(f_) == EOF; }

 private:
  std::string path_;
  std::FILE* f_;
  uint64_t pos_ = 0;
};

}  // namespace

DartNodes read_dart_trie(const std::string& path) {
  Reader r(path);
  DartNodes d;
  d.order = r.get<uint64_t>("order", UINT64_MAX);
  const uint64_t n = r.get<uint64_t>("node_count", UINT64_MAX);
  if (d.order < 1 || d.order > 64) throw FormatError(path + ": DART order " + std::to_string(d.order) + " out of range");
  if (n < 1 || n > (uint64_t{1} << 40)) throw FormatError(path + ": DART node_count " + std::to_string(n) + " out of range");
  d.token.resize(n);
  d.parent.resize(n);
  d.freq.resize(n);
  d.depth.resize(n);
  std::vector<uint64_t> declared(n), seen(n, 0);
  for (uint64_t i = 0; i < n; ++i) {
    d.token[i] = r.get<int32_t>("token", i);
    d.parent[i] = r.get<uint64_t>("parent", i);
    d.freq[i] = r.get<int32_t>("freq", i);
    declared[i] = r.get<uint64_t>("n_children", i);
    if (declared[i] > n) throw FormatError(path + ": node " + std::to_string(i) + " claims " +
                                           std::to_string(declared[i]) + " children, more than the trie has nodes");
    for (uint64_t c = 0; c < declared[i]; ++c) {
      r.get<int32_t>("child token", i);
      const uint64_t child = r.get<uint64_t>("child id", i);
      if (child >= n || child == 0) throw FormatError(path + ": node " + std::to_string(i) + " has child id " +
                                                      std::to_string(child) + " out of range");
    }
    if (i == 0) continue;
    if (d.parent[i] >= i)
      throw FormatError(path + ": node " + std::to_string(i) + " has parent " + std::to_string(d.parent[i]) +
                        ", not an earlier node (unsupported node order)");
    d.depth[i] = d.depth[d.parent[i]] + 1;
    if (d.depth[i] > d.order)
      throw FormatError(path + ": node " + std::to_string(i) + " lies at depth " + std::to_string(d.depth[i]) +
                        ", deeper than the order " + std::to_string(d.order));
    ++seen[d.parent[i]];
  }
  if (!r.at_end()) throw FormatError(path + ": trailing bytes after the last node");
  for (uint64_t i = 0; i < n; ++i)
    if (seen[i] != declared[i])
      throw FormatError(path + ": node " + std::to_string(i) + " lists " + std::to_string(declared[i]) +
                        " children but " + std::to_string(seen[i]) + " nodes name it as parent");
  return d;
}

}  // namespace ngram
