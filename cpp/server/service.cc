#include "service.h"

#include <algorithm>
#include <chrono>
#include <new>

#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include <malloc.h>

#include <climits>
#include <cstdlib>
#include <cstring>

#include "errors.h"
#include "message_text.h"
#include "request_bounds.h"
#include "json_log.h"
#include "propose.h"
#include "prune_tree.h"
#include "queries.h"
#include "tree_messages.h"

namespace ngram::server {

using grpc::Status;
using grpc::StatusCode;

// ---- helpers -------------------------------------------------------------------

namespace {

Status invalid(const std::string& msg) { return Status(StatusCode::INVALID_ARGUMENT, msg); }

// The status of a call stopped by its Interrupt: a drain's is UNAVAILABLE,
// which clients retry on another replica.
Status stopped(StopReason reason, const std::string& what) {
  switch (reason) {
    case StopReason::kDeadline: return Status(StatusCode::DEADLINE_EXCEEDED, what);
    case StopReason::kCancelled: return Status(StatusCode::CANCELLED, what);
    default: return Status(StatusCode::UNAVAILABLE, "draining: the server is shutting down (" + what + ")");
  }
}

// The call's deadline on the steady clock (which the engine's checks read);
// none when the client set none (gRPC's infinite deadline would overflow).
Interrupt::Clock::time_point steady_deadline(grpc::ServerContextBase* ctx) {
  const auto left = ctx->deadline() - std::chrono::system_clock::now();
  if (left > std::chrono::hours(24 * 365)) return Interrupt::Clock::time_point::max();
  return Interrupt::Clock::now() + std::chrono::duration_cast<Interrupt::Clock::duration>(left);
}

Status over_limit(const char* field, uint64_t value, const char* what, const char* flag, uint64_t limit) {
  return invalid(std::string(field) + ": " + std::to_string(value) + " " + what + ", the server's limit is " +
                 std::to_string(limit) + " (" + flag + ")");
}

// body(), its exceptions mapped to status codes: the one mapping of every
// method's errors.
template <class Body>
Status status_of(Body&& body) {
  try {
    return body();
  } catch (const InvalidArgument& e) {
    return invalid(e.what());
  } catch (const Interrupted& e) {
    return stopped(e.reason(), e.what());
  } catch (const FormatError& e) {
    return Status(StatusCode::INTERNAL, e.what());
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return Status(StatusCode::INTERNAL, e.what());
  }
}

// The request message from its bytes. What protobuf says about a body it
// refuses (invalid UTF-8 in a string field) goes into the status message,
// not onto stderr (json_log.h, ProtobufLogCapture).
template <class Req>
Status parse(const grpc::ByteBuffer& in, Req* req) {
  ProtobufLogCapture capture;
  grpc::ByteBuffer body(in);  // shares the slices; the reader needs a mutable buffer
  grpc::ProtoBufferReader reader(&body);
  if (reader.status().ok() && req->ParseFromZeroCopyStream(&reader)) return Status::OK;
  std::string msg = "request: not a valid " + req->GetTypeName() + " message";
  if (!capture.text().empty()) msg += " (" + capture.text() + ")";
  return invalid(msg);
}


// A reply serialized into one buffer: a large one is then one mapping,
// returned to the system when gRPC has sent it, not thousands of 8 KiB
// blocks scattered over the heap. Returns its size.
size_t serialize(const google::protobuf::MessageLite& msg, grpc::ByteBuffer* out) {
  const size_t size = msg.ByteSizeLong();
  grpc::Slice slice(size);
  msg.SerializeWithCachedSizesToArray(const_cast<uint8_t*>(slice.begin()));
  grpc::ByteBuffer buffer(&slice, 1);
  out->Swap(&buffer);
  return size;
}

constexpr size_t kTrimAfterBytes = size_t{8} << 20;

// The trees a tree method answered, and their nodes besides the roots.
void count_trees(Metrics& metrics, const char* method,
                 const google::protobuf::RepeatedPtrField<v1::PrunedTreeNodes>& trees) {
  uint64_t nodes = 0;
  for (const auto& t : trees) nodes += t.tokens_size() > 0 ? static_cast<uint64_t>(t.tokens_size() - 1) : 0;
  metrics.trees(method, static_cast<uint64_t>(trees.size()), nodes);
}

}  // namespace

// One call: its reactor, the flag that stops its work (raised by gRPC's
// OnCancel or by a drain), and its answer with metrics and the request log.
class NgramServiceImpl::Call final : public grpc::ServerUnaryReactor {
 public:
  Call(NgramServiceImpl& service, const char* method, grpc::CallbackServerContext* ctx)
      : service_(service), method_(method), ctx_(ctx), t0_(std::chrono::steady_clock::now()),
        interrupt_(steady_deadline(ctx), &stop_) {
    std::lock_guard<std::mutex> lock(service_.calls_mu_);
    service_.calls_.insert(this);
  }

