// The compute workers: a fixed number of threads that run calls one at a
// time each, first come first served, behind a queue bounded in length and
// in wait. gRPC's own threads only read requests and queue them (or refuse
// them at once), so a slow call never holds the threads that read the next
// ones, and no call's work runs on the thread of another.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ngram::server {

class ComputePool {
 public:
  using Clock = std::chrono::steady_clock;
  // How a queued job is run: to do its work, or only to be answered
  // because it waited longer than the queue's bound.
  enum class Verdict { kRun, kWaitedTooLong };
  using Job = std::function<void(Verdict, Clock::duration waited)>;
  // Why submit() refused a job.
  enum class Refusal { kNone, kQueueFull, kQueueStalled };

  ComputePool(unsigned threads, uint64_t max_queue, Clock::duration max_wait);
  ~ComputePool();  // finishes the queued jobs, then joins the workers
  ComputePool(const ComputePool&) = delete;
  ComputePool& operator=(const ComputePool&) = delete;

  // Queues `job` unless max_queue jobs are waiting already, or the oldest
  // waiting one has waited longer than max_wait (the workers are not keeping
  // up: a new job would wait at least as long). Never blocks.
  Refusal submit(Job job);

  uint64_t queued() const;
  unsigned busy() const;
  unsigned threads() const { return static_cast<unsigned>(workers_.size()); }
  uint64_t max_queue() const { return max_queue_; }
  Clock::duration max_wait() const { return max_wait_; }

 private:
  struct Queued {
    Job job;
    Clock::time_point since;
  };
  void work();

  const uint64_t max_queue_;
  const Clock::duration max_wait_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> queue_;
  unsigned busy_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace ngram::server
