#include "server_config.h"

#include "json_log.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>

namespace ngram::server {

namespace {

const char* kUsageLine = "Usage: ngram-serve FILE [FILE ...] [--port P] [options]";

const char* kIntro = R"(
Serves one or more trie files over gRPC (ngram.v1.NgramService), with the
standard health service and server reflection.

  FILE                     a trie file (ngram-build output, uncompressed)
)";

const char* kOutro = R"(
Signals: SIGTERM/SIGINT drain and exit; SIGHUP reloads every index from the
FILE named for it on this command line (logged with the path it opened).
)";

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "%s\nTry 'ngram-serve --help' for help.\n\nError: %s\n", kUsageLine, msg.c_str());
  std::exit(2);
}

// A deprecated flag's one warning, as a JSON log line like every other
// line the server writes on stderr.
void deprecated(const char* flag, const std::string& use) {
  LogLine("warning", "deprecated_flag").kv("flag", flag).kv("use", use).emit();
}

std::string range_text(uint64_t lo, uint64_t hi) { return std::to_string(lo) + ".." + std::to_string(hi); }

// An integer flag's value within [lo, hi], or exit 2 naming the flag and its
// range (a value past 64 bits included: never truncated).
uint64_t to_u64(const std::string& flag, const std::string& v, uint64_t lo, uint64_t hi) {
  const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
  if (!digits) die(flag + ": not a whole number: '" + v + "' (must be " + range_text(lo, hi) + ")");
  errno = 0;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (errno == ERANGE || x < lo || x > hi) die(flag + ": " + v + " is out of range: must be " + range_text(lo, hi));
  return x;
}

// One option: its name, the word shown for its value ("" for a switch), its
// help (lines after the first indented by help()), and what it sets.
struct Option {
  const char* name;
  const char* metavar;
  const char* help;
  std::function<void(const std::string&)> set;
};

}  // namespace