  const Interrupt& interrupt() const { return interrupt_; }
  const char* method() const { return method_; }
  void set_queue_seconds(double s) { queue_seconds_ = s; }

  // Raises the stop flag unless a reason is there already.
  void stop(StopReason reason) {
    StopReason none = StopReason::kNone;
    stop_.compare_exchange_strong(none, reason);
  }

  // Answers the call; the reactor may be deleted (OnDone) as soon as this returns.
  void finish(const Status& st) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    service_.metrics_.observe(method_, st.error_code(), secs);
    if (service_.config_.log_requests || st.error_code() == StatusCode::INTERNAL) {
      LogLine(st.error_code() == StatusCode::INTERNAL ? "error" : "info", "call")
          .kv("method", method_)
          .kv("peer", ctx_->peer())
          .kv("code", static_cast<int>(st.error_code()))
          .kv("message", st.error_message())
          .kv("seconds", secs)
          .kv("queue_seconds", queue_seconds_)
          .emit();
    }
    Finish(st);
  }

  void OnCancel() override { stop(StopReason::kCancelled); }
  void OnDone() override {
    {
      std::lock_guard<std::mutex> lock(service_.calls_mu_);
      service_.calls_.erase(this);
    }
    delete this;
  }

 private:
  NgramServiceImpl& service_;
  const char* const method_;
  grpc::CallbackServerContext* const ctx_;
  const std::chrono::steady_clock::time_point t0_;
  double queue_seconds_ = 0;  // how long it waited for a compute worker
  std::atomic<StopReason> stop_{StopReason::kNone};
  const Interrupt interrupt_;
};

void NgramServiceImpl::stop_all() {
  std::lock_guard<std::mutex> lock(calls_mu_);
  for (Call* c : calls_) c->stop(StopReason::kDraining);
}

uint64_t NgramServiceImpl::live_calls() const {
  std::lock_guard<std::mutex> lock(calls_mu_);
  return calls_.size();
}

void NgramServiceImpl::refused(const char* method, const char* reason) {
  metrics_.rejected(method, reason);
  // One log line per ten seconds at most while calls are refused: enough for
  // an operator to see the host saturate, never a flood.
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  int64_t last = last_overload_log_.load();
  if (now - last >= 10 && last_overload_log_.compare_exchange_strong(last, now)) {
    LogLine("warning", "overloaded")
        .kv("method", method)
        .kv("reason", reason)
        .kv("queued", pool_.queued())
        .kv("max_queue", pool_.max_queue())
        .kv("busy_workers", pool_.busy())
        .kv("threads", pool_.threads())
        .emit();
  }
}

