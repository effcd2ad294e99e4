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
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "errors.h"
#include "index_registry.h"
#include "json_log.h"
#include "metrics.h"
#include "server_config.h"
#include "service.h"

using namespace ngram::server;

namespace {

std::string read_file(const std::string& path, const char* flag) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(std::string(flag) + ": cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::shared_ptr<grpc::ServerCredentials> credentials(const ServerConfig& c) {
  if (c.tls_cert.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions opts(c.tls_client_ca.empty()
                                             ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                             : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  opts.pem_key_cert_pairs.push_back({read_file(c.tls_key, "--tls-key"), read_file(c.tls_cert, "--tls-cert")});
  if (!c.tls_client_ca.empty()) opts.pem_root_certs = read_file(c.tls_client_ca, "--tls-client-ca");
  return grpc::SslServerCredentials(opts);
}

}  // namespace

int main(int argc, char** argv) {
#ifdef NGRAM_ABSL_MUTEX_MODE
  // Lock-order tracking costs every lock of gRPC's a graph update (about 1 %
  // of the server's CPU in perf samples); it only reports, never prevents.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  // stderr carries JSON lines only (docs/SERVER.md, "Logs").
  route_grpc_log();
  route_protobuf_log();
  ServerConfig config = parse_args(argc, argv);
  if (config.threads == 0) config.threads = std::max(1u, std::thread::hardware_concurrency());
  if (config.max_inflight == 0) config.max_inflight = 64ull * config.threads;

  // Signals are taken by one thread with sigwait: block them before any other
  // thread (gRPC's included) exists, so that every thread inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  IndexRegistry registry(config.in_ram, config.verify);
  std::unique_ptr<Metrics> metrics;
  std::shared_ptr<grpc::ServerCredentials> creds;
  try {
    for (size_t i = 0; i < config.files.size(); ++i) {
      const std::string name = i < config.names.size() ? config.names[i] : file_stem(config.files[i]);
      const auto t0 = std::chrono::steady_clock::now();
      registry.add(name, config.files[i]);
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
    metrics = Metrics::create(config.metrics_host, config.metrics_port, registry);
  } catch (const std::exception& e) {
    LogLine("error", "startup_failed").kv("error", e.what()).emit();
    return 1;
  }

  Admission admission(config.max_inflight, config.threads);
  NgramServiceImpl service(config, registry, *metrics, admission);
  NgramAdminImpl admin(registry, *metrics);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int bound_port = 0;
  const std::string addr = (config.host.find(':') != std::string::npos ? "[" + config.host + "]" : config.host) +
                           ":" + std::to_string(config.port);
  builder.AddListeningPort(addr, creds, &bound_port);
  builder.RegisterService(&service);
  if (config.admin) builder.RegisterService(&admin);
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<uint64_t>(config.limits.max_message_bytes, INT32_MAX)));
  builder.SetMaxSendMessageSize(static_cast<int>(std::min<uint64_t>(config.limits.max_message_bytes, INT32_MAX)));
  // The sync server runs each call on a thread of its own pool; cap that pool
  // a little above the admission limit (gRPC itself answers RESOURCE_EXHAUSTED
  // beyond it) and keep enough pollers for the cores.
  grpc::ResourceQuota quota("ngram-serve");
  quota.SetMaxThreads(static_cast<int>(std::min<uint64_t>(config.max_inflight + 2 * config.threads + 8, 1 << 16)));
  builder.SetResourceQuota(quota);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, static_cast<int>(config.threads));
  // A thread that finishes a call exits when its queue already has
  // MAX_POLLERS idle threads, and a new one is started for the next call:
  // with a small maximum, every call under load paid a thread start and
  // exit. Idle threads up to the admission limit stay instead.
  const int pollers = static_cast<int>(std::min<uint64_t>(config.max_inflight / config.threads + 2, 1 << 12));
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, pollers);

  std::unique_ptr<grpc::Server> server;
  {
    // gRPC says why it cannot listen (say, the port is in use) only in its log.
    GrpcLogCapture grpc_log;
    server = builder.BuildAndStart();
    if (!server || bound_port == 0) {
      const std::string said = grpc_log.text();
      const std::string reason = grpc_error_reason(said);
      LogLine("error", "startup_failed")
          .kv("error", "cannot listen on " + addr + (reason.empty() ? "" : ": " + reason))
          .kv("grpc", said)
          .emit();
      grpc_log.discard();
      return 1;
    }
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  if (health) {
    health->SetServingStatus("", true);
    health->SetServingStatus("ngram.v1.NgramService", true);
  }
  std::string names;
  for (const auto& n : registry.names()) names += (names.empty() ? "" : ",") + n;
  LogLine("info", "listening")
      .kv("host", config.host)
      .kv("port", bound_port)
      .kv("tls", !config.tls_cert.empty())
      .kv("mtls", !config.tls_client_ca.empty())
      .kv("indexes", names)
      .kv("threads", config.threads)
      .kv("max_inflight", config.max_inflight)
      .kv("metrics", metrics->endpoint())
      .kv("admin", config.admin)
      .emit();

  std::thread signals([&] {
    while (true) {
      int sig = 0;
      if (sigwait(&sigs, &sig) != 0) continue;
      if (sig == SIGHUP) {
        LogLine("info", "signal").kv("signal", "SIGHUP").emit();
        for (const auto& n : registry.names()) {
          try {
            reload_index(registry, *metrics, n, "");
          } catch (const std::exception&) {
            // logged by reload_index; the old index keeps serving
          }
        }
        continue;
      }
      LogLine("info", "draining")
          .kv("signal", sig == SIGTERM ? "SIGTERM" : "SIGINT")
          .kv("in_flight", admission.in_flight())
          .kv("drain_seconds", config.drain_seconds)
          .emit();
      if (health) health->Shutdown();  // health checks now answer NOT_SERVING
      service.begin_drain();             // new calls are refused (UNAVAILABLE)
      const auto deadline = std::chrono::system_clock::now() +
                            std::chrono::milliseconds(static_cast<int64_t>(config.drain_seconds * 1000));
      // Wait for the admitted calls, then give their replies a second to leave:
      // Shutdown(deadline) alone would also wait for health Watch streams,
      // which never end by themselves, and so always take the whole
      // --drain-seconds.
      while (admission.in_flight() > 0 && std::chrono::system_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      server->Shutdown(std::min(deadline, std::chrono::system_clock::now() + std::chrono::seconds(1)));
      return;
    }
  });
  server->Wait();
  signals.join();
  LogLine("info", "stopped").kv("in_flight", admission.in_flight()).emit();
  // Every call has finished or been cancelled by now. Leave without running
  // gRPC's library teardown, which can wait seconds for client connections
  // that are still open (e.g. a client watching connectivity).
  std::fflush(nullptr);
  std::_Exit(0);
}
