// How a caller stops an engine call it no longer wants: a deadline, and a
// flag that another thread raises (a cancelled RPC, a server's drain). The
// engine's loops call check() between bounded units of work (a level of a
// prune, a few dozen chosen nodes of a proposal, a tree of a batch, a chunk
// of probability queries), so that a call stops within a millisecond or so
// of work after its deadline passes or its flag is raised; check() then
// throws Interrupted. An Interrupt made with no arguments never stops a call
// and costs one predictable branch per check.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace ngram {

enum class StopReason : uint8_t {
  kNone = 0,       // a flag's value while nothing asks the call to stop
  kCancelled = 1,  // the caller no longer wants the answer
  kDraining = 2,   // the process is shutting down
  kDeadline = 3,   // the deadline passed (never a flag's value)
};

// A call stopped by its Interrupt; what() says why and, where the loop knows
// it, how far the call got.
class Interrupted : public std::runtime_error {
 public:
  Interrupted(StopReason reason, const std::string& msg) : std::runtime_error(msg), reason_(reason) {}
  StopReason reason() const { return reason_; }

 private:
  StopReason reason_;
};

class Interrupt {
 public:
  using Clock = std::chrono::steady_clock;

  Interrupt() = default;
  // Stops at `deadline` (Clock::time_point::max(): never), or once *flag
  // holds a reason other than kNone. `flag` must outlive the call.
  explicit Interrupt(Clock::time_point deadline, const std::atomic<StopReason>* flag = nullptr)
      : deadline_(deadline), flag_(flag), armed_(deadline != Clock::time_point::max() || flag != nullptr) {}

  bool armed() const { return armed_; }

  // Throws Interrupted when the call should stop.
  void check() const {
    if (armed_) check_armed();
  }

  // Why the call should stop now (kNone: it should go on). The deadline
  // first: gRPC also cancels a call whose deadline passed.
  StopReason reason() const {
    if (!armed_) return StopReason::kNone;
    if (deadline_ != Clock::time_point::max() && Clock::now() >= deadline_) return StopReason::kDeadline;
    return flag_ ? flag_->load(std::memory_order_relaxed) : StopReason::kNone;
  }

 private:
  void check_armed() const {
    const StopReason r = reason();
    if (r != StopReason::kNone) throw Interrupted(r, message(r));
  }
  static std::string message(StopReason r) {
    switch (r) {
      case StopReason::kCancelled: return "cancelled";
      case StopReason::kDraining: return "stopped: the server is draining";
      case StopReason::kDeadline: return "deadline passed";
      default: return "stopped";
    }
  }

  Clock::time_point deadline_ = Clock::time_point::max();
  const std::atomic<StopReason>* flag_ = nullptr;
  bool armed_ = false;
};

}  // namespace ngram