grpc::ServerUnaryReactor* NgramServiceImpl::unary(const char* method, grpc::CallbackServerContext* ctx, Body body) {
  Call* call = new Call(*this, method, ctx);
  if (draining_.load()) {
    refused(method, "draining");
    call->finish(Status(StatusCode::UNAVAILABLE, "draining: the server is shutting down"));
    return call;
  }
  in_flight_.fetch_add(1);
  metrics_.in_flight(+1);
  const ComputePool::Refusal refusal = pool_.submit([this, call, body = std::move(body)](
                                                        ComputePool::Verdict verdict, ComputePool::Clock::duration waited) {
    const double waited_s = std::chrono::duration<double>(waited).count();
    metrics_.queue_wait(waited_s);
    call->set_queue_seconds(waited_s);
    Status st;
    // What stopped the call while it waited, if anything; the deadline
    // first (gRPC also marks a call whose deadline passed as cancelled).
    const StopReason why = call->interrupt().reason();
    if (why == StopReason::kDeadline) {
      st = Status(StatusCode::DEADLINE_EXCEEDED, "deadline passed before the call started");
    } else if (why == StopReason::kCancelled) {
      st = Status(StatusCode::CANCELLED, "call cancelled while queued");
    } else if (why == StopReason::kDraining) {
      st = Status(StatusCode::UNAVAILABLE, "draining: the server is shutting down");
    } else if (verdict == ComputePool::Verdict::kWaitedTooLong) {
      refused(call->method(), "queue_wait");
      st = Status(StatusCode::RESOURCE_EXHAUSTED,
                  "server busy: the call waited " + std::to_string(static_cast<int64_t>(waited_s * 1000)) +
                      " ms for a compute worker, over --max-queue-wait-ms " +
                      std::to_string(config_.max_queue_wait_ms));
    } else {
      st = status_of([&] { return body(call->interrupt()); });
    }
    in_flight_.fetch_sub(1);
    metrics_.in_flight(-1);
    call->finish(st);
  });
  if (refusal != ComputePool::Refusal::kNone) {
    in_flight_.fetch_sub(1);
    metrics_.in_flight(-1);
    const bool full = refusal == ComputePool::Refusal::kQueueFull;
    refused(method, full ? "queue_full" : "queue_stalled");
    call->finish(Status(StatusCode::RESOURCE_EXHAUSTED,
                        full ? "server busy: " + std::to_string(pool_.max_queue()) +
                                   " calls already wait for a compute worker (--max-queue)"
                             : "server busy: the oldest queued call has waited over --max-queue-wait-ms " +
                                   std::to_string(config_.max_queue_wait_ms)));
  }
  return call;
}

template <class Req, class Resp, class F>
grpc::ServerUnaryReactor* NgramServiceImpl::typed(const char* method, grpc::CallbackServerContext* ctx,
                                                  const grpc::ByteBuffer* in, grpc::ByteBuffer* out, F body) {
  return unary(method, ctx, [in, out, body = std::move(body)](const Interrupt& stop) -> Status {
    size_t reply_bytes = 0;
    {
      Req req;
      if (Status st = parse(*in, &req); !st.ok()) return st;
      Resp resp;
      if (Status st = body(req, &resp, stop); !st.ok()) return st;
      reply_bytes = serialize(resp, out);
    }
    // The request and reply messages are freed by now; a large one leaves
    // its thread's heap in pieces that glibc would keep (issue 39 measured
    // 389 MB held after eight 53 MB replies): give them back.
    if (reply_bytes >= kTrimAfterBytes) malloc_trim(0);
    return Status::OK;
  });
}

Status NgramServiceImpl::resolve(const std::string& name, const std::string& fingerprint,
                                 std::shared_ptr<const LoadedIndex>* out) const {
  *out = registry_.get(name);
  if (!*out) {
    std::string served;
    for (const auto& n : registry_.names()) served += (served.empty() ? "" : ", ") + n;
    return Status(StatusCode::NOT_FOUND, "index: " + quoted(name) + " is not served here (served: " + served + ")");
  }
  if (!fingerprint.empty()) {
    const std::string& have = (*out)->tokenizer_fingerprint;
    if (have.empty())
      return Status(StatusCode::FAILED_PRECONDITION,
                    "tokenizer_fingerprint: index '" + (*out)->name + "' records no tokenizer fingerprint");
    if (have != fingerprint)
      return Status(StatusCode::FAILED_PRECONDITION, "tokenizer_fingerprint: index '" + (*out)->name +
                                                         "' was built with tokenizer " + have +
                                                         "; the request gives " + quoted(fingerprint));
  }
  return Status::OK;
}

// ---- queries -------------------------------------------------------------------

grpc::ServerUnaryReactor* NgramServiceImpl::GetInfo(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                    grpc::ByteBuffer* out) {
  return typed<v1::GetInfoRequest, v1::GetInfoResponse>(
      "GetInfo", ctx, in, out, [this](const v1::GetInfoRequest& req, v1::GetInfoResponse* resp, const Interrupt&) {
        std::shared_ptr<const LoadedIndex> idx;
        if (Status st = resolve(req.index(), "", &idx); !st.ok()) return st;
        const TrieIndex& t = *idx->trie;
        resp->set_index(idx->name);
        resp->set_order(t.order());
        resp->set_vocab_size(t.vocab_size());
        resp->set_eos_id(t.eos_id());
        for (uint32_t k = 1; k <= t.order(); ++k) resp->add_ngram_counts(t.ngram_count(k));
        resp->set_meta_json(t.meta_json());
        resp->set_total_tokens(t.total_tokens());
        resp->set_file_bytes(t.file_size());
        resp->set_ram_bytes(t.ram_bytes());
        resp->set_mapped(t.mapped());
        resp->set_path(idx->path);
        resp->set_loaded_unix_seconds(idx->loaded_unix_seconds);
        for (const auto& n : registry_.names()) resp->add_indexes(n);
        return Status::OK;
      });
}

