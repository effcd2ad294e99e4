#include "json_log.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include <google/protobuf/stubs/logging.h>

namespace ngram::server {

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

LogLine::LogLine(const char* level, const char* event) {
  const auto now = std::chrono::system_clock::now();
  const double ts = std::chrono::duration<double>(now.time_since_epoch()).count();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", ts);
  line_ = std::string("{\"ts\":") + buf + ",\"level\":" + json_quote(level) + ",\"event\":" + json_quote(event);
}

LogLine& LogLine::kv(const char* key, const std::string& value) {
  line_ += "," + json_quote(key) + ":" + json_quote(value);
  return *this;
}
LogLine& LogLine::kv(const char* key, int64_t value) {
  line_ += "," + json_quote(key) + ":" + std::to_string(value);
  return *this;
}
LogLine& LogLine::kv(const char* key, uint64_t value) {
  line_ += "," + json_quote(key) + ":" + std::to_string(value);
  return *this;
}
LogLine& LogLine::kv(const char* key, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", value);
  line_ += "," + json_quote(key) + ":" + buf;
  return *this;
}
LogLine& LogLine::kv(const char* key, bool value) {
  line_ += "," + json_quote(key) + ":" + (value ? "true" : "false");
  return *this;
}

void LogLine::emit() {
  static std::mutex mu;
  line_ += "}\n";
  std::lock_guard<std::mutex> lock(mu);
  std::fwrite(line_.data(), 1, line_.size(), stderr);
  std::fflush(stderr);
}

void append_captured(const std::string& msg);

namespace {
thread_local ProtobufLogCapture* t_capture = nullptr;

void protobuf_log(google::protobuf::LogLevel level, const char* file, int line, const std::string& msg) {
  if (t_capture) {
    append_captured(msg);
    return;
  }
  const char* lvl = level >= google::protobuf::LOGLEVEL_ERROR     ? "error"
                    : level == google::protobuf::LOGLEVEL_WARNING ? "warning"
                                                                  : "info";
  LogLine(lvl, "protobuf").kv("message", msg).kv("source", std::string(file) + ":" + std::to_string(line)).emit();
}
}  // namespace

void append_captured(const std::string& msg) {
  std::string& t = t_capture->text_;
  if (!t.empty()) t += "; ";
  t += msg;
}

ProtobufLogCapture::ProtobufLogCapture() : outer_(t_capture) { t_capture = this; }
ProtobufLogCapture::~ProtobufLogCapture() { t_capture = outer_; }

void route_protobuf_log() { google::protobuf::SetLogHandler(&protobuf_log); }

}  // namespace ngram::server
