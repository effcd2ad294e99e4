// Structured logs: one JSON object per line on stderr, one line per event.
// Nothing else writes to stderr: libprotobuf's and gRPC's own logs are routed
// through LogLine too.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

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

// Sends gRPC's own log (gpr_log, which would print plain-text, often
// multi-line records on stderr) through LogLine as event "grpc", one line
// per record. Call once, first thing in main(). GRPC_VERBOSITY still decides
// which records are logged (default: errors only).
void route_grpc_log();

// While one lives, what gRPC logs (on any thread) is kept instead of
// written: gRPC reports some failures only in its log (a port that cannot
// be bound), so that the caller can name the reason in its own event. What
// was kept is written as "grpc" events when it ends, unless discard()ed.
// One at a time.
class GrpcLogCapture {
 public:
  GrpcLogCapture();
  ~GrpcLogCapture();
  GrpcLogCapture(const GrpcLogCapture&) = delete;
  GrpcLogCapture& operator=(const GrpcLogCapture&) = delete;
  // The messages kept so far, "; "-separated.
  std::string text() const;
  // Drops what was kept (the caller has reported it).
  void discard();

  struct Record {
    std::string level, message, source;
  };

 private:
  friend void keep_grpc_record(Record r);
  std::vector<Record> records_;
};

// The reason a gRPC error text gives, for a person: the operating system's
// error when it names one (os_error, e.g. "Address already in use"), else its
// outermost description; "" for an empty text.
std::string grpc_error_reason(const std::string& text);

}  // namespace ngram::server
