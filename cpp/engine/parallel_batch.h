// Many independent requests on a few threads, each thread with its own
// workspace: the one definition of how the engine's batch calls
// (prune_tree_batch, propose_batch) share out work and report errors.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "errors.h"

namespace ngram {

// Runs one(i, ws) for every i in [0, n) on `threads` threads (0: the
// hardware's), ws a Workspace of the calling thread. An InvalidArgument is
// raised after every thread has finished, for the lowest failing i, as
// "<field>[i]: <message>"; any other exception is rethrown as it is.
template <class Workspace, class One>
void run_batch(size_t n, uint32_t threads, const char* field, One&& one) {
  if (n == 0) return;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<uint32_t>(std::min<size_t>(threads, n));
  std::atomic<size_t> next{0};
  std::mutex err_mu;
  size_t err_index = n;
  std::string err_msg;
  std::exception_ptr err_other;
  auto work = [&]() {
    Workspace ws;
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      try {
        one(i, ws);
      } catch (const InvalidArgument& e) {
        std::lock_guard<std::mutex> g(err_mu);
        if (i < err_index) {
          err_index = i;
          err_msg = e.what();
        }
      } catch (...) {
        std::lock_guard<std::mutex> g(err_mu);
        if (!err_other) err_other = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (uint32_t i = 1; i < threads; ++i) pool.emplace_back(work);
  work();
  for (std::thread& th : pool) th.join();
  if (err_other) std::rethrow_exception(err_other);
  if (err_index < n) throw InvalidArgument(std::string(field) + "[" + std::to_string(err_index) + "]: " + err_msg);
}

}  // namespace ngram
