// Registry cases (bench/registry.h) for the dense GEMM: the blocked CPU kernel, or cuBLAS on the GPU; and
// the GEMM with a bias row (a dense layer without activation, ag::matmul_bias).
#include <memory>

#include "bench/registry_cases.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "runtime/cuda.h"

namespace gnn::cli {

namespace {

// gemm: [N*C, F] x [F, F], the dense half of a layer on config-batched activations; with --backward
// also dA = dC B^T and dB = A^T dC.
// gemm-bias: the same with a bias added to every row of C, in the GEMM's store on the CPU (cuBLAS and then the
// row on the GPU). Against gemm, the time the bias costs; it was one more read and write of C.
KernelCase gemm_case(const KernelShape& s, bool with_bias) {
  const int64_t M = s.nodes * s.configs, F = s.features;
  const Device dev = device_of(s);
  auto a = std::make_shared<Tensor>(random_tensor(M, F, 1).to(dev));
  auto b = std::make_shared<Tensor>(random_tensor(F, F, 2).to(dev));
  auto c = std::make_shared<Tensor>(Tensor::empty({M, F}, DType::F32, dev));
  auto da = std::make_shared<Tensor>(Tensor::empty({M, F}, DType::F32, dev));
  auto db = std::make_shared<Tensor>(Tensor::empty({F, F}, DType::F32, dev));
  auto bias = std::make_shared<Tensor>(random_tensor(1, F, 3).reshape({F}).to(dev));
  const bool bwd = s.backward, cuda = s.cuda;
  KernelCase k;
  k.step = [=] {
    auto mm = [cuda](bool ta, bool tb, int64_t m, int64_t n, int64_t kk, const float* A, const float* B, float* C) {
      if (!cuda) return gemm_cpu(ta, tb, m, n, kk, 1.0f, A, ta ? m : kk, B, tb ? kk : n, 0.0f, C, n);
#ifdef GNN_WITH_CUDA
      gemm_cuda(ta, tb, m, n, kk, 1.0f, A, ta ? m : kk, B, tb ? kk : n, 0.0f, C, n, cuda_blas(0), cuda_stream(0));
#endif
    };
    if (!with_bias) {
      mm(false, false, M, F, F, a->f32(), b->f32(), c->f32());
    } else if (!cuda) {
      gemm_bias_cpu(false, false, M, F, F, a->f32(), F, b->f32(), F, bias->f32(), c->f32(), F);
    } else {
      mm(false, false, M, F, F, a->f32(), b->f32(), c->f32());
#ifdef GNN_WITH_CUDA
      add_row_cuda(c->f32(), c->f32(), bias->f32(), M, F, cuda_stream(0));
#endif
    }
    if (bwd) {
      mm(false, true, M, F, F, c->f32(), b->f32(), da->f32());
      mm(true, false, F, F, M, a->f32(), c->f32(), db->f32());
    }
  };
  k.graph_safe = cuda;
  k.bytes = 4.0 * (2.0 * M * F + F * F) * (bwd ? 3 : 1);  // read A, write C (B is tiny); 3 products with backward
  k.flops = 2.0 * double(M) * F * F * (bwd ? 3 : 1);
  return k;
}

}  // namespace

std::vector<KernelEntry> gemm_kernels() {
  return {
      {"gemm", true, true, [](const KernelShape& s) { return gemm_case(s, false); }},
      {"gemm-bias", true, true, [](const KernelShape& s) { return gemm_case(s, true); }},
  };
}

}  // namespace gnn::cli
