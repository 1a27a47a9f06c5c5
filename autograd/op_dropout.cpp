// Inverted dropout: y = x * m / (1 - p), m ~ Bernoulli(1 - p) per element; dx = dy * m / (1 - p).
// The mask comes from the caller's Rng, so a seed fixes every mask of a run. Not training, or p = 0:
// y is x itself (no copy, nothing recorded).
#include <algorithm>

#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"

namespace gnn::ag {

Var dropout(const Var& x, double p, Rng& rng, bool training) {
  check_arg_on("dropout", "x", x, -1, x.dtype(), x.device());
  GNN_CHECK(p >= 0 && p < 1, "dropout: p must lie in [0, 1), got ", p);
  if (!training || p == 0) return x;
  return dispatch_dev("dropout", x.value(), [&](auto t) {
    using T = decltype(t);
    const int64_t n = x.value().numel();
    // On a GPU the mask is drawn on the host, the same draws as for a host tensor, and copied over: the
    // same seed gives the same masks on both devices.
    Tensor mask = Tensor::empty(x.shape(), x.dtype());
    T* m = ptr<T>(mask);
    const T keep = T(1) / T(1 - p);
    // 24 random bits per element against the threshold. The mask is drawn in chunks of 64k elements,
    // each from its own stream seeded by one draw of the caller's Rng and the chunk index, so it is
    // parallel and still the same for any thread count.
    const uint32_t threshold = uint32_t(p * double(1u << 24));
    const uint64_t base = rng.next();
    constexpr int64_t kChunk = 1 << 16;
#pragma omp parallel for if (n > kChunk)
    for (int64_t c = 0; c < ceil_div<int64_t>(n, kChunk); ++c) {
      Rng r(base + 0x9e3779b97f4a7c15ull * uint64_t(c + 1));
      const int64_t end = std::min(n, (c + 1) * kChunk);
      for (int64_t i = c * kChunk; i < end; i += 2) {
        const uint64_t bits = r.next();
        m[i] = (uint32_t(bits) & 0xffffffu) < threshold ? T(0) : keep;
        if (i + 1 < end) m[i + 1] = (uint32_t(bits >> 32) & 0xffffffu) < threshold ? T(0) : keep;
      }
    }
    if (x.value().is_cuda()) mask = mask.to(x.value().device());
    Tensor y = empty_like(x.value(), x.shape());
    mul_on<T>(y, ptr<T>(y), ptr<T>(x.value()), ptr<T>(mask), n);
    return record("dropout", y, {x}, [x, mask](const Tensor& dy) {
      Tensor dx = empty_like(dy, dy.shape());
      mul_on<T>(dx, ptr<T>(dx), ptr<T>(dy), ptr<T>(mask), dy.numel());
      accumulate(x, dx);
    });
  });
}

}  // namespace gnn::ag
