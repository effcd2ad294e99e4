// The engine's two error kinds. Both carry a message that names the file,
// field or limit at fault; the Python module maps them to ValueError and the
// server to gRPC status codes. (A call its caller stops throws Interrupted,
// interrupt.h: not an error of the request or the file.)
#pragma once
#include <stdexcept>
#include <string>

namespace ngram {

// The trie file is missing, truncated, corrupted or of another format.
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller's request is malformed: wrong shapes, ids out of range, bad numbers.
class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace ngram
