// Activations on the GPU (kernels/activation.h), with the CPU's scalar formulas (act_value,
// act_derivative): a thread per element for act and bias_act forward. bias_act's backward with a bias
// gradient writes dx and sums it down the columns in the same pass (kernels/column_sum.cuh: fixed row
// slices, warps combined in order, the same bits every run); without one it is a map like the others.
#include <cuda_runtime.h>

#include "kernels/activation.h"
#include "kernels/column_sum.cuh"
#include "kernels/cuda_launch.cuh"

namespace gnn {
namespace {

template <Act A>
__global__ void act_fwd_kernel(float* y, const float* x, int64_t n, float slope) {
  GNN_GRID_STRIDE(i, n)
  y[i] = act_value(A, __ldg(x + i), slope);
}

template <Act A>
__global__ void act_bwd_kernel(float* dx, const float* dy, const float* x, int64_t n, float slope) {
  GNN_GRID_STRIDE(i, n)
  dx[i] = __ldg(dy + i) * act_derivative(A, __ldg(x + i), slope);
}

template <Act A>
struct BiasActGrad {  // dx[r, f] = dy[r, f] act'(x[r, f] + b[f]), stored and summed
  float* dx;
  const float *dy, *x, *b;
  int64_t F;
  float slope;
  __device__ float operator()(int64_t r, int64_t f) const {
    const int64_t i = r * F + f;
    const float d = __ldg(dy + i) * act_derivative(A, __ldg(x + i) + (b ? __ldg(b + f) : 0.0f), slope);
    dx[i] = d;
    return d;
  }
};

// y = act(x + b); z (when not null) keeps x + b. x may be y itself.
template <Act A>
__global__ void bias_act_fwd_kernel(float* y, float* z, const float* x, const float* b, int64_t R, int64_t F,
                                    float slope) {
  GNN_GRID_STRIDE(i, R * F) {
    const float v = x[i] + (b ? __ldg(b + i % F) : 0.0f);
    if (z) z[i] = v;
    y[i] = act_value(A, v, slope);
  }
}

template <Act A>
__global__ void bias_act_bwd_kernel(float* dx, const float* dy, const float* x, const float* b, int64_t R, int64_t F,
                                    float slope) {
  const BiasActGrad<A> g{dx, dy, x, b, F, slope};
  GNN_GRID_STRIDE(i, R * F) g(i / F, i % F);
}

__global__ void gate_fwd_kernel(float* y, const float* x, const float* z, const float* b, int64_t R, int64_t F) {
  GNN_GRID_STRIDE(i, R * F)
  y[i] = __ldg(x + i) * act_value(Act::kSigmoid, __ldg(z + i) + (b ? __ldg(b + i % F) : 0.0f), 0.0f);
}

__global__ void gate_bwd_kernel(float* dx, float* dz, const float* dy, const float* x, const float* z, const float* b,
                                int64_t R, int64_t F) {
  GNN_GRID_STRIDE(i, R * F) {
    // the sigmoid once: s (1 - s) is act_derivative's formula
    const float g = __ldg(dy + i), s = act_value(Act::kSigmoid, __ldg(z + i) + (b ? __ldg(b + i % F) : 0.0f), 0.0f);
    dx[i] = g * s;
    dz[i] = g * __ldg(x + i) * (s * (1.0f - s));
  }
}

}  // namespace

void gate_forward_cuda(float* y, const float* x, const float* z, const float* b, int64_t R, int64_t F, Stream stream) {
  GNN_LAUNCH_N("gate_forward_cuda", R * F, gate_fwd_kernel, y, x, z, b, R, F);
}

void gate_backward_cuda(float* dx, float* dz, float* db, const float* dy, const float* x, const float* z,
                        const float* b, int64_t R, int64_t F, float* workspace, Stream stream) {
  GNN_LAUNCH_N("gate_backward_cuda", R * F, gate_bwd_kernel, dx, dz, dy, x, z, b, R, F);
  if (db) column_sum_cuda(db, dz, R, F, false, workspace, stream);
}

void act_forward_cuda(float* y, const float* x, int64_t n, Act a, float slope, Stream stream) {
  if (n == 0) return;
  dispatch_act(a, [&](auto A) {
    act_fwd_kernel<decltype(A)::value><<<grid_for(n, "act_forward_cuda"), kThreads, 0, stream>>>(y, x, n, slope);
  });
  GNN_CUDA_LAUNCH_CHECK("act_forward_cuda");
}

void act_backward_cuda(float* dx, const float* dy, const float* x, int64_t n, Act a, float slope, Stream stream) {
  if (n == 0) return;
  dispatch_act(a, [&](auto A) {
    act_bwd_kernel<decltype(A)::value><<<grid_for(n, "act_backward_cuda"), kThreads, 0, stream>>>(dx, dy, x, n, slope);
  });
  GNN_CUDA_LAUNCH_CHECK("act_backward_cuda");
}

void bias_act_forward_cuda(float* y, float* z, const float* x, const float* b, int64_t R, int64_t F, Act a, float slope,
                           Stream stream) {
  if (R * F == 0) return;
  dispatch_act(a, [&](auto A) {
    constexpr Act kA = decltype(A)::value;
    bias_act_fwd_kernel<kA><<<grid_for(R * F, "bias_act_forward_cuda"), kThreads, 0, stream>>>(y, z, x, b, R, F, slope);
  });
  GNN_CUDA_LAUNCH_CHECK("bias_act_forward_cuda");
}

void bias_act_backward_cuda(float* dx, float* db, const float* dy, const float* x, const float* b, int64_t R, int64_t F,
                            Act a, float slope, float* workspace, Stream stream) {
  dispatch_act(a, [&](auto A) {
    using Grad = BiasActGrad<decltype(A)::value>;
    if (db)
      return column_sum_launch("bias_act_backward_cuda", db, Grad{dx, dy, x, b, F, slope}, R, F, false, workspace,
                               stream);
    if (R * F == 0) return;
    constexpr Act kA = decltype(A)::value;
    bias_act_bwd_kernel<kA>
        <<<grid_for(R * F, "bias_act_backward_cuda"), kThreads, 0, stream>>>(dx, dy, x, b, R, F, slope);
    GNN_CUDA_LAUNCH_CHECK("bias_act_backward_cuda");
  });
}

}  // namespace gnn
