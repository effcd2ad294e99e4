// How status messages and logs write figures and what a client sent.
#pragma once
#include <cstdint>
#include <string>

namespace ngram::server {

// A number with thousands separators ("1,048,576").
std::string grouped(uint64_t v);

// A client's string quoted for a message: whole when short, else its first
// kQuoted bytes (cut at a character boundary) and its length, so that a
// message never grows with what a client sends (a long one would exceed
// gRPC's metadata limit and reach the client as another error).
constexpr size_t kQuoted = 64;
std::string quoted(const std::string& s, size_t most = kQuoted);

}  // namespace ngram::server
