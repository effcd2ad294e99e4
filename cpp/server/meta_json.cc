#include "meta_json.h"

#include <nlohmann/json.hpp>

namespace ngram::server {

std::string tokenizer_fingerprint(const std::string& meta_json) {
  // A meta section that is not a JSON object records no fingerprint.
  const nlohmann::json meta = nlohmann::json::parse(meta_json, nullptr, /*allow_exceptions=*/false);
  if (!meta.is_object()) return "";
  const auto tokenizer = meta.find("tokenizer");
  if (tokenizer == meta.end() || !tokenizer->is_object()) return "";
  const auto fingerprint = tokenizer->find("fingerprint");
  return fingerprint != tokenizer->end() && fingerprint->is_string() ? fingerprint->get<std::string>() : "";
}

}  // namespace ngram::server
