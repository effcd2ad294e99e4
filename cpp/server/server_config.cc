#include "server_config.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>

namespace ngram::server {

namespace {

const char* kUsageLine = "Usage: ngram-serve FILE [FILE ...] [--port P] [options]";

const char* kHelp = R"(
Serves one or more trie files over gRPC (ngram.v1.NgramService), with the
standard health service and server reflection.

  FILE                     a trie file (ngram-build output, uncompressed)
  --name NAME              index name of the i-th FILE (repeat; default: file stem)
  --host H                 listen address (default 0.0.0.0)
  --port P                 listen port (default 50051); 0 picks a free one (logged)
  --threads N              compute workers (default: the cores)
  --max-inflight N         calls admitted at once, beyond: RESOURCE_EXHAUSTED
                           (default 64 x threads)
  --max-message-bytes N    request/response size limit (default 67108864)
  --max-batch N            queries per ConditionalProbs, trees per PruneTree and
                           ProposeTree (65536)
  --max-context N          context/prefix tokens per query (4096)
  --max-candidates N       candidates per query (4096; a PruneTree level: at most 1024)
  --max-topk N             TopK k (65536)
  --max-levels N           PruneTree levels per lattice, ProposeTree max_depth (64, at most)
  --max-beam N             PruneTree beam_width (1024, at most)
  --max-nodes N            PruneTree and ProposeTree nodes per tree (4096, at most)
  --max-propose-context N  ProposeTree tokens per sequence (1048576, at most)
  --tls-cert PEM           server certificate chain (enables TLS)
  --tls-key PEM            server private key
  --tls-client-ca PEM      require client certificates signed by this CA (mTLS)
  --metrics-port P         Prometheus /metrics on this port (default: off)
  --metrics-host H         metrics listen address (default: --host)
  --drain-seconds S        on SIGTERM, time for in-flight calls (default 30)
  --ram                    read tries into RAM instead of mapping them: a format-1
                           trie is also decoded for speed (the fastest representation,
                           about 2.5x its file's bytes); a format-2 trie is held as
                           its file is (docs/FORMAT.md, "Representations")
  --verify                 check every section's checksum when loading
  --admin                  serve ngram.v1.NgramAdmin (Reload)
  --log-requests           one log line per call (default: events only)

Signals: SIGTERM/SIGINT drain and exit; SIGHUP reloads every index from its file.
)";

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "%s\nTry 'ngram-serve --help' for help.\n\nError: %s\n", kUsageLine, msg.c_str());
  std::exit(2);
}

uint64_t to_u64(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || *end || errno || v[0] == '-') die(flag + ": not a non-negative integer: " + v);
  return x;
}

}  // namespace

