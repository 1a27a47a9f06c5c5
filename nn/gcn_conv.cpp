#include "nn/conv.h"

namespace gnn::nn {

GCNConv::GCNConv(int64_t in, int64_t out, Rng& rng, bool with_bias, bool add_self_loops) : self_loops_(add_self_loops) {
  weight = add_param("weight", init_tensor(Shape{in, out}, Init::kGlorot, in, out, rng));
  if (with_bias) bias = add_param("bias", init_tensor(Shape{out}, Init::kZeros, in, out, rng));
}

ag::Var GCNConv::forward(const Graph& g, const ag::Var& x) const {
  GNN_CHECK(x.value().dim() == 2 && x.size(1) == weight.size(0), "GCNConv: expected [N, ", weight.size(0),
            "] input, got ", x.value().desc());
  const Prepared& p = cache_.get(g, [this](const Graph& g) {  // built on the host, then moved to g's device
    const Graph host = g.on(Device::cpu());
    const Graph looped = self_loops_ ? add_self_loops(host).graph : host;
    const Tensor norm = gcn_norm(looped);
    return Prepared{looped.on(g.device()), norm.on(g.device())};
  });
  const ag::Var norm(p.norm.astype(x.dtype()));
  ag::Var y = ag::spmm(p.graph, ag::matmul(x, weight), Reduce::kSum, norm);
  return bias.defined() ? ag::add_bias(y, bias) : y;
}

}  // namespace gnn::nn
