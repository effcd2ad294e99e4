// A call's `timeout` keyword: seconds from the call's start (None: no
// limit) as the engine's Interrupt, and the engine's Interrupted reworded
// as the call's own (engine_module.cc maps it to TimeoutError).
#pragma once
#include <pybind11/pybind11.h>

#include <chrono>
#include <cmath>
#include <string>

#include "errors.h"
#include "interrupt.h"

namespace ngram_py {

namespace py = pybind11;

class CallTimeout {
 public:
  // `h`: the keyword's value, a null handle or None for no limit; anything
  // but a number of seconds > 0 and finite raises ValueError naming
  // "timeout". The deadline counts from here. `call` names the call and
  // `answer` what a stopped call does not return ("trees"), for the message.
  CallTimeout(const py::handle& h, const char* call, const char* answer) : call_(call), answer_(answer) {
    if (!h || h.is_none()) return;
    if (py::isinstance<py::bool_>(h) || !(PyFloat_Check(h.ptr()) || PyIndex_Check(h.ptr()) ||
                                          py::hasattr(h, "__float__")))
      throw ngram::InvalidArgument("timeout must be a number of seconds or None, got " + std::string(py::repr(h)));
    const double s = PyFloat_AsDouble(h.ptr());
    if (s == -1.0 && PyErr_Occurred()) throw py::error_already_set();
    if (!(s > 0.0) || !std::isfinite(s))
      throw ngram::InvalidArgument("timeout = " + std::string(py::repr(h)) +
                                   ": must be a number of seconds > 0 and finite, or None");
    seconds_ = std::string(py::str(py::float_(s)));
    // Beyond a century the deadline cannot pass: no deadline, and none of
    // the clock's arithmetic overflows.
    if (s > kNever) return;
    const auto now = ngram::Interrupt::Clock::now();
    stop_ = ngram::Interrupt(now + std::chrono::duration_cast<ngram::Interrupt::Clock::duration>(
                                       std::chrono::duration<double>(s)));
  }

  const ngram::Interrupt& interrupt() const { return stop_; }

  // Runs f (the engine's call; the GIL may be released inside), its
  // Interrupted reworded: "propose: timeout of 0.5 s passed; no tree
  // returned".
  template <class F>
  void run(F&& f) const {
    try {
      f();
    } catch (const ngram::Interrupted& e) {
      if (e.reason() != ngram::StopReason::kDeadline) throw;
      throw ngram::Interrupted(e.reason(), std::string(call_) + ": timeout of " + seconds_ + " s passed; no " +
                                               answer_ + " returned");
    }
  }

 private:
  static constexpr double kNever = 100.0 * 365 * 24 * 3600;
  const char* call_;
  const char* answer_;
  std::string seconds_;
  ngram::Interrupt stop_;
};

}  // namespace ngram_py
