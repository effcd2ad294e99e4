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

// Sends libprotobuf's log (it would print plain-text lines on stderr) through
// LogLine as event "protobuf". Call once, before serving.
void route_protobuf_log();

// While one lives, what libprotobuf logs on this thread is kept in text()
// instead (say, why a request body did not parse), for the caller to report.
class ProtobufLogCapture {
 public:
  ProtobufLogCapture();
  ~ProtobufLogCapture();
  ProtobufLogCapture(const ProtobufLogCapture&) = delete;
  ProtobufLogCapture& operator=(const ProtobufLogCapture&) = delete;
  const std::string& text() const { return text_; }

 private:
  friend void append_captured(const std::string& msg);
  std::string text_;
  ProtobufLogCapture* outer_;
};

}  // namespace ngram::server
