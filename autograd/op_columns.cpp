// Column and row plumbing: concatenation, column slices, the mean over heads, row gathers.
//   concat:  y = [x_1 | x_2 | ...];       dx_i = the matching column block of dy
//   rows:    y = [x_1; x_2; ...];         dx_i = the matching row block of dy
//   slice:   y = x[:, b:e];               dx = dy in those columns, 0 elsewhere
//   heads:   y[r, f] = mean_h x[r, h*F + f];  dx[r, h*F + f] = dy[r, f] / H
//   dot:     y[r, h] = sum_d x[r, h*D + d] a[h, d];  dx[r, h*D + d] = dy[r, h] a[h, d];
//            da[h, d] = sum_r dy[r, h] x[r, h*D + d]  (GAT's attention vectors)
//   gather:  y[i] = x[index[i]];          dx[k] = sum_{i: index[i] = k} dy[i]  (embedding's backward)
// Each runs where its inputs are (the CUDA kernels of kernels/elementwise.h on a GPU).
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"

namespace gnn::ag {

namespace {

// [x_1 | x_2 | ...] (rows false: the widths add up) or [x_1; x_2; ...] (rows true: the heights do).
// Block i sits at column (or row) offset off_i; its gradient is that block of dy.
Var concat(const char* op, const std::vector<Var>& xs, bool rows) {
  GNN_CHECK(!xs.empty(), op, ": no inputs");
  const Device dev = xs[0].device();
  check_arg_on(op, "xs[0]", xs[0], 2, xs[0].dtype(), dev);
  const int keep = rows ? 1 : 0, grow = rows ? 0 : 1;  // the dim all share, the dim that adds up
  int64_t total = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    check_arg_on(op, "an input", xs[i], 2, xs[0].dtype(), dev);
    GNN_CHECK(xs[i].size(keep) == xs[0].size(keep), op, ": input ", i, " has ", xs[i].size(keep),
              rows ? " columns" : " rows", ", input 0 has ", xs[0].size(keep));
    total += xs[i].size(grow);
  }
  const int64_t R = rows ? total : xs[0].size(0), W = rows ? xs[0].size(1) : total;
  return dispatch_dev(op, xs[0].value(), [&](auto t) {
    using T = decltype(t);
    // Block (r, c) of y <-> x: a row block is W wide at row offset off, a column block x.size(1) wide.
    auto copy = [R, W, rows](const Tensor& on, T* y, T* x, int64_t off, int64_t n, bool to_y) {
      if (n == 0 || (rows ? W : R) == 0) return;
      const int64_t h = rows ? n : R, w = rows ? W : n;
      T* yb = rows ? y + off * W : y;
      const int64_t yoff = rows ? 0 : off;
      if (to_y) copy_block_on<T>(on, yb, W, yoff, x, w, 0, h, w);
      else copy_block_on<T>(on, x, w, 0, yb, W, yoff, h, w);
    };
    Tensor y = empty_like(xs[0].value(), Shape{R, W});
    for (int64_t off = 0; const Var& x : xs) {
      copy(y, ptr<T>(y), ptr<T>(x.value()), off, x.size(grow), true);
      off += x.size(grow);
    }
    return record(op, y, xs, [xs = std::vector<GradRef>(xs.begin(), xs.end()), grow, copy](const Tensor& dy) {
      for (int64_t i = 0, off = 0; i < int64_t(xs.size()); off += xs[size_t(i)].size(grow), ++i) {
        const GradRef& x = xs[size_t(i)];
        if (!x.requires_grad()) continue;
        Tensor dx = empty_like(dy, x.shape());
        copy(dy, ptr<T>(dy), ptr<T>(dx), off, x.size(grow), false);
        accumulate(x, dx);
      }
    });
  });
}

}  // namespace

Var concat_cols(const std::vector<Var>& xs) { return concat("concat_cols", xs, false); }
Var concat_rows(const std::vector<Var>& xs) { return concat("concat_rows", xs, true); }

