#include "compute_pool.h"

namespace ngram::server {

ComputePool::ComputePool(unsigned threads, uint64_t max_queue, Clock::duration max_wait)
    : max_queue_(max_queue), max_wait_(max_wait) {
  workers_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

ComputePool::~ComputePool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

ComputePool::Refusal ComputePool::submit(Job job) {
  const Clock::time_point now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= max_queue_) return Refusal::kQueueFull;
    if (!queue_.empty() && now - queue_.front().since > max_wait_) return Refusal::kQueueStalled;
    queue_.push_back({std::move(job), now});
  }
  cv_.notify_one();
  return Refusal::kNone;
}

uint64_t ComputePool::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

unsigned ComputePool::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}

void ComputePool::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing is left
    Queued q = std::move(queue_.front());
    queue_.pop_front();
    ++busy_;
    lock.unlock();
    const Clock::duration waited = Clock::now() - q.since;
    q.job(waited > max_wait_ ? Verdict::kWaitedTooLong : Verdict::kRun, waited);
    q.job = nullptr;  // the job's captures are released before the next wait
    lock.lock();
    --busy_;
  }
}

}  // namespace ngram::server
