#include "service.h"

#include <algorithm>
#include <chrono>
#include <new>

#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include "errors.h"
#include "json_log.h"
#include "propose.h"
#include "prune_tree.h"
#include "queries.h"

namespace ngram::server {

using grpc::Status;
using grpc::StatusCode;

// ---- admission ---------------------------------------------------------------

bool Admission::enter() {
  if (in_flight_.fetch_add(1) >= max_inflight_) {
    in_flight_.fetch_sub(1);
    return false;
  }
  return true;
}

void Admission::leave() { in_flight_.fetch_sub(1); }

Status Admission::acquire_worker(grpc::ServerContextBase* ctx) {
  const auto deadline = ctx->deadline();
  std::unique_lock<std::mutex> lock(mu_);
  while (free_workers_ == 0) {
    // Short waits so that cancellation is noticed and a far-off (or absent)
    // deadline never overflows the clock arithmetic.
    cv_.wait_for(lock, std::chrono::milliseconds(20));
    if (free_workers_ > 0) break;
    if (ctx->IsCancelled()) return Status(StatusCode::CANCELLED, "call cancelled while queued");
    if (std::chrono::system_clock::now() >= deadline)
      return Status(StatusCode::DEADLINE_EXCEEDED, "deadline passed while waiting for a worker");
  }
  --free_workers_;
  return Status::OK;
}

void Admission::run(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_workers_ == 0) {
      queued_.push_back(std::move(task));
      return;
    }
    --free_workers_;
  }
  task();
  release_worker();
}

void Admission::release_worker() {
  for (;;) {
    std::function<void()> next;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queued_.empty()) {
        ++free_workers_;
        break;
      }
      next = std::move(queued_.front());
      queued_.pop_front();
    }
    next();  // the slot passes to the queued task
  }
  cv_.notify_one();
}

// ---- helpers -------------------------------------------------------------------

namespace {

Status invalid(const std::string& msg) { return Status(StatusCode::INVALID_ARGUMENT, msg); }

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

bool past_deadline(grpc::ServerContextBase* ctx) {
  return std::chrono::system_clock::now() >= ctx->deadline();
}

// The trees a tree method answered, and their nodes besides the roots.
void count_trees(Metrics& metrics, const char* method,
                 const google::protobuf::RepeatedPtrField<v1::PrunedTreeNodes>& trees) {
  uint64_t nodes = 0;
  for (const auto& t : trees) nodes += t.tokens_size() > 0 ? static_cast<uint64_t>(t.tokens_size() - 1) : 0;
  metrics.trees(method, static_cast<uint64_t>(trees.size()), nodes);
}

}  // namespace

grpc::ServerUnaryReactor* NgramServiceImpl::unary(const char* method, grpc::CallbackServerContext* ctx,
                                                  std::function<Status()> body) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const auto t0 = std::chrono::steady_clock::now();
  auto finish = [this, method, ctx, reactor, t0](const Status& st) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    metrics_.observe(method, st.error_code(), secs);
    if (config_.log_requests || st.error_code() == StatusCode::INTERNAL) {
      LogLine(st.error_code() == StatusCode::INTERNAL ? "error" : "info", "call")
          .kv("method", method)
          .kv("peer", ctx->peer())
          .kv("code", static_cast<int>(st.error_code()))
          .kv("message", st.error_message())
          .kv("seconds", secs)
          .emit();
    }
    reactor->Finish(st);
  };
  if (draining_.load()) {
    finish(Status(StatusCode::UNAVAILABLE, "draining: the server is shutting down"));
    return reactor;
  }
  if (!admission_.enter()) {
    metrics_.rejected(method);
    finish(Status(StatusCode::RESOURCE_EXHAUSTED,
                  "server busy: " + std::to_string(admission_.in_flight()) + " calls in flight (--max-inflight)"));
    return reactor;
  }
  metrics_.in_flight(+1);
  // The body runs on this gRPC thread (the one that read the request) when a
  // compute slot is free, and the reply goes out from there: no hand-over to
  // another thread (CHANGELOG.md: what that saves).
  admission_.run([this, ctx, body = std::move(body), finish = std::move(finish)] {
    Status st;
    // The deadline first: gRPC also marks a call whose deadline passed as cancelled.
    if (past_deadline(ctx)) {
      st = Status(StatusCode::DEADLINE_EXCEEDED, "deadline passed before the call started");
    } else if (ctx->IsCancelled()) {
      st = Status(StatusCode::CANCELLED, "call cancelled while queued");
    } else {
      st = status_of(body);
    }
    metrics_.in_flight(-1);
    admission_.leave();
    finish(st);
  });
  return reactor;
}

