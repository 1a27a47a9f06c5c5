// CUDA SpMM (kernels/spmm.h). One kernel serves the forward gather along the CSR and the backward
// gather along the CSC (no atomics): a group of L lanes owns one output row and walks its entries,
// each lane holding V = 4 (16-byte loads) or 1 consecutive columns; a row wider than L*V columns
// (C*F for config-batched tensors) is walked once per chunk of L*V columns. L is the smallest power of
// two up to 32 that covers the row, so F = 8 puts 16 rows in a warp and F = 128 one row.
//
// Hub rows (more than kHubEntries entries) would leave one group serial over thousands of entries
// while the rest of the grid idles; the block that owns such a row splits its entries over all its
// groups (group g takes entries g, g + G, ...) and combines the partial results in shared memory in
// group order, so the sums are the same for every run.
//
// Per-head weights (GAT): w is [E, H] and the row's columns split into H heads of head_cols each; an
// entry's weight for a lane's columns is w[p * H + the head of those columns], so every head is
// aggregated in the one launch (a vector of 4 columns never straddles two heads).
//
// Summation order differs from the CPU kernel (which adds entries in order per column), so GPU and
// CPU results agree to rounding, not bitwise; two GPU runs agree bitwise.
#include <cuda_runtime.h>

#include "kernels/cuda_launch.cuh"
#include "kernels/spmm.h"

namespace gnn {
namespace {

constexpr int kHubEntries = 256;

enum class Mode { kFwd, kFwdMax, kBwd, kBwdMax };

struct GatherArgs {
  int64_t rows = 0;  // output rows
  const int32_t* ptr = nullptr;  // [rows + 1]: entries of each output row (CSR indptr, or CSC indptr)
  const int32_t* idx = nullptr;  // [E]: the input row each entry reads (CSR indices, or CSC indices)
  const int32_t* to_csr = nullptr;  // backward: the CSR position of each CSC entry
  const int32_t* indptr = nullptr;  // the CSR indptr (degrees for mean)
  const float* w = nullptr;  // per CSR position ([E], or [E, heads]), or null
  const float* in = nullptr;  // x (forward) or dy (backward)
  float* out = nullptr;  // y (forward) or dx (backward)
  int32_t* argmax_out = nullptr;  // forward max: [rows, F]
  const int32_t* argmax_in = nullptr;  // backward max: [N, F]
  int64_t F = 0, ld_in = 0, ld_out = 0;
  int64_t heads = 1, head_cols = 1;  // w's columns and, with heads > 1, the row's columns per head
  int lanes = 32;
  const float* base = nullptr;  // out = base + the result (ld_out apart; the backward's may be out itself)
  bool mean = false;
};

template <int V>
struct Vec {
  float v[V];
};

template <int V>
__device__ __forceinline__ Vec<V> load(const float* p) {
  Vec<V> r;
  if constexpr (V == 4) {
    const float4 t = __ldg(reinterpret_cast<const float4*>(p));
    r.v[0] = t.x, r.v[1] = t.y, r.v[2] = t.z, r.v[3] = t.w;
  } else {
    r.v[0] = __ldg(p);
  }
  return r;
}

template <int V>
__device__ __forceinline__ void store(float* p, const float* v) {
  if constexpr (V == 4) *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  else p[0] = v[0];
}

// Adds entry q of the current row into acc/arg for the V columns starting at col, whose head is wh.
template <int V, Mode M>
__device__ __forceinline__ void add_entry(const GatherArgs& a, int32_t q, int64_t col, int64_t wh, float* acc,
                                          int32_t* arg) {
  const int32_t s = __ldg(a.idx + q);
  const int32_t p = (M == Mode::kBwd || M == Mode::kBwdMax) ? __ldg(a.to_csr + q) : q;
  float c = a.w ? __ldg(a.w + int64_t(p) * a.heads + wh) : 1.0f;
  if (M == Mode::kBwd && a.mean) c /= float(__ldg(a.indptr + s + 1) - __ldg(a.indptr + s));
  const Vec<V> x = load<V>(a.in + int64_t(s) * a.ld_in + col);
#pragma unroll
  for (int k = 0; k < V; ++k) {
    if constexpr (M == Mode::kFwd || M == Mode::kBwd) {
      acc[k] += c * x.v[k];
    } else if constexpr (M == Mode::kFwdMax) {
      const float val = c * x.v[k];
      if (arg[k] < 0 || max_takes(val, acc[k])) acc[k] = val, arg[k] = p;
    } else {  // kBwdMax: only where entry p was the row's argmax
      if (__ldg(a.argmax_in + int64_t(s) * a.F + col + k) == p) acc[k] += c * x.v[k];
    }
  }
}

// The head of the columns from col on (0 with one head).
__device__ __forceinline__ int64_t head_of(const GatherArgs& a, int64_t col) {
  return a.heads > 1 ? col / a.head_cols : 0;
}

template <int V, Mode M>
__device__ __forceinline__ void init(float* acc, int32_t* arg) {
#pragma unroll
  for (int k = 0; k < V; ++k) acc[k] = M == Mode::kFwdMax ? -INFINITY : 0.0f, arg[k] = -1;
}

template <int V, Mode M>
__device__ __forceinline__ void finish(const GatherArgs& a, int64_t r, int64_t col, float* acc, const int32_t* arg,
                                       int32_t deg) {
  float* o = a.out + r * a.ld_out + col;
  if constexpr (M == Mode::kFwd) {
    if (a.mean && deg > 0)
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] /= float(deg);
  } else if constexpr (M == Mode::kFwdMax) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (arg[k] < 0) acc[k] = 0.0f;
      a.argmax_out[r * a.F + col + k] = arg[k];
    }
  }
  if (a.base) {
    const float* b = a.base + r * a.ld_out + col;
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] += b[k];  // a plain load: base may be out itself (backward)
  }
  store<V>(o, acc);
}

