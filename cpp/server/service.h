// The gRPC services over the engine: NgramService (queries, tree pruning,
// corpus proposals) and NgramAdmin (reload). Every call goes through
// admission: a bounded number in flight (beyond it RESOURCE_EXHAUSTED at
// once, never a queue that grows) and a pool of compute slots sized to the
// cores. A call waits for a slot no longer than its deadline: one whose
// deadline passed (or that was cancelled) while it waited is answered
// without running.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>

#include "index_registry.h"
#include "metrics.h"
#include "ngram/v1/ngram.grpc.pb.h"
#include "server_config.h"

namespace ngram::server {

// Admission control: in-flight calls and compute slots.
class Admission {
 public:
  Admission(uint64_t max_inflight, unsigned workers) : max_inflight_(max_inflight), free_workers_(workers) {}
  bool enter();   // false: at the in-flight limit
  void leave();
  // Runs `task` on this thread when a compute slot is free; else queues it,
  // and the thread that frees the next slot runs it. A callback-API thread
  // never blocks here (blocked, it could not read the next call).
  void run(std::function<void()> task);
  // For the synchronous stream: waits for a compute slot until the call's
  // deadline or cancellation. Queued tasks get freed slots first.
  grpc::Status acquire_worker(grpc::ServerContextBase* ctx);
  // Runs the queued tasks, if any, then frees the slot.
  void release_worker();
  uint64_t in_flight() const { return in_flight_.load(); }

 private:
  const uint64_t max_inflight_;
  std::atomic<uint64_t> in_flight_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  unsigned free_workers_;
  std::deque<std::function<void()>> queued_;
};

// Every method uses the callback API (see unary() in service.cc) on the
// request's bytes: the service parses them itself (typed()), so that a body
// that is not the method's message is INVALID_ARGUMENT with a message, where
// gRPC's own parsing answers UNIMPLEMENTED with none.
using NgramServiceBase = v1::NgramService::WithRawCallbackMethod_GetInfo<
    v1::NgramService::WithRawCallbackMethod_ConditionalProbs<v1::NgramService::WithRawCallbackMethod_TopK<
        v1::NgramService::WithRawCallbackMethod_PruneTree<
            v1::NgramService::WithRawCallbackMethod_ProposeTree<v1::NgramService::Service>>>>>;

class NgramServiceImpl final : public NgramServiceBase {
 public:
  NgramServiceImpl(const ServerConfig& config, IndexRegistry& registry, Metrics& metrics, Admission& admission)
      : config_(config), registry_(registry), metrics_(metrics), admission_(admission) {}

  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                    grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ConditionalProbs(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                             grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* TopK(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* PruneTree(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                      grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ProposeTree(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                        grpc::ByteBuffer* resp) override;

  // Before Server::Shutdown: from now on new calls are refused (UNAVAILABLE,
  // which clients retry on another replica), so a drain waits only for the
  // calls already admitted.
  void begin_drain() { draining_.store(true); }

 private:
  // A unary call: admission, a compute slot (Admission::run), then `body`
  // (a Status() function), its errors mapped to status codes, metrics and
  // the optional request log; the reactor finishes with the status.
  grpc::ServerUnaryReactor* unary(const char* method, grpc::CallbackServerContext* ctx,
                                  std::function<grpc::Status()> body);
  // unary() of `body` (a Status(const Req*, Resp*) function) on the request
  // parsed from `in`; its response is serialized into `out` when it succeeds.
  template <class Req, class Resp, class Body>
  grpc::ServerUnaryReactor* typed(const char* method, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                  grpc::ByteBuffer* out, Body body);
  // The index a request names, checked against its tokenizer fingerprint.
  grpc::Status resolve(const std::string& name, const std::string& fingerprint,
                       std::shared_ptr<const LoadedIndex>* out) const;
  grpc::Status prune_tree(const v1::PruneTreeRequest& req, v1::PruneTreeResponse* resp) const;
  grpc::Status propose_tree(const v1::ProposeTreeRequest& req, v1::ProposeTreeResponse* resp) const;

  const ServerConfig& config_;
  IndexRegistry& registry_;
  Metrics& metrics_;
  Admission& admission_;
  std::atomic<bool> draining_{false};
};

class NgramAdminImpl final : public v1::NgramAdmin::Service {
 public:
  NgramAdminImpl(IndexRegistry& registry, Metrics& metrics) : registry_(registry), metrics_(metrics) {}
  grpc::Status Reload(grpc::ServerContext* ctx, const v1::ReloadRequest* req, v1::ReloadResponse* resp) override;

 private:
  IndexRegistry& registry_;
  Metrics& metrics_;
};

// Reloads one index and logs the outcome; throws what the registry throws.
std::shared_ptr<const LoadedIndex> reload_index(IndexRegistry& registry, Metrics& metrics,
                                                const std::string& name, const std::string& path);

}  // namespace ngram::server