Var slice_cols(const Var& x, int64_t begin, int64_t end) {
  check_arg_on("slice_cols", "x", x, 2, x.dtype(), x.device());
  const int64_t R = x.size(0), W = x.size(1);
  GNN_CHECK(0 <= begin && begin <= end && end <= W, "slice_cols: columns [", begin, ", ", end, ") of ",
            x.value().desc());
  return dispatch_dev("slice_cols", x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), Shape{R, end - begin});
    copy_block_on<T>(y, ptr<T>(y), end - begin, 0, ptr<T>(x.value()), W, begin, R, end - begin);
    return record("slice_cols", y, {x}, [x = GradRef(x), R, W, begin, end](const Tensor& dy) {
      Tensor dx = Tensor::zeros(x.shape(), x.dtype(), x.device());
      copy_block_on<T>(dy, ptr<T>(dx), W, begin, ptr<T>(dy), end - begin, 0, R, end - begin);
      accumulate(x, dx);
    });
  });
}

Var slice_rows(const Var& x, int64_t begin, int64_t end) {
  check_arg_on("slice_rows", "x", x, 2, x.dtype(), x.device());
  const int64_t R = x.size(0), W = x.size(1);
  GNN_CHECK(0 <= begin && begin <= end && end <= R, "slice_rows: rows [", begin, ", ", end, ") of ", x.value().desc());
  return dispatch_dev("slice_rows", x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), Shape{end - begin, W});
    copy_block_on<T>(y, ptr<T>(y), W, 0, ptr<T>(x.value()) + begin * W, W, 0, end - begin, W);
    return record("slice_rows", y, {x}, [x = GradRef(x), W, begin, end](const Tensor& dy) {
      Tensor dx = Tensor::zeros(x.shape(), x.dtype(), x.device());
      copy_block_on<T>(dy, ptr<T>(dx) + begin * W, W, 0, ptr<T>(dy), W, 0, end - begin, W);
      accumulate(x, dx);
    });
  });
}

namespace {

// y[r, f] = mean over the heads of x[r, h*F + f];  its backward dx[r, h*F + f] = dy[r, f] / heads.
template <class T>
void head_mean_host(T* y, const T* x, int64_t R, int64_t F, int64_t heads) {
  const int64_t W = F * heads;
#pragma omp parallel for if (R * W > (1 << 16))
  for (int64_t r = 0; r < R; ++r)
    for (int64_t f = 0; f < F; ++f) {
      T acc = 0;
      for (int64_t h = 0; h < heads; ++h) acc += x[r * W + h * F + f];
      y[r * F + f] = acc / T(heads);
    }
}
template <class T>
void head_mean_backward_host(T* dx, const T* dy, int64_t R, int64_t F, int64_t heads) {
  const int64_t W = F * heads;
#pragma omp parallel for if (R * W > (1 << 16))
  for (int64_t r = 0; r < R; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t f = 0; f < F; ++f) dx[r * W + h * F + f] = dy[r * F + f] / T(heads);
}
// y[r, h] = <x[r, h*D:], a[h]>;  dx[r, h*D + d] = dy[r, h] a[h, d], prod[r, h*D + d] = dy[r, h] x[r, h*D + d]
// (da is prod's column sums), each written when asked for (non-null).
template <class T>
void head_dot_host(T* y, const T* x, const T* a, int64_t R, int64_t H, int64_t D) {
  const int64_t W = H * D;
#pragma omp parallel for if (R * W > (1 << 16))
  for (int64_t r = 0; r < R; ++r)
    for (int64_t h = 0; h < H; ++h) {
      T acc = 0;
      for (int64_t d = 0; d < D; ++d) acc += x[r * W + h * D + d] * a[h * D + d];
      y[r * H + h] = acc;
    }
}
// (head by head, so that no element pays an integer division for its head: k / D was a tenth of
// tile-gat-6th's step, 1 thread)
template <class T>
void head_dot_backward_host(T* dx, T* prod, const T* dy, const T* x, const T* a, int64_t R, int64_t H, int64_t D) {
  const int64_t W = H * D;
#pragma omp parallel for if (R * W > (1 << 16))
  for (int64_t r = 0; r < R; ++r)
    for (int64_t h = 0; h < H; ++h) {
      const T g = dy[r * H + h];
      const T* __restrict ah = a + h * D;  // a is [H, D]
      const T* __restrict xr = x + r * W + h * D;
      if (dx) {
        T* __restrict d = dx + r * W + h * D;
        for (int64_t j = 0; j < D; ++j) d[j] = g * ah[j];
      }
      if (prod) {
        T* __restrict q = prod + r * W + h * D;
        for (int64_t j = 0; j < D; ++j) q[j] = g * xr[j];
      }
    }
}
constexpr Kernel head_mean_k{"head_mean", [](auto... a) { head_mean_host(a...); },
                             [](auto... a) { head_mean_host(a...); },
                             [](const Tensor& on, float* y, const float* x, int64_t R, int64_t F, int64_t heads) {
                               block_sum_cuda(y, x, R, F, heads, F * heads, F, 1.0f / float(heads), on.stream());
                             }};
constexpr Kernel head_mean_backward_k{
    "head_mean_backward", [](auto... a) { head_mean_backward_host(a...); },
    [](auto... a) { head_mean_backward_host(a...); },
    [](const Tensor& on, float* dx, const float* dy, int64_t R, int64_t F, int64_t heads) {
      head_broadcast_cuda(dx, dy, R, heads, F, 1.0f / float(heads), on.stream());
    }};
constexpr Kernel head_dot_k = GNN_HOST_KERNEL(head_dot_host, head_dot_cuda);
constexpr Kernel head_dot_backward_k = GNN_HOST_KERNEL(head_dot_backward_host, head_dot_backward_cuda);

}  // namespace

