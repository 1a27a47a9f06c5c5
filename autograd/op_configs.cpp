// Config-batched plumbing (../shared/DESIGN.md, the data path step 4). Activations that depend on the
// configuration are laid out node-major, [N, C*F]: row n holds config 0's F values, then config 1's...
// The same bytes read as [(N*C), F] put one (node, config) pair per row, so a dense layer is one GEMM
// and a graph gather reads C*F contiguous values per neighbour. These ops move between the two views
// and build the joined input of an early-join model.
//   reshape:        y = x viewed as [rows, cols] (same element order);   dx = dy viewed back
//   join_configs:   x [N, A] (config-independent), c [N, C*B] (per config)
//                   y[n, k*(A+B) + j] = x[n, j] for j < A, c[n, k*B + j - A] otherwise;   y [N, C*(A+B)]
//                   dx[n, j] = sum_k dy[n, k*(A+B) + j];  dc = the B-wide blocks of dy
//                   with base [N, C*(A+B)]: y = that + base in the same pass (add's bits), dbase = dy
//   keep_grad_rows: y = x;  dx[r] = dy[r] where keep[r] != 0, else 0
//                   (segment training: forward on the whole graph, gradients only through a segment);
//                   keep on the host or on x's device (then nothing is copied per call)
//   config_attention: x [N, C*D], beta [1] -> y [N, C*2D], per (n, c): act([x | x * softmax_c(beta x)]
//                   + residual), then dropout if asked; forward and backward in kernels/config_attention.h
//                   (reference, CPU, CUDA)
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/config_attention.h"

namespace gnn::ag {

Var reshape(const Var& x, int64_t rows, int64_t cols) {
  GNN_CHECK(x.defined(), "reshape: undefined input");
  GNN_CHECK(rows >= 0 && cols >= 0 && rows * cols == x.value().numel(), "reshape: cannot view ", x.value().desc(),
            " as [", rows, ", ", cols, "]");
  const Shape from = x.shape();
  // A view shares storage; the tape never writes a value after recording it, so sharing is safe.
  return record("reshape", x.value().reshape({rows, cols}), {x},
                [x = GradRef(x), from](const Tensor& dy) { accumulate(x, dy.reshape(from.vec())); });
}

namespace {

// join_configs: y viewed as [N*C, A+B]: x's row n fills the first A columns of rows n*C .. n*C+C-1, and c
// viewed as [N*C, B] the last B columns of every row. Its backward for x: dx[n, j] = sum_k dy[n, k*(A+B) + j],
// k in order.
template <class T>
void join_configs_host(T* y, const T* x, const T* c, int64_t N, int64_t A, int64_t B, int64_t C) {
  const int64_t W = C * (A + B);
  for (int64_t k = 0; k < C; ++k) copy_block(y, W, k * (A + B), x, A, 0, N, A);
  copy_block(y, A + B, A, c, B, 0, N * C, B);
}
// join_configs with a base: y = the join + base, element by element (add's bits), in one pass that writes y
// once (a join and then an add wrote it, read it back and wrote it again).
template <class T>
void join_configs_add_host(T* y, const T* x, const T* c, const T* base, int64_t N, int64_t A, int64_t B, int64_t C) {
  const int64_t W = C * (A + B);
#pragma omp parallel for schedule(static) if (N * W > (1 << 16))
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * A;
    for (int64_t k = 0; k < C; ++k) {
      T* yr = y + n * W + k * (A + B);
      const T* br = base + n * W + k * (A + B);
      const T* cr = c + (n * C + k) * B;
      for (int64_t j = 0; j < A; ++j) yr[j] = xr[j] + br[j];
      for (int64_t j = 0; j < B; ++j) yr[A + j] = cr[j] + br[A + j];
    }
  }
}
template <class T>
void join_configs_dx_host(T* dx, const T* dy, int64_t N, int64_t A, int64_t B, int64_t C) {
  const int64_t W = C * (A + B);
#pragma omp parallel for if (N * W > (1 << 16))
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < A; ++j) dx[n * A + j] = 0;
    for (int64_t k = 0; k < C; ++k)
      for (int64_t j = 0; j < A; ++j) dx[n * A + j] += dy[n * W + k * (A + B) + j];
  }
}
// keep_grad_rows' backward: dx = dy on the rows kept, 0 elsewhere (keep: u8 [R], on the host or the GPU).
template <class T>
void mask_rows_host(T* dx, const T* dy, const Tensor& keep, int64_t R, int64_t W) {
  const uint8_t* k = keep.data_as<uint8_t>();
#pragma omp parallel for if (R * W > (1 << 16))
  for (int64_t r = 0; r < R; ++r) {
    if (k[r]) std::memcpy(dx + r * W, dy + r * W, size_t(W) * sizeof(T));
    else std::memset(dx + r * W, 0, size_t(W) * sizeof(T));
  }
}
constexpr Kernel join_configs_k = GNN_HOST_KERNEL(join_configs_host, join_configs_cuda);
constexpr Kernel join_configs_add_k{
    "join_configs_add", [](auto... a) { join_configs_add_host(a...); }, [](auto... a) { join_configs_add_host(a...); },
    [](const Tensor& on, float* y, const float* x, const float* c, const float* base, int64_t N, int64_t A, int64_t B,
       int64_t C) {  // the join, then add's kernel: its bits
      join_configs_cuda(y, x, c, N, A, B, C, on.stream());
      add_cuda(y, y, base, N * C * (A + B), 1.0f, on.stream());
    }};