ServerConfig parse_args(int argc, char** argv) {
  ServerConfig c;
  using Setter = std::function<void(const std::string&)>;
  const std::map<std::string, Setter> with_value = {
      {"--name", [&](const std::string& v) { c.names.push_back(v); }},
      {"--host", [&](const std::string& v) { c.host = v; }},
      {"--port", [&](const std::string& v) {
         const uint64_t p = to_u64("--port", v);
         if (p > 65535) die("--port: must be 0..65535");
         c.port = static_cast<int>(p);
       }},
      {"--threads", [&](const std::string& v) { c.threads = static_cast<unsigned>(to_u64("--threads", v)); }},
      {"--max-inflight", [&](const std::string& v) { c.max_inflight = to_u64("--max-inflight", v); }},
      {"--max-message-bytes", [&](const std::string& v) { c.limits.max_message_bytes = to_u64("--max-message-bytes", v); }},
      {"--max-batch", [&](const std::string& v) { c.limits.max_batch = to_u64("--max-batch", v); }},
      {"--max-context", [&](const std::string& v) { c.limits.max_context = to_u64("--max-context", v); }},
      {"--max-candidates", [&](const std::string& v) { c.limits.max_candidates = to_u64("--max-candidates", v); }},
      {"--max-topk", [&](const std::string& v) { c.limits.max_topk = to_u64("--max-topk", v); }},
      {"--max-levels", [&](const std::string& v) { c.limits.max_levels = to_u64("--max-levels", v); }},
      {"--max-beam", [&](const std::string& v) { c.limits.max_beam = to_u64("--max-beam", v); }},
      {"--max-nodes", [&](const std::string& v) { c.limits.max_nodes = to_u64("--max-nodes", v); }},
      {"--max-propose-context",
       [&](const std::string& v) { c.limits.max_propose_context = to_u64("--max-propose-context", v); }},
      {"--tls-cert", [&](const std::string& v) { c.tls_cert = v; }},
      {"--tls-key", [&](const std::string& v) { c.tls_key = v; }},
      {"--tls-client-ca", [&](const std::string& v) { c.tls_client_ca = v; }},
      {"--metrics-port", [&](const std::string& v) {
         const uint64_t p = to_u64("--metrics-port", v);
         if (p > 65535) die("--metrics-port: must be 0..65535");
         c.metrics_port = static_cast<int>(p);
       }},
      {"--metrics-host", [&](const std::string& v) { c.metrics_host = v; }},
      {"--drain-seconds", [&](const std::string& v) {
         char* end = nullptr;
         c.drain_seconds = std::strtod(v.c_str(), &end);
         if (v.empty() || *end || c.drain_seconds < 0) die("--drain-seconds: not a non-negative number: " + v);
       }},
  };
  const std::map<std::string, bool*> switches = {
      {"--ram", &c.in_ram}, {"--verify", &c.verify}, {"--admin", &c.admin}, {"--log-requests", &c.log_requests}};

  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf("%s\n%s", kUsageLine, kHelp);
      std::exit(0);
    }
    if (a.rfind("--", 0) == 0) {
      std::string value;
      bool inline_value = false;
      if (const size_t eq = a.find('='); eq != std::string::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
        inline_value = true;
      }
      if (auto s = switches.find(a); s != switches.end()) {
        if (inline_value) die(a + " takes no value");
        *s->second = true;
        continue;
      }
      auto w = with_value.find(a);
      if (w == with_value.end()) die("unknown option " + a);
      if (!inline_value) {
        if (i + 1 >= argc) die(a + " needs a value");
        value = argv[++i];
      }
      w->second(value);
      continue;
    }
    c.files.push_back(a);
  }
  if (c.files.empty()) die("no trie FILE given");
  if (c.names.size() > c.files.size()) die("more --name than FILEs");
  if (c.tls_cert.empty() != c.tls_key.empty()) die("--tls-cert and --tls-key go together");
  if (!c.tls_client_ca.empty() && c.tls_cert.empty()) die("--tls-client-ca needs --tls-cert and --tls-key");
  if (c.limits.max_batch == 0 || c.limits.max_context == 0 || c.limits.max_candidates == 0 ||
      c.limits.max_levels == 0 || c.limits.max_beam == 0 || c.limits.max_nodes == 0 ||
      c.limits.max_propose_context == 0)
    die("limits must be >= 1");
  // The engine's bounds (cpp/engine/prune_tree.h, PruneLimits; propose.h,
  // ProposeLimits) cap PruneTree's and ProposeTree's limits.
  const struct {
    const char* flag;
    uint64_t value, most;
  } engine_bounds[] = {{"--max-levels", c.limits.max_levels, PruneLimits::kMaxDepth},
                       {"--max-beam", c.limits.max_beam, PruneLimits::kMaxBeamWidth},
                       {"--max-nodes", c.limits.max_nodes, PruneLimits::kMaxNodes},
                       {"--max-propose-context", c.limits.max_propose_context, ProposeLimits::kMaxContext}};
  for (const auto& b : engine_bounds)
    if (b.value > b.most)
      die(std::string(b.flag) + " " + std::to_string(b.value) + ": at most the engine's " + std::to_string(b.most));
  if (c.metrics_host.empty()) c.metrics_host = c.host;
  return c;
}

}  // namespace ngram::server
