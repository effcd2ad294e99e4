// A search's trie argument, as every binding that searches takes it: an
// _engine.Trie (a trie file's representation) or an _engine.NoTrie (a
// vocabulary and nothing stored: cpp/engine/no_trie.h).
#pragma once
#include <pybind11/pybind11.h>

#include <string>

#include "fastcall.h"
#include "no_trie.h"
#include "trie_index.h"

namespace ngram_py {

// f(const TrieIndex&) or f(const NoTrie&), as `trie` is; a TypeError naming
// `call` for anything else.
template <class F>
decltype(auto) with_trie(pybind11::handle trie, const char* call, F&& f) {
  if (const ngram::TrieIndex* t = bound_object<ngram::TrieIndex>(trie.ptr())) return f(*t);
  if (const ngram::NoTrie* n = bound_object<ngram::NoTrie>(trie.ptr())) return f(*n);
  throw pybind11::type_error(std::string(call) + ": trie must be an _engine.Trie, got " +
                             std::string(pybind11::str(pybind11::type::of(trie).attr("__name__"))) +
                             " (or an _engine.NoTrie: no trie)");
}

}  // namespace ngram_py
