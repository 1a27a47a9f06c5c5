#include "apps/bench_kernels.h"

#include <memory>

#include "apps/cli.h"
#include "io/npz.h"
#include "kernels/gemm.h"
#include "kernels/activation.h"
#include "kernels/sage.h"
#include "kernels/spmm.h"
#include "runtime/random_graph.h"
#include "runtime/tensor.h"

namespace gnn::cli {
namespace {

struct GraphData {
  Graph g;
  CsrView v;
  explicit GraphData(const KernelShape& s) : g(tpugraphs_like_graph(s.nodes, s.edges, s.seed)) {
    if (!s.save_graph.empty()) {  // rows [dst, src] in CSR order, as TpuGraphs writes [consumer, producer]
      Tensor ei = Tensor::empty({g.num_edges, 2}, DType::I64);
      for (int64_t v = 0; v < g.num_nodes; ++v)
        for (int32_t p = g.csr_indptr.i32()[v]; p < g.csr_indptr.i32()[v + 1]; ++p)
          ei.i64()[2 * p] = v, ei.i64()[2 * p + 1] = g.csr_indices.i32()[p];
      save_npz(s.save_graph, {{"edge_index", ei}, {"num_nodes", Tensor::from_vector<int64_t>({g.num_nodes})}});
    }
    v = {g.num_nodes, g.num_nodes, g.csr_indptr.i32(), g.csr_indices.i32(), g.csc_indptr.i32(), g.csc_indices.i32(),
         g.csc_to_csr.i32()};
  }
};

Tensor random_tensor(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor t = Tensor::empty({rows, cols}, DType::F32);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    t.f32()[i] = float(int64_t(x % 2001) - 1000) / 1000.0f;
  }
  return t;
}

// spmm-{sum,mean,max}: y = reduce over in-edges of x, x and y [N, C*F].
KernelCase spmm_case(Reduce op, const KernelShape& s) {
  auto d = std::make_shared<GraphData>(s);
  const int64_t F = s.features * s.configs, N = s.nodes, E = d->g.num_edges;
  auto x = std::make_shared<Tensor>(random_tensor(N, F, 1));
  auto y = std::make_shared<Tensor>(Tensor::empty({N, F}, DType::F32));
  auto dx = std::make_shared<Tensor>(Tensor::empty({N, F}, DType::F32));
  auto arg = std::make_shared<Tensor>(Tensor::empty({op == Reduce::kMax ? N : 0, F}, DType::I32));
  KernelCase k;
  const bool bwd = s.backward;
  k.step = [=] {
    spmm_forward_cpu(y->f32(), op == Reduce::kMax ? arg->i32() : nullptr, x->f32(), nullptr, d->v, F, F, F, op);
    if (bwd) spmm_backward_x_cpu(dx->f32(), y->f32(), op == Reduce::kMax ? arg->i32() : nullptr, nullptr, d->v, F, F, F, op);
  };
  // forward: read one x row per edge, write y, read indptr and indices (+ write argmax for max)
  const double fwd = 4.0 * (double(E) * F + double(N) * F + double(N + 1) + double(E)) + (op == Reduce::kMax ? 4.0 * N * F : 0);
  // backward: read one dy row per edge, write dx, read the CSC (+ argmax rows per edge for max)
  const double bwdb = 4.0 * (double(E) * F + double(N) * F + double(N + 1) + 2.0 * E) + (op == Reduce::kMax ? 4.0 * E * F : 0);
  k.bytes = fwd + (bwd ? bwdb : 0);
  k.flops = double(E) * F * (bwd ? 2 : 1);
  return k;
}

// gemm: [N*C, F] x [F, F], the dense half of a layer on config-batched activations; with --backward
// also dA = dC B^T and dB = A^T dC.
KernelCase gemm_case(const KernelShape& s) {
  const int64_t M = s.nodes * s.configs, F = s.features;
  auto a = std::make_shared<Tensor>(random_tensor(M, F, 1));
  auto b = std::make_shared<Tensor>(random_tensor(F, F, 2));
  auto c = std::make_shared<Tensor>(Tensor::empty({M, F}, DType::F32));
  auto da = std::make_shared<Tensor>(Tensor::empty({M, F}, DType::F32));
  auto db = std::make_shared<Tensor>(Tensor::empty({F, F}, DType::F32));
  const bool bwd = s.backward;
  KernelCase k;
  k.step = [=] {
    gemm_cpu(false, false, M, F, F, 1.0f, a->f32(), F, b->f32(), F, 0.0f, c->f32(), F);
    if (bwd) {
      gemm_cpu(false, true, M, F, F, 1.0f, c->f32(), F, b->f32(), F, 0.0f, da->f32(), F);
      gemm_cpu(true, false, F, F, M, 1.0f, a->f32(), F, c->f32(), F, 0.0f, db->f32(), F);
    }
  };
  k.bytes = 4.0 * (2.0 * M * F + F * F) * (bwd ? 3 : 1);  // read A, write C (B is tiny); 3 products with backward
  k.flops = 2.0 * double(M) * F * F * (bwd ? 3 : 1);
  return k;
}

// sage-layer / sage-layer-fused: y = relu([mean_{j->i} x_j | x_i] W + b), W [2F, F]; configs widen the
// rows, so the layer runs at width C*F in and out.
// The composed layer runs the separate kernels (spmm mean, two GEMMs, bias + relu); the fused one
// builds [agg | x] per row block and multiplies once (kernels/sage.h). --backward adds dx, dW, db.
KernelCase sage_case(bool fused, const KernelShape& s) {
  auto d = std::make_shared<GraphData>(s);
  const int64_t N = s.nodes, F = s.features * s.configs, O = F, E = d->g.num_edges;
  auto x = std::make_shared<Tensor>(random_tensor(N, F, 1));
  auto W = std::make_shared<Tensor>(random_tensor(2 * F, O, 2));
  auto b = std::make_shared<Tensor>(random_tensor(1, O, 3));
  auto y = std::make_shared<Tensor>(Tensor::empty({N, O}, DType::F32));
  auto z = std::make_shared<Tensor>(Tensor::empty({N, O}, DType::F32));
  auto agg = std::make_shared<Tensor>(Tensor::empty({N, F}, DType::F32));
  auto dz = std::make_shared<Tensor>(Tensor::empty({N, O}, DType::F32));
  auto dagg = std::make_shared<Tensor>(Tensor::empty({N, F}, DType::F32));
  auto dx = std::make_shared<Tensor>(Tensor::empty({N, F}, DType::F32));
  auto dW = std::make_shared<Tensor>(Tensor::empty({2 * F, O}, DType::F32));
  auto db = std::make_shared<Tensor>(Tensor::empty({O}, DType::F32));
  const bool bwd = s.backward;
  KernelCase k;
  if (fused) {
    k.step = [=] {
      sage_forward_cpu(y->f32(), bwd ? z->f32() : nullptr, x->f32(), d->v, W->f32(), b->f32(), F, O, Act::kRelu, 0.0f);
      if (bwd)  // y stands in for the incoming gradient
        sage_backward_cpu(dx->f32(), dW->f32(), db->f32(), y->f32(), z->f32(), x->f32(), d->v, W->f32(), F, O,
                          Act::kRelu, 0.0f);
    };
  } else {
    k.step = [=] {
      spmm_forward_cpu(agg->f32(), nullptr, x->f32(), nullptr, d->v, F, F, F, Reduce::kMean);
      gemm_cpu(false, false, N, O, F, 1.0f, agg->f32(), F, W->f32(), O, 0.0f, z->f32(), O);
      gemm_cpu(false, false, N, O, F, 1.0f, x->f32(), F, W->f32() + F * O, O, 1.0f, z->f32(), O);
      float* zp = z->f32();
      const float* bp = b->f32();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < N; ++i)
        for (int64_t o = 0; o < O; ++o) zp[i * O + o] += bp[o];
      act_forward_cpu(y->f32(), z->f32(), N * O, Act::kRelu, 0.0f);
      if (!bwd) return;
      act_backward_cpu(dz->f32(), y->f32(), z->f32(), N * O, Act::kRelu, 0.0f);
      gemm_cpu(true, false, F, O, N, 1.0f, agg->f32(), F, dz->f32(), O, 0.0f, dW->f32(), O);
      gemm_cpu(true, false, F, O, N, 1.0f, x->f32(), F, dz->f32(), O, 0.0f, dW->f32() + F * O, O);
      float* dbp = db->f32();
      const float* dzp = dz->f32();
      for (int64_t o = 0; o < O; ++o) dbp[o] = 0;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t o = 0; o < O; ++o) dbp[o] += dzp[i * O + o];
      gemm_cpu(false, true, N, F, O, 1.0f, dz->f32(), O, W->f32(), O, 0.0f, dagg->f32(), F);
      gemm_cpu(false, true, N, F, O, 1.0f, dz->f32(), O, W->f32() + F * O, O, 0.0f, dx->f32(), F);
      spmm_backward_x_cpu(dx->f32(), dagg->f32(), nullptr, nullptr, d->v, F, F, F, Reduce::kMean, true);
    };
  }
  // forward: read x (gathered per edge, and once as the root), write y (and z); backward: read dy, z,
  // x again (gathers and root), write dx, read d_agg per edge. Weights are small and not counted.
  const double fwd = 4.0 * (double(E) * F + double(N) * F + double(N) * O * (bwd ? 2 : 1));
  const double bwdb = 4.0 * (2.0 * N * O + double(E) * F + 2.0 * N * F + double(E) * F);
  k.bytes = fwd + (bwd ? bwdb : 0);
  k.flops = 2.0 * N * (2 * F) * O * (bwd ? 3 : 1) + double(E) * F * (bwd ? 2 : 1);  // GEMMs + gathers
  return k;
}

}  // namespace

std::vector<std::string> bench_kernel_names() {
  return {"gemm", "spmm-sum", "spmm-mean", "spmm-max", "sage-layer", "sage-layer-fused"};
}

KernelCase make_kernel_case(const std::string& name, const KernelShape& s) {
  if (name == "gemm") return gemm_case(s);
  if (name == "spmm-sum") return spmm_case(Reduce::kSum, s);
  if (name == "spmm-mean") return spmm_case(Reduce::kMean, s);
  if (name == "spmm-max") return spmm_case(Reduce::kMax, s);
  if (name == "sage-layer") return sage_case(false, s);
  if (name == "sage-layer-fused") return sage_case(true, s);
  std::string all;
  for (const std::string& n : bench_kernel_names()) all += (all.empty() ? "" : ", ") + n;
  throw UsageError("gnn bench kernel: unknown kernel '" + name + "' (available: " + all + ")");
}

}  // namespace gnn::cli
