// Graph readout on the CPU: features in the inner loop; sum / mean / max over tasks of a graph and a block
// of channels, log-sum-exp one task per graph.
#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "kernels/pooling.h"

namespace gnn {

// One task per graph and block of kPoolBlock channels: a step of one big graph (the layout recipes' [N,
// C*F] rows) spreads over the threads, where one task per graph ran it on one. Each channel still runs
// over its graph's rows in order, so the bits do not depend on the block or the thread count.
constexpr int64_t kPoolBlock = 256;

// The max loops select on v > max alone, one compare (max_takes' two in the select made GCC's code for it
// scalar: pool max 20% slower), and mark each column that met a NaN after its first row. Those columns take
// their first NaN here, as max_takes would have: the max is NaN wherever a NaN comes (torch's amax).
static void first_nans(float* m, int32_t* ar, const int32_t* nan, const float* xr, int64_t b, int64_t e, int64_t F,
                       int64_t w) {
  for (int64_t f = 0; f < w; ++f)
    if (nan[f] && m[f] == m[f])
      for (int64_t i = b + 1; i < e; ++i)
        if (xr[i * F + f] != xr[i * F + f]) {
          m[f] = xr[i * F + f], ar[f] = int32_t(i);
          break;
        }
}

GNN_CPU_CLONES void pool_forward_cpu(float* __restrict y, int32_t* __restrict argmax, const float* __restrict x,
                                     const int64_t* graph_ptr, int64_t G, int64_t F, Reduce op) {
  GNN_CHECK(!argmax || graph_ptr[G] <= std::numeric_limits<int32_t>::max(), "pool max: ", graph_ptr[G],
            " rows; its argmax holds rows in int32");
  const int64_t blocks = ceil_div<int64_t>(F, kPoolBlock);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < G * blocks; ++t) {
    const int64_t g = t / blocks, f0 = (t % blocks) * kPoolBlock, w = std::min(kPoolBlock, F - f0);
    float* yr = y + g * F + f0;
    const float* xr = x + f0;
    const int64_t b = graph_ptr[g], e = graph_ptr[g + 1];
    if (b == e) {
      for (int64_t f = 0; f < w; ++f) yr[f] = 0.0f;
      if (op == Reduce::kMax)
        for (int64_t f = 0; f < w; ++f) argmax[g * F + f0 + f] = -1;
      continue;
    }
    for (int64_t f = 0; f < w; ++f) yr[f] = xr[b * F + f];
    if (op == Reduce::kMax) {
      int32_t* ar = argmax + g * F + f0;
      int32_t nan[kPoolBlock];
      for (int64_t f = 0; f < w; ++f) ar[f] = int32_t(b), nan[f] = 0;
      for (int64_t i = b + 1; i < e; ++i)
        for (int64_t f = 0; f < w; ++f) {
          const float v = xr[i * F + f];
          const int32_t take = -int32_t(v > yr[f]);
          yr[f] = take ? v : yr[f];
          ar[f] = (ar[f] & ~take) | (int32_t(i) & take);
          nan[f] |= -int32_t(v != v);
        }
      first_nans(yr, ar, nan, xr, b, e, F, w);
      continue;
    }
    for (int64_t i = b + 1; i < e; ++i)
      for (int64_t f = 0; f < w; ++f) yr[f] += xr[i * F + f];
    if (op == Reduce::kMean) {
      const float inv = 1.0f / float(e - b);
      for (int64_t f = 0; f < w; ++f) yr[f] *= inv;
    }
  }
}

namespace {

// What a backward pass puts into each node row: one readout's part (pool_backward_cpu), or the mean's and
// then the max's (pool_mean_max_backward_cpu).
enum class PoolGrad { kSum, kMean, kMax, kMeanMax };

// A row's w values into o: fresh(f) where there is no base; where there is, add(held, f) with held the base
// row's value (base is dx: in place, through o alone, o being restrict; else base's row read apart).
template <class Fresh, class Add>
inline GNN_INLINE void put_row(float* __restrict o, const float* br, int64_t w, bool in_place, Fresh fresh, Add add) {
  if (!br) {
    for (int64_t f = 0; f < w; ++f) o[f] = fresh(f);
  } else if (in_place) {
    for (int64_t f = 0; f < w; ++f) o[f] = add(o[f], f);
  } else {
    const float* __restrict b = br;
    for (int64_t f = 0; f < w; ++f) o[f] = add(b[f], f);
  }
}

// The backward's tasks, as the forward's: a graph and a block of channels each, its rows in order.
GNN_CPU_CLONES void pool_backward_tasks(float* __restrict dx, const float* __restrict dy,
                                        const int32_t* __restrict argmax, const int64_t* graph_ptr, int64_t G,
                                        int64_t F, PoolGrad kind, const float* base) {
  const int64_t blocks = ceil_div<int64_t>(F, kPoolBlock);
  const bool in_place = base == dx;
  const bool mean = kind == PoolGrad::kMean || kind == PoolGrad::kMeanMax;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < G * blocks; ++t) {
    const int64_t g = t / blocks, f0 = (t % blocks) * kPoolBlock, w = std::min(kPoolBlock, F - f0);
    const int64_t b = graph_ptr[g], e = graph_ptr[g + 1];
    const float* __restrict d = dy + g * F + f0;
    const int32_t* __restrict ar = kind == PoolGrad::kMax || kind == PoolGrad::kMeanMax ? argmax + g * F + f0 : nullptr;
    const float scale = mean && e > b ? 1.0f / float(e - b) : 1.0f;
    for (int64_t i = b; i < e; ++i) {
      float* o = dx + i * F + f0;
      const float* br = base ? base + i * F + f0 : nullptr;
      auto to_max = [&](int64_t f) GNN_INLINE { return float(ar[f] == int32_t(i)) * d[f]; };
      auto to_mean = [&](int64_t f) GNN_INLINE { return scale * d[f]; };
      if (kind == PoolGrad::kMeanMax)
        put_row(
            o, br, w, in_place, [&](int64_t f) GNN_INLINE { return to_mean(f) + to_max(f); },
            [&](float held, int64_t f) GNN_INLINE { return (held + to_mean(f)) + to_max(f); });
      else if (kind == PoolGrad::kMax)
        put_row(o, br, w, in_place, to_max, [&](float held, int64_t f) GNN_INLINE { return held + to_max(f); });
      else put_row(o, br, w, in_place, to_mean, [&](float held, int64_t f) GNN_INLINE { return held + to_mean(f); });
    }
  }
}

}  // namespace

