#include "meta_json.h"

#include <cctype>
#include <map>

namespace ngram::server {

namespace {

void skip_ws(const std::string& s, size_t& i) {
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
}

// Moves i past one JSON string starting at s[i] == '"'. False if unterminated.
bool skip_string(const std::string& s, size_t& i) {
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '"') {
      ++i;
      return true;
    }
  }
  return false;
}

// Moves i past one JSON value (any kind). False on malformed input.
bool skip_value(const std::string& s, size_t& i) {
  skip_ws(s, i);
  if (i >= s.size()) return false;
  if (s[i] == '"') return skip_string(s, i);
  if (s[i] == '{' || s[i] == '[') {
    int depth = 0;
    while (i < s.size()) {
      const char c = s[i];
      if (c == '"') {
        if (!skip_string(s, i)) return false;
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') {
        if (--depth == 0) {
          ++i;
          return true;
        }
      }
      ++i;
    }
    return false;
  }
  while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' &&
         !std::isspace(static_cast<unsigned char>(s[i])))
    ++i;
  return true;
}

// The value of a JSON string literal (raw text with quotes), its escapes of
// one character undone (a fingerprint is hex: it has none); "" when `raw` is
// not a string.
std::string string_value(const std::string& raw) {
  if (raw.size() < 2 || raw.front() != '"' || raw.back() != '"') return "";
  std::string out;
  for (size_t i = 1; i + 1 < raw.size(); ++i) {
    if (raw[i] == '\\' && i + 2 < raw.size()) ++i;
    out += raw[i];
  }
  return out;
}

// The members of the JSON object `s` as key -> raw value text; empty when `s`
// is not an object.
std::map<std::string, std::string> object_members(const std::string& s) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  skip_ws(s, i);
  if (i >= s.size() || s[i] != '{') return out;
  ++i;
  while (true) {
    skip_ws(s, i);
    if (i >= s.size() || s[i] == '}') return out;
    if (s[i] != '"') return {};
    const size_t k0 = i;
    if (!skip_string(s, i)) return {};
    const std::string key = string_value(s.substr(k0, i - k0));
    skip_ws(s, i);
    if (i >= s.size() || s[i] != ':') return {};
    ++i;
    skip_ws(s, i);
    const size_t v0 = i;
    if (!skip_value(s, i)) return {};
    out[key] = s.substr(v0, i - v0);
    skip_ws(s, i);
    if (i < s.size() && s[i] == ',') ++i;
  }
}

}  // namespace

std::string tokenizer_fingerprint(const std::string& meta_json) {
  const auto top = object_members(meta_json);
  const auto tok = top.find("tokenizer");
  if (tok == top.end()) return "";
  const auto members = object_members(tok->second);
  const auto fp = members.find("fingerprint");
  return fp == members.end() ? "" : string_value(fp->second);
}

}  // namespace ngram::server
