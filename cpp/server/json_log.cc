#include "json_log.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include <google/protobuf/stubs/logging.h>
#include <grpc/support/log.h>

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

void keep_grpc_record(GrpcLogCapture::Record r);

namespace {
std::mutex g_grpc_mu;  // guards g_grpc_capture and what it keeps
GrpcLogCapture* g_grpc_capture = nullptr;

void grpc_log(gpr_log_func_args* args) {
  GrpcLogCapture::Record r{args->severity == GPR_LOG_SEVERITY_ERROR  ? "error"
                           : args->severity == GPR_LOG_SEVERITY_INFO ? "info"
                                                                     : "debug",
                           args->message ? args->message : "",
                           std::string(args->file ? args->file : "") + ":" + std::to_string(args->line)};
  keep_grpc_record(std::move(r));
}

void emit_grpc_record(const GrpcLogCapture::Record& r) {
  LogLine(r.level.c_str(), "grpc").kv("message", r.message).kv("source", r.source).emit();
}
}  // namespace

void keep_grpc_record(GrpcLogCapture::Record r) {
  {
    std::lock_guard<std::mutex> lock(g_grpc_mu);
    if (g_grpc_capture) {
      g_grpc_capture->records_.push_back(std::move(r));
      return;
    }
  }
  emit_grpc_record(r);
}

void route_grpc_log() { gpr_set_log_function(&grpc_log); }

GrpcLogCapture::GrpcLogCapture() {
  std::lock_guard<std::mutex> lock(g_grpc_mu);
  g_grpc_capture = this;
}

GrpcLogCapture::~GrpcLogCapture() {
  std::vector<Record> left;
  {
    std::lock_guard<std::mutex> lock(g_grpc_mu);
    g_grpc_capture = nullptr;
    left.swap(records_);
  }
  for (const Record& r : left) emit_grpc_record(r);
}

std::string GrpcLogCapture::text() const {
  std::lock_guard<std::mutex> lock(g_grpc_mu);
  std::string t;
  for (const Record& r : records_) t += (t.empty() ? "" : "; ") + r.message;
  return t;
}

void GrpcLogCapture::discard() {
  std::lock_guard<std::mutex> lock(g_grpc_mu);
  records_.clear();
}

std::string grpc_error_reason(const std::string& text) {
  // gRPC 1.51 writes an error as CODE:description {key:value, ..., children:[...]};
  // older releases as JSON ("os_error":"..."). Both quote os_error's value.
  if (const size_t key = text.find("os_error"); key != std::string::npos) {
    const size_t open = text.find('"', text.find(':', key));
    const size_t close = open == std::string::npos ? open : text.find('"', open + 1);
    if (close != std::string::npos) return text.substr(open + 1, close - open - 1);
  }
  std::string head = text.substr(0, text.find(" {"));
  if (const size_t colon = head.find(':'); colon != std::string::npos && colon > 0 &&
                                           head.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ_") == colon)
    head = head.substr(colon + 1);  // the status code name
  return head;
}

}  // namespace ngram::server
