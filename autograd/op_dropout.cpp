// Inverted dropout: y = x * m / (1 - p), m ~ Bernoulli(1 - p) per element; dx = dy * m / (1 - p). And
// dropout_configs, whose mask is the same for the C configs of a node-major row.
// The mask is a counter-based hash of (one draw of the caller's Rng, element index) (kernels/dropout.h):
// a seed fixes every mask of a run, the host and the GPU draw the same masks, and the backward recomputes
// the mask from the same draw instead of keeping n values. Not training, or p = 0: y is x itself (no
// copy, nothing recorded).
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/dropout.h"

namespace gnn::ag {

namespace {

constexpr Kernel dropout_apply_k = GNN_KERNEL(dropout_apply);
template <class T>
void apply_on(const Tensor& on, T* y, const T* x, int64_t n, uint64_t seed, uint32_t threshold, T scale) {
  run<T>(dropout_apply_k, on, y, x, n, seed, threshold, scale);
}

constexpr Kernel dropout_configs_apply_k = GNN_KERNEL(dropout_configs_apply);

// One draw of the caller's generator for p: the seed, threshold and scale a mask is made of.
template <class T>
struct Draw {
  uint64_t seed;
  uint32_t threshold;
  T scale;
  Draw(double p, Rng& rng) : seed(rng.next()) {
    const DropoutMask<T> m = dropout_mask<T>(p, seed);  // the formulas fused dropout uses
    threshold = m.threshold, scale = m.scale;
  }
};

void check_dropout(const char* op, const Var& x, double p) {
  check_arg_on(op, "x", x, -1, x.dtype(), x.device());
  GNN_CHECK(p >= 0 && p < 1, op, ": p must lie in [0, 1), got ", p);
}

}  // namespace

Var dropout(const Var& x, double p, Rng& rng, bool training) {
  check_dropout("dropout", x, p);
  if (!training || p == 0) return x;
  return dispatch_dev("dropout", x.value(), [&](auto t) {
    using T = decltype(t);
    const Draw<T> d(p, rng);
    Tensor y = empty_like(x.value(), x.shape());
    apply_on<T>(y, ptr<T>(y), ptr<T>(x.value()), y.numel(), d.seed, d.threshold, d.scale);
    return record("dropout", y, {x}, [x = GradRef(x), d](const Tensor& dy) {
      Tensor dx = empty_like(dy, dy.shape());
      apply_on<T>(dx, ptr<T>(dx), ptr<T>(dy), dy.numel(), d.seed, d.threshold, d.scale);
      accumulate(x, dx);
    });
  });
}

Var dropout_configs(const Var& x, double p, Rng& rng, bool training, int64_t configs) {
  check_dropout("dropout_configs", x, p);
  GNN_CHECK(x.value().dim() == 2 && configs >= 1 && x.size(1) % configs == 0, "dropout_configs: x ", x.shape().str(),
            " is not rows of ", configs, " configs side by side");
  if (!training || p == 0) return x;
  return dispatch_dev("dropout_configs", x.value(), [&](auto t) {
    using T = decltype(t);
    const Draw<T> d(p, rng);
    const int64_t R = x.size(0), C = configs, F = x.size(1) / configs;
    Tensor y = empty_like(x.value(), x.shape());
    run<T>(dropout_configs_apply_k, y, ptr<T>(y), ptr<T>(x.value()), R, C, F, d.seed, d.threshold, d.scale);
    return record("dropout_configs", y, {x}, [x = GradRef(x), R, C, F, d](const Tensor& dy) {
      Tensor dx = empty_like(dy, dy.shape());
      run<T>(dropout_configs_apply_k, dx, ptr<T>(dx), ptr<T>(dy), R, C, F, d.seed, d.threshold, d.scale);
      accumulate(x, dx);
    });
  });
}

}  // namespace gnn::ag
