// Instance norm on the CPU: one task per graph and block of channels, each channel's sums over the rows
// in the reference's order (so the two cannot drift), with per-graph dgamma/dbeta partials summed in
// graph order afterwards.
#include <algorithm>
#include <vector>

#include "base/error.h"
#include "kernels/instance_norm.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace gnn {

namespace {

// Channels per task: a graph's rows are walked once per pass with the block's channels contiguous in
// each row, and a graph of many channels spreads over the threads. Each channel's sums still run over
// the rows in order, so the results are the reference's, bitwise, for any block and thread count.
// A block is as wide as lets the largest graph's rows of it fit 2 MiB between the passes (at least 64,
// at most 1024 channels), narrower only when the threads would lack tasks. (Sized for a 2 MiB L2; on an
// EPYC with 1 MiB, widths from 96 to 1024 ran alike, docs/benchmarks.md 2026-11-29.) On config-batched
// rows ([921, 64*256]) 512 channels run the forward 2.2x and the backward 2.5x as fast as 64 did: a
// row's block is then a run the prefetcher follows, where 64 channels were 256 bytes, each in another page.
constexpr int64_t kNormBlock = 1024;

int64_t norm_block(const int64_t* graph_ptr, int64_t G, int64_t F) {
#ifdef _OPENMP
  const int64_t threads = omp_get_max_threads();
#else
  const int64_t threads = 1;
#endif
  int64_t rows = 1;
  for (int64_t g = 0; g < G; ++g) rows = std::max(rows, graph_ptr[g + 1] - graph_ptr[g]);
  int64_t w = std::clamp<int64_t>((int64_t(2) << 20) / (4 * rows) / 64 * 64, 64, kNormBlock);
  while (w > 64 && G * ceil_div<int64_t>(F, w) < threads) w = std::max<int64_t>(64, w / 2 / 64 * 64);
  return w;
}

// Tensors of kNormStreamFloats floats and up (16 MiB) do not stay in the cache between ops, so the passes
// that read them from memory ask for the rows kNormAhead ahead into L2: the first pass x, res and dy, the
// backward's last pass held (a row's block is a short run, 2.3 KiB at [900, 64*256], 64 KiB from the next;
// in a test program on the AMD EPYC VM the first pass read 24 GB/s without the prefetches, 29-31 GB/s with
// them, and slower than without when they fetched into L1). The last pass writes its output with streaming
// stores, which do not fetch the lines they overwrite first, where instance_norm_streams says it qualifies
// and no earlier pass wrote it: not where the forward's sums go through y, or the backward's dz through dx
// (blocks too large to keep); those, and smaller tensors, which the next op may find in cache, are stored
// as before. Values and bits are the same either way. (docs/benchmarks.md, 2026-12-04, fifty-second
// session: the norm's forward 28-49% faster on [900, 64*256].)
constexpr int64_t kNormStreamFloats = int64_t(4) << 20;
constexpr int64_t kNormAhead = 8;

bool norm_large(int64_t N, int64_t F) { return N * F >= kNormStreamFloats; }

// Row i + kNormAhead's block of p [N, F] (columns f0 .. f0+w-1) into L2, when that row is before e.
GNN_INLINE inline void prefetch_ahead(const float* p, int64_t i, int64_t e, int64_t F, int64_t f0, int64_t w) {
  if (!p || i + kNormAhead >= e) return;
  const float* r = p + (i + kNormAhead) * F + f0;
  for (int64_t f = 0; f < w; f += 16) __builtin_prefetch(r + f, 0, 2);
}

// w floats (whole 64-byte lines, dst 64-byte aligned) from src to dst with streaming stores; the task that
// wrote them ends with store_fence.
GNN_INLINE inline void store_streamed(float* dst, const float* src, int64_t w) {
#if defined(__SSE__)
  for (int64_t f = 0; f < w; f += 4) _mm_stream_ps(dst + f, _mm_loadu_ps(src + f));
#else
  std::copy(src, src + w, dst);
#endif
}

GNN_INLINE inline void store_fence() {
#if defined(__SSE__)
  _mm_sfence();  // the streamed lines ordered before the parallel region ends
#endif
}

// Rows a trip of the passes that sum over rows: each sum still one chain over the rows in order (the
// reference's bits), with a quarter of its loads and stores (a load, an add and a store of each double sum
// per row before). On an AMX Xeon, 2 threads, forward + backward: layout-tgraph's rows ([168, 64*128],
// residual and GELU) 2.09 -> 1.97 ms, SAGE-6th's ([663, 80*256]) 35.2 -> 33.9 ms (`gnn bench kernel
// op:instance-norm-residual-gelu --backward`, alternating runs).
constexpr int64_t kSumRows = 4;
static_assert(kSumRows == 4, "sum_rows and the backward's trips are written out for four rows");

// sum[f] += double(val(row(i), f)) for the rows i of [i0, i1), in order, kSumRows a trip.
template <class RowFn, class ValFn>
GNN_INLINE inline void sum_rows(double* __restrict sum, int64_t i0, int64_t i1, int64_t w, RowFn row, ValFn val) {
  int64_t i = i0;
  for (; i + kSumRows <= i1; i += kSumRows) {
    const float *r0 = row(i), *r1 = row(i + 1), *r2 = row(i + 2), *r3 = row(i + 3);
    for (int64_t f = 0; f < w; ++f)
      sum[f] = sum[f] + double(val(r0, f)) + double(val(r1, f)) + double(val(r2, f)) + double(val(r3, f));
  }
  for (; i < i1; ++i) {
    const float* r = row(i);
    for (int64_t f = 0; f < w; ++f) sum[f] += double(val(r, f));
  }
}

}  // namespace

