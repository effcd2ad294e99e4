// Structured logs: one JSON object per line on stderr, one line per event.
#pragma once
#include <cstdint>
#include <string>

namespace ngram::server {

// Builds one log line; emit() writes it atomically (a mutex guards stderr).
//   LogLine("info", "listening").kv("port", 50051).emit();
class LogLine {
 public:
  LogLine(const char* level, const char* event);
  LogLine& kv(const char* key, const std::string& value);
  LogLine& kv(const char* key, const char* value) { return kv(key, std::string(value)); }
  LogLine& kv(const char* key, int64_t value);
  LogLine& kv(const char* key, uint64_t value);
  LogLine& kv(const char* key, int value) { return kv(key, static_cast<int64_t>(value)); }
  LogLine& kv(const char* key, unsigned value) { return kv(key, static_cast<uint64_t>(value)); }
  LogLine& kv(const char* key, double value);
  LogLine& kv(const char* key, bool value);
  void emit();

 private:
  std::string line_;
};

// JSON string literal of s (quotes included).
std::string json_quote(const std::string& s);

}  // namespace ngram::server
