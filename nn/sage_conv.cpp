#include "nn/conv.h"

namespace gnn::nn {

SAGEConv::SAGEConv(int64_t in, int64_t out, Rng& rng, SageOptions opt) : in_(in), out_(out), opt_(opt) {
  const int64_t rows = opt.root_weight ? 2 * in : in;
  weight = add_param("weight", init_tensor(Shape{rows, out}, Init::kGlorot, in, out, rng));
  if (opt.bias) bias = add_param("bias", init_tensor(Shape{out}, Init::kZeros, in, out, rng));
  if (opt.residual && in != out)
    res_weight = add_param("res_weight", init_tensor(Shape{in, out}, Init::kGlorot, in, out, rng));
}

ag::Var SAGEConv::forward(const Graph& g, const ag::Var& x) const {
  GNN_CHECK(x.value().dim() == 2 && x.size(1) == in_, "SAGEConv: expected [N, ", in_, "] input, got ",
            x.value().desc());
  ag::Var y;
  if (opt_.fused && opt_.aggr == Reduce::kMean && opt_.root_weight) {
    y = ag::sage_fused(g, x, weight, bias, opt_.act, opt_.slope);
  } else {
    ag::Var agg = ag::spmm(g, x, opt_.aggr);
    ag::Var h = opt_.root_weight ? ag::concat_cols({agg, x}) : agg;
    y = ag::matmul(h, weight);
    if (bias.defined()) y = ag::add_bias(y, bias);
    if (opt_.act != Act::kNone) y = ag::activation(y, opt_.act, opt_.slope);
  }
  if (opt_.residual) y = ag::add(y, res_weight.defined() ? ag::matmul(x, res_weight) : x);
  return y;
}

}  // namespace gnn::nn
