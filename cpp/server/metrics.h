// Prometheus metrics: per method calls, errors by status code, latency
// histograms, trees and tree nodes answered, calls refused by reason; calls
// in flight, queued and running, queue wait; per index file size and age;
// process RSS.
// Without prometheus-cpp at build time every method is a no-op.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace ngram::server {

class IndexRegistry;
class ComputePool;

class Metrics {
 public:
  virtual ~Metrics() = default;
  // One finished call of `method` with gRPC status code `code`.
  virtual void observe(const std::string& method, int code, double seconds) = 0;
  virtual void in_flight(int delta) = 0;
  // A call refused without running: `reason` is queue_full, queue_stalled
  // or queue_wait (RESOURCE_EXHAUSTED), or draining (UNAVAILABLE).
  virtual void rejected(const std::string& method, const char* reason) = 0;
  // How long a call waited for a compute worker.
  virtual void queue_wait(double seconds) = 0;
  // The pool whose queue length and busy workers are reported at each scrape.
  virtual void watch(const ComputePool& pool) = 0;
  // A tree method's answer: `n_trees` trees of `nodes` nodes besides their roots.
  virtual void trees(const std::string& method, uint64_t n_trees, uint64_t nodes) = 0;
  virtual void reloaded(const std::string& index, bool ok) = 0;
  // The address it listens on ("" when metrics are off).
  virtual std::string endpoint() const = 0;

  // Serves /metrics on host:port (0: a free port); a negative port returns the no-op recorder.
  // Throws std::runtime_error when the port cannot be bound or metrics
  // were not compiled in.
  static std::unique_ptr<Metrics> create(const std::string& host, int port, const IndexRegistry& registry);
};

}  // namespace ngram::server