bool instance_norm_streams(const float* out, int64_t N, int64_t F) {
#if defined(__SSE__)
  return norm_large(N, F) && reinterpret_cast<uintptr_t>(out) % 64 == 0 && F % 16 == 0;
#else
  (void)out, (void)N, (void)F;
  return false;
#endif
}

// The block of s = x + res a task keeps between its passes (a graph's rows x the block's channels), so
// that the later passes read one stream from cache, not x and res again. In the backward, with dz's
// block beside it that is up to 4 MiB, in L3 rather than a 1 MiB L2 (AVX-512 EPYC): 6% off the fused
// norm's forward + backward there (docs/benchmarks.md, 2026-11-30). At most 2 MiB a block, kept for the
// process's life, which norm_block's widths fit up to 8,192 rows; for a larger graph's block the forward
// writes s into y and the backward sums each row again into a buffer of its trip's rows. A thread holds
// two such blocks at most: s's, and the backward's dz where it streams dx out.
constexpr int64_t kScratchFloats = (int64_t(2) << 20) / 4;

// Thread-local block `which` (0: s's, 1: the backward's dz where dx is streamed).
static float* norm_scratch(int64_t n, int which = 0) {
  thread_local std::vector<float> buf[2];
  if (int64_t(buf[which].size()) < n) buf[which].resize(size_t(n));
  return buf[which].data();
}