ServerConfig parse_args(int argc, char** argv) {
  ServerConfig c;
  Limits& lim = c.limits;
  const auto u64 = [](uint64_t* to, const char* flag, uint64_t lo, uint64_t hi) {
    return [=](const std::string& v) { *to = to_u64(flag, v, lo, hi); };
  };
  const auto port = [](int* to, const char* flag) {
    return [=](const std::string& v) { *to = static_cast<int>(to_u64(flag, v, 0, 65535)); };
  };
  const auto on = [](bool* to) { return [=](const std::string&) { *to = true; }; };
  bool admin_switch = false;
  bool admin_host_given = false;
  // The one table of flags: parsing, ranges and --help come from it.
  const std::vector<Option> options = {
      {"--name", "NAME", "index name of the i-th FILE (repeat; default: file stem)",
       [&](const std::string& v) {
         if (v.empty()) die("--name: an empty index name");
         c.names.push_back(v);
       }},
      {"--host", "H", "listen address (default 0.0.0.0)", [&](const std::string& v) { c.host = v; }},
      {"--port", "P", "listen port (default 50051); 0 picks a free one (logged)", port(&c.port, "--port")},
      {"--threads", "N", "compute workers, 0..1024 (default 0: the cores)",
       [&](const std::string& v) { c.threads = static_cast<unsigned>(to_u64("--threads", v, 0, 1024)); }},
      {"--max-queue", "N", "calls waiting for a worker, 1..65536; beyond: RESOURCE_EXHAUSTED\n"
                           "at once (default 8 x threads)",
       u64(&c.max_queue, "--max-queue", 1, 65536)},
      {"--max-queue-wait-ms", "MS", "the longest a call waits for a worker, 1..3600000; a call\n"
                                    "that waited longer is refused (RESOURCE_EXHAUSTED), and\n"
                                    "while the oldest waiting call has, new calls are (default 500)",
       u64(&c.max_queue_wait_ms, "--max-queue-wait-ms", 1, 3600000)},
      {"--max-inflight", "N", "deprecated: --max-queue N less --threads",
       [&](const std::string& v) {
         deprecated("--max-inflight", "--max-queue (calls waiting for a worker: --max-inflight less --threads)");
         c.max_inflight = to_u64("--max-inflight", v, 2, 65536 + 1024);
       }},
      {"--max-message-bytes", "N", "request/response size limit, 1024..2147483647 (default 67108864)",
       u64(&lim.max_message_bytes, "--max-message-bytes", 1024, 2147483647)},
      {"--max-request-work", "N", "work units one request may ask for (docs/SERVER.md), 1..134217728\n"
                                  "(default, and most, 134217728)",
       u64(&lim.max_request_work, "--max-request-work", 1, Limits::kMaxRequestWork)},
      {"--max-batch", "N", "queries per ConditionalProbs, trees per PruneTree and\n"
                           "ProposeTree, 1..1048576 (65536)",
       u64(&lim.max_batch, "--max-batch", 1, 1u << 20)},
      {"--max-context", "N", "context/prefix tokens per query, 1..1048576 (4096)",
       u64(&lim.max_context, "--max-context", 1, 1u << 20)},
      {"--max-candidates", "N", "candidates per query, 1..65536 (4096; a PruneTree level: at most 1024)",
       u64(&lim.max_candidates, "--max-candidates", 1, 65536)},
      {"--max-topk", "N", "TopK k, 1..1048576 (65536)", u64(&lim.max_topk, "--max-topk", 1, 1u << 20)},
      {"--max-levels", "N", "PruneTree levels per lattice, ProposeTree max_depth, 1..64 (64)",
       u64(&lim.max_levels, "--max-levels", 1, PruneLimits::kMaxDepth)},
      {"--max-beam", "N", "PruneTree beam_width, 1..1024 (1024)",
       u64(&lim.max_beam, "--max-beam", 1, PruneLimits::kMaxBeamWidth)},
      {"--max-nodes", "N", "PruneTree and ProposeTree nodes per tree, 1..4096 (4096)",
       u64(&lim.max_nodes, "--max-nodes", 1, PruneLimits::kMaxNodes)},
      {"--max-propose-context", "N", "ProposeTree tokens per sequence, 1..1048576 (1048576)",
       u64(&lim.max_propose_context, "--max-propose-context", 1, ProposeLimits::kMaxContext)},
      {"--tls-cert", "PEM", "server certificate chain (enables TLS)", [&](const std::string& v) { c.tls_cert = v; }},
      {"--tls-key", "PEM", "server private key", [&](const std::string& v) { c.tls_key = v; }},
      {"--tls-client-ca", "PEM", "require client certificates signed by this CA (mTLS)",
       [&](const std::string& v) { c.tls_client_ca = v; }},
      {"--metrics-port", "P", "Prometheus /metrics on this port (default: off; 0 picks a free\n"
                              "one, logged as metrics)",
       port(&c.metrics_port, "--metrics-port")},
      {"--metrics-host", "H", "metrics listen address (default: --host)",
       [&](const std::string& v) { c.metrics_host = v; }},
      {"--admin-port", "P", "serve ngram.v1.NgramAdmin (Reload) on its own listener at\n"
                            "this port, never on --port (default: off; 0 picks a free\n"
                            "one, logged as admin_port)",
       port(&c.admin_port, "--admin-port")},
      {"--admin-host", "H", "the admin listener's address (default 127.0.0.1)",
       [&](const std::string& v) {
         c.admin_host = v;
         admin_host_given = true;
       }},
      {"--reload-dir", "DIR", "Reload opens only files under DIR (default: the FILEs'\n"
                              "directories)",
       [&](const std::string& v) { c.reload_dir = v; }},
      {"--drain-seconds", "S", "on SIGTERM, time for in-flight calls, 0..3600 (default 30)",
       [&](const std::string& v) {
         char* end = nullptr;
         const double s = std::strtod(v.c_str(), &end);
         if (v.empty() || *end || !std::isfinite(s) || s < 0 || s > 3600)
           die("--drain-seconds: not a number of seconds in 0..3600: '" + v + "'");
         c.drain_seconds = s;
       }},
      {"--ram", "", "read tries into RAM instead of mapping them: a format-1\n"
                    "trie is also decoded for speed (the fastest representation,\n"
                    "about 2.5x its file's bytes); a format-2 trie is held as\n"
                    "its file is (docs/FORMAT.md, \"Representations\")",
       on(&c.in_ram)},
      {"--verify", "", "check every section's checksum when loading", on(&c.verify)},
      {"--admin", "", "deprecated: --admin-port 0", on(&admin_switch)},
      {"--log-requests", "", "one log line per call (default: events only)", on(&c.log_requests)},
  };

  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::string help = std::string(kUsageLine) + "\n" + kIntro;
      for (const Option& o : options) {
        std::string head = std::string("  ") + o.name + (*o.metavar ? std::string(" ") + o.metavar : "");
        head.resize(std::max<size_t>(head.size() + 1, 27), ' ');
        std::string text = o.help;
        for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 1))
          text.insert(at + 1, std::string(27, ' '));
        help += head + text + "\n";
      }
      help += kOutro;
      std::fputs(help.c_str(), stdout);
      std::exit(0);
    }
    if (a.rfind("--", 0) != 0) {
      c.files.push_back(a);
      continue;
    }
    std::string value;
    bool inline_value = false;
    if (const size_t eq = a.find('='); eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      inline_value = true;
    }
    const Option* o = nullptr;
    for (const Option& x : options)
      if (a == x.name) o = &x;
    if (!o) die("unknown option " + a);
    if (!*o->metavar) {
      if (inline_value) die(a + " takes no value");
    } else if (!inline_value) {
      if (i + 1 >= argc) die(a + " needs a value");
      value = argv[++i];
    }
    o->set(value);
  }
  if (c.files.empty()) die("no trie FILE given");
  if (c.names.size() > c.files.size()) die("more --name than FILEs");
  if (c.tls_cert.empty() != c.tls_key.empty()) die("--tls-cert and --tls-key go together");
  if (!c.tls_client_ca.empty() && c.tls_cert.empty()) die("--tls-client-ca needs --tls-cert and --tls-key");
  if (c.max_inflight && c.max_queue) die("--max-inflight and --max-queue: give one (--max-inflight is deprecated)");
  if (admin_switch) {
    deprecated("--admin", "--admin-port P (NgramAdmin has its own listener; --admin means --admin-port 0)");
    if (c.admin_port < 0) c.admin_port = 0;
  }
  if (c.admin_port < 0 && !c.reload_dir.empty()) die("--reload-dir needs --admin-port");
  if (c.admin_port < 0 && admin_host_given) die("--admin-host needs --admin-port");
  if (c.metrics_port < 0 && !c.metrics_host.empty()) die("--metrics-host needs --metrics-port");
  // Two listeners on one port: the second would fail to bind, its error blaming the other's flag.
  const std::pair<int, const char*> ports[] = {
      {c.port, "--port"}, {c.metrics_port, "--metrics-port"}, {c.admin_port, "--admin-port"}};
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = i + 1; j < 3; ++j)
      if (ports[i].first > 0 && ports[i].first == ports[j].first)
        die(std::string(ports[j].second) + " " + std::to_string(ports[j].first) + " is " + ports[i].second +
            "'s too: give each listener its own port");
  if (c.metrics_host.empty()) c.metrics_host = c.host;
  return c;
}

void resolve_defaults(ServerConfig& c, unsigned cores) {
  if (c.threads == 0) c.threads = std::max(1u, std::min(cores, 1024u));
  if (c.max_queue == 0)
    c.max_queue = c.max_inflight ? std::max<uint64_t>(1, c.max_inflight - std::min<uint64_t>(c.max_inflight - 1, c.threads))
                                 : 8ull * c.threads;
}

}  // namespace ngram::server
