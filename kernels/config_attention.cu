// Cross-config attention on the GPU (kernels/config_attention.h): one thread per (row, channel), each
// walking the row's C configs, so neighbouring threads read neighbouring channels of one config.
#include <cuda_runtime.h>

#include "kernels/config_attention.h"
#include "kernels/cuda_launch.cuh"
#include "kernels/elementwise.h"

namespace gnn {
namespace {

__global__ void config_attention_fwd_kernel(float* y, float* w, const float* x, const float* res, int64_t R, int64_t C,
                                            int64_t D, const float* beta, Act a, RowsDropout<float> drop) {
  const float b = __ldg(beta);
  GNN_GRID_STRIDE(t, R * D) {
    const int64_t r = t / D, d = t % D;
    const float* xr = x + r * C * D + d;
    float m = __ldg(xr) * b;
    for (int64_t c = 1; c < C; ++c) m = fmaxf(m, __ldg(xr + c * D) * b);
    float sum = 0.0f;
    for (int64_t c = 0; c < C; ++c) sum += expf(__ldg(xr + c * D) * b - m);
    const float inv = 1.0f / sum;
    for (int64_t c = 0; c < C; ++c) {
      const float xv = __ldg(xr + c * D), wv = expf(xv * b - m) * inv;
      w[r * C * D + c * D + d] = wv;
      const int64_t i = r * C * 2 * D + c * 2 * D + d, j = i + D;
      const float z1 = res ? xv + __ldg(res + i) : xv, z2 = res ? xv * wv + __ldg(res + j) : xv * wv;
      float y1 = act_value(a, z1, 0.0f), y2 = act_value(a, z2, 0.0f);
      if (drop.mask.on) {
        const int64_t m = drop.first(r, c, C, 2 * D) + d;
        y1 = drop.mask.apply(y1, m);
        y2 = drop.mask.apply(y2, m + D);
      }
      y[i] = y1;
      y[j] = y2;
    }
  }
}

// dz recomputed twice (once for the sums, once for dx) rather than stored; part[r * D + d] gets the
// (row, channel)'s share of dbeta. dy masked first under dropout, as the host does.
__global__ void config_attention_bwd_kernel(float* dx, float* dres, float* part, const float* dy, const float* x,
                                            const float* w, const float* res, int64_t R, int64_t C, int64_t D,
                                            const float* beta, Act a, RowsDropout<float> drop) {
  const float b = __ldg(beta);
  GNN_GRID_STRIDE(t, R * D) {
    const int64_t r = t / D, d = t % D;
    auto dz = [&](int64_t c, float& g1, float& g2) {
      const int64_t i = r * C * 2 * D + c * 2 * D + d, j = i + D;
      const float xv = __ldg(x + r * C * D + c * D + d), wv = __ldg(w + r * C * D + c * D + d);
      const float z1 = res ? xv + __ldg(res + i) : xv, z2 = res ? xv * wv + __ldg(res + j) : xv * wv;
      float d1 = __ldg(dy + i), d2 = __ldg(dy + j);
      if (drop.mask.on) {
        const int64_t m = drop.first(r, c, C, 2 * D) + d;
        d1 = drop.mask.apply(d1, m);
        d2 = drop.mask.apply(d2, m + D);
      }
      g1 = d1 * act_derivative(a, z1, 0.0f);
      g2 = d2 * act_derivative(a, z2, 0.0f);
    };
    float aw = 0.0f, wx = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      float g1, g2;
      dz(c, g1, g2);
      const float xv = __ldg(x + r * C * D + c * D + d), wv = __ldg(w + r * C * D + c * D + d);
      aw += g2 * xv * wv;
      wx += wv * xv;
    }
    float db = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      float g1, g2;
      dz(c, g1, g2);
      const float xv = __ldg(x + r * C * D + c * D + d), wv = __ldg(w + r * C * D + c * D + d), av = g2 * xv;
      dx[r * C * D + c * D + d] = g1 + g2 * wv + b * wv * (av - aw);
      db += av * wv * (xv - wx);
      if (dres) {
        const int64_t i = r * C * 2 * D + c * 2 * D + d;
        dres[i] = g1;
        dres[i + D] = g2;
      }
    }
    part[t] = db;
  }
}

}  // namespace

int64_t config_attention_workspace_cuda(int64_t R, int64_t D) { return R * D; }

void config_attention_forward_cuda(float* y, float* w, const float* x, const float* res, int64_t R, int64_t C,
                                   int64_t D, const float* beta, Act a, RowsDropout<float> drop, Stream stream) {
  GNN_LAUNCH_N("config_attention_forward_cuda", R * D, config_attention_fwd_kernel, y, w, x, res, R, C, D, beta, a,
               drop);
}

void config_attention_backward_cuda(float* dx, float* dres, float* dbeta, const float* dy, const float* x,
                                    const float* w, const float* res, int64_t R, int64_t C, int64_t D,
                                    const float* beta, Act a, RowsDropout<float> drop, float* workspace,
                                    Stream stream) {
  if (R * D > 0) {
    config_attention_bwd_kernel<<<grid_for(R * D, "config_attention_backward_cuda"), kThreads, 0, stream>>>(
        dx, dres, workspace, dy, x, w, res, R, C, D, beta, a, drop);
    GNN_CUDA_LAUNCH_CHECK("config_attention_backward_cuda");
  }
  sum_cuda(dbeta, workspace, R * D, stream);  // 0 when there is nothing
}

}  // namespace gnn