// With a residual the forward's first pass sums s = x + res into the task's kept block, which the second
// and third passes read back from cache: y is written once, by the last pass (each sum still s's float).
// Writing s into y instead made the first pass fetch y's lines to write them and the later passes read
// them back from memory: on SAGE-6th's rows ([663, 80*256], residual and GELU) 19 ms against 13 with the
// kept block. A block too large to keep (a graph of over 8,192 rows) still goes through y.
GNN_CPU_CLONES void instance_norm_forward_cpu(float* y, float* mean, float* rstd, const float* x, const float* res,
                                              const float* gamma, const float* beta, const int64_t* graph_ptr,
                                              int64_t G, int64_t F, float eps, Act act,
                                              const RowsDropout<float>& drop) {
  const int64_t B = norm_block(graph_ptr, G, F), blocks = ceil_div<int64_t>(F, B);
  const bool large = norm_large(graph_ptr[G], F), streams = instance_norm_streams(y, graph_ptr[G], F);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < G * blocks; ++t) {
    const int64_t g = t / blocks, f0 = (t % blocks) * B, w = std::min(B, F - f0);
    const int64_t b = graph_ptr[g], e = graph_ptr[g + 1], n = e - b;
    float* kept = res && n * w <= kScratchFloats ? norm_scratch(n * w) : nullptr;
    const bool streamed = streams && (kept || !res);  // y written with streaming stores where s is not in y
    // Row i's block of s from the first pass on: the kept block's row, y's (written by the first pass)
    // when the block is not kept, or x's own without a residual.
    auto s_row = [&](int64_t i) -> const float* { return kept ? kept + (i - b) * w : (res ? y : x) + i * F + f0; };
    float m[kNormBlock], rs[kNormBlock], gm[kNormBlock], bt[kNormBlock];
    double sum[kNormBlock], v[kNormBlock];  // the mean's and the variance's sums, in double as the reference's
    alignas(64) float row[kNormBlock];  // y's row before it is streamed out
    for (int64_t f = 0; f < w; ++f) sum[f] = 0.0, v[f] = 0.0;  // only the block's w (zeroing 1024 costs small graphs)
    for (int64_t i0 = b; i0 < e; i0 += kSumRows) {  // s's rows a trip's worth at a time, then their sums
      const int64_t i1 = std::min(i0 + kSumRows, e);
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t o = i * F + f0;
        if (large) prefetch_ahead(x, i, e, F, f0, w), prefetch_ahead(res, i, e, F, f0, w);
        if (!res) continue;
        float* d = kept ? kept + (i - b) * w : y + o;
        for (int64_t f = 0; f < w; ++f) d[f] = x[o + f] + res[o + f];
      }
      sum_rows(sum, i0, i1, w, s_row, [](const float* r, int64_t f) GNN_INLINE { return r[f]; });
    }
    for (int64_t f = 0; f < w; ++f) m[f] = n ? float(sum[f] / double(n)) : 0.0f;
    sum_rows(v, b, e, w, s_row, [&](const float* r, int64_t f) GNN_INLINE { return (r[f] - m[f]) * (r[f] - m[f]); });
    for (int64_t f = 0; f < w; ++f) {
      if (std::isinf(v[f])) {  // a square past the float range (norm_rstd)
        v[f] = 0.0;
        for (int64_t i = b; i < e; ++i) v[f] += norm_square(s_row(i)[f] - m[f]);
      }
      rs[f] = norm_rstd(n ? v[f] / double(n) : 0.0, eps);
      mean[g * F + f0 + f] = m[f], rstd[g * F + f0 + f] = rs[f];
    }
    for (int64_t f = 0; f < w; ++f) gm[f] = gamma ? gamma[f0 + f] : 1.0f, bt[f] = beta ? beta[f0 + f] : 0.0f;
    dispatch_act(act, [&](auto A) GNN_INLINE {  // the activation a constant in the loop, which vectorises
      for (int64_t i = b; i < e; ++i) {
        const float* xs = s_row(i);  // y's own row when s went through y: read, then overwritten
        float* yr = streamed ? row : y + i * F + f0;
        for (int64_t f = 0; f < w; ++f) yr[f] = act_value<float>(A, (xs[f] - m[f]) * rs[f] * gm[f] + bt[f], 0.0f);
        drop.apply_row(yr, yr, i, f0, w, F);  // the dropout after it, while the row is in L1
        if (streamed) store_streamed(y + i * F + f0, row, w);
      }
    });
    if (streamed) store_fence();
  }
}

