#include "nn/conv.h"

namespace gnn::nn {

SelfAttention::SelfAttention(int64_t dim, int64_t heads, Rng& rng, bool linear)
    : heads_(heads), linear_(linear), q_(dim, dim, rng), k_(dim, dim, rng), v_(dim, dim, rng), o_(dim, dim, rng) {
  GNN_CHECK(heads >= 1 && dim % heads == 0, "SelfAttention: ", dim, " features do not split into ", heads, " heads");
  add_child("q", &q_);
  add_child("k", &k_);
  add_child("v", &v_);
  add_child("o", &o_);
}

ag::Var SelfAttention::forward(const ag::Var& x, const Tensor& graph_ptr) const {
  return o_.forward(ag::graph_attention(q_.forward(x), k_.forward(x), v_.forward(x), graph_ptr, heads_, linear_));
}

}  // namespace gnn::nn