// At most 40 registers (6 blocks of 256 threads per SM, 75% occupancy): the gather is bound by the
// latency of its row loads, so resident warps are what keeps HBM busy. At the compiler's own choice
// (48 registers, 5 blocks, 62.5%) ncu read 48% of DRAM bandwidth at N = 1M, F = 128 on an H100;
// capped, that SpMM went from 0.598 to 0.535 ms and F = 128 at N = 100k from 0.068 to 0.061 ms
// (bench/peers/cuda_spmm.py). ptxas reports 4 bytes of spill for the V = 4 forward under the cap.
template <int V, Mode M>
__global__ void __launch_bounds__(kThreads, 6) gather_kernel(GatherArgs a) {
  const int L = a.lanes, groups = kThreads / L;
  const int g = int(threadIdx.x) / L, lane = int(threadIdx.x) % L;
  const int64_t r0 = int64_t(blockIdx.x) * groups, chunk = int64_t(L) * V;
  __shared__ float part[kThreads * V];
  __shared__ int32_t part_arg[M == Mode::kFwdMax ? kThreads * V : 1];

  float acc[V];
  int32_t arg[V];
  bool hub = false;
  const int64_t r = r0 + g;
  if (r < a.rows) {
    const int32_t b = a.ptr[r], e = a.ptr[r + 1];
    if (e - b > kHubEntries) {
      hub = true;
    } else {
      for (int64_t col = int64_t(lane) * V; col < a.F; col += chunk) {
        const int64_t wh = head_of(a, col);
        init<V, M>(acc, arg);
        for (int32_t q = b; q < e; ++q) add_entry<V, M>(a, q, col, wh, acc, arg);
        finish<V, M>(a, r, col, acc, arg, e - b);
      }
    }
  }
  if (!__syncthreads_or(hub)) return;  // a barrier and a vote: does the block own a hub row?

  // The block's hub rows, one at a time, all groups splitting the entries.
  const int64_t r_end = r0 + groups < a.rows ? r0 + groups : a.rows;
  for (int64_t rr = r0; rr < r_end; ++rr) {
    const int32_t b = a.ptr[rr], e = a.ptr[rr + 1];
    if (e - b <= kHubEntries) continue;  // the same decision in every thread
    for (int64_t base = 0; base < a.F; base += chunk) {
      const int64_t col = base + int64_t(lane) * V, wh = head_of(a, col);
      init<V, M>(acc, arg);
      if (col < a.F)
        for (int32_t q = b + g; q < e; q += groups) add_entry<V, M>(a, q, col, wh, acc, arg);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        part[threadIdx.x * V + k] = acc[k];
        if constexpr (M == Mode::kFwdMax) part_arg[threadIdx.x * V + k] = arg[k];
      }
      __syncthreads();
      if (g == 0 && col < a.F) {
        for (int h = 1; h < groups; ++h) {  // in group order: the same result every run
          const int t = h * L + lane;
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const float pv = part[t * V + k];
            if constexpr (M == Mode::kFwdMax) {
              const int32_t pa = part_arg[t * V + k];  // partials hold each group's first max
              if (max_merge_takes(pv, pa, acc[k], arg[k])) acc[k] = pv, arg[k] = pa;
            } else {
              acc[k] += pv;
            }
          }
        }
        finish<V, M>(a, rr, col, acc, arg, e - b);
      }
      __syncthreads();
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <Mode M>
void launch_gather(GatherArgs a, Stream stream, const char* name) {
  if (a.rows == 0 || a.F == 0) return;
  const bool vec4 = a.F % 4 == 0 && (a.heads == 1 || a.head_cols % 4 == 0) && a.ld_in % 4 == 0 && a.ld_out % 4 == 0 &&
                    aligned16(a.in) && aligned16(a.out);
  const int V = vec4 ? 4 : 1;
  const int64_t need = ceil_div<int64_t>(a.F, V);
  int L = 1;
  while (L < 32 && L < need) L *= 2;
  a.lanes = L;
  const unsigned blocks = blocks_for(a.rows, kThreads / L, name);  // a group of L lanes per row
  if (vec4) gather_kernel<4, M><<<blocks, kThreads, 0, stream>>>(a);
  else gather_kernel<1, M><<<blocks, kThreads, 0, stream>>>(a);
  GNN_CUDA_LAUNCH_CHECK(name);
}

// dw[p] = sum_f dy[v, f] x[src[p], f] (/deg(v) for mean; max: only the columns whose argmax is p);
// with H heads of F columns each (max excluded), dw[p, h] over head h's columns.
// One warp per edge, taken in CSC order: CSC entry q is CSR position p = csc_to_csr[q] with row
// v = csc_indices[q] and source indices[p], two dependent loads where a binary search for v in indptr
// would take log2(N) (17 at N = 100k: ncu timed that version at 204 us for E = 200k, H = 4 on an H100).
// Each dw[p, h] is written once, and the warp's shuffle reduction has a fixed order.
__global__ void __launch_bounds__(kThreads)
    edge_dot_kernel(float* dw, const float* dy, const float* x, const int32_t* argmax, CsrView g, int64_t F,
                    int64_t ldx, int64_t ldy, Reduce op, int64_t H) {
  const int64_t q = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int lane = int(threadIdx.x % 32);
  if (q >= g.num_edges) return;
  const int64_t p = __ldg(g.csc_to_csr + q), v = __ldg(g.csc_indices + q), s = __ldg(g.indices + p);
  for (int64_t h = 0; h < H; ++h) {
    const float *dyh = dy + v * ldy + h * F, *xh = x + s * ldx + h * F;
    float acc = 0.0f;
    for (int64_t f = lane; f < F; f += 32)
      if (op != Reduce::kMax || __ldg(argmax + v * F + f) == p) acc += __ldg(dyh + f) * __ldg(xh + f);
    for (int o = 16; o > 0; o /= 2) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (lane == 0) dw[p * H + h] = op == Reduce::kMean ? acc / float(g.indptr[v + 1] - g.indptr[v]) : acc;
  }
}

// The forward gathers along the CSR; the backward (dx) along the CSC, back to CSR positions for w.
GatherArgs forward_args(float* y, int32_t* argmax, const float* x, const float* w, const CsrView& g, int64_t F,
                        int64_t ldx, int64_t ldy, Reduce op) {
  GatherArgs a;
  a.rows = g.num_rows, a.ptr = g.indptr, a.idx = g.indices, a.indptr = g.indptr, a.w = w;
  a.in = x, a.out = y, a.argmax_out = argmax, a.F = F, a.ld_in = ldx, a.ld_out = ldy, a.mean = op == Reduce::kMean;
  return a;
}
GatherArgs backward_args(float* dx, const float* dy, const int32_t* argmax, const float* w, const CsrView& g, int64_t F,
                         int64_t ldx, int64_t ldy, Reduce op, const float* base) {
  GatherArgs a;
  a.rows = g.num_cols, a.ptr = g.csc_indptr, a.idx = g.csc_indices, a.to_csr = g.csc_to_csr, a.indptr = g.indptr;
  a.w = w, a.in = dy, a.out = dx, a.argmax_in = argmax, a.F = F, a.ld_in = ldy, a.ld_out = ldx;
  a.mean = op == Reduce::kMean, a.base = base;
  return a;
}

}  // namespace

