#include "tree_messages.h"

#include <array>
#include <vector>

namespace ngram::server {

PruneParams prune_params_of(const v1::PruneParams& p) {
  // Field i + 1 is kPruneFields[i] (prune_params.h): the one table. An
  // unset field (an empty list, a false flag) keeps the default.
  static const auto fields = [] {
    std::array<const google::protobuf::FieldDescriptor*, kPruneFieldCount> fds{};
    for (uint32_t i = 0; i < kPruneFieldCount; ++i)
      fds[i] = v1::PruneParams::descriptor()->FindFieldByNumber(static_cast<int>(i) + 1);
    return fds;
  }();
  const google::protobuf::Reflection* refl = p.GetReflection();
  PruneParams params;
  for (uint32_t i = 0; i < kPruneFieldCount; ++i) {
    const google::protobuf::FieldDescriptor* fd = fields[i];
    const PruneField& f = kPruneFields[i];
    if (f.weights) {
      const int n = refl->FieldSize(p, fd);
      std::vector<float>& w = params.*f.weights;
      w.resize(static_cast<size_t>(n));
      for (int j = 0; j < n; ++j) w[static_cast<size_t>(j)] = refl->GetRepeatedFloat(p, fd, j);
      continue;
    }
    if (!refl->HasField(p, fd)) continue;
    if (f.integer) params.*f.integer = refl->GetInt64(p, fd);
    else if (f.weight) params.*f.weight = refl->GetFloat(p, fd);
    else if (f.token) params.*f.token = refl->GetInt64(p, fd);
    else params.*f.flag = refl->GetBool(p, fd);
  }
  return params;
}

ProposeParams propose_params_of(const v1::ProposeParams& p) {
  // kProposeFields (propose_params.h) is the one table, with each field's number.
  const google::protobuf::Descriptor* desc = p.GetDescriptor();
  const google::protobuf::Reflection* refl = p.GetReflection();
  ProposeParams params;
  for (const ProposeField& f : kProposeFields) {
    const google::protobuf::FieldDescriptor* fd = desc->FindFieldByNumber(static_cast<int>(f.field));
    if (!refl->HasField(p, fd)) continue;
    if (f.integer) params.*f.integer = refl->GetInt64(p, fd);
    else if (f.unit) params.*f.unit = refl->GetFloat(p, fd);
    else params.*f.flag = refl->GetBool(p, fd);
  }
  return params;
}

void add_tree(const DraftTree& tree, bool with_scores, google::protobuf::RepeatedPtrField<v1::PrunedTreeNodes>* out) {
  v1::PrunedTreeNodes* t = out->Add();
  t->mutable_tokens()->Add(tree.tokens.begin(), tree.tokens.end());
  t->mutable_parents()->Add(tree.parents.begin(), tree.parents.end());
  if (with_scores) t->mutable_scores()->Add(tree.scores.begin(), tree.scores.end());
}

}  // namespace ngram::server
