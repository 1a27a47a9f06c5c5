#include "nn/config_share.h"

#include <algorithm>

namespace gnn::nn {
namespace {

// A bipartite graph and its weights from edge lists.
void make_block(const std::vector<int64_t>& src, const std::vector<int64_t>& dst, const std::vector<float>& w,
                int64_t sources, int64_t rows, const char* what, Graph* g, Tensor* weight) {
  *g = Graph::from_bipartite_edges(src.data(), dst.data(), int64_t(src.size()), sources, rows, what);
  // CSR position p holds input edge csr_eid[p]: the weights in CSR order.
  *weight = Tensor::empty({g->num_edges}, DType::F32);
  for (int64_t p = 0; p < g->num_edges; ++p) weight->f32()[p] = w[size_t(g->csr_eid.i32()[p])];
}

Tensor iota_i32(int64_t n) {
  Tensor t = Tensor::empty({n}, DType::I32);
  for (int64_t i = 0; i < n; ++i) t.i32()[i] = int32_t(i);
  return t;
}

}  // namespace

SharePlan SharePlan::build(const Graph& a, const Tensor& a_weight, const Tensor& seeds, const Tensor& graph_ptr,
                           int64_t configs, int64_t steps) {
  GNN_CHECK(a.device().is_cpu() && seeds.device().is_cpu() && graph_ptr.device().is_cpu(),
            "SharePlan::build: the graph, seeds and graph_ptr must be on the host");
  GNN_CHECK(a.num_sources() == a.num_nodes, "SharePlan::build: the aggregation graph must have one node set");
  GNN_CHECK(seeds.dtype() == DType::I32 && seeds.dim() == 1, "SharePlan::build: seeds must be i32 [K], got ",
            seeds.desc());
  GNN_CHECK(graph_ptr.dtype() == DType::I64 && graph_ptr.dim() == 1 && graph_ptr.size(0) >= 1,
            "SharePlan::build: graph_ptr must be i64 [G+1], got ", graph_ptr.desc());
  GNN_CHECK(!a_weight.defined() || (a_weight.dtype() == DType::F32 && a_weight.numel() == a.num_edges),
            "SharePlan::build: a_weight must be f32 [", a.num_edges, "], got ", a_weight.desc());
  GNN_CHECK(configs >= 1 && steps >= 0, "SharePlan::build: configs ", configs, ", steps ", steps);
  const int64_t N = a.num_nodes, G = graph_ptr.size(0) - 1;
  GNN_CHECK(graph_ptr.i64()[0] == 0 && graph_ptr.i64()[G] == N, "SharePlan::build: graph_ptr does not span the ", N,
            " nodes");
  SharePlan plan;
  plan.nodes_ = N, plan.configs_ = configs, plan.graphs_ = G;
  const int32_t* rp = a.csr_indptr.i32();
  const int32_t* ri = a.csr_indices.i32();
  const int32_t* cp = a.csc_indptr.i32();
  const int32_t* ci = a.csc_indices.i32();
  auto weight_at = [&](int32_t p) { return a_weight.defined() ? a_weight.f32()[p] : 1.0f; };

  std::vector<int32_t> order;  // D in plan order
  std::vector<int32_t> pos(static_cast<size_t>(N), -1);  // a node's row in D, -1 outside
  for (int64_t k = 0; k < seeds.numel(); ++k) {
    const int32_t v = seeds.i32()[k];
    GNN_CHECK(v >= 0 && v < N, "SharePlan::build: seed ", k, " = ", v, " is outside [0, ", N, ")");
    GNN_CHECK(pos[size_t(v)] < 0, "SharePlan::build: node ", v, " is a seed twice");
    pos[size_t(v)] = int32_t(order.size());
    order.push_back(v);
  }
  auto snapshot = [&] {
    plan.dep_rows_.push_back(int64_t(order.size()));
    plan.dep_ids_.push_back(Tensor::from_vector(order));
  };
  snapshot();
  for (int64_t l = 0; l < steps; ++l) {
    const int32_t before = int32_t(order.size());
    // The rows that read a row of D_l: the destinations of its entries (the CSC of each u in D_l).
    std::vector<int32_t> fresh;
    for (int32_t r = 0; r < before; ++r)
      for (int32_t q = cp[order[size_t(r)]]; q < cp[order[size_t(r)] + 1]; ++q)
        if (pos[size_t(ci[q])] == -1) pos[size_t(ci[q])] = -2, fresh.push_back(ci[q]);
    std::sort(fresh.begin(), fresh.end());
    for (int32_t v : fresh) pos[size_t(v)] = int32_t(order.size()), order.push_back(v);
    Step s;
    s.new_rows = Tensor::from_vector(fresh);
    std::vector<int64_t> dsrc, ddst, ssrc, sdst;
    std::vector<float> dw, sw;
    for (int32_t r = 0; r < int32_t(order.size()); ++r) {
      const int32_t v = order[size_t(r)];
      for (int32_t p = rp[v]; p < rp[v + 1]; ++p) {
        const int32_t u = ri[p];
        if (pos[size_t(u)] >= 0 && pos[size_t(u)] < before)
          dsrc.push_back(pos[size_t(u)]), ddst.push_back(r), dw.push_back(weight_at(p));
        else ssrc.push_back(u), sdst.push_back(r), sw.push_back(weight_at(p));
      }
    }
    make_block(dsrc, ddst, dw, before, int64_t(order.size()), "config sharing: rows from D", &s.from_dep,
               &s.from_dep_w);
    make_block(ssrc, sdst, sw, N, int64_t(order.size()), "config sharing: rows from shared", &s.from_shared,
               &s.from_shared_w);
    plan.steps_.push_back(std::move(s));
    snapshot();
  }
  // Readout: each graph's rows, the dependent ones from dep, the others from shared.
  std::vector<int64_t> graph_of(static_cast<size_t>(N));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t v = graph_ptr.i64()[g]; v < graph_ptr.i64()[g + 1]; ++v) graph_of[size_t(v)] = g;
  auto inv_size = [&](int64_t g) {
    return 1.0f / float(std::max<int64_t>(1, graph_ptr.i64()[g + 1] - graph_ptr.i64()[g]));
  };
  std::vector<int64_t> psrc, pdst, qsrc, qdst;
  std::vector<float> pw, qw;
  for (int32_t r = 0; r < int32_t(order.size()); ++r)
    psrc.push_back(r), pdst.push_back(graph_of[size_t(order[size_t(r)])]), pw.push_back(inv_size(pdst.back()));
  for (int64_t v = 0; v < N; ++v)
    if (pos[size_t(v)] < 0) qsrc.push_back(v), qdst.push_back(graph_of[size_t(v)]), qw.push_back(inv_size(qdst.back()));
  make_block(psrc, pdst, pw, int64_t(order.size()), G, "config sharing: pooling D", &plan.pool_dep_,
             &plan.pool_dep_mean_);
  make_block(qsrc, qdst, qw, N, G, "config sharing: pooling shared", &plan.pool_shared_, &plan.pool_shared_mean_);
  // Max: row g*C + c takes the larger of config c's max over graph g's D rows (source g*C + c) and the
  // max over its shared rows (source G*C + g*C + c), each only where the graph has such rows.
  std::vector<char> has_dep(size_t(G), 0), has_shared(size_t(G), 0);
  for (int64_t d : pdst) has_dep[size_t(d)] = 1;
  for (int64_t d : qdst) has_shared[size_t(d)] = 1;
  std::vector<int64_t> msrc, mdst;
  std::vector<float> mw;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t c = 0; c < configs; ++c) {
      if (has_dep[size_t(g)]) msrc.push_back(g * configs + c), mdst.push_back(g * configs + c), mw.push_back(1);
      if (has_shared[size_t(g)])
        msrc.push_back((G + g) * configs + c), mdst.push_back(g * configs + c), mw.push_back(1);
    }
  make_block(msrc, mdst, mw, 2 * G * configs, G * configs, "config sharing: max pooling", &plan.pool_max_,
             &plan.pool_max_w_);
  return plan;
}