void spmm_forward_cuda(float* y, int32_t* argmax, const float* x, const float* w, const CsrView& g, int64_t F,
                       int64_t ldx, int64_t ldy, Reduce op, const float* base, Stream stream) {
  GNN_CHECK(!base || base != y, "spmm_forward_cuda: base must not be y (as on the CPU)");
  GatherArgs a = forward_args(y, argmax, x, w, g, F, ldx, ldy, op);
  a.base = base;
  if (op == Reduce::kMax) launch_gather<Mode::kFwdMax>(a, stream, "spmm_forward_cuda (max)");
  else launch_gather<Mode::kFwd>(a, stream, "spmm_forward_cuda");
}

void spmm_backward_x_cuda(float* dx, const float* dy, const int32_t* argmax, const float* w, const CsrView& g,
                          int64_t F, int64_t ldx, int64_t ldy, Reduce op, const float* base, Stream stream) {
  const GatherArgs a = backward_args(dx, dy, argmax, w, g, F, ldx, ldy, op, base);
  if (op == Reduce::kMax) launch_gather<Mode::kBwdMax>(a, stream, "spmm_backward_x_cuda (max)");
  else launch_gather<Mode::kBwd>(a, stream, "spmm_backward_x_cuda");
}

void spmm_backward_w_cuda(float* dw, const float* dy, const float* x, const int32_t* argmax, const CsrView& g,
                          int64_t F, int64_t ldx, int64_t ldy, Reduce op, Stream stream) {
  const int64_t E = g.num_edges;
  if (E == 0) return;
  edge_dot_kernel<<<blocks_for(E * 32, kThreads, "spmm_backward_w_cuda"), kThreads, 0, stream>>>(dw, dy, x, argmax, g,
                                                                                                 F, ldx, ldy, op, 1);
  GNN_CUDA_LAUNCH_CHECK("spmm_backward_w_cuda");
}

