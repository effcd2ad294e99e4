// libFuzzer target: the server's request decoding and handlers. The real
// NgramService (cpp/server/service.cc) serves a trie ($NGRAM_FUZZ_TRIE) on an
// in-process channel; each input is one call: its first byte picks the
// method, the rest is the request body as the client sent it. Passes when
// every call ends with a status a client may get for a bad request (OK,
// INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, RESOURCE_EXHAUSTED), never
// UNIMPLEMENTED, INTERNAL or UNKNOWN, and nothing crashes or leaks
// (AddressSanitizer's leak check at exit).
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "compute_pool.h"
#include "index_registry.h"
#include "json_log.h"
#include "metrics.h"
#include "server_config.h"
#include "service.h"

namespace {

struct Host {
  ngram::server::ServerConfig config;
  ngram::server::IndexRegistry registry{false, false};
  std::unique_ptr<ngram::server::Metrics> metrics;
  std::unique_ptr<ngram::server::ComputePool> pool;
  std::unique_ptr<ngram::server::NgramServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<grpc::GenericStub> stub;
};
Host* g_host = nullptr;  // lives until exit, like the server's own

const char* const kMethods[] = {"/ngram.v1.NgramService/GetInfo", "/ngram.v1.NgramService/ConditionalProbs",
                                "/ngram.v1.NgramService/TopK", "/ngram.v1.NgramService/PruneTree",
                                "/ngram.v1.NgramService/ProposeTree"};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* path = std::getenv("NGRAM_FUZZ_TRIE");
  if (!path) {
    std::fprintf(stderr, "set NGRAM_FUZZ_TRIE to a trie file (fuzz/run_fuzz.py does)\n");
    std::exit(2);
  }
  ngram::server::route_protobuf_log();
  g_host = new Host;
  g_host->config.threads = 1;
  g_host->config.max_queue = 8;
  // Small limits, so that a fuzzed request reaches the engine's checks
  // rather than spending its time on a huge batch.
  g_host->config.limits.max_batch = 16;
  g_host->config.limits.max_candidates = 64;
  g_host->config.limits.max_topk = 256;
  g_host->config.limits.max_nodes = 256;
  g_host->config.limits.max_beam = 64;
  g_host->registry.add("fuzz", path);
  g_host->metrics = ngram::server::Metrics::create("", -1, g_host->registry);  // -1: no endpoint
  g_host->pool = std::make_unique<ngram::server::ComputePool>(1, 8, std::chrono::seconds(10));
  g_host->service = std::make_unique<ngram::server::NgramServiceImpl>(g_host->config, g_host->registry,
                                                                      *g_host->metrics, *g_host->pool);
  grpc::ServerBuilder builder;
  builder.RegisterService(g_host->service.get());
  g_host->server = builder.BuildAndStart();
  g_host->stub = std::make_unique<grpc::GenericStub>(g_host->server->InProcessChannel(grpc::ChannelArguments()));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const char* method = kMethods[data[0] % (sizeof(kMethods) / sizeof(kMethods[0]))];
  grpc::Slice slice(data + 1, size - 1);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  g_host->stub->UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status st) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(st);
    done = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  switch (status.error_code()) {
    case grpc::StatusCode::OK:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      if (status.error_code() != grpc::StatusCode::OK && status.error_message().empty()) {
        std::fprintf(stderr, "%s: status %d with no message\n", method, status.error_code());
        std::abort();
      }
      return 0;
    default:
      std::fprintf(stderr, "%s: status %d: %s\n", method, status.error_code(), status.error_message().c_str());
      std::abort();
  }
}
