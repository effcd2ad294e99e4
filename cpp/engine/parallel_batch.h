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
#include "interrupt.h"

namespace ngram {

// Runs one(i, ws) for every i in [0, n) on `threads` threads (0: the
// hardware's), ws a Workspace of the calling thread; `one` passes `stop` on
// to the call it makes, so that a long item stops too. `stop` is checked
// before each item; once any thread is Interrupted, every thread stops
// taking items, and that one Interrupted is rethrown after every thread has
// finished (a stopped batch answers nothing else). Otherwise an
// InvalidArgument is raised after every thread has finished, for the lowest
// failing i, as "<field>[i]: <message>"; any other exception is rethrown as
// it is, before either.
template <class Workspace, class One>
void run_batch(size_t n, uint32_t threads, const char* field, One&& one, const Interrupt& stop = Interrupt()) {
  if (n == 0) return;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<uint32_t>(std::min<size_t>(threads, n));
  std::atomic<size_t> next{0};
  std::atomic<bool> stopped{false};  // a thread was Interrupted: take no more items
  std::mutex err_mu;
  size_t err_index = n;
  std::string err_msg;
  std::exception_ptr err_other, err_stop;
  auto work = [&]() {
    Workspace ws;
    while (!stopped.load(std::memory_order_relaxed)) {
      const size_t i = next.fetch_add(1);
      if (i >= n) break;
      try {
        stop.check();
        one(i, ws);
      } catch (const Interrupted&) {
        std::lock_guard<std::mutex> g(err_mu);
        stopped.store(true, std::memory_order_relaxed);
        if (!err_stop) err_stop = std::current_exception();
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
  if (err_stop) std::rethrow_exception(err_stop);
  if (err_index < n) throw InvalidArgument(std::string(field) + "[" + std::to_string(err_index) + "]: " + err_msg);
}

}  // namespace ngram