SharePlan SharePlan::to(Device device) const {
  SharePlan p = *this;
  std::vector<Tensor*> arrays;
  auto add_graph = [&](Graph& g, Tensor& w) {
    for (Tensor* t : g.arrays()) arrays.push_back(t);
    arrays.push_back(&w);
  };
  for (Step& s : p.steps_) add_graph(s.from_dep, s.from_dep_w), add_graph(s.from_shared, s.from_shared_w);
  add_graph(p.pool_dep_, p.pool_dep_mean_);
  add_graph(p.pool_shared_, p.pool_shared_mean_);
  add_graph(p.pool_max_, p.pool_max_w_);
  Tensor::move_packed(arrays, device);
  return p;
}

ag::Var repeat_cols(const ag::Var& x, int64_t C) {
  if (C == 1) return x;
  const int64_t R = x.size(0);
  Tensor index = Tensor::empty({R * C}, DType::I32);
  for (int64_t i = 0; i < R * C; ++i) index.i32()[i] = int32_t(i / C);
  const ag::Var y = ag::gather_rows(x, index);  // [R*C, F]: row r*C + c is x[r]
  return ag::reshape(y, R, C * x.size(1));
}

SharedRows aggregate(const SharePlan& plan, const Graph& a, const Tensor& a_weight, const SharedRows& x) {
  GNN_CHECK(x.level < plan.steps(), "config sharing: the plan covers ", plan.steps(), " steps, asked for step ",
            x.level + 1);
  const SharePlan::Step& s = plan.step(x.level);
  const ag::Var w = a_weight.defined() ? ag::Var(a_weight) : ag::Var();
  const ag::Var shared = ag::spmm(a, x.shared, Reduce::kSum, w);
  ag::Var dep =
      ag::add(ag::spmm(s.from_dep, x.dep, Reduce::kSum, ag::Var(s.from_dep_w)),
              repeat_cols(ag::spmm(s.from_shared, x.shared, Reduce::kSum, ag::Var(s.from_shared_w)), x.configs));
  return {shared, dep, x.level + 1, x.configs};
}