Var head_mean(const Var& x, int64_t heads) {
  check_arg_on("head_mean", "x", x, 2, x.dtype(), x.device());
  const int64_t R = x.size(0), W = x.size(1);
  GNN_CHECK(heads >= 1 && W % heads == 0, "head_mean: ", W, " columns do not split into ", heads, " heads");
  const int64_t F = W / heads;
  return dispatch_dev("head_mean", x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), Shape{R, F});
    run<T>(head_mean_k, y, ptr<T>(y), ptr<T>(x.value()), R, F, heads);
    return record("head_mean", y, {x}, [x = GradRef(x), R, F, heads](const Tensor& dy) {
      Tensor dx = empty_like(dy, x.shape());
      run<T>(head_mean_backward_k, dy, ptr<T>(dx), ptr<T>(dy), R, F, heads);
      accumulate(x, dx);
    });
  });
}

Var head_dot(const Var& x, const Var& a) {
  check_arg_on("head_dot", "x", x, 2, x.dtype(), x.device());
  check_arg_on("head_dot", "a", a, 2, x.dtype(), x.device());
  const int64_t R = x.size(0), H = a.size(0), D = a.size(1), W = x.size(1);
  GNN_CHECK(W == H * D, "head_dot: x has ", W, " columns, a ", a.shape().str(), " needs H*D = ", H * D);
  return dispatch_dev("head_dot", x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), Shape{R, H});
    const T *xp = ptr<T>(x.value()), *ap = ptr<T>(a.value());
    run<T>(head_dot_k, y, ptr<T>(y), xp, ap, R, H, D);
    return record("head_dot", y, {x, a}, [x, a, R, H, D, W](const Tensor& dy) {
      const T *g = ptr<T>(dy), *xp = ptr<T>(x.value()), *ap = ptr<T>(a.value());
      // dx[r, h*D + d] = dy[r, h] a[h, d];  da = column sums of prod[r, h*D + d] = dy[r, h] x[r, h*D + d]
      Tensor dx = x.requires_grad() ? empty_like(dy, x.shape()) : Tensor();
      Tensor prod = a.requires_grad() ? empty_like(dy, x.shape()) : Tensor();
      T* d = dx.defined() ? ptr<T>(dx) : nullptr;
      T* p = prod.defined() ? ptr<T>(prod) : nullptr;
      run<T>(head_dot_backward_k, dy, d, p, g, xp, ap, R, H, D);
      if (dx.defined()) accumulate(x, dx);
      if (prod.defined()) {
        Tensor da = empty_like(dy, a.shape());
        column_sum_on<T>(dy, ptr<T>(da), p, R, W);
        accumulate(a, da);
      }
    });
  });
}

Var gather_rows(const Var& x, const Tensor& index) { return embedding(x, index); }

}  // namespace gnn::ag