void pool_backward_cpu(float* dx, const float* dy, const int32_t* argmax, const int64_t* graph_ptr, int64_t G,
                       int64_t F, Reduce op, const float* base) {
  const PoolGrad kind = op == Reduce::kMax ? PoolGrad::kMax : op == Reduce::kMean ? PoolGrad::kMean : PoolGrad::kSum;
  pool_backward_tasks(dx, dy, argmax, graph_ptr, G, F, kind, base);
}

// Both readouts in one pass over each task's rows: the sum as pool_forward_cpu's mean (the first row, then
// the others added in order, times 1 / n) and the max with its argmax as its max, then mean + max.
GNN_CPU_CLONES void pool_mean_max_forward_cpu(float* __restrict y, int32_t* __restrict argmax,
                                              const float* __restrict x, const int64_t* graph_ptr, int64_t G,
                                              int64_t F) {
  GNN_CHECK(graph_ptr[G] <= std::numeric_limits<int32_t>::max(), "pool mean-max: ", graph_ptr[G],
            " rows; its argmax holds rows in int32");
  const int64_t blocks = ceil_div<int64_t>(F, kPoolBlock);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < G * blocks; ++t) {
    const int64_t g = t / blocks, f0 = (t % blocks) * kPoolBlock, w = std::min(kPoolBlock, F - f0);
    float* yr = y + g * F + f0;
    int32_t* ar = argmax + g * F + f0;
    const float* xr = x + f0;
    const int64_t b = graph_ptr[g], e = graph_ptr[g + 1];
    if (b == e) {  // mean 0 + max 0
      for (int64_t f = 0; f < w; ++f) yr[f] = 0.0f + 0.0f, ar[f] = -1;
      continue;
    }
    float s[kPoolBlock], m[kPoolBlock];
    int32_t nan[kPoolBlock];
    for (int64_t f = 0; f < w; ++f) s[f] = xr[b * F + f], m[f] = xr[b * F + f], ar[f] = int32_t(b), nan[f] = 0;
    for (int64_t i = b + 1; i < e; ++i)
      for (int64_t f = 0; f < w; ++f) {
        const float v = xr[i * F + f];
        s[f] += v;
        const int32_t take = -int32_t(v > m[f]);
        m[f] = take ? v : m[f];
        ar[f] = (ar[f] & ~take) | (int32_t(i) & take);
        nan[f] |= -int32_t(v != v);
      }
    first_nans(m, ar, nan, xr, b, e, F, w);
    const float inv = 1.0f / float(e - b);
    for (int64_t f = 0; f < w; ++f) yr[f] = s[f] * inv + m[f];
  }
}

// dx = (base +) the mean's part, then + the max's, each as pool_backward_cpu forms it.
void pool_mean_max_backward_cpu(float* dx, const float* dy, const int32_t* argmax, const int64_t* graph_ptr, int64_t G,
                                int64_t F, const float* base) {
  pool_backward_tasks(dx, dy, argmax, graph_ptr, G, F, PoolGrad::kMeanMax, base);
}

GNN_CPU_CLONES void pool_logsumexp_forward_cpu(float* __restrict y, const float* __restrict x, const int64_t* graph_ptr,
                                               int64_t G, int64_t F) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t g = 0; g < G; ++g) {
    const int64_t b = graph_ptr[g], e = graph_ptr[g + 1];
    std::vector<float> m(size_t(F), -INFINITY);
    std::vector<double> sum(size_t(F), 0.0);  // (as the reference: kernels/pooling.h)
    for (int64_t i = b; i < e; ++i)
      for (int64_t f = 0; f < F; ++f) m[size_t(f)] = lse_max(m[size_t(f)], x[i * F + f]);
    for (int64_t i = b; i < e; ++i)
      for (int64_t f = 0; f < F; ++f) sum[size_t(f)] += double(vm::exp(x[i * F + f] - m[size_t(f)]));
    for (int64_t f = 0; f < F; ++f) {
      const float mf = m[size_t(f)];
      y[g * F + f] = e == b ? 0.0f : std::isinf(mf) ? mf : mf + vm::log(float(sum[size_t(f)]));
    }
  }
}

GNN_CPU_CLONES void pool_logsumexp_backward_cpu(float* __restrict dx, const float* __restrict dy,
                                                const float* __restrict x, const float* __restrict y,
                                                const int64_t* graph_ptr, int64_t G, int64_t F) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t g = 0; g < G; ++g)
    for (int64_t i = graph_ptr[g]; i < graph_ptr[g + 1]; ++i)
      for (int64_t f = 0; f < F; ++f) dx[i * F + f] = dy[g * F + f] * vm::exp(x[i * F + f] - y[g * F + f]);
}

}  // namespace gnn
