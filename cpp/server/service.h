// The gRPC services over the engine: NgramService (queries, tree pruning,
// corpus proposals) and NgramAdmin (reload, on the operator's own listener).
// A call is read on one of gRPC's threads, which only checks whether it can
// be queued: while draining it is refused with UNAVAILABLE, and when the
// compute pool's queue is full or stalled with RESOURCE_EXHAUSTED, at once.
// A queued call runs on a compute worker (compute_pool.h), its work bounded
// before it starts (request_bounds.h) and stopped by its deadline, its
// client's cancellation or the end of a drain (interrupt.h), whichever
// comes first.
#pragma once
#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_set>

#include "compute_pool.h"
#include "index_registry.h"
#include "interrupt.h"
#include "metrics.h"
#include "ngram/v1/ngram.grpc.pb.h"
#include "server_config.h"

namespace ngram::server {

// Every method uses the callback API on the request's bytes: the service
// parses them itself (parse() in service.cc), on the compute worker, so that
// a body that is not the method's message is INVALID_ARGUMENT with a
// message, where gRPC's own parsing answers UNIMPLEMENTED with none.
using NgramServiceBase = v1::NgramService::WithRawCallbackMethod_GetInfo<
    v1::NgramService::WithRawCallbackMethod_ConditionalProbs<v1::NgramService::WithRawCallbackMethod_TopK<
        v1::NgramService::WithRawCallbackMethod_PruneTree<
            v1::NgramService::WithRawCallbackMethod_ProposeTree<v1::NgramService::Service>>>>>;

class NgramServiceImpl final : public NgramServiceBase {
 public:
  NgramServiceImpl(const ServerConfig& config, IndexRegistry& registry, Metrics& metrics, ComputePool& pool)
      : config_(config), registry_(registry), metrics_(metrics), pool_(pool) {}

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

  // The drain, in its order (main.cc): from begin_drain on, new calls are
  // refused with UNAVAILABLE (clients retry on another replica); stop_all
  // makes every call still queued or running end with UNAVAILABLE within
  // the engine's check interval; live_calls() reaches 0 once every call
  // has been answered and gRPC is done with it.
  void begin_drain() { draining_.store(true); }
  void stop_all();
  uint64_t live_calls() const;
  // Calls admitted and not yet answered (queued or running).
  uint64_t in_flight() const { return in_flight_.load(); }

 private:
  class Call;
  using Body = std::function<grpc::Status(const Interrupt&)>;
  // A unary call: refused at once, or queued on the compute pool, where
  // `body` runs unless the call waited too long, its deadline passed or it
  // was cancelled or drained while queued.
  grpc::ServerUnaryReactor* unary(const char* method, grpc::CallbackServerContext* ctx, Body body);
  // unary() of `body` (a Status(const Req&, Resp*, const Interrupt&)
  // function) on the request parsed from `in`; its response is serialized
  // into `out` when it succeeds.
  template <class Req, class Resp, class F>
  grpc::ServerUnaryReactor* typed(const char* method, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                  grpc::ByteBuffer* out, F body);
  // The index a request names, checked against its tokenizer fingerprint.
  grpc::Status resolve(const std::string& name, const std::string& fingerprint,
                       std::shared_ptr<const LoadedIndex>* out) const;
  grpc::Status conditional_probs(const v1::ConditionalProbsRequest& req, v1::ConditionalProbsResponse* resp,
                                 const Interrupt& stop) const;
  grpc::Status prune_tree(const v1::PruneTreeRequest& req, v1::PruneTreeResponse* resp, const Interrupt& stop) const;
  grpc::Status propose_tree(const v1::ProposeTreeRequest& req, v1::ProposeTreeResponse* resp,
                            const Interrupt& stop) const;
  void refused(const char* method, const char* reason);

  const ServerConfig& config_;
  IndexRegistry& registry_;
  Metrics& metrics_;
  ComputePool& pool_;
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> in_flight_{0};
  mutable std::mutex calls_mu_;
  std::unordered_set<Call*> calls_;  // every call not yet done (OnDone), for stop_all
  std::atomic<int64_t> last_overload_log_{0};
};

class NgramAdminImpl final : public v1::NgramAdmin::Service {
 public:
  // reload_dirs: the directories Reload's paths must lie in (resolved).
  NgramAdminImpl(IndexRegistry& registry, Metrics& metrics, std::vector<std::string> reload_dirs)
      : registry_(registry), metrics_(metrics), reload_dirs_(std::move(reload_dirs)) {}
  grpc::Status Reload(grpc::ServerContext* ctx, const v1::ReloadRequest* req, v1::ReloadResponse* resp) override;

 private:
  IndexRegistry& registry_;
  Metrics& metrics_;
  const std::vector<std::string> reload_dirs_;
};

// Reloads one index from `path` ("" = the file it was last loaded from) and
// logs the outcome with the path it opened; throws what the registry throws.
std::shared_ptr<const LoadedIndex> reload_index(IndexRegistry& registry, Metrics& metrics,
                                                const std::string& name, const std::string& path,
                                                const char* cause);

}  // namespace ngram::server
