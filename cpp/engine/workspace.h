// Workspace<State>: the scratch space of one thread for one kind of search,
// reused across calls so that a warm thread allocates nothing but its
// output. Its State is the search's own, defined in the search's private
// header and instantiated in its .cc (extern template here, in the public
// header that names the workspace), so that no caller sees or depends on it.
#pragma once
#include <memory>

namespace ngram {

template <class State>
class Workspace {
 public:
  Workspace();
  ~Workspace();
  State& state() { return *state_; }

 private:
  std::unique_ptr<State> state_;  // not copied: one thread's own
};

template <class State>
Workspace<State>::Workspace() : state_(std::make_unique<State>()) {}
template <class State>
Workspace<State>::~Workspace() = default;

}  // namespace ngram
