// The server's command line: every flag, its default and its meaning.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "propose.h"
#include "prune_tree.h"

namespace ngram::server {

// The request limits. Those of PruneTree and ProposeTree start at the
// engine's own bounds (PruneLimits, ProposeLimits: the one definition) and
// may only be lowered: a request the server admits is never refused by the
// engine for its size.
struct Limits {
  // The most work one request may ask for (request_bounds.h: the units);
  // the default is also the most the flag admits.
  static constexpr uint64_t kMaxRequestWork = uint64_t{1} << 27;

  uint64_t max_message_bytes = 64ull << 20;  // per request and per response
  uint64_t max_request_work = kMaxRequestWork;
  uint64_t max_batch = 65536;       // queries per ConditionalProbs, trees per PruneTree and ProposeTree
  uint64_t max_context = 4096;      // context / prefix tokens per query
  uint64_t max_candidates = 4096;   // candidates per query (ConditionalProbs K; PruneTree K: also <= the engine's)
  uint64_t max_topk = 65536;        // TopK k
  uint64_t max_levels = PruneLimits::kMaxDepth;     // PruneTree levels per lattice, ProposeTree max_depth
  uint64_t max_beam = PruneLimits::kMaxBeamWidth;   // PruneTree beam_width
  uint64_t max_nodes = PruneLimits::kMaxNodes;      // PruneTree (remain_total) and ProposeTree nodes per tree
  uint64_t max_propose_context = ProposeLimits::kMaxContext;  // ProposeTree tokens per sequence

  // PruneTree's candidates per level: --max-candidates within the engine's bound.
  uint64_t max_prune_candidates() const {
    return max_candidates < PruneLimits::kMaxCandidates ? max_candidates : PruneLimits::kMaxCandidates;
  }
};

// The listen port without --port: the one ngram-query (ngram_service/query_cli.py,
// DEFAULT_TARGET) and the container image assume.
constexpr int kDefaultPort = 50051;

struct ServerConfig {
  std::vector<std::string> files;   // trie files, one index each
  std::vector<std::string> names;   // --name, in the order of files
  std::string host = "0.0.0.0";
  int port = kDefaultPort;          // 0: any free port (logged)
  unsigned threads = 0;             // compute workers; 0: the cores
  uint64_t max_queue = 0;           // calls waiting for a worker; 0: 8 x threads
  uint64_t max_queue_wait_ms = 500; // the longest a call waits for a worker
  uint64_t max_inflight = 0;        // deprecated: --max-queue is this less threads
  Limits limits;
  std::string tls_cert, tls_key, tls_client_ca;
  std::string metrics_host;         // empty: same as host
  int metrics_port = -1;            // -1: no metrics endpoint; 0: a free port
  double drain_seconds = 30;        // SIGTERM: how long in-flight calls may finish
  bool in_ram = false;              // read tries into RAM instead of mapping them
  bool verify = false;              // check every section's checksum at load
  int admin_port = -1;              // NgramAdmin's own listener; -1: none, 0: any free port (logged)
  std::string admin_host = "127.0.0.1";
  std::string reload_dir;           // Reload's paths lie here; empty: the FILEs' directories
  bool log_requests = false;        // one log line per call
};

// Parses argv; on --help prints usage and exits 0; on a bad flag prints the
// usage line, a pointer to --help and the reason to stderr (as the click
// tools do) and exits 2. Every number is checked against its flag's range
// here; threads, max_queue and max_inflight are left for resolve_defaults.
ServerConfig parse_args(int argc, char** argv);

// Fills the defaults that depend on the machine (threads: the cores;
// max_queue: 8 x threads, or --max-inflight less threads).
void resolve_defaults(ServerConfig& c, unsigned cores);

}  // namespace ngram::server