template <class Req, class Resp, class Body>
grpc::ServerUnaryReactor* NgramServiceImpl::typed(const char* method, grpc::CallbackServerContext* ctx,
                                                  const grpc::ByteBuffer* in, grpc::ByteBuffer* out, Body body) {
  return unary(method, ctx, [in, out, body = std::move(body)]() -> Status {
    Req req;
    if (Status st = parse(*in, &req); !st.ok()) return st;
    Resp resp;
    if (Status st = body(&req, &resp); !st.ok()) return st;
    bool own_buffer = false;
    return grpc::GenericSerialize<grpc::ProtoBufferWriter, Resp>(resp, out, &own_buffer);
  });
}

Status NgramServiceImpl::resolve(const std::string& name, const std::string& fingerprint,
                                 std::shared_ptr<const LoadedIndex>* out) const {
  *out = registry_.get(name);
  if (!*out) {
    std::string served;
    for (const auto& n : registry_.names()) served += (served.empty() ? "" : ", ") + n;
    return Status(StatusCode::NOT_FOUND, "index: '" + name + "' is not served here (served: " + served + ")");
  }
  if (!fingerprint.empty()) {
    const std::string& have = (*out)->tokenizer_fingerprint;
    if (have.empty())
      return Status(StatusCode::FAILED_PRECONDITION,
                    "tokenizer_fingerprint: index '" + (*out)->name + "' records no tokenizer fingerprint");
    if (have != fingerprint)
      return Status(StatusCode::FAILED_PRECONDITION, "tokenizer_fingerprint: index '" + (*out)->name +
                                                         "' was built with tokenizer " + have +
                                                         "; the request gives " + fingerprint);
  }
  return Status::OK;
}

// ---- queries -------------------------------------------------------------------