constexpr Kernel join_configs_dx_k{
    "join_configs_dx", [](auto... a) { join_configs_dx_host(a...); }, [](auto... a) { join_configs_dx_host(a...); },
    [](const Tensor& on, float* dx, const float* dy, int64_t N, int64_t A, int64_t B, int64_t C) {
      block_sum_cuda(dx, dy, N, A, C, C * (A + B), A + B, 1.0f, on.stream());
    }};
constexpr Kernel mask_rows_k{
    "mask_rows", [](auto... a) { mask_rows_host(a...); }, [](auto... a) { mask_rows_host(a...); },
    [](const Tensor& on, float* dx, const float* dy, const Tensor& keep, int64_t R, int64_t W) {
      const Tensor k = keep.on(on.device());  // a batch moved by Batch::to has it there already
      mask_rows_cuda(dx, dy, k.data_as<uint8_t>(), R, W, on.stream());
    }};

}  // namespace

Var join_configs(const Var& x, const Var& c, int64_t configs, const Var& base) {
  check_arg_on("join_configs", "x", x, 2, x.dtype(), x.device());
  check_arg_on("join_configs", "c", c, 2, x.dtype(), x.device());
  if (base.defined()) check_arg_on("join_configs", "base", base, 2, x.dtype(), x.device());
  const int64_t N = x.size(0), A = x.size(1), C = configs;
  GNN_CHECK(C >= 1 && c.size(0) == N && c.size(1) % C == 0, "join_configs: c ", c.value().desc(), " is not [", N, ", ",
            C, " * B] for x ", x.value().desc());
  const int64_t B = c.size(1) / C, W = C * (A + B);
  GNN_CHECK(!base.defined() || base.shape() == Shape({N, W}), "join_configs: base ", base.value().desc(),
            " is not the joined [", N, ", ", W, "]");
  return dispatch_dev("join_configs", x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), Shape{N, W});
    if (base.defined())
      run<T>(join_configs_add_k, y, ptr<T>(y), ptr<T>(x.value()), ptr<T>(c.value()), ptr<T>(base.value()), N, A, B, C);
    else run<T>(join_configs_k, y, ptr<T>(y), ptr<T>(x.value()), ptr<T>(c.value()), N, A, B, C);
    std::vector<Var> inputs{x, c};
    if (base.defined()) inputs.push_back(base);
    return record("join_configs", y, inputs,
                  [x = GradRef(x), c = GradRef(c), base = GradRef(base), N, A, B, C, W](const Tensor& dy) {
                    const T* g = ptr<T>(dy);
                    accumulate(base, dy);  // add's backward: dy itself (nothing when there is no base)
                    if (x.requires_grad()) {
                      Tensor dx = empty_like(dy, Shape{N, A});
                      run<T>(join_configs_dx_k, dy, ptr<T>(dx), g, N, A, B, C);
                      accumulate(x, dx);
                    }
                    if (c.requires_grad()) {
                      Tensor dc = empty_like(dy, Shape{N, C * B});
                      copy_block_on<T>(dy, ptr<T>(dc), B, 0, g, A + B, A, N * C, B);
                      accumulate(c, dc);
                    }
                  });
  });
}

constexpr Kernel config_attention_forward_k = GNN_KERNEL(config_attention_forward);
constexpr Kernel config_attention_backward_k{
    "config_attention_backward", [](auto... a) { config_attention_backward_ref(a...); },
    [](auto... a) { config_attention_backward_cpu(a...); },
    [](const Tensor& on, float* dx, float* dres, float* dbeta, const float* dy, const float* x, const float* w,
       const float* res, int64_t R, int64_t C, int64_t D, const float* beta, Act act, RowsDropout<float> drop) {
      const Tensor ws = empty_like(on, Shape{std::max<int64_t>(1, config_attention_workspace_cuda(R, D))});
      config_attention_backward_cuda(dx, dres, dbeta, dy, x, w, res, R, C, D, beta, act, drop, ws.f32(), on.stream());
    }};

