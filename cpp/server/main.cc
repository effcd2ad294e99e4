// ngram-serve-native: serves trie files over gRPC. Started by `ngram-serve`
// (ngram_service/serve.py) with the same arguments; see server_config.cc for
// the flags and docs/SERVER.md for operations.
#ifdef NGRAM_ABSL_MUTEX_MODE
#include <absl/synchronization/mutex.h>
#endif
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <climits>
#include <condition_variable>
#include <mutex>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "errors.h"
#include "index_registry.h"
#include "mapped_files.h"
#include "json_log.h"
#include "compute_pool.h"
#include "metrics.h"
#include "server_config.h"
#include "service.h"

using namespace ngram::server;

namespace {

// A mapped trie whose file is cut or rewritten in place (cp or > over it,
// not mv) faults with SIGBUS on the next read of a page no longer there. The
// process cannot go on, but it says why before it dies as it would have (the
// same signal, so a supervisor sees the same crash): one JSON log line, naming
// the file where the address is a noted mapping (mapped_files.h),
// written with async-signal-safe calls only.
void append(char*& at, const char* text) {
  while (*text) *at++ = *text++;
}

void append_number(char*& at, unsigned long long v, int min_digits) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v || n < min_digits);
  while (n) *at++ = digits[--n];
}

// A JSON string's body: quotes, backslashes and control bytes escaped.
void append_json_text(char*& at, const char* text) {
  static const char kHex[] = "0123456789abcdef";
  for (; *text; ++text) {
    const unsigned char c = static_cast<unsigned char>(*text);
    if (c == '"' || c == '\\') {
      *at++ = '\\';
      *at++ = static_cast<char>(c);
    } else if (c < 0x20) {
      append(at, "\\u00");
      *at++ = kHex[c >> 4];
      *at++ = kHex[c & 15];
    } else {
      *at++ = static_cast<char>(c);
    }
  }
}

extern "C" void on_sigbus(int, siginfo_t* info, void*) {
  char file[1024];  // the longest path noted (mapped_files.cc); escaped, up to 6 bytes each
  char line[1024 + 6 * sizeof file];
  char* at = line;
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  append(at, "{\"ts\":");
  append_number(at, static_cast<unsigned long long>(now.tv_sec), 1);
  append(at, ".");
  append_number(at, static_cast<unsigned long long>(now.tv_nsec / 1000), 6);
  if (info && info->si_code == BUS_ADRERR) {  // a mapped page that no longer exists: a file cut under its mapping
    append(at, ",\"level\":\"fatal\",\"event\":\"trie_file_changed\",\"file\":");
    if (ngram::mapped_file_at(info->si_addr, file, sizeof file)) {
      append(at, "\"");
      append_json_text(at, file);
      append(at, "\"");
    } else {
      append(at, "null");
    }
    append(at, ",\"error\":\"SIGBUS reading a mapped trie: a served file was cut or overwritten in place. "
               "Replace a trie by renaming a new file over it (mv) or serve a new path, then SIGHUP or Reload "
               "(docs/OPERATIONS.md); --ram serves from a copy\"}\n");
  } else {
    append(at, ",\"level\":\"fatal\",\"event\":\"bus_error\",\"error\":\"SIGBUS: a hardware or alignment "
               "fault, not a cut file\"}\n");
  }
  ssize_t unused = ::write(STDERR_FILENO, line, static_cast<size_t>(at - line));
  (void)unused;
  ::signal(SIGBUS, SIG_DFL);
  ::raise(SIGBUS);
}