Status NgramServiceImpl::conditional_probs(const v1::ConditionalProbsRequest& req, v1::ConditionalProbsResponse* resp,
                                           const Interrupt& stop) const {
  const Limits& lim = config_.limits;
  const uint64_t c = req.context_len(), k = req.num_candidates();
  if (c == 0) return invalid("context_len: must be >= 1");
  if (c > lim.max_context) return over_limit("context_len", c, "tokens", "--max-context", lim.max_context);
  if (k > lim.max_candidates)
    return over_limit("num_candidates", k, "candidates", "--max-candidates", lim.max_candidates);
  const uint64_t nctx = static_cast<uint64_t>(req.contexts_size());
  if (nctx % c != 0)
    return invalid("contexts: " + std::to_string(nctx) + " values is not a multiple of context_len " +
                   std::to_string(c));
  const uint64_t b = nctx / c;
  if (b > lim.max_batch) return over_limit("contexts", b, "queries", "--max-batch", lim.max_batch);
  if (static_cast<uint64_t>(req.candidates_size()) != b * k)
    return invalid("candidates: " + std::to_string(req.candidates_size()) + " values, expected batch " +
                   std::to_string(b) + " x num_candidates " + std::to_string(k));
  if (Status st = check_cost(probs_cost(b, k, c), lim); !st.ok()) return st;
  std::shared_ptr<const LoadedIndex> idx;
  if (Status st = resolve(req.index(), req.tokenizer_fingerprint(), &idx); !st.ok()) return st;
  resp->set_batch(static_cast<uint32_t>(b));
  resp->set_num_candidates(static_cast<uint32_t>(k));
  resp->mutable_probs()->Resize(static_cast<int>(b * k), 0.0f);
  resp->mutable_matched()->Resize(static_cast<int>(b * k), 0);
  if (b == 0) return Status::OK;
  ngram::conditional_probs(*idx->trie, req.contexts().data(), b, c, req.candidates().data(), k,
                    resp->mutable_probs()->mutable_data(), resp->mutable_matched()->mutable_data(), stop);
  return Status::OK;
}

grpc::ServerUnaryReactor* NgramServiceImpl::ConditionalProbs(grpc::CallbackServerContext* ctx,
                                                             const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return typed<v1::ConditionalProbsRequest, v1::ConditionalProbsResponse>(
      "ConditionalProbs", ctx, in, out,
      [this](const v1::ConditionalProbsRequest& req, v1::ConditionalProbsResponse* resp, const Interrupt& stop) {
        return conditional_probs(req, resp, stop);
      });
}

grpc::ServerUnaryReactor* NgramServiceImpl::TopK(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                 grpc::ByteBuffer* out) {
  return typed<v1::TopKRequest, v1::TopKResponse>(
      "TopK", ctx, in, out, [this](const v1::TopKRequest& req, v1::TopKResponse* resp, const Interrupt&) {
        const Limits& lim = config_.limits;
        const uint64_t n = static_cast<uint64_t>(req.context_size());
        if (n > lim.max_context) return over_limit("context", n, "tokens", "--max-context", lim.max_context);
        if (req.k() > lim.max_topk) return over_limit("k", req.k(), "continuations", "--max-topk", lim.max_topk);
        if (Status st = check_cost(topk_cost(req.k(), n), lim); !st.ok()) return st;
        std::shared_ptr<const LoadedIndex> idx;
        if (Status st = resolve(req.index(), req.tokenizer_fingerprint(), &idx); !st.ok()) return st;
        const ngram::TopK r = topk(*idx->trie, req.context().data(), n, req.k());
        resp->mutable_tokens()->Add(r.tokens.begin(), r.tokens.end());
        resp->mutable_probs()->Add(r.probs.begin(), r.probs.end());
        resp->mutable_counts()->Add(r.counts.begin(), r.counts.end());
        resp->set_matched(r.matched);
        return Status::OK;
      });
}

// ---- tree pruning ----------------------------------------------------------------

