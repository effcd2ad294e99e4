// The tree methods' messages (PruneTree, ProposeTree in
// proto/ngram/v1/ngram.proto) as the engine's types, and the engine's trees
// as the responses' PrunedTreeNodes: the server's one conversion of each.
// An unset parameter keeps the engine's default (prune_params.h,
// propose_params.h); the values are the engine's to check.
#pragma once
#include <google/protobuf/repeated_ptr_field.h>

#include "draft_tree.h"
#include "ngram/v1/ngram.pb.h"
#include "propose_params.h"
#include "prune_params.h"

namespace ngram::server {

PruneParams prune_params_of(const v1::PruneParams& p);
ProposeParams propose_params_of(const v1::ProposeParams& p);

// Appends `tree` (tokens, parents, and its scores when with_scores).
void add_tree(const DraftTree& tree, bool with_scores, google::protobuf::RepeatedPtrField<v1::PrunedTreeNodes>* out);

}  // namespace ngram::server
