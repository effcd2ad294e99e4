// DART tree pruning: being written.
