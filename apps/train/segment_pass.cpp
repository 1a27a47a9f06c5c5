#include "apps/train/segment_pass.h"

#include "apps/train/blocks.h"

namespace gnn::train {
namespace {

// Sums of listed source rows into their graphs: source src[i] adds to graph dst[i].
Graph readout_block(const std::vector<int64_t>& src, const std::vector<int64_t>& dst, int64_t sources, int64_t graphs,
                    Device device) {
  Graph g =
      Graph::from_bipartite_edges(src.data(), dst.data(), int64_t(src.size()), sources, graphs, "segment readout");
  if (device.is_cuda()) Tensor::move_packed(g.arrays(), device);
  return g;
}

// [G, C*F] -> [G*C, F]
ag::Var by_config(const ag::Var& y, int64_t C) { return ag::reshape(y, y.size(0) * C, y.size(1) / C); }

// Each listed row's place in `ids` (a plan level's rows), -1 when it is not there.
std::vector<int32_t> places(const Tensor& ids, int64_t nodes) {
  std::vector<int32_t> at(static_cast<size_t>(nodes), -1);
  for (int64_t p = 0; p < ids.numel(); ++p) at[size_t(ids.i32()[p])] = int32_t(p);
  return at;
}

}  // namespace

SegmentPass::SegmentPass(const Batch& b) : view_(b.segment_view(&rows_)), graphs_(b.graphs), configs_(b.configs) {}

ag::Var SegmentPass::cut(const ag::Var& x) {
  const int64_t H = rows_.halo.numel();
  if (!replaying_) {
    kept_.push_back(H ? ag::gather_rows(x, rows_.halo).value() : Tensor());
    return x;
  }
  const Tensor& c = kept_.at(next_++);
  if (!c.defined()) return x;
  const int64_t n = x.size(0);
  Tensor index = Tensor::empty({n}, DType::I32);
  for (int64_t r = 0; r < n; ++r) index.i32()[r] = int32_t(r);
  for (int64_t j = 0; j < H; ++j) index.i32()[rows_.halo_view.i32()[j]] = int32_t(n + j);
  return ag::gather_rows(ag::concat_rows({x, ag::Var(c)}), index);
}

nn::SharedRows SegmentPass::cut(const nn::SharePlan& plan, const nn::SharedRows& x) {
  const int64_t H = rows_.halo.numel(), C = x.configs;
  const Tensor& ids = plan.dependent_ids(x.level);
  const std::vector<int32_t> at = places(ids, plan.nodes());
  if (!replaying_) {  // H's values per config: from dep where a row depends on the config, else from shared
    if (!H) {
      kept_.emplace_back();
      return x;
    }
    Tensor index = Tensor::empty({H}, DType::I32);
    for (int64_t j = 0; j < H; ++j) {
      const int32_t p = at[size_t(rows_.halo.i32()[j])];
      index.i32()[j] = p >= 0 ? int32_t(H + p) : int32_t(j);
    }
    const ag::Var both = ag::concat_rows({nn::repeat_cols(ag::gather_rows(x.shared, rows_.halo), C), x.dep});
    kept_.push_back(ag::gather_rows(both, index).value());
    return x;
  }
  const Tensor& c = kept_.at(next_++);
  if (!c.defined()) return x;
  const int64_t D = ids.numel();
  Tensor index = Tensor::empty({D}, DType::I32);
  for (int64_t p = 0; p < D; ++p) index.i32()[p] = int32_t(p);
  for (int64_t j = 0; j < H; ++j) {  // H seeds the view's plan: every level holds it in dep
    const int32_t p = at[size_t(rows_.halo_view.i32()[j])];
    GNN_CHECK(p >= 0, "SegmentPass: a neighbour of the segment is not among the plan's dependent rows");
    index.i32()[p] = int32_t(D + j);
  }
  return {x.shared, ag::gather_rows(ag::concat_rows({x.dep, ag::Var(c)}), index), x.level, C};
}

ag::Var SegmentPass::keep_or_add(const ag::Var& view_sum, const ag::Var& outside_sum) {
  if (!replaying_) {
    kept_.push_back(outside_sum.value());
    return outside_sum;
  }
  return ag::add(view_sum, ag::Var(kept_.at(next_++)));
}

ag::Var SegmentPass::sum(const Batch& b, const ag::Var& x) {
  const int64_t C = configs_;
  if (replaying_) return keep_or_add(by_config(ag::pool(x, b.graph_ptr, Reduce::kSum), C), ag::Var());
  std::vector<int64_t> src, dst;
  for (int64_t v = 0; v < b.nodes; ++v)
    if (rows_.outside.u8()[v]) src.push_back(v), dst.push_back(b.node_graph.i32()[v]);
  const Graph g = readout_block(src, dst, b.nodes, graphs_, x.device());
  return keep_or_add(ag::Var(), by_config(ag::spmm(g, x, Reduce::kSum), C));
}

ag::Var SegmentPass::sum(const Batch& b, const nn::SharePlan& plan, const nn::SharedRows& x) {
  const int64_t C = configs_;
  if (replaying_) return keep_or_add(nn::pool(plan, x, Reduce::kSum), ag::Var());
  // The rows outside the view: those of D from dep (per config), the others from shared (once).
  const Tensor& ids = plan.dependent_ids(x.level);
  const std::vector<int32_t> at = places(ids, b.nodes);
  std::vector<int64_t> dsrc, ddst, ssrc, sdst;
  for (int64_t v = 0; v < b.nodes; ++v) {
    if (!rows_.outside.u8()[v]) continue;
    const int64_t g = b.node_graph.i32()[v];
    if (at[size_t(v)] >= 0) dsrc.push_back(at[size_t(v)]), ddst.push_back(g);
    else ssrc.push_back(v), sdst.push_back(g);
  }
  const Graph gd = readout_block(dsrc, ddst, ids.numel(), graphs_, x.dep.device());
  const Graph gs = readout_block(ssrc, sdst, b.nodes, graphs_, x.dep.device());
  const ag::Var y =
      ag::add(ag::spmm(gd, x.dep, Reduce::kSum), nn::repeat_cols(ag::spmm(gs, x.shared, Reduce::kSum), C));
  return keep_or_add(ag::Var(), by_config(y, C));
}

ag::Var SegmentPass::configurable_sum(const Batch& b, const ag::Var& x) {
  const int64_t C = configs_;
  if (replaying_)
    return keep_or_add(by_config(ag::pool(ag::gather_rows(x, b.config_nodes), b.config_ptr, Reduce::kSum), C),
                       ag::Var());
  std::vector<int64_t> src, dst;
  for (int64_t k = 0; k < b.config_nodes.numel(); ++k) {
    const int32_t v = b.config_nodes.i32()[k];
    if (rows_.outside.u8()[v]) src.push_back(v), dst.push_back(b.node_graph.i32()[v]);
  }
  const Graph g = readout_block(src, dst, b.nodes, graphs_, x.device());
  return keep_or_add(ag::Var(), by_config(ag::spmm(g, x, Reduce::kSum), C));
}

ag::Var SegmentPass::configurable_sum(const Batch& b, const nn::SharedRows& x) {
  const int64_t C = configs_;
  if (replaying_)
    return keep_or_add(by_config(ag::pool(configurable_rows(b, x), b.config_ptr, Reduce::kSum), C), ag::Var());
  std::vector<int64_t> src, dst;  // the configurable nodes are dep's first rows, in config_nodes order
  for (int64_t k = 0; k < b.config_nodes.numel(); ++k) {
    const int32_t v = b.config_nodes.i32()[k];
    if (rows_.outside.u8()[v]) src.push_back(k), dst.push_back(b.node_graph.i32()[v]);
  }
  const Graph g = readout_block(src, dst, x.dep.size(0), graphs_, x.dep.device());
  return keep_or_add(ag::Var(), by_config(ag::spmm(g, x.dep, Reduce::kSum), C));
}

ag::Var SegmentPass::mean(const ag::Var& sum) const {
  const int64_t F = sum.size(1);
  Tensor inv = Tensor::empty({graphs_ * configs_, F}, DType::F32);
  for (int64_t g = 0; g < graphs_; ++g)
    std::fill(inv.f32() + g * configs_ * F, inv.f32() + (g + 1) * configs_ * F,
              1.0f / float(std::max<int64_t>(1, rows_.sizes[size_t(g)])));
  return ag::mul(sum, ag::Var(inv.to(sum.device())));
}

}  // namespace gnn::train
