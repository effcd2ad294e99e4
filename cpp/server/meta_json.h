// The one field of a trie's meta JSON (written by the indexer as one JSON
// object) that the server acts on: the tokenizer fingerprint, checked against
// each request's. GetInfo sends the meta section whole; clients parse it.
#pragma once
#include <string>

namespace ngram::server {

// meta["tokenizer"]["fingerprint"] when it is a JSON string, else "".
std::string tokenizer_fingerprint(const std::string& meta_json);

}  // namespace ngram::server
