// Reads the few fields the server needs from a trie's meta JSON (written by
// the indexer as one JSON object): no general JSON library, only a scanner
// that splits an object into its members' raw texts.
#pragma once
#include <map>
#include <string>

namespace ngram::server {

// The members of the JSON object `text` as key -> raw value text. Returns an
// empty map when `text` is not an object.
std::map<std::string, std::string> json_object_members(const std::string& text);

// The value of a JSON string literal (raw text with quotes); "" otherwise.
std::string json_string_value(const std::string& raw);

// What GetInfo and the fingerprint check need from the meta section.
struct MetaInfo {
  std::string tokenizer_name;
  std::string tokenizer_fingerprint;
  std::string corpus_json = "{}";
  std::string build_json = "{}";
};
MetaInfo parse_meta(const std::string& meta_json);

}  // namespace ngram::server