std::string read_file(const std::string& path, const char* flag) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(std::string(flag) + ": cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A PEM file's text, refused naming the flag and the file when it holds no
// block whose label ends with `kind` ("CERTIFICATE"; "PRIVATE KEY" takes RSA,
// EC and PKCS#8 keys): gRPC would say only "Invalid cert chain file".
std::string read_pem(const std::string& path, const char* flag, const std::string& kind) {
  std::string text = read_file(path, flag);
  const std::string begin = "-----BEGIN ";
  for (size_t at = text.find(begin); at != std::string::npos; at = text.find(begin, at + 1)) {
    const size_t from = at + begin.size(), end = text.find("-----", from);
    if (end == std::string::npos) break;
    const std::string label = text.substr(from, end - from);
    if (label.size() >= kind.size() && label.compare(label.size() - kind.size(), kind.size(), kind) == 0) return text;
  }
  throw std::runtime_error(std::string(flag) + " " + path + ": no PEM " + kind + " in it");
}

std::shared_ptr<grpc::ServerCredentials> credentials(const ServerConfig& c) {
  if (c.tls_cert.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions opts(c.tls_client_ca.empty()
                                             ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                             : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  opts.pem_key_cert_pairs.push_back(
      {read_pem(c.tls_key, "--tls-key", "PRIVATE KEY"), read_pem(c.tls_cert, "--tls-cert", "CERTIFICATE")});
  if (!c.tls_client_ca.empty()) opts.pem_root_certs = read_pem(c.tls_client_ca, "--tls-client-ca", "CERTIFICATE");
  return grpc::SslServerCredentials(opts);
}

// Builds and starts one listener; on failure logs startup_failed with what
// gRPC said (say, the port is in use) and returns nullptr. `what` follows
// the address in the message.
std::unique_ptr<grpc::Server> listen(grpc::ServerBuilder& builder, const std::string& addr, const std::string& what) {
  // One server per port: without this gRPC sets SO_REUSEPORT, and a second
  // server on a port in use would start and share its calls.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  GrpcLogCapture grpc_log;  // gRPC says why it cannot listen only in its log
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server) return server;
  const std::string said = grpc_log.text();
  const std::string reason = grpc_error_reason(said);
  LogLine("error", "startup_failed")
      .kv("error", "cannot listen on " + addr + what + (reason.empty() ? "" : ": " + reason))
      .kv("grpc", said)
      .emit();
  grpc_log.discard();
  return nullptr;
}

std::string address(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// The directories Reload may open files from: --reload-dir, else each
// FILE's directory; resolved, so that a path is compared after realpath.
std::vector<std::string> reload_dirs(const ServerConfig& c) {
  std::vector<std::string> given;
  if (!c.reload_dir.empty()) {
    struct stat st {};
    if (::stat(c.reload_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw std::runtime_error("--reload-dir " + c.reload_dir + ": not a directory");
    given.push_back(c.reload_dir);
  } else {
    for (const std::string& f : c.files) {
      const size_t slash = f.find_last_of('/');
      given.push_back(slash == std::string::npos ? "." : slash == 0 ? "/" : f.substr(0, slash));
    }
  }
  std::vector<std::string> out;
  for (const std::string& d : given) {
    char buf[PATH_MAX];
    if (!::realpath(d.c_str(), buf)) throw std::runtime_error("--reload-dir: cannot resolve " + d);
    std::string r = buf;
    if (r.size() > 1 && r.back() == '/') r.pop_back();
    if (r == "/") r.clear();  // every absolute path then starts with r + '/'
    if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
  }
  return out;
}

// SIGHUP's reloads, on their own thread: loading a large trie takes a while,
// and the signal thread must stay free for SIGTERM.
class Reloader {
 public:
  Reloader(IndexRegistry& registry, Metrics& metrics) : registry_(registry), metrics_(metrics) {
    thread_ = std::thread([this] { run(); });
    thread_.detach();  // the process exits with _Exit, whatever it is loading
  }
  void request() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_ = true;
    }
    cv_.notify_one();
  }

 private:
  void run() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return pending_; });
        pending_ = false;  // a SIGHUP during the reloads below asks for one more round
      }
      for (const auto& n : registry_.names()) {
        try {
          reload_index(registry_, metrics_, n, "", "SIGHUP");
        } catch (const std::exception&) {
          // logged by reload_index; the old index keeps serving
        }
      }
    }
  }
  IndexRegistry& registry_;
  Metrics& metrics_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool pending_ = false;
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
#ifdef NGRAM_ABSL_MUTEX_MODE
  // Lock-order tracking costs every lock of gRPC's a graph update; it only
  // reports, never prevents.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  // Large buffers (replies of many MB) come from mmap and go back to the
  // system when freed: glibc's adaptive threshold would otherwise raise
  // itself after the first large free and keep such memory in its heaps.
  // An operator's own setting ($MALLOC_MMAP_THRESHOLD_) wins.
  if (!std::getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 1 << 20);
  // stderr carries JSON lines only (docs/SERVER.md, "Logs").
  route_grpc_log();
  route_protobuf_log();
  ServerConfig config = parse_args(argc, argv);
  resolve_defaults(config, std::thread::hardware_concurrency());

  // Signals are taken by one thread with sigwait: block them before any other
  // thread (gRPC's included) exists, so that every thread inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  struct sigaction bus {};
  bus.sa_sigaction = on_sigbus;
  bus.sa_flags = SA_SIGINFO;
  sigaction(SIGBUS, &bus, nullptr);

  IndexRegistry registry(config.in_ram, config.verify);
  std::unique_ptr<Metrics> metrics;
  std::shared_ptr<grpc::ServerCredentials> creds;
  std::vector<std::string> allowed_dirs;
  try {
    for (size_t i = 0; i < config.files.size(); ++i) {
      const std::string name = i < config.names.size() ? config.names[i] : file_stem(config.files[i]);
      const auto t0 = std::chrono::steady_clock::now();
      try {
        registry.add(name, config.files[i]);
      } catch (const std::exception& e) {
        // The index names the FILE where its path does not (a compressed one is served from /proc/self/fd/N).
        LogLine("error", "startup_failed").kv("index", name).kv("path", config.files[i]).kv("error", e.what()).emit();
        return 1;
      }
      auto idx = registry.get(name);
      LogLine("info", "index_loaded")
          .kv("index", name)
          .kv("path", config.files[i])
          .kv("order", idx->trie->order())
          .kv("vocab_size", idx->trie->vocab_size())
          .kv("file_bytes", idx->trie->file_size())
          .kv("mapped", idx->trie->mapped())
          .kv("tokenizer_fingerprint", idx->tokenizer_fingerprint)
          .kv("seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count())
          .emit();
    }
    creds = credentials(config);
    if (config.admin_port >= 0) allowed_dirs = reload_dirs(config);
    metrics = Metrics::create(config.metrics_host, config.metrics_port, registry);
  } catch (const std::exception& e) {
    LogLine("error", "startup_failed").kv("error", e.what()).emit();
    return 1;
  }

  ComputePool pool(config.threads, config.max_queue, std::chrono::milliseconds(config.max_queue_wait_ms));
  metrics->watch(pool);
  NgramServiceImpl service(config, registry, *metrics, pool);
  NgramAdminImpl admin(registry, *metrics, allowed_dirs);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int bound_port = 0;
  const std::string addr = address(config.host, config.port);
  builder.AddListeningPort(addr, creds, &bound_port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.limits.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config.limits.max_message_bytes));
  // NgramService runs on the callback API and its own compute pool; only
  // reflection is a synchronous service, and a few threads serve it.
  grpc::ResourceQuota quota("ngram-serve");
  quota.SetMaxThreads(16);
  builder.SetResourceQuota(quota);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 2);
  std::unique_ptr<grpc::Server> server = listen(builder, addr, "");
  if (!server || bound_port == 0) return 1;

  // The operator's listener: NgramAdmin alone, never on the query port.
  std::unique_ptr<grpc::Server> admin_server;
  int admin_port = 0;
  if (config.admin_port >= 0) {
    grpc::ServerBuilder admin_builder;
    const std::string admin_addr = address(config.admin_host, config.admin_port);
    admin_builder.AddListeningPort(admin_addr, creds, &admin_port);
    admin_builder.RegisterService(&admin);
    admin_server = listen(admin_builder, admin_addr, " (the admin listener)");
    if (!admin_server || admin_port == 0) return 1;
  }

  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  if (health) {
    health->SetServingStatus("", true);
    health->SetServingStatus("ngram.v1.NgramService", true);
  }
  std::string names;
  for (const auto& n : registry.names()) names += (names.empty() ? "" : ",") + n;
  LogLine listening("info", "listening");
  listening.kv("host", config.host)
      .kv("port", bound_port)
      .kv("tls", !config.tls_cert.empty())
      .kv("mtls", !config.tls_client_ca.empty())
      .kv("indexes", names)
      .kv("threads", config.threads)
      .kv("max_queue", config.max_queue)
      .kv("max_queue_wait_ms", config.max_queue_wait_ms)
      .kv("max_request_work", config.limits.max_request_work)
      .kv("metrics", metrics->endpoint())
      .kv("admin", admin_server != nullptr);
  if (admin_server) listening.kv("admin_host", config.admin_host).kv("admin_port", admin_port);
  listening.emit();

  Reloader reloader(registry, *metrics);
  // This thread takes the signals from here on; gRPC's threads serve.
  int sig = 0;
  for (;;) {
    if (sigwait(&sigs, &sig) != 0) continue;
    if (sig == SIGHUP) {
      LogLine("info", "signal").kv("signal", "SIGHUP").emit();
      reloader.request();
      continue;
    }
    break;
  }
  LogLine("info", "draining")
      .kv("signal", sig == SIGTERM ? "SIGTERM" : "SIGINT")
      .kv("in_flight", service.in_flight())
      .kv("drain_seconds", config.drain_seconds)
      .emit();
  if (health) health->Shutdown();  // health checks now answer NOT_SERVING
  service.begin_drain();             // new calls are refused (UNAVAILABLE)
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::milliseconds(static_cast<int64_t>(config.drain_seconds * 1000));
  while (service.in_flight() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // What is left ends now with UNAVAILABLE: the queued calls as soon as a
  // worker takes them, the running ones at their engine's next check.
  const uint64_t cut = service.in_flight();
  if (cut > 0) service.stop_all();
  // Every call answered, and gRPC done sending it, within a bound.
  const auto answered_by = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (service.live_calls() > 0 && std::chrono::steady_clock::now() < answered_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  LogLine("info", "stopped")
      .kv("cut", cut)
      .kv("unanswered", service.live_calls())
      .kv("seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count())
      .emit();
  // Exit without gRPC's Server::Shutdown: it cancels the calls that arrived
  // but were not handed to the service yet, which clients see as CANCELLED
  // (and do not retry), where a closed connection is UNAVAILABLE for every
  // one of them (tests/test_server_resilience.py). Nor its library teardown,
  // which can wait seconds for client connections that are still open.
  std::fflush(nullptr);
  std::_Exit(0);
}