// dx holds dz = dy act'(z) (dy masked first with a dropout) between the passes when there is an activation
// or a dropout; with `held` there is neither, and the last pass writes held + the norm's dx.
GNN_CPU_CLONES void instance_norm_backward_cpu(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                                               const float* res, const float* mean, const float* rstd,
                                               const float* gamma, const float* beta, const int64_t* graph_ptr,
                                               int64_t G, int64_t F, Act act, const RowsDropout<float>& drop,
                                               const float* held) {
  GNN_CHECK(!held || (act == Act::kNone && !drop.mask.on),
            "instance_norm_backward: a held gradient to add needs no activation or dropout (dx holds dz then)");
  std::vector<float> pg(static_cast<size_t>(G * F)), pb(static_cast<size_t>(G * F));
  const int64_t B = norm_block(graph_ptr, G, F), blocks = ceil_div<int64_t>(F, B);
  const bool large = norm_large(graph_ptr[G], F), streams = instance_norm_streams(dx, graph_ptr[G], F);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < G * blocks; ++t) {
    const int64_t g = t / blocks, f0 = (t % blocks) * B, w = std::min(B, F - f0);
    const int64_t b = graph_ptr[g], e = graph_ptr[g + 1], n = e - b;
    const float* m = mean + g * F + f0;
    const float* rs = rstd + g * F + f0;
    float dg[kNormBlock], db[kNormBlock], gm[kNormBlock], bt[kNormBlock], rows[kSumRows][kNormBlock];
    double s1d[kNormBlock], s2d[kNormBlock];  // (in double, as the reference's)
    float s1[kNormBlock], s2[kNormBlock];
    alignas(64) float masked[kNormBlock];  // dy's masked row in the first pass, dx's streamed one in the last
    for (int64_t f = 0; f < w; ++f) s1d[f] = 0.0, s2d[f] = 0.0, dg[f] = 0.0f, db[f] = 0.0f;
    for (int64_t f = 0; f < w; ++f) gm[f] = gamma ? gamma[f0 + f] : 1.0f, bt[f] = beta ? beta[f0 + f] : 0.0f;
    // whether the first pass stores dz (the masked dy times act'), with an activation or a dropout: in dx,
    // or in a second kept block where dx is streamed (dz_store below); else dz is dy itself
    const bool store_dz = act != Act::kNone || drop.mask.on;
    // Row i's block of s: x's own without a residual; else summed into the kept block (the first pass)
    // and read back from it (the second), or summed into one of rows each time when the block is not kept
    // (a trip's rows each their own).
    float* kept = res && n * w <= kScratchFloats ? norm_scratch(n * w) : nullptr;
    auto s_of = [&](int64_t i, bool first) -> const float* {
      const int64_t o = i * F + f0;
      if (!res) return x + o;
      float* d = kept ? kept + (i - b) * w : rows[(i - b) % kSumRows];
      if (first || !kept)
        for (int64_t f = 0; f < w; ++f) d[f] = x[o + f] + res[o + f];
      return d;
    };
    // dx streamed out by the last pass where it qualifies; dz then kept in a second block between the
    // passes, so that no pass writes dx's lines but the last (where that block would not fit, dz goes
    // through dx and dx is stored as usual)
    const bool streamed = streams && (!store_dz || n * w <= kScratchFloats);
    float* dz_kept = store_dz && streamed ? norm_scratch(n * w, 1) : nullptr;
    // Row i's block of dz: where the first pass stores it, and where both passes read it (dy's own row
    // without an activation or a dropout)
    auto dz_store = [&](int64_t i) { return dz_kept ? dz_kept + (i - b) * w : dx + i * F + f0; };
    auto dz_row = [&](int64_t i) -> const float* { return store_dz ? dz_store(i) : dy + i * F + f0; };
    for (int64_t i0 = b; i0 < e; i0 += kSumRows) {  // a trip's rows of s and dz, then their sums
      const int64_t k = std::min(kSumRows, e - i0);
      const float* xs[kSumRows];
      const float* d[kSumRows];
      for (int64_t r = 0; r < k; ++r) {
        const int64_t i = i0 + r, o = i * F + f0;
        if (large) {
          prefetch_ahead(x, i, e, F, f0, w), prefetch_ahead(res, i, e, F, f0, w);
          prefetch_ahead(dy, i, e, F, f0, w);
        }
        const float* xr = xs[r] = s_of(i, true);
        const float* g0 = dy + o;  // dy's row, or dropout's backward of it
        if (drop.mask.on) {
          drop.apply_row(masked, g0, i, f0, w, F);
          g0 = masked;
        }
        if (act != Act::kNone)
          dispatch_act(act, [&](auto A) GNN_INLINE {
            float* __restrict dz = dz_store(i);
            const float* __restrict g1 = g0;
            for (int64_t f = 0; f < w; ++f)
              dz[f] = g1[f] * act_derivative<float>(A, (xr[f] - m[f]) * rs[f] * gm[f] + bt[f], 0.0f);
          });
        else if (store_dz) std::copy(g0, g0 + w, dz_store(i));
        d[r] = dz_row(i);
      }
      // each row's terms dz gm and dz gm xh (in double), dz xh and dz, added in row order
      if (k == kSumRows) {
        const float *d0 = d[0], *d1 = d[1], *d2 = d[2], *d3 = d[3];
        const float *x0 = xs[0], *x1 = xs[1], *x2 = xs[2], *x3 = xs[3];
        for (int64_t f = 0; f < w; ++f) {
          const float h0 = (x0[f] - m[f]) * rs[f], h1 = (x1[f] - m[f]) * rs[f], h2 = (x2[f] - m[f]) * rs[f],
                      h3 = (x3[f] - m[f]) * rs[f];
          s1d[f] =
              s1d[f] + double(d0[f] * gm[f]) + double(d1[f] * gm[f]) + double(d2[f] * gm[f]) + double(d3[f] * gm[f]);
          s2d[f] = s2d[f] + double(d0[f] * gm[f] * h0) + double(d1[f] * gm[f] * h1) + double(d2[f] * gm[f] * h2) +
                   double(d3[f] * gm[f] * h3);
          dg[f] = dg[f] + d0[f] * h0 + d1[f] * h1 + d2[f] * h2 + d3[f] * h3;
          db[f] = db[f] + d0[f] + d1[f] + d2[f] + d3[f];
        }
      } else
        for (int64_t r = 0; r < k; ++r)
          for (int64_t f = 0; f < w; ++f) {
            const float xh = (xs[r][f] - m[f]) * rs[f];
            s1d[f] += double(d[r][f] * gm[f]), s2d[f] += double(d[r][f] * gm[f] * xh);
            dg[f] += d[r][f] * xh, db[f] += d[r][f];
          }
    }
    for (int64_t f = 0; f < w; ++f) {
      s1[f] = n ? float(s1d[f] / double(n)) : 0.0f, s2[f] = n ? float(s2d[f] / double(n)) : 0.0f;
      pg[size_t(g * F + f0 + f)] = dg[f], pb[size_t(g * F + f0 + f)] = db[f];
    }
    for (int64_t i = b; i < e; ++i) {
      const int64_t o = i * F + f0;
      if (large) prefetch_ahead(held, i, e, F, f0, w);
      const float* xs = s_of(i, false);
      const float* d = dz_row(i);
      float* out = streamed ? masked : dx + o;  // masked is free in this pass
      if (held) {
        for (int64_t f = 0; f < w; ++f) {
          const float xh = (xs[f] - m[f]) * rs[f];
          out[f] = held[o + f] + (d[f] * gm[f] - s1[f] - xh * s2[f]) * rs[f];
        }
      } else {
        for (int64_t f = 0; f < w; ++f) {
          const float xh = (xs[f] - m[f]) * rs[f];
          out[f] = (d[f] * gm[f] - s1[f] - xh * s2[f]) * rs[f];
        }
      }
      if (streamed) store_streamed(dx + o, out, w);
    }
    if (streamed) store_fence();
  }
  for (int64_t f = 0; f < F; ++f) {
    float sg = 0.0f, sb = 0.0f;
    for (int64_t g = 0; g < G; ++g) sg += pg[size_t(g * F + f)], sb += pb[size_t(g * F + f)];
    if (dgamma) dgamma[f] = sg;
    if (dbeta) dbeta[f] = sb;
  }
}

}  // namespace gnn
