// NgramAdmin: reloading an index, on the operator's own listener (service.h).
#include <climits>
#include <cstdlib>
#include <cstring>

#include <chrono>

#include "errors.h"
#include "json_log.h"
#include "message_text.h"
#include "service.h"

namespace ngram::server {

using grpc::Status;
using grpc::StatusCode;

std::shared_ptr<const LoadedIndex> reload_index(IndexRegistry& registry, Metrics& metrics, const std::string& name,
                                                const std::string& path, const char* cause) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string label = name.empty() ? registry.default_name() : name;
  const std::string from = !path.empty() ? path : registry.file_of(label);
  try {
    auto idx = registry.reload(label, from);
    metrics.reloaded(label, true);
    LogLine("info", "reload")
        .kv("index", idx->name)
        .kv("path", idx->path)
        .kv("cause", cause)
        .kv("file_bytes", idx->trie->file_size())
        .kv("seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count())
        .emit();
    return idx;
  } catch (const std::exception& e) {
    metrics.reloaded(label, false);
    LogLine("error", "reload_failed").kv("index", label).kv("path", from).kv("cause", cause).kv("error", e.what()).emit();
    throw;
  }
}

namespace {

// The operator's paths are quoted longer than other client strings: the
// file name is at their end.
constexpr size_t kQuotedPath = 1024;

// `path` resolved (symbolic links and ".." followed), if it lies in one of
// `dirs` (resolved directories); else a PERMISSION_DENIED or NOT_FOUND status.
Status confined(const std::string& path, const std::vector<std::string>& dirs, std::string* resolved) {
  char buf[PATH_MAX];
  if (!::realpath(path.c_str(), buf))
    return Status(StatusCode::FAILED_PRECONDITION,
                  "path: cannot open " + quoted(path, kQuotedPath) + ": " + std::strerror(errno));
  *resolved = buf;
  for (const std::string& d : dirs)
    if (resolved->compare(0, d.size(), d) == 0 && resolved->size() > d.size() && (*resolved)[d.size()] == '/')
      return Status::OK;
  std::string allowed;
  for (const std::string& d : dirs) allowed += (allowed.empty() ? "" : ", ") + d;
  return Status(StatusCode::PERMISSION_DENIED,
                "path: " + quoted(path, kQuotedPath) + " is not under the reload directory (" + allowed +
                    "; --reload-dir)");
}

}  // namespace

Status NgramAdminImpl::Reload(grpc::ServerContext*, const v1::ReloadRequest* req, v1::ReloadResponse* resp) {
  std::string path;
  if (!req->path().empty())
    if (Status st = confined(req->path(), reload_dirs_, &path); !st.ok()) return st;
  if (!req->index().empty() && !registry_.get(req->index()))
    return Status(StatusCode::NOT_FOUND, "index: " + quoted(req->index()) + " is not served here");
  try {
    auto idx = reload_index(registry_, metrics_, req->index(), path, "admin");
    resp->set_index(idx->name);
    resp->set_path(idx->path);
    resp->set_file_bytes(idx->trie->file_size());
    resp->set_loaded_unix_seconds(idx->loaded_unix_seconds);
    return Status::OK;
  } catch (const FormatError& e) {
    return Status(StatusCode::FAILED_PRECONDITION, std::string("path: ") + e.what());
  } catch (const std::exception& e) {
    return Status(StatusCode::INTERNAL, e.what());
  }
}

}  // namespace ngram::server
