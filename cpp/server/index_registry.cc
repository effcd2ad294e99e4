#include "index_registry.h"

#include <chrono>
#include <stdexcept>

namespace ngram::server {

std::string file_stem(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = base.find_last_of('.');
  if (dot != std::string::npos && dot > 0) base = base.substr(0, dot);
  return base;
}

std::shared_ptr<const LoadedIndex> IndexRegistry::load(const std::string& name, const std::string& path) const {
  auto idx = std::make_shared<LoadedIndex>();
  idx->name = name;
  idx->path = path;
  idx->trie = TrieIndex::open(path, in_ram_ ? TrieIndex::Load::kRam : TrieIndex::Load::kMap, verify_);
  idx->tokenizer_fingerprint = tokenizer_fingerprint(idx->trie->meta_json());
  idx->loaded_unix_seconds =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return idx;
}

void IndexRegistry::add(const std::string& name, const std::string& path) {
  if (slots_.count(name)) throw std::invalid_argument("index name '" + name + "' given twice");
  auto slot = std::make_unique<Slot>();
  slot->current = load(name, path);
  slot->file = path;
  slots_[name] = std::move(slot);
  order_.push_back(name);
}

std::shared_ptr<const LoadedIndex> IndexRegistry::get(const std::string& name) const {
  auto it = slots_.find(name.empty() ? order_.front() : name);
  if (it == slots_.end()) return nullptr;
  std::lock_guard<std::mutex> lock(it->second->mu);
  return it->second->current;
}

std::shared_ptr<const LoadedIndex> IndexRegistry::reload(const std::string& name, const std::string& path) {
  auto it = slots_.find(name.empty() ? order_.front() : name);
  if (it == slots_.end()) throw std::out_of_range("no index named '" + name + "'");
  Slot& slot = *it->second;
  std::lock_guard<std::mutex> one_at_a_time(slot.reload_mu);
  auto fresh = load(it->first, path);  // may throw: the old index keeps serving
  {
    std::lock_guard<std::mutex> lock(slot.mu);
    slot.current.swap(fresh);
  }
  return get(it->first);  // `fresh` (the old index) is released after the lock
}

const std::string& IndexRegistry::file_of(const std::string& name) const {
  auto it = slots_.find(name.empty() ? order_.front() : name);
  if (it == slots_.end()) throw std::out_of_range("no index named '" + name + "'");
  return it->second->file;
}

}  // namespace ngram::server
