#include "metrics.h"

#include <atomic>
#include <chrono>
#include <vector>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <unistd.h>

#include "compute_pool.h"
#include "index_registry.h"

#ifdef NGRAM_WITH_PROMETHEUS
#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#endif

namespace ngram::server {

namespace {

class NoMetrics final : public Metrics {
 public:
  void observe(const std::string&, int, double) override {}
  void in_flight(int) override {}
  void rejected(const std::string&, const char*) override {}
  void queue_wait(double) override {}
  void watch(const ComputePool&) override {}
  void trees(const std::string&, uint64_t, uint64_t) override {}
  void reloaded(const std::string&, bool) override {}
  std::string endpoint() const override { return ""; }
};

#ifdef NGRAM_WITH_PROMETHEUS
using namespace prometheus;

const char* code_name(int code) {
  static const char* names[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                                "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
                                "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  return code >= 0 && code <= 16 ? names[code] : "UNKNOWN";
}

double resident_bytes() {
  long pages_total = 0, pages_rss = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  if (std::fscanf(f, "%ld %ld", &pages_total, &pages_rss) != 2) pages_rss = 0;
  std::fclose(f);
  return static_cast<double>(pages_rss) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

// Index size and age, the compute pool's queue and busy workers and the
// process RSS, computed at scrape time.
class ScrapeTimeGauges final : public Collectable {
 public:
  explicit ScrapeTimeGauges(const IndexRegistry& r) : registry_(r) {}
  void watch(const ComputePool& pool) { pool_.store(&pool); }
  std::vector<MetricFamily> Collect() const override {
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    MetricFamily bytes{"ngram_index_file_bytes", "Size of the index's trie file", MetricType::Gauge, {}};
    MetricFamily age{"ngram_index_age_seconds", "Seconds since the index was (re)loaded", MetricType::Gauge, {}};
    MetricFamily ngrams{"ngram_index_ngrams", "Distinct n-grams stored in the index", MetricType::Gauge, {}};
    for (const std::string& name : registry_.names()) {
      auto idx = registry_.get(name);
      if (!idx) continue;
      uint64_t total = 0;
      for (uint32_t k = 1; k <= idx->trie->order(); ++k) total += idx->trie->ngram_count(k);
      auto gauge = [&](MetricFamily& fam, double v) {
        ClientMetric m;
        m.label.push_back({"index", name});
        m.gauge.value = v;
        fam.metric.push_back(m);
      };
      gauge(bytes, static_cast<double>(idx->trie->file_size()));
      gauge(age, now - idx->loaded_unix_seconds);
      gauge(ngrams, static_cast<double>(total));
    }
    MetricFamily rss{"ngram_process_resident_bytes", "Resident set size of the server", MetricType::Gauge, {}};
    ClientMetric m;
    m.gauge.value = resident_bytes();
    rss.metric.push_back(m);
    std::vector<MetricFamily> out = {bytes, age, ngrams, rss};
    if (const ComputePool* pool = pool_.load()) {
      const auto one = [&](const char* name, const char* help, double v) {
        MetricFamily fam{name, help, MetricType::Gauge, {}};
        ClientMetric x;
        x.gauge.value = v;
        fam.metric.push_back(x);
        out.push_back(fam);
      };
      one("ngram_queued", "Calls waiting for a compute worker", static_cast<double>(pool->queued()));
      one("ngram_queue_capacity", "The most calls that may wait (--max-queue)", static_cast<double>(pool->max_queue()));
      one("ngram_workers_busy", "Compute workers running a call", static_cast<double>(pool->busy()));
      one("ngram_workers", "Compute workers (--threads)", static_cast<double>(pool->threads()));
    }
    return out;
  }

 private:
  const IndexRegistry& registry_;
  std::atomic<const ComputePool*> pool_{nullptr};
};

// civetweb's options for the /metrics listener: enough threads that idle or
// slow connections cannot hold every one, and each connection's wait for a
// request bounded, so that a scrape is answered whatever else is connected.
std::vector<std::string> exposer_options(const std::string& host, int port) {
  return {"listening_ports", host + ":" + std::to_string(port), "num_threads", "8",
          "request_timeout_ms", "2000", "linger_timeout_ms", "0", "enable_keep_alive", "no"};
}

class PrometheusMetrics final : public Metrics {
 public:
  PrometheusMetrics(const std::string& host, int port, const IndexRegistry& r)
      : exposer_(exposer_options(host, port)),
        registry_(std::make_shared<Registry>()),
        gauges_(std::make_shared<ScrapeTimeGauges>(r)),
        requests_(BuildCounter().Name("ngram_requests_total").Help("Calls finished, by method and status code")
                      .Register(*registry_)),
        rejected_(BuildCounter().Name("ngram_rejected_total")
                      .Help("Calls refused without running, by method and reason (queue_full, queue_stalled, "
                            "queue_wait: RESOURCE_EXHAUSTED; draining: UNAVAILABLE)").Register(*registry_)),
        queue_wait_(BuildHistogram().Name("ngram_queue_wait_seconds")
                        .Help("Time calls waited for a compute worker").Register(*registry_)
                        .Add({}, Histogram::BucketBoundaries{0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                                                             0.1, 0.2, 0.5, 1, 5})),
        reloads_(BuildCounter().Name("ngram_reloads_total").Help("Index reloads, by index and result")
                     .Register(*registry_)),
        latency_(BuildHistogram().Name("ngram_request_seconds").Help("Call latency in the server, by method")
                     .Register(*registry_)),
        trees_(BuildCounter().Name("ngram_trees_total").Help("Trees answered by PruneTree and ProposeTree, by method")
                   .Register(*registry_)),
        tree_nodes_(BuildCounter().Name("ngram_tree_nodes_total")
                        .Help("Nodes of the trees answered, roots excluded, by method").Register(*registry_)),
        in_flight_(BuildGauge().Name("ngram_in_flight").Help("Calls being served").Register(*registry_)
                       .Add({})) {
    exposer_.RegisterCollectable(registry_);
    exposer_.RegisterCollectable(gauges_);
    const auto ports = exposer_.GetListeningPorts();
    endpoint_ = host + ":" + std::to_string(ports.empty() ? port : ports.front());
  }

  void observe(const std::string& method, int code, double seconds) override {
    // A family's Add builds and hashes a label map under the family's lock:
    // each (method, code) series is looked up once, then kept here.
    Series* series;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Series& s = series_[method];
      if (!s.latency) {
        static const Histogram::BucketBoundaries b = {0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005,
                                                      0.01,    0.02,   0.05,   0.1,    0.5,   1,     5};
        s.latency = &latency_.Add({{"method", method}}, b);
      }
      const size_t c = code >= 0 && static_cast<size_t>(code) < kCodes ? static_cast<size_t>(code) : kCodes - 1;
      if (!s.requests[c]) s.requests[c] = &requests_.Add({{"method", method}, {"code", code_name(code)}});
      series = &s;
      series->requests[c]->Increment();
    }
    series->latency->Observe(seconds);
  }
  void in_flight(int delta) override { in_flight_.Increment(delta); }
  void rejected(const std::string& method, const char* reason) override {
    rejected_.Add({{"method", method}, {"reason", reason}}).Increment();
  }
  void queue_wait(double seconds) override { queue_wait_.Observe(seconds); }
  void watch(const ComputePool& pool) override { gauges_->watch(pool); }
  void trees(const std::string& method, uint64_t n_trees, uint64_t nodes) override {
    Series* series;
    {
      std::lock_guard<std::mutex> lock(mu_);
      series = &series_[method];
      if (!series->trees) {
        series->trees = &trees_.Add({{"method", method}});
        series->nodes = &tree_nodes_.Add({{"method", method}});
      }
    }
    series->trees->Increment(static_cast<double>(n_trees));
    series->nodes->Increment(static_cast<double>(nodes));
  }
  void reloaded(const std::string& index, bool ok) override {
    reloads_.Add({{"index", index}, {"result", ok ? "ok" : "error"}}).Increment();
  }
  std::string endpoint() const override { return endpoint_; }

 private:
  Exposer exposer_;
  std::shared_ptr<Registry> registry_;
  std::shared_ptr<ScrapeTimeGauges> gauges_;
  Family<Counter>& requests_;
  Family<Counter>& rejected_;
  Histogram& queue_wait_;
  Family<Counter>& reloads_;
  Family<Histogram>& latency_;
  Family<Counter>& trees_;
  Family<Counter>& tree_nodes_;
  Gauge& in_flight_;
  static constexpr size_t kCodes = 18;  // gRPC's 17 status codes, then any other
  struct Series {
    Histogram* latency = nullptr;
    Counter* requests[kCodes] = {};
    Counter* trees = nullptr;  // tree methods only
    Counter* nodes = nullptr;
  };
  std::mutex mu_;
  std::map<std::string, Series> series_;  // by method; nodes never move, so Series* stays valid
  std::string endpoint_;
};
#endif

}  // namespace

std::unique_ptr<Metrics> Metrics::create(const std::string& host, int port, const IndexRegistry& registry) {
  if (port < 0) return std::make_unique<NoMetrics>();
#ifdef NGRAM_WITH_PROMETHEUS
  try {
    return std::make_unique<PrometheusMetrics>(host, port, registry);
  } catch (const std::exception& e) {  // civetweb's words ("null context ...") do not say which listener
    throw std::runtime_error("--metrics-port: cannot listen on " + host + ":" + std::to_string(port) +
                             " (in use, or not an address of this machine): " + e.what());
  }
#else
  (void)host;
  (void)registry;
  throw std::runtime_error("--metrics-port: this build has no prometheus-cpp");
#endif
}

}  // namespace ngram::server