Status NgramServiceImpl::prune_tree(const v1::PruneTreeRequest& req, v1::PruneTreeResponse* resp,
                                   const Interrupt& stop) const {
  const Limits& lim = config_.limits;
  const uint64_t n = static_cast<uint64_t>(req.inputs_size());
  if (n > lim.max_batch) return over_limit("inputs", n, "trees", "--max-batch", lim.max_batch);
  std::shared_ptr<const LoadedIndex> idx;
  if (Status st = resolve(req.index(), req.tokenizer_fingerprint(), &idx); !st.ok()) return st;
  const TrieIndex& t = *idx->trie;

  const PruneParams params = prune_params_of(req.params());
  // A negative integer (the wire's int64 carries one) is the engine's to
  // refuse, with its own message, below.
  if (params.beam_width > 0 && static_cast<uint64_t>(params.beam_width) > lim.max_beam)
    return over_limit("params.beam_width", params.beam_width, "entries", "--max-beam", lim.max_beam);
  if (params.max_nodes > 0 && static_cast<uint64_t>(params.max_nodes) > lim.max_nodes)
    return over_limit("params.max_nodes", params.max_nodes, "nodes", "--max-nodes", lim.max_nodes);

  // The work before any tree: the lattices' candidates as sent (their shapes
  // are checked tree by tree below).
  uint64_t first_cells = 0, deeper_cells = 0;
  for (const v1::PruneInput& in : req.inputs()) {
    const uint64_t first = in.level_sizes_size() > 0 ? in.level_sizes(0) : 0;
    const uint64_t cells = static_cast<uint64_t>(in.tokens_size());
    first_cells += std::min(first, cells);
    deeper_cells += cells - std::min(first, cells);
  }
  const auto at_least_0 = [](int64_t v) { return static_cast<uint64_t>(v < 0 ? 0 : v); };
  if (Status st = check_cost(prune_cost(n, first_cells, deeper_cells, at_least_0(params.beam_width),
                                        at_least_0(params.max_nodes), req.with_scores()),
                             lim);
      !st.ok())
    return st;

  // The lattice's shape is the engine's to check (lattice_offsets), within this server's limits.
  LatticeFields fields;
  fields.sizes = "level_sizes";
  fields.tokens = "tokens";
  fields.probs = "probs";
  const LatticeBounds bounds{lim.max_levels, lim.max_prune_candidates(), "--max-levels",
                             lim.max_candidates < PruneLimits::kMaxCandidates ? "--max-candidates" : "the engine's limit"};

  thread_local PruneWorkspace ws;
  thread_local DraftTree tree;
  thread_local std::vector<uint64_t> offsets;
  resp->mutable_trees()->Reserve(static_cast<int>(n));
  for (uint64_t i = 0; i < n; ++i) {
    const v1::PruneInput& in = req.inputs(static_cast<int>(i));
    const std::string field = "inputs[" + std::to_string(i) + "]";
    fields.input = field;
    const uint64_t depth = static_cast<uint64_t>(in.level_sizes_size());
    lattice_offsets(in.level_sizes().data(), depth, static_cast<uint64_t>(in.tokens_size()),
                    static_cast<uint64_t>(in.probs_size()), offsets, fields, bounds);
    if (static_cast<uint64_t>(in.prefix_size()) > lim.max_context)
      return over_limit((field + ".prefix").c_str(), in.prefix_size(), "tokens", "--max-context", lim.max_context);
    PruneInput pin;
    pin.prefix = in.prefix().data();
    pin.prefix_len = static_cast<uint64_t>(in.prefix_size());
    pin.tokens = in.tokens().data();
    pin.probs = in.probs().data();
    pin.level_offsets = offsets.data();
    pin.depth = static_cast<uint32_t>(depth);
    try {
      ngram::prune_tree_nodes(t, pin, params, ws, tree, stop);
    } catch (const InvalidArgument& e) {
      return invalid(field + ": " + e.what());
    } catch (const Interrupted& e) {
      return stopped(e.reason(), std::string(e.what()) + " after " + std::to_string(i) + " of " +
                                     std::to_string(n) + " trees");
    }
    add_tree(tree, req.with_scores(), resp->mutable_trees());
  }
  return Status::OK;
}

grpc::ServerUnaryReactor* NgramServiceImpl::PruneTree(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
  return typed<v1::PruneTreeRequest, v1::PruneTreeResponse>(
      "PruneTree", ctx, in, out,
      [this](const v1::PruneTreeRequest& req, v1::PruneTreeResponse* resp, const Interrupt& stop) {
        Status st = prune_tree(req, resp, stop);
        if (st.ok()) count_trees(metrics_, "PruneTree", resp->trees());
        return st;
      });
}

