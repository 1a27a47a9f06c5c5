#include "apps/bench_kernels.h"

#include <memory>

#include "apps/cli.h"
#include "io/npz.h"
#include "kernels/gemm.h"
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

}  // namespace

std::vector<std::string> bench_kernel_names() { return {"gemm", "spmm-sum", "spmm-mean", "spmm-max"}; }

KernelCase make_kernel_case(const std::string& name, const KernelShape& s) {
  if (name == "gemm") return gemm_case(s);
  if (name == "spmm-sum") return spmm_case(Reduce::kSum, s);
  if (name == "spmm-mean") return spmm_case(Reduce::kMean, s);
  if (name == "spmm-max") return spmm_case(Reduce::kMax, s);
  std::string all;
  for (const std::string& n : bench_kernel_names()) all += (all.empty() ? "" : ", ") + n;
  throw UsageError("gnn bench kernel: unknown kernel '" + name + "' (available: " + all + ")");
}

}  // namespace gnn::cli
