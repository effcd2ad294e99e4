#include "tree_messages.h"

namespace ngram::server {

PruneParams prune_params_of(const v1::PruneParams& p) {
  PruneParams params;
  if (p.has_beam_width()) params.beam_width = p.beam_width();
  if (p.has_max_nodes()) params.max_nodes = p.max_nodes();
  if (p.has_ngram_weight()) params.ngram_weight = p.ngram_weight();
  if (p.has_eos_token_id()) params.eos_token_id = p.eos_token_id();
  params.ngram_on_first_level = p.ngram_on_first_level();
  params.level_weights.assign(p.level_weights().begin(), p.level_weights().end());
  params.logit_weights.assign(p.logit_weights().begin(), p.logit_weights().end());
  return params;
}

ProposeParams propose_params_of(const v1::ProposeParams& p) {
  // Field i + 1 is kProposeFields[i] (propose_params.h): the one table.
  const google::protobuf::Descriptor* desc = p.GetDescriptor();
  const google::protobuf::Reflection* refl = p.GetReflection();
  ProposeParams params;
  for (uint32_t i = 0; i < kProposeFieldCount; ++i) {
    const google::protobuf::FieldDescriptor* fd = desc->FindFieldByNumber(static_cast<int>(i) + 1);
    if (!refl->HasField(p, fd)) continue;
    const ProposeField& f = kProposeFields[i];
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
