// Graph instance norm, with an optional residual before it and an activation after it: per graph g
// (node rows graph_ptr[g] .. graph_ptr[g+1]-1) and channel f, with s = x + res (res [N, F] or null),
//   z = (s - mean_g) / sqrt(var_g + eps) * gamma[f] + beta[f]   (gamma, beta [F] or null);   y = act(z)
//   dz = dy * act'(z) (z recomputed, never stored);   dxhat = dz * gamma
//   ds = (dxhat - mean_g(dxhat) - xhat * mean_g(dxhat * xhat)) * rstd_g   (dx = dres = ds)
//   dgamma = sum over nodes of dz * xhat, dbeta = sum of dz (per graph, then graphs in order)
// x, y, dx [N, F]; mean, rstd [G, F] (kept by the forward for the backward). A graph with no rows
// gives mean 0 and rstd 1/sqrt(eps). The mean and the variance are summed in double, then rounded, as are
// the backward's two sums over the rows (kernels/layer_norm.h says why). Without res and act it is the plain norm, with
// its bits; with them, the bits of add, norm and activation composed (GNN layers' GELU(norm(f(x) + x)) in one pass each
// way). y may be x or res (in place); dx must not alias x or res (it may hold dz between the backward's passes). With a
// RowsDropout the activation's output is dropped out in the same pass, y = drop(act(z)), and the backward masks dy
// before the rest: the bits of dropout (or dropout_configs) applied to the norm's y.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "base/common.h"
#include "kernels/activation.h"
#include "kernels/dropout.h"
#include "kernels/layer_norm.h"  // (norm_square, norm_rstd)

namespace gnn {

template <class T>
void instance_norm_forward_ref(T* y, T* mean, T* rstd, const T* x, const T* res, const T* gamma, const T* beta,
                               const int64_t* graph_ptr, int64_t G, int64_t F, T eps, Act act,
                               const RowsDropout<T>& drop = {}) {
  auto s = [&](int64_t i) { return res ? x[i] + res[i] : x[i]; };
  for (int64_t g = 0; g < G; ++g) {
    const int64_t b = graph_ptr[g], e = graph_ptr[g + 1], n = e - b;
    for (int64_t f = 0; f < F; ++f) {
      double sum = 0;
      for (int64_t i = b; i < e; ++i) sum += double(s(i * F + f));
      const T m = n ? T(sum / double(n)) : T(0);
      double v = 0;
      for (int64_t i = b; i < e; ++i) v += double((s(i * F + f) - m) * (s(i * F + f) - m));
      if (std::isinf(v)) {  // (norm_rstd)
        v = 0;
        for (int64_t i = b; i < e; ++i) v += norm_square(s(i * F + f) - m);
      }
      const T rs = norm_rstd(n ? v / double(n) : 0.0, eps);
      mean[g * F + f] = m, rstd[g * F + f] = rs;
      for (int64_t i = b; i < e; ++i)
        y[i * F + f] = drop.apply(
            act_value(act, (s(i * F + f) - m) * rs * (gamma ? gamma[f] : T(1)) + (beta ? beta[f] : T(0)), T(0)), i, f,
            F);
    }
  }
}

// dx doubles as the store of dz between the two passes. With `held` (x's gradient so far, which dx may be;
// only without an activation or dropout, when no dz is stored) dx = held + the norm's dx, the bits of
// adding the two after (ag::grad_sum).
template <class T>
void instance_norm_backward_ref(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* res, const T* mean,
                                const T* rstd, const T* gamma, const T* beta, const int64_t* graph_ptr, int64_t G,
                                int64_t F, Act act, const RowsDropout<T>& drop = {}, const T* held = nullptr) {
  std::vector<T> own;  // the norm's dx apart from held's (dx may be held itself)
  T* const out = dx;
  if (held) {
    own.resize(static_cast<size_t>(graph_ptr[G] * F));
    dx = own.data();
  }
  auto s = [&](int64_t i) { return res ? x[i] + res[i] : x[i]; };
  for (int64_t f = 0; f < F; ++f) {
    if (dgamma) dgamma[f] = 0;
    if (dbeta) dbeta[f] = 0;
  }
  for (int64_t g = 0; g < G; ++g) {
    const int64_t b = graph_ptr[g], e = graph_ptr[g + 1], n = e - b;
    for (int64_t f = 0; f < F; ++f) {
      const T m = mean[g * F + f], rs = rstd[g * F + f], gm = gamma ? gamma[f] : T(1), bt = beta ? beta[f] : T(0);
      double s1d = 0, s2d = 0;  // (in double, as the forward's sums: a common offset in dy would go)
      for (int64_t i = b; i < e; ++i) {
        const T xh = (s(i * F + f) - m) * rs;
        const T dyd = drop.apply(dy[i * F + f], i, f, F);  // dropout's backward first
        const T d = act == Act::kNone ? dyd : dyd * act_derivative(act, xh * gm + bt, T(0));
        dx[i * F + f] = d;
        s1d += double(d * gm), s2d += double(d * gm * xh);
        if (dgamma) dgamma[f] += d * xh;
        if (dbeta) dbeta[f] += d;
      }
      const T s1 = n ? T(s1d / double(n)) : T(0), s2 = n ? T(s2d / double(n)) : T(0);
      for (int64_t i = b; i < e; ++i) {
        const T xh = (s(i * F + f) - m) * rs;
        dx[i * F + f] = (dx[i * F + f] * gm - s1 - xh * s2) * rs;
      }
    }
  }
  if (held)
    for (int64_t i = 0; i < graph_ptr[G] * F; ++i) out[i] = held[i] + dx[i];
}

void instance_norm_forward_cpu(float* y, float* mean, float* rstd, const float* x, const float* res, const float* gamma,
                               const float* beta, const int64_t* graph_ptr, int64_t G, int64_t F, float eps, Act act,
                               const RowsDropout<float>& drop = {});
void instance_norm_backward_cpu(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                                const float* res, const float* mean, const float* rstd, const float* gamma,
                                const float* beta, const int64_t* graph_ptr, int64_t G, int64_t F, Act act,
                                const RowsDropout<float>& drop = {}, const float* held = nullptr);
// Whether an output (y, or dx) of N rows qualifies for the host kernels' streaming stores: 4M floats and up
// (16 MiB, past what the next op finds in cache), 64-byte aligned, F a multiple of 16. The kernels then
// stream it where their blocks fit the kept scratch (instance_norm_cpu.cpp says where and why), and prefetch
// the rows of any tensor of that size whatever its alignment. The same bits either way.
bool instance_norm_streams(const float* out, int64_t N, int64_t F);
// CUDA: a block of 8 warps per (graph, 32 channels) strides over the graph's rows; the warps' partial
// sums are combined in warp order (the same bits every run). dgamma and dbeta are summed per graph
// into workspace [2, G, F] and then over graphs in order, as the CPU does.
void instance_norm_forward_cuda(float* y, float* mean, float* rstd, const float* x, const float* res,
                                const float* gamma, const float* beta, const int64_t* graph_ptr, int64_t G, int64_t F,
                                float eps, Act act, Stream stream);
void instance_norm_backward_cuda(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                                 const float* res, const float* mean, const float* rstd, const float* gamma,
                                 const float* beta, const int64_t* graph_ptr, int64_t G, int64_t F, Act act,
                                 float* workspace, Stream stream);

}  // namespace gnn