grpc::ServerUnaryReactor* NgramServiceImpl::GetInfo(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                    grpc::ByteBuffer* out) {
  return typed<v1::GetInfoRequest, v1::GetInfoResponse>(
      "GetInfo", ctx, in, out, [this](const v1::GetInfoRequest* req, v1::GetInfoResponse* resp) {
    std::shared_ptr<const LoadedIndex> idx;
    if (Status st = resolve(req->index(), "", &idx); !st.ok()) return st;
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

grpc::ServerUnaryReactor* NgramServiceImpl::ConditionalProbs(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                             grpc::ByteBuffer* out) {
  return typed<v1::ConditionalProbsRequest, v1::ConditionalProbsResponse>(
      "ConditionalProbs", ctx, in, out, [this](const v1::ConditionalProbsRequest* req, v1::ConditionalProbsResponse* resp) {
    const Limits& lim = config_.limits;
    const uint64_t c = req->context_len(), k = req->num_candidates();
    if (c == 0) return invalid("context_len: must be >= 1");
    if (c > lim.max_context) return over_limit("context_len", c, "tokens", "--max-context", lim.max_context);
    if (k > lim.max_candidates)
      return over_limit("num_candidates", k, "candidates", "--max-candidates", lim.max_candidates);
    const uint64_t nctx = static_cast<uint64_t>(req->contexts_size());
    if (nctx % c != 0)
      return invalid("contexts: " + std::to_string(nctx) + " values is not a multiple of context_len " +
                     std::to_string(c));
    const uint64_t b = nctx / c;
    if (b > lim.max_batch) return over_limit("contexts", b, "queries", "--max-batch", lim.max_batch);
    if (static_cast<uint64_t>(req->candidates_size()) != b * k)
      return invalid("candidates: " + std::to_string(req->candidates_size()) + " values, expected batch " +
                     std::to_string(b) + " x num_candidates " + std::to_string(k));
    std::shared_ptr<const LoadedIndex> idx;
    if (Status st = resolve(req->index(), req->tokenizer_fingerprint(), &idx); !st.ok()) return st;
    resp->set_batch(static_cast<uint32_t>(b));
    resp->set_num_candidates(static_cast<uint32_t>(k));
    resp->mutable_probs()->Resize(static_cast<int>(b * k), 0.0f);
    resp->mutable_matched()->Resize(static_cast<int>(b * k), 0);
    if (b == 0) return Status::OK;
    conditional_probs(*idx->trie, req->contexts().data(), b, c, req->candidates().data(), k,
                      resp->mutable_probs()->mutable_data(), resp->mutable_matched()->mutable_data());
    return Status::OK;
  });
}

grpc::ServerUnaryReactor* NgramServiceImpl::TopK(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                 grpc::ByteBuffer* out) {
  return typed<v1::TopKRequest, v1::TopKResponse>(
      "TopK", ctx, in, out, [this](const v1::TopKRequest* req, v1::TopKResponse* resp) {
    const Limits& lim = config_.limits;
    const uint64_t n = static_cast<uint64_t>(req->context_size());
    if (n > lim.max_context) return over_limit("context", n, "tokens", "--max-context", lim.max_context);
    if (req->k() > lim.max_topk) return over_limit("k", req->k(), "continuations", "--max-topk", lim.max_topk);
    std::shared_ptr<const LoadedIndex> idx;
    if (Status st = resolve(req->index(), req->tokenizer_fingerprint(), &idx); !st.ok()) return st;
    const ngram::TopK r = topk(*idx->trie, req->context().data(), n, req->k());
    resp->mutable_tokens()->Add(r.tokens.begin(), r.tokens.end());
    resp->mutable_probs()->Add(r.probs.begin(), r.probs.end());
    resp->mutable_counts()->Add(r.counts.begin(), r.counts.end());
    resp->set_matched(r.matched);
    return Status::OK;
  });
}

// ---- tree pruning ----------------------------------------------------------------

Status NgramServiceImpl::prune_tree(const v1::PruneTreeRequest& req, v1::PruneTreeResponse* resp) const {
  const Limits& lim = config_.limits;
  const uint64_t n = static_cast<uint64_t>(req.inputs_size());
  if (n > lim.max_batch) return over_limit("inputs", n, "trees", "--max-batch", lim.max_batch);
  std::shared_ptr<const LoadedIndex> idx;
  if (Status st = resolve(req.index(), req.tokenizer_fingerprint(), &idx); !st.ok()) return st;
  const TrieIndex& t = *idx->trie;

  const v1::PruneParams& p = req.params();
  PruneParams params;
  if (p.has_beam_width()) params.beam_width = p.beam_width();
  if (p.has_max_nodes()) params.max_nodes = p.max_nodes();
  if (p.has_ngram_weight()) params.ngram_weight = p.ngram_weight();
  if (p.has_eos_token_id()) params.eos_token_id = p.eos_token_id();
  params.ngram_on_first_level = p.ngram_on_first_level();
  params.level_weights.assign(p.level_weights().begin(), p.level_weights().end());
  params.logit_weights.assign(p.logit_weights().begin(), p.logit_weights().end());
  if (static_cast<uint64_t>(params.beam_width) > lim.max_beam)
    return over_limit("params.beam_width", params.beam_width, "entries", "--max-beam", lim.max_beam);
  if (static_cast<uint64_t>(params.max_nodes) > lim.max_nodes)
    return over_limit("params.max_nodes", params.max_nodes, "nodes", "--max-nodes", lim.max_nodes);

  // The lattice's shape is the engine's to check (lattice_offsets), within this server's limits.
  LatticeFields fields;
  fields.sizes = "level_sizes";
  fields.tokens = "tokens";
  fields.probs = "probs";
  const LatticeBounds bounds{lim.max_levels, lim.max_prune_candidates(), "--max-levels",
                             lim.max_candidates < PruneLimits::kMaxCandidates ? "--max-candidates" : "the engine's limit"};

  thread_local PruneWorkspace ws;
  thread_local PrunedTree tree;
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
      ngram::prune_tree_nodes(t, pin, params, ws, tree);
    } catch (const InvalidArgument& e) {
      return invalid(field + ": " + e.what());
    }
    v1::PrunedTreeNodes* out = resp->add_trees();
    out->mutable_tokens()->Add(tree.tokens.begin(), tree.tokens.end());
    out->mutable_parents()->Add(tree.parents.begin(), tree.parents.end());
    if (req.with_scores()) out->mutable_scores()->Add(tree.scores.begin(), tree.scores.end());
  }
  return Status::OK;
}

grpc::ServerUnaryReactor* NgramServiceImpl::PruneTree(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
  return typed<v1::PruneTreeRequest, v1::PruneTreeResponse>(
      "PruneTree", ctx, in, out, [this](const v1::PruneTreeRequest* req, v1::PruneTreeResponse* resp) {
        Status st = prune_tree(*req, resp);
        if (st.ok()) count_trees(metrics_, "PruneTree", resp->trees());
        return st;
      });
}

// ---- corpus proposals --------------------------------------------------------------

Status NgramServiceImpl::propose_tree(const v1::ProposeTreeRequest& req, v1::ProposeTreeResponse* resp) const {
  const Limits& lim = config_.limits;
  const uint64_t n = static_cast<uint64_t>(req.contexts_size());
  if (n > lim.max_batch) return over_limit("contexts", n, "trees", "--max-batch", lim.max_batch);
  std::shared_ptr<const LoadedIndex> idx;
  if (Status st = resolve(req.index(), req.tokenizer_fingerprint(), &idx); !st.ok()) return st;
  const TrieIndex& t = *idx->trie;

  const v1::ProposeParams& p = req.params();
  ProposeParams params;  // unset fields: the engine's defaults
  if (p.has_max_nodes()) params.max_nodes = p.max_nodes();
  if (p.has_max_depth()) params.max_depth = p.max_depth();
  if (p.has_max_branch()) params.max_branch = p.max_branch();
  if (p.has_min_prob()) params.min_prob = p.min_prob();
  if (p.has_backoff()) params.backoff = p.backoff();
  if (p.has_corpus()) params.corpus = p.corpus();
  if (p.has_lookup()) params.lookup = p.lookup();
  if (p.has_lookup_weight()) params.lookup_weight = p.lookup_weight();
  if (p.has_lookup_min_match()) params.lookup_min_match = p.lookup_min_match();
  // The server's lowered limits; a value outside the engine's range is the
  // engine's to refuse, with its own message.
  if (params.max_nodes > 0 && static_cast<uint64_t>(params.max_nodes) > lim.max_nodes &&
      params.max_nodes <= ProposeLimits::kMaxNodes)
    return over_limit("params.max_nodes", params.max_nodes, "nodes", "--max-nodes", lim.max_nodes);
  if (params.max_depth > 0 && static_cast<uint64_t>(params.max_depth) > lim.max_levels &&
      params.max_depth <= ProposeLimits::kMaxDepth)
    return over_limit("params.max_depth", params.max_depth, "levels", "--max-levels", lim.max_levels);

  // One compute slot for the whole call, as PruneTree: the sequences one
  // after the other on this thread.
  thread_local ProposeWorkspace ws;
  thread_local ProposedTree tree;
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
      ngram::propose_tree(t, context.data(), len, params, ws, tree);
    } catch (const InvalidArgument& e) {
      return invalid("contexts[" + std::to_string(i) + "]: " + e.what());
    }
    v1::PrunedTreeNodes* out = resp->add_trees();
    out->mutable_tokens()->Add(tree.tokens.begin(), tree.tokens.end());
    out->mutable_parents()->Add(tree.parents.begin(), tree.parents.end());
    out->mutable_scores()->Add(tree.scores.begin(), tree.scores.end());
  }
  return Status::OK;
}

