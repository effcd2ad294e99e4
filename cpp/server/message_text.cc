#include "message_text.h"

namespace ngram::server {

std::string grouped(uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string quoted(const std::string& s, size_t most) {
  if (s.size() <= most) return "'" + s + "'";
  size_t cut = most;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  return "'" + s.substr(0, cut) + "...' (" + grouped(s.size()) + " bytes)";
}

}  // namespace ngram::server