Var config_attention(const Var& x, const Var& beta, int64_t configs, const Var& residual, Act act,
                     FusedDropout dropout) {
  check_arg_on("config_attention", "x", x, 2, x.dtype(), x.device());
  check_arg_on("config_attention", "beta", beta, 1, x.dtype(), x.device());
  GNN_CHECK(beta.value().numel() == 1, "config_attention: beta must have one element, got ", beta.value().desc());
  GNN_CHECK(configs >= 1 && x.size(1) % configs == 0, "config_attention: ", x.value().desc(),
            " is not [N, C*D] for C = ", configs);
  const int64_t R = x.size(0), C = configs, D = x.size(1) / configs;
  GNN_CHECK(act != Act::kLeakyRelu, "config_attention: the fused activation takes no slope; apply leaky_relu after it");
  GNN_CHECK(dropout.p >= 0 && dropout.p < 1, "config_attention: dropout p must lie in [0, 1), got ", dropout.p);
  if (residual.defined()) {
    check_arg_on("config_attention", "residual", residual, 2, x.dtype(), x.device());
    GNN_CHECK(residual.size(0) == R && residual.size(1) == C * 2 * D, "config_attention: residual ",
              residual.value().desc(), " is not the output's [", R, ", ", C * 2 * D, "]");
  }
  return dispatch_dev("config_attention", x.value(), [&](auto t) {
    using T = decltype(t);
    const Tensor xv = x.value(), bv = beta.value();
    const Tensor rv = residual.defined() ? residual.value() : Tensor();
    Tensor y = empty_like(xv, Shape{R, C * 2 * D}), w = empty_like(xv, Shape{R, C * D});
    const T* res = rv.defined() ? ptr<T>(rv) : nullptr;
    const RowsDropout<T> drop = rows_dropout<T>(dropout, C);
    run<T>(config_attention_forward_k, xv, ptr<T>(y), ptr<T>(w), ptr<T>(xv), res, R, C, D, ptr<T>(bv), act, drop);
    // The backward reads the residual only to recompute the activation's input.
    const Tensor keep_res = act != Act::kNone ? rv : Tensor();
    return record("config_attention", y, {x, beta, residual},
                  [xv, bv, w, keep_res, x = GradRef(x), beta = GradRef(beta), residual = GradRef(residual), R, C, D,
                   act, drop](const Tensor& dy) {
                    Tensor dx = empty_like(dy, xv.shape()), db = empty_like(dy, bv.shape());
                    // Without an activation or dropout the residual's gradient is dy itself (accumulate never
                    // writes a shared one).
                    const bool same = act == Act::kNone && !drop.mask.on;
                    Tensor dres = residual.requires_grad() && !same ? empty_like(dy, dy.shape()) : Tensor();
                    run<T>(config_attention_backward_k, dy, ptr<T>(dx), dres.defined() ? ptr<T>(dres) : nullptr,
                           ptr<T>(db), ptr<T>(dy), ptr<T>(xv), ptr<T>(w),
                           keep_res.defined() ? ptr<T>(keep_res) : nullptr, R, C, D, ptr<T>(bv), act, drop);
                    accumulate(x, dx);
                    accumulate(beta, db);
                    if (dres.defined()) accumulate(residual, dres);
                    else if (same) accumulate(residual, dy);
                  });
  });
}

Var keep_grad_rows(const Var& x, const Tensor& keep) {
  GNN_CHECK(x.defined() && x.value().dim() >= 1, "keep_grad_rows: x must have rows");
  GNN_CHECK(keep.dtype() == DType::U8 && keep.dim() == 1 && keep.size(0) == x.size(0) &&
                (keep.device().is_cpu() || keep.device() == x.device()),
            "keep_grad_rows: keep must be u8 [", x.size(0), "] on the host or on x's device (", x.device().str(),
            "), got ", keep.desc());
  const int64_t R = x.size(0), W = x.value().numel() / std::max<int64_t>(R, 1);
  return dispatch_dev("keep_grad_rows", x.value(), [&](auto t) {
    using T = decltype(t);
    return record("keep_grad_rows", x.value(), {x}, [x = GradRef(x), keep, R, W](const Tensor& dy) {
      if (!x.requires_grad()) return;
      Tensor dx = empty_like(dy, x.shape());
      run<T>(mask_rows_k, dy, ptr<T>(dx), ptr<T>(dy), keep, R, W);
      accumulate(x, dx);
    });
  });
}

}  // namespace gnn::ag