SharedRows advance(const SharePlan& plan, const SharedRows& x) {
  const SharePlan::Step& s = plan.step(x.level);
  if (s.new_rows.numel() == 0) return {x.shared, x.dep, x.level + 1, x.configs};
  const ag::Var fresh = repeat_cols(ag::gather_rows(x.shared, s.new_rows), x.configs);
  return {x.shared, ag::concat_rows({x.dep, fresh}), x.level + 1, x.configs};
}

SharedRows add(const SharedRows& a, const SharedRows& b) {
  GNN_CHECK(a.level == b.level && a.configs == b.configs, "config sharing: adding rows of levels ", a.level, " and ",
            b.level);
  return {ag::add(a.shared, b.shared), ag::add(a.dep, b.dep), a.level, a.configs};
}

SharedRows keep_grad_rows(const SharePlan& plan, const SharedRows& x, const Tensor& keep, const Tensor& keep_host) {
  if (!keep.defined()) return x;
  const Tensor& ids = plan.dependent_ids(x.level);
  Tensor kd = Tensor::empty({ids.numel()}, DType::U8);
  for (int64_t i = 0; i < ids.numel(); ++i) kd.u8()[i] = keep_host.u8()[ids.i32()[i]];
  return {ag::keep_grad_rows(x.shared, keep), ag::keep_grad_rows(x.dep, kd.to(keep.device())), x.level, x.configs};
}

ag::Var pool(const SharePlan& plan, const SharedRows& x, Reduce op) {
  GNN_CHECK(x.level == plan.steps(), "config sharing: pooling reads level ", plan.steps(), ", got level ", x.level);
  const int64_t C = x.configs, G = plan.graphs();
  if (op == Reduce::kMax) {  // per config: the max over its D rows, then against the shared rows' max
    const ag::Var dep = ag::reshape(ag::spmm(plan.pool_dep(), x.dep, Reduce::kMax), G * C, x.dep.size(1) / C);
    const ag::Var shared =
        ag::reshape(repeat_cols(ag::spmm(plan.pool_shared(), x.shared, Reduce::kMax), C), G * C, x.shared.size(1));
    return ag::spmm(plan.pool_max(), ag::concat_rows({dep, shared}), Reduce::kMax);
  }
  const bool mean = op == Reduce::kMean;
  const ag::Var wd = mean ? ag::Var(plan.pool_dep_mean()) : ag::Var();
  const ag::Var ws = mean ? ag::Var(plan.pool_shared_mean()) : ag::Var();
  const ag::Var y = ag::add(ag::spmm(plan.pool_dep(), x.dep, Reduce::kSum, wd),
                            repeat_cols(ag::spmm(plan.pool_shared(), x.shared, Reduce::kSum, ws), x.configs));
  return ag::reshape(y, plan.graphs() * x.configs, y.size(1) / x.configs);
}

ag::Var expand(const SharePlan& plan, const SharedRows& x) {
  const int64_t N = plan.nodes();
  const Tensor& ids = plan.dependent_ids(x.level);
  Tensor index = iota_i32(N);  // row v of [repeat(shared); dep]: v, or N + its row in dep
  for (int64_t r = 0; r < ids.numel(); ++r) index.i32()[ids.i32()[r]] = int32_t(N + r);
  return ag::gather_rows(ag::concat_rows({repeat_cols(x.shared, x.configs), x.dep}), index);
}

}  // namespace gnn::nn
