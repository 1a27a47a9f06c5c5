#include <vector>

#include "nn/conv.h"

namespace gnn::nn {

GATConv::GATConv(int64_t in, int64_t out, Rng& rng, GatOptions opt) : out_(out), opt_(opt), rng_(rng.split()) {
  const int64_t H = opt.heads;
  GNN_CHECK(H >= 1 && out >= 1 && in >= 1, "GATConv: sizes and heads must be positive");
  weight = add_param("weight", init_tensor(Shape{in, H * out}, Init::kGlorot, in, H * out, rng));
  att_src = add_param("att_src", init_tensor(Shape{H, out}, Init::kGlorot, H, out, rng));
  att_dst = add_param("att_dst", init_tensor(Shape{H, out}, Init::kGlorot, H, out, rng));
  if (opt.edge_dim > 0) {
    edge_weight =
        add_param("edge_weight", init_tensor(Shape{opt.edge_dim, H * out}, Init::kGlorot, opt.edge_dim, H * out, rng));
    att_edge = add_param("att_edge", init_tensor(Shape{H, out}, Init::kGlorot, H, out, rng));
  }
  if (opt.bias) bias = add_param("bias", init_tensor(Shape{opt.concat ? H * out : out}, Init::kZeros, in, out, rng));
}

namespace {

// Edge features of the looped graph in CSR order: kept edges keep theirs; node i's loop gets the mean
// of its incoming edges' features (PyG's fill_value = "mean"), zeros when it has none.
Tensor looped_edge_attr(const Graph& lg, const Tensor& kept_eid, const Tensor& edge_attr, int64_t E) {
  const int64_t N = lg.num_nodes, D = edge_attr.size(1), K = kept_eid.size(0);
  const Tensor ea = edge_attr.astype(DType::F64);
  const double* a = ea.f64();
  const int64_t* kept = kept_eid.i64();
  std::vector<double> in_order(static_cast<size_t>((K + N) * D), 0.0), count(static_cast<size_t>(N), 0.0);
  std::vector<int64_t> dst_of(static_cast<size_t>(K + N));
  const int32_t* indptr = lg.csr_indptr.i32();
  const int32_t* eid = lg.csr_eid.i32();
  for (int64_t v = 0; v < N; ++v)
    for (int32_t p = indptr[v]; p < indptr[v + 1]; ++p) dst_of[size_t(eid[p])] = v;
  for (int64_t k = 0; k < K; ++k) {
    GNN_CHECK(kept[k] < E, "GATConv: edge ids out of range");
    const int64_t v = dst_of[size_t(k)];
    count[size_t(v)] += 1;
    for (int64_t d = 0; d < D; ++d) {
      in_order[size_t(k * D + d)] = a[kept[k] * D + d];
      in_order[size_t((K + v) * D + d)] += a[kept[k] * D + d];
    }
  }
  for (int64_t i = 0; i < N; ++i)
    for (int64_t d = 0; d < D; ++d) in_order[size_t((K + i) * D + d)] /= std::max(1.0, count[size_t(i)]);
  Tensor out = Tensor::empty(Shape{lg.num_edges, D}, DType::F64);
  for (int64_t p = 0; p < lg.num_edges; ++p)
    for (int64_t d = 0; d < D; ++d) out.f64()[p * D + d] = in_order[size_t(eid[p] * D + d)];
  return out;
}

}  // namespace

ag::Var GATConv::forward(const Graph& g, const ag::Var& x, const Tensor& edge_attr) {
  GNN_CHECK(x.value().dim() == 2 && x.size(1) == weight.size(0), "GATConv: expected [N, ", weight.size(0),
            "] input, got ", x.value().desc());
  const int64_t H = opt_.heads;
  // Built on the host, then the looped graph is moved to g's device (the index arrays stay on the host).
  const Prepared& p = cache_.get(g, [this](const Graph& g) {
    const Graph host = g.on(Device::cpu());
    Prepared p;
    if (opt_.add_self_loops) {
      p.looped = add_self_loops(host);
    } else {
      std::vector<int64_t> ids(static_cast<size_t>(host.num_edges));
      for (size_t e = 0; e < ids.size(); ++e) ids[e] = int64_t(e);
      p.looped = {host, Tensor::from_vector(ids)};
    }
    const Graph& lg = p.looped.graph;
    std::vector<int32_t> dst(static_cast<size_t>(lg.num_edges));
    for (int64_t v = 0; v < lg.num_nodes; ++v)
      for (int32_t q = lg.csr_indptr.i32()[v]; q < lg.csr_indptr.i32()[v + 1]; ++q) dst[size_t(q)] = int32_t(v);
    p.csr_src = lg.csr_indices;
    p.csr_dst = Tensor::from_vector(dst);
    p.host_looped = lg;
    p.looped.graph = lg.on(g.device());
    return p;
  });
  const Graph& lg = p.looped.graph;
  ag::Var xw = ag::matmul(x, weight);
  ag::Var a_src = ag::head_dot(xw, att_src), a_dst = ag::head_dot(xw, att_dst);
  ag::Var scores;
  if (opt_.edge_dim == 0) {
    GNN_CHECK(!edge_attr.defined(), "GATConv: edge features given to a layer built with edge_dim = 0");
    scores = ag::gat_scores(lg, a_src, a_dst, opt_.negative_slope);
  } else {
    GNN_CHECK(edge_attr.defined() && edge_attr.dim() == 2 && edge_attr.size(0) == g.num_edges &&
                  edge_attr.size(1) == opt_.edge_dim,
              "GATConv: edge_attr must be [E, edge_dim] = [", g.num_edges, ", ", opt_.edge_dim, "], got ",
              edge_attr.defined() ? edge_attr.desc() : std::string("none"));
    const ag::Var ea(looped_edge_attr(p.host_looped, p.looped.kept_eid, edge_attr.on(Device::cpu()), g.num_edges)
                         .astype(x.dtype())
                         .on(x.device()));
    ag::Var a_edge = ag::head_dot(ag::matmul(ea, edge_weight), att_edge);
    ag::Var pre = ag::add(ag::add(ag::gather_rows(a_src, p.csr_src), ag::gather_rows(a_dst, p.csr_dst)), a_edge);
    scores = ag::activation(pre, Act::kLeakyRelu, opt_.negative_slope);
  }
  ag::Var alpha = ag::dropout(ag::segment_softmax(lg, scores), opt_.dropout, rng_, training());
  const ag::Var values = opt_.value_dropout > 0 ? ag::dropout(xw, opt_.value_dropout, rng_, training()) : xw;
  ag::Var y = ag::spmm(lg, values, Reduce::kSum, alpha);
  if (!opt_.concat && H > 1) y = ag::head_mean(y, H);
  return bias.defined() ? ag::add_bias(y, bias) : y;
}

}  // namespace gnn::nn