void spmm_heads_forward_cuda(float* y, const float* x, const float* w, const CsrView& g, int64_t H, int64_t Fh,
                             Reduce op, Stream stream) {
  GNN_CHECK(op != Reduce::kMax && H >= 1 && Fh >= 1, "spmm_heads_forward_cuda: sum or mean over H >= 1 heads");
  GatherArgs a = forward_args(y, nullptr, x, w, g, H * Fh, H * Fh, H * Fh, op);
  a.heads = H, a.head_cols = Fh;
  launch_gather<Mode::kFwd>(a, stream, "spmm_heads_forward_cuda");
}

void spmm_heads_backward_x_cuda(float* dx, const float* dy, const float* w, const CsrView& g, int64_t H, int64_t Fh,
                                Reduce op, Stream stream) {
  GNN_CHECK(op != Reduce::kMax && H >= 1 && Fh >= 1, "spmm_heads_backward_x_cuda: sum or mean over H >= 1 heads");
  GatherArgs a = backward_args(dx, dy, nullptr, w, g, H * Fh, H * Fh, H * Fh, op, nullptr);
  a.heads = H, a.head_cols = Fh;
  launch_gather<Mode::kBwd>(a, stream, "spmm_heads_backward_x_cuda");
}

void spmm_heads_backward_w_cuda(float* dw, const float* dy, const float* x, const CsrView& g, int64_t H, int64_t Fh,
                                Reduce op, Stream stream) {
  GNN_CHECK(op != Reduce::kMax && H >= 1 && Fh >= 1, "spmm_heads_backward_w_cuda: sum or mean over H >= 1 heads");
  const int64_t E = g.num_edges;
  if (E == 0) return;
  edge_dot_kernel<<<blocks_for(E * 32, kThreads, "spmm_heads_backward_w_cuda"), kThreads, 0, stream>>>(
      dw, dy, x, nullptr, g, Fh, H * Fh, H * Fh, op, H);
  GNN_CUDA_LAUNCH_CHECK("spmm_heads_backward_w_cuda");
}

}  // namespace gnn
