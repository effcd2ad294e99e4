#include "meta_json.h"

#include <cctype>

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

}  // namespace

std::map<std::string, std::string> json_object_members(const std::string& s) {
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
    const std::string key = json_string_value(s.substr(k0, i - k0));
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

std::string json_string_value(const std::string& raw) {
  if (raw.size() < 2 || raw.front() != '"' || raw.back() != '"') return "";
  std::string out;
  for (size_t i = 1; i + 1 < raw.size(); ++i) {
    char c = raw[i];
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i + 1 > raw.size() - 1) break;
    switch (raw[i]) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'u': {  // BMP code point -> UTF-8 (surrogate pairs are left as is)
        if (i + 4 >= raw.size()) return out;
        const unsigned cp = std::stoul(raw.substr(i + 1, 4), nullptr, 16);
        i += 4;
        if (cp < 0x80) {
          out += static_cast<char>(cp);
        } else if (cp < 0x800) {
          out += static_cast<char>(0xC0 | (cp >> 6));
          out += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
          out += static_cast<char>(0xE0 | (cp >> 12));
          out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
          out += static_cast<char>(0x80 | (cp & 0x3F));
        }
        break;
      }
      default: out += raw[i];
    }
  }
  return out;
}

MetaInfo parse_meta(const std::string& meta_json) {
  MetaInfo m;
  const auto top = json_object_members(meta_json);
  if (auto it = top.find("tokenizer"); it != top.end()) {
    const auto tok = json_object_members(it->second);
    if (auto n = tok.find("name"); n != tok.end()) m.tokenizer_name = json_string_value(n->second);
    if (auto f = tok.find("fingerprint"); f != tok.end()) m.tokenizer_fingerprint = json_string_value(f->second);
  }
  if (auto it = top.find("corpus"); it != top.end() && !it->second.empty() && it->second[0] == '{')
    m.corpus_json = it->second;
  if (auto it = top.find("build"); it != top.end() && !it->second.empty() && it->second[0] == '{')
    m.build_json = it->second;
  return m;
}

}  // namespace ngram::server
