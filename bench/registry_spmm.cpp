// Registry cases (bench/registry.h) for gnn's SpMM, spmm-{sum,mean,max}, and for cuSPARSE's SpMM on
// the same graph (--spmm cusparse), the comparison backend.
#include <memory>
#include <vector>

#include "bench/registry_cases.h"
#include "kernels/spmm.h"
#include "kernels/spmm_cusparse.h"
#include "runtime/cuda.h"

namespace gnn::cli {
namespace {

#ifdef GNN_WITH_CUDA
// spmm through cuSPARSE: one value per CSR entry (1, or 1/deg(v) for mean); forward only.
std::function<void()> cusparse_step(Reduce op, const std::shared_ptr<GraphData>& d, const std::shared_ptr<Tensor>& x,
                                    const std::shared_ptr<Tensor>& y, int64_t F) {
  const Graph& g = d->g;
  const auto indptr = g.csr_indptr.to_vector<int32_t>();
  std::vector<float> values(size_t(g.num_edges));
  for (int64_t v = 0; v < g.num_nodes; ++v)
    for (int32_t p = indptr[size_t(v)]; p < indptr[size_t(v + 1)]; ++p)
      values[size_t(p)] = op == Reduce::kMean ? 1.0f / float(indptr[size_t(v + 1)] - indptr[size_t(v)]) : 1.0f;
  auto vals = std::make_shared<Tensor>(Tensor::from_vector(values).to(Device::cuda(0)));
  // cuSPARSE's work buffer, ours to own (kernels allocate nothing)
  void* handle = cuda_sparse(0);
  const size_t bytes = CusparseSpmm::workspace_bytes(handle, d->v, vals->f32(), y->f32(), x->f32(), F, F, F);
  auto work = std::make_shared<Tensor>(Tensor::empty({int64_t(bytes)}, DType::U8, Device::cuda(0)));
  auto sp = std::make_shared<CusparseSpmm>(handle, d->v, vals->f32(), y->f32(), x->f32(), F, F, F,
                                           bytes > 0 ? work->data() : nullptr, cuda_stream(0));
  return [sp, work, vals, d, x, y] { sp->run(); };
}
#endif

// spmm-{sum,mean,max}: y = reduce over in-edges of x, x and y [N, C*F].
KernelCase spmm_case(Reduce op, const KernelShape& s) {
  auto d = std::make_shared<GraphData>(s);
  const int64_t F = s.features * s.configs, N = s.nodes, E = d->g.num_edges;
  const Device dev = device_of(s);
  auto x = std::make_shared<Tensor>(random_tensor(N, F, 1).to(dev));
  auto y = std::make_shared<Tensor>(Tensor::empty({N, F}, DType::F32, dev));
  auto dx = std::make_shared<Tensor>(Tensor::empty({N, F}, DType::F32, dev));
  auto arg = std::make_shared<Tensor>(Tensor::empty({op == Reduce::kMax ? N : 0, F}, DType::I32, dev));
  KernelCase k;
  const bool bwd = s.backward;
  if (s.cusparse) {  // (forward, sum or mean, on the GPU: make_kernel_case has checked)
#ifdef GNN_WITH_CUDA
    k.step = cusparse_step(op, d, x, y, F);
#endif
  } else {
    const bool cuda = s.cuda;
    k.graph_safe = cuda;
    k.step = [=] {
      int32_t* am = op == Reduce::kMax ? arg->i32() : nullptr;
      if (!cuda) {
        spmm_forward_cpu(y->f32(), am, x->f32(), nullptr, d->v, F, F, F, op);
        if (bwd) spmm_backward_x_cpu(dx->f32(), y->f32(), am, nullptr, d->v, F, F, F, op);
        return;
      }
#ifdef GNN_WITH_CUDA
      spmm_forward_cuda(y->f32(), am, x->f32(), nullptr, d->v, F, F, F, op, nullptr, cuda_stream(0));
      if (bwd) spmm_backward_x_cuda(dx->f32(), y->f32(), am, nullptr, d->v, F, F, F, op, nullptr, cuda_stream(0));
#endif
    };
  }
  // forward: read one x row per edge, write y, read indptr and indices (+ write argmax for max)
  const double fwd =
      4.0 * (double(E) * F + double(N) * F + double(N + 1) + double(E)) + (op == Reduce::kMax ? 4.0 * N * F : 0);
  // backward: read one dy row per edge, write dx, read the CSC (+ argmax rows per edge for max)
  const double bwdb =
      4.0 * (double(E) * F + double(N) * F + double(N + 1) + 2.0 * E) + (op == Reduce::kMax ? 4.0 * E * F : 0);
  k.bytes = fwd + (bwd ? bwdb : 0);
  k.flops = double(E) * F * (bwd ? 2 : 1);
  return k;
}

}  // namespace

std::vector<KernelEntry> spmm_kernels() {
  return on_edges({
      {"spmm-sum", true, true, [](const KernelShape& s) { return spmm_case(Reduce::kSum, s); }},
      {"spmm-mean", true, true, [](const KernelShape& s) { return spmm_case(Reduce::kMean, s); }},
      {"spmm-max", true, true, [](const KernelShape& s) { return spmm_case(Reduce::kMax, s); }},
  });
}

}  // namespace gnn::cli
