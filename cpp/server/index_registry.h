// The indexes a host serves, by name. Each name holds a shared_ptr to the
// loaded trie; a reload builds the new one aside and swaps the pointer under
// a mutex, so calls in flight finish on the trie they started with and no
// call ever sees a half-loaded index.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "meta_json.h"
#include "trie_index.h"

namespace ngram::server {

struct LoadedIndex {
  std::string name;
  std::string path;
  std::shared_ptr<const TrieIndex> trie;
  std::string tokenizer_fingerprint;  // from the meta section; "" when it records none
  double loaded_unix_seconds = 0;
};

class IndexRegistry {
 public:
  IndexRegistry(bool in_ram, bool verify) : in_ram_(in_ram), verify_(verify) {}

  // Loads a file under `name` (startup only; throws FormatError, or
  // std::invalid_argument for a duplicate name).
  void add(const std::string& name, const std::string& path);
  // The index named `name` ("" = the default, the first added); nullptr if none.
  std::shared_ptr<const LoadedIndex> get(const std::string& name) const;
  // Reopens `name` from `path` and swaps it in. Throws FormatError (the
  // old index keeps serving) or std::out_of_range.
  std::shared_ptr<const LoadedIndex> reload(const std::string& name, const std::string& path);
  // The file `name` was added from (the command line's): what SIGHUP reopens.
  const std::string& file_of(const std::string& name) const;
  const std::vector<std::string>& names() const { return order_; }
  const std::string& default_name() const { return order_.front(); }

 private:
  std::shared_ptr<const LoadedIndex> load(const std::string& name, const std::string& path) const;

  struct Slot {
    mutable std::mutex mu;
    std::shared_ptr<const LoadedIndex> current;
    std::string file;      // the file given at add()
    std::mutex reload_mu;  // one reload of a slot at a time
  };
  bool in_ram_, verify_;
  std::map<std::string, std::unique_ptr<Slot>> slots_;  // fixed after startup
  std::vector<std::string> order_;
};

// The index name of a file: its file name without the last extension.
std::string file_stem(const std::string& path);

}  // namespace ngram::server