grpc::ServerUnaryReactor* NgramServiceImpl::ProposeTree(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                        grpc::ByteBuffer* out) {
  return typed<v1::ProposeTreeRequest, v1::ProposeTreeResponse>(
      "ProposeTree", ctx, in, out, [this](const v1::ProposeTreeRequest* req, v1::ProposeTreeResponse* resp) {
        Status st = propose_tree(*req, resp);
        if (st.ok()) count_trees(metrics_, "ProposeTree", resp->trees());
        return st;
      });
}

// ---- admin ----------------------------------------------------------------------

std::shared_ptr<const LoadedIndex> reload_index(IndexRegistry& registry, Metrics& metrics, const std::string& name,
                                                const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string label = name.empty() ? registry.default_name() : name;
  // The file a reload opens: `path`, or the index's current file (SIGHUP).
  const auto current = registry.get(label);
  const std::string tried = !path.empty() ? path : current ? current->path : "";
  try {
    auto idx = registry.reload(name, path);
    metrics.reloaded(label, true);
    LogLine("info", "reload")
        .kv("index", idx->name)
        .kv("path", idx->path)
        .kv("file_bytes", idx->trie->file_size())
        .kv("seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count())
        .emit();
    return idx;
  } catch (const std::exception& e) {
    metrics.reloaded(label, false);
    LogLine("error", "reload_failed").kv("index", label).kv("path", tried).kv("error", e.what()).emit();
    throw;
  }
}

Status NgramAdminImpl::Reload(grpc::ServerContext*, const v1::ReloadRequest* req, v1::ReloadResponse* resp) {
  try {
    auto idx = reload_index(registry_, metrics_, req->index(), req->path());
    resp->set_index(idx->name);
    resp->set_path(idx->path);
    resp->set_file_bytes(idx->trie->file_size());
    resp->set_loaded_unix_seconds(idx->loaded_unix_seconds);
    return Status::OK;
  } catch (const std::out_of_range& e) {
    return Status(StatusCode::NOT_FOUND, std::string("index: ") + e.what());
  } catch (const FormatError& e) {
    return Status(StatusCode::FAILED_PRECONDITION, std::string("path: ") + e.what());
  } catch (const std::exception& e) {
    return Status(StatusCode::INTERNAL, e.what());
  }
}

}  // namespace ngram::server
