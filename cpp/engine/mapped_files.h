// Which file a mapped address belongs to, so that a SIGBUS handler can name
// the trie whose file was cut under its mapping. A fixed table of slots:
// noting and forgetting take no lock the handler could be interrupted in,
// and the look-up is async-signal-safe.
#pragma once
#include <cstddef>
#include <string>

namespace ngram {

// Notes [base, base + bytes) as mapping `path`. Past the table's capacity a
// mapping goes unnoted, and the handler says it cannot name the file.
void note_mapping(const void* base, size_t bytes, const std::string& path);

// Forgets the mapping noted at `base`, before it is unmapped.
void forget_mapping(const void* base);

// Async-signal-safe: copies the path of the noted mapping holding `addr`
// into out (NUL-terminated, cut to cap - 1 bytes); false where none holds it.
bool mapped_file_at(const void* addr, char* out, size_t cap);

}  // namespace ngram