// ---- corpus proposals --------------------------------------------------------------

Status NgramServiceImpl::propose_tree(const v1::ProposeTreeRequest& req, v1::ProposeTreeResponse* resp,
                                      const Interrupt& stop) const {
  const Limits& lim = config_.limits;
  const uint64_t n = static_cast<uint64_t>(req.contexts_size());
  if (n > lim.max_batch) return over_limit("contexts", n, "trees", "--max-batch", lim.max_batch);
  std::shared_ptr<const LoadedIndex> idx;
  if (Status st = resolve(req.index(), req.tokenizer_fingerprint(), &idx); !st.ok()) return st;
  const TrieIndex& t = *idx->trie;

  if (req.params().has_backoff())
    return invalid("params.backoff: no longer a parameter; proposals interpolate the corpus' suffixes "
                   "(params.discount, docs/PROPOSALS.md)");
  const ProposeParams params = propose_params_of(req.params());  // unset fields: the engine's defaults
  // The server's lowered limits; a value outside the engine's range is the
  // engine's to refuse, with its own message.
  if (params.max_nodes > 0 && static_cast<uint64_t>(params.max_nodes) > lim.max_nodes &&
      params.max_nodes <= ProposeLimits::kMaxNodes)
    return over_limit("params.max_nodes", params.max_nodes, "nodes", "--max-nodes", lim.max_nodes);
  if (params.max_depth > 0 && static_cast<uint64_t>(params.max_depth) > lim.max_levels &&
      params.max_depth <= ProposeLimits::kMaxDepth)
    return over_limit("params.max_depth", params.max_depth, "levels", "--max-levels", lim.max_levels);

  // The work before any tree, with the parameters taken within the engine's
  // ranges (a value outside them gets the engine's own message below).
  uint64_t tokens = 0;
  for (const auto& c : req.contexts()) tokens += static_cast<uint64_t>(c.context_size());
  const auto clamp = [](int64_t v, uint64_t most) { return std::min<uint64_t>(v < 0 ? 0 : v, most); };
  if (Status st = check_cost(propose_cost(n, tokens, clamp(params.max_nodes, ProposeLimits::kMaxNodes),
                                          clamp(params.max_branch, ProposeLimits::kMaxBranch),
                                          clamp(params.root_branch, ProposeLimits::kMaxBranch), t.order()),
                             lim);
      !st.ok())
    return st;

  // One compute worker for the whole call, as PruneTree: the sequences one
  // after the other on this thread.
  thread_local ProposeWorkspace ws;
  thread_local DraftTree tree;
  resp->mutable_trees()->Reserve(static_cast<int>(n));
  for (uint64_t i = 0; i < n; ++i) {
    const auto& context = req.contexts(static_cast<int>(i)).context();
    const uint64_t len = static_cast<uint64_t>(context.size());
    if (len > lim.max_propose_context)
      return over_limit(("contexts[" + std::to_string(i) + "].context").c_str(), len, "tokens",
                        lim.max_propose_context < ProposeLimits::kMaxContext ? "--max-propose-context"
                                                                             : "the engine's limit",
                        lim.max_propose_context);
    try {
      ngram::propose_tree_nodes(t, context.data(), len, params, ws, tree, stop);
    } catch (const InvalidArgument& e) {
      return invalid("contexts[" + std::to_string(i) + "]: " + e.what());
    } catch (const Interrupted& e) {
      return stopped(e.reason(), std::string(e.what()) + " after " + std::to_string(i) + " of " +
                                     std::to_string(n) + " trees");
    }
    add_tree(tree, true, resp->mutable_trees());  // scores always: path probabilities
  }
  return Status::OK;
}

grpc::ServerUnaryReactor* NgramServiceImpl::ProposeTree(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                        grpc::ByteBuffer* out) {
  return typed<v1::ProposeTreeRequest, v1::ProposeTreeResponse>(
      "ProposeTree", ctx, in, out,
      [this](const v1::ProposeTreeRequest& req, v1::ProposeTreeResponse* resp, const Interrupt& stop) {
        Status st = propose_tree(req, resp, stop);
        if (st.ok()) count_trees(metrics_, "ProposeTree", resp->trees());
        return st;
      });
}

}  // namespace ngram::server
