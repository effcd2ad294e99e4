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
  uint64_t max_message_bytes = 64ull << 20;  // per request and per response
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
  uint64_t max_inflight = 0;        // calls admitted at once; 0: 64 x threads
  Limits limits;
  std::string tls_cert, tls_key, tls_client_ca;
  std::string metrics_host;         // empty: same as host
  int metrics_port = 0;             // 0: no metrics endpoint
  double drain_seconds = 30;        // SIGTERM: how long in-flight calls may finish
  bool in_ram = false;              // read tries into RAM instead of mapping them
  bool verify = false;              // check every section's checksum at load
  bool admin = false;               // serve NgramAdmin (Reload)
  bool log_requests = false;        // one log line per call
};

// Parses argv; on --help prints usage and exits 0; on a bad flag prints the
// usage line, a pointer to --help and the reason to stderr (as the click
// tools do) and exits 2.
ServerConfig parse_args(int argc, char** argv);

}  // namespace ngram::server
