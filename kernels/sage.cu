// Fused SAGE on the GPU (kernels/sage.h). Forward, four launches:
//   h[:, :F] = mean gather of x   (the tuned SpMM kernel, writing with row stride 2F)
//   h[:, F:] = x                  (one 2-D copy)
//   z = h W                       (one cuBLAS product with K = 2F)
//   z += b, y = act(z)            (one epilogue; z kept only for training)
// The composed path is seven (SpMM, two concat copies, GEMM, bias, activation, and the concat's
// output written and read once more). Backward, from the saved z and h:
//   dz = dy * act'(z) and db = its column sums, one pass (fixed order, no atomics);  dW = h^T dz (one product)
//   dx = dz W_root^T (straight into dx);  dagg = dz W_agg^T;  dx += transposed mean gather of dagg
// Every step has a fixed reduction order, so two runs give the same bits.
#include <cuda_runtime.h>

#include "kernels/cuda_launch.cuh"
#include "kernels/elementwise.h"
#include "kernels/sage.h"

namespace gnn {

void sage_forward_cuda(float* y, float* z, float* h, float* scratch, const float* x, const CsrView& g, const float* W,
                       const float* b, int64_t F, int64_t O, Act act, float slope, const BlasHandle& blas,
                       Stream stream) {
  GNN_CHECK((z == nullptr) == (h == nullptr), "sage_forward_cuda: z and h are both kept (training) or neither");
  const int64_t N = g.num_rows;
  if (N == 0 || O == 0) return;
  float* hb = h ? h : scratch;  // [N, 2F]
  GNN_CHECK(hb != nullptr, "sage_forward_cuda: inference needs scratch of N * 2F floats");
  spmm_forward_cuda(hb, nullptr, x, nullptr, g, F, F, 2 * F, Reduce::kMean, nullptr, stream);
  copy_block_cuda(hb, 2 * F, F, x, F, 0, N, F, stream);
  float* zb = z ? z : y;
  gemm_cuda(false, false, N, O, 2 * F, 1.0f, hb, 2 * F, W, O, 0.0f, zb, O, blas, stream);
  bias_act_forward_cuda(y, z, zb, b, N, O, act, slope, stream);
}

int64_t sage_backward_workspace_cuda(int64_t N, int64_t F, int64_t O) {
  return N * O + N * F + column_sum_workspace_cuda(N, O);
}

void sage_backward_cuda(float* dx, float* dW, float* db, const float* dy, const float* z, const float* h,
                        const CsrView& g, const float* W, int64_t F, int64_t O, Act act, float slope, float* workspace,
                        const BlasHandle& blas, Stream stream) {
  const int64_t N = g.num_rows;
  float* dz = workspace;  // [N, O]
  float* dagg = dz + N * O;  // [N, F], then db's column-sum partials
  bias_act_backward_cuda(dz, db, dy, z, nullptr, N, O, act, slope, dagg + N * F, stream);  // db from the same pass
  gemm_cuda(true, false, 2 * F, O, N, 1.0f, h, 2 * F, dz, O, 0.0f, dW, O, blas, stream);  // dW = h^T dz
  gemm_cuda(false, true, N, F, O, 1.0f, dz, O, W + F * O, O, 0.0f, dx, F, blas, stream);  // dx = dz W_root^T
  gemm_cuda(false, true, N, F, O, 1.0f, dz, O, W, O, 0.0f, dagg, F, blas, stream);  // dagg = dz W_agg^T
  spmm_backward_x_cuda(dx, dagg, nullptr, nullptr, g, F, F, F, Reduce::kMean, /*base=*/dx, stream);
}

// The narrowing layer's mean after its product (kernels/sage.h): one thread per output value, the sums in
// the CPU's order and each product and sum rounded on its own (__fmul_rn / __fadd_rn: no contraction into
// a multiply-add), so the GPU gives the host's bits.
__global__ void sage_combine_fwd_kernel(float* y, const float* q, const float* b, const int32_t* indptr,
                                        const int32_t* indices, int64_t N, int64_t C, int64_t O) {
  const int64_t W = C * O;
  GNN_GRID_STRIDE(i, N * W) {
    const int64_t v = i / W, j = i % W, c = j / O, o = j % O;
    const int32_t e0 = indptr[v], e1 = indptr[v + 1];
    float acc = 0.0f;
    for (int32_t p = e0; p < e1; ++p) acc = __fadd_rn(acc, q[int64_t(indices[p]) * 2 * W + c * 2 * O + o]);
    const float mean = e1 > e0 ? __fmul_rn(acc, 1.0f / float(e1 - e0)) : 0.0f;
    const float z = __fadd_rn(mean, q[v * 2 * W + c * 2 * O + O + o]);
    y[i] = b ? __fadd_rn(z, b[o]) : z;
  }
}

__global__ void sage_combine_bwd_kernel(float* dq, const float* dy, const int32_t* indptr, const int32_t* csc_indptr,
                                        const int32_t* csc_indices, int64_t S, int64_t C, int64_t O) {
  const int64_t W = C * O;
  GNN_GRID_STRIDE(i, S * W) {
    const int64_t u = i / W, j = i % W, c = j / O, o = j % O;
    float acc = 0.0f;
    for (int32_t k = csc_indptr[u]; k < csc_indptr[u + 1]; ++k) {
      const int32_t v = csc_indices[k];
      acc = __fadd_rn(acc, __fmul_rn(1.0f / float(indptr[v + 1] - indptr[v]), dy[int64_t(v) * W + j]));
    }
    dq[u * 2 * W + c * 2 * O + o] = acc;
    dq[u * 2 * W + c * 2 * O + O + o] = dy[i];
  }
}

void sage_combine_forward_cuda(float* y, const float* q, const float* b, const CsrView& g, int64_t C, int64_t O,
                               Stream stream) {
  GNN_LAUNCH_N("sage_combine_forward_cuda", g.num_rows * C * O, sage_combine_fwd_kernel, y, q, b, g.indptr, g.indices,
               g.num_rows, C, O);
}

void sage_combine_backward_cuda(float* dq, const float* dy, const CsrView& g, int64_t C, int64_t O, Stream stream) {
  GNN_LAUNCH_N("sage_combine_backward_cuda", g.num_cols * C * O, sage_combine_bwd_kernel, dq, dy, g.indptr,
               g.csc_indptr, g.csc_indices, g.num_cols, C, O);
}

}  // namespace gnn
