// The row maps of graph self-attention and the fused full attention on the GPU (kernels/attention.h).
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/attention.h"
#include "kernels/cuda_launch.cuh"

namespace gnn {
namespace {

__global__ void phi_kernel(float* a, const float* q, int64_t n, int64_t D, int64_t ld) {
  GNN_GRID_STRIDE(t, n * D) a[t] = attn_phi(__ldg(q + (t / D) * ld + t % D));
}

__global__ void div_kernel(float* y, int64_t ld, const float* num, const float* den, int64_t n, int64_t D) {
  GNN_GRID_STRIDE(t, n * D) y[(t / D) * ld + t % D] = __ldg(num + t) / __ldg(den + t / D);
}

__global__ void dphi_kernel(float* dq, int64_t ld, const float* da, const float* q, int64_t n, int64_t D) {
  GNN_GRID_STRIDE(t, n * D) {
    const int64_t o = (t / D) * ld + t % D;
    dq[o] = __ldg(da + t) * attn_dphi(__ldg(q + o));
  }
}

// A warp per row: lanes stride over D, the dot combined in a fixed butterfly.
__global__ void coef_kernel(float* u, float* c, const float* dy, int64_t ld, const float* y, const float* den,
                            int64_t n, int64_t D) {
  const int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = int(threadIdx.x % 32);
  if (i >= n) return;  // whole warps leave together
  const float inv = 1.0f / __ldg(den + i);
  float dot = 0.0f;
  for (int64_t d = lane; d < D; d += 32) {
    const float g = __ldg(dy + i * ld + d);
    u[i * D + d] = g * inv;
    dot += g * __ldg(y + i * D + d);
  }
  dot = warp_sum(dot);
  if (lane == 0) c[i] = -dot * inv;
}

// ---- Fused full attention (kernels/attention.h) ----
// A block is one tile of 32 rows (queries, or keys for dk/dv) of one graph and one head: 4 warps of 8
// rows each. The other side's rows stream through shared memory 32 at a time, lane j of a warp taking
// row j of that tile. Tiles hold the head's D columns zero-padded to DP = 32 * DC, so every dot product
// runs over DP. A tile whose rows a lane reads one each is stored with a row stride of DP + 1 (no bank
// conflicts); one whose row every lane reads at once (a broadcast) is stored unpadded and read as float4.
constexpr int kFlashThreads = 128, kFlashWarps = kFlashThreads / 32, kFlashRows = int(kFlashTile) / kFlashWarps;
static_assert(kFlashTile == 32, "a lane per row of the streamed tile");

// rows row0 .. row0+31 of src's columns col .. col+D-1 (row stride ld) into dst, zeros past `valid` rows
// and past D
template <int DP, int LD>
__device__ __forceinline__ void flash_load(float (*dst)[LD], const float* src, int64_t row0, int64_t valid, int64_t ld,
                                           int64_t col, int64_t D) {
  for (int i = threadIdx.x; i < 32 * DP; i += kFlashThreads) {
    const int r = i / DP, c = i % DP;
    dst[r][c] = r < valid && c < D ? __ldg(src + (row0 + r) * ld + col + c) : 0.0f;
  }
}

// s[r] = <a[rows r], b[lane]> for the warp's kFlashRows rows of a (unpadded, broadcast as float4) and the
// lane's row of b (padded): a float4 of a feeds four FMAs per row.
template <int DP>
__device__ __forceinline__ void flash_dots(float (&s)[kFlashRows], const float (*a)[DP], int a0, const float* b) {
  for (int r = 0; r < kFlashRows; ++r) s[r] = 0.0f;
  for (int d = 0; d < DP; d += 4) {
    const float b0 = b[d], b1 = b[d + 1], b2 = b[d + 2], b3 = b[d + 3];
    for (int r = 0; r < kFlashRows; ++r) {
      const float4 x = *reinterpret_cast<const float4*>(&a[a0 + r][d]);
      s[r] += x.x * b0 + x.y * b1 + x.z * b2 + x.w * b3;
    }
  }
}

// acc[r][c] += sum_{j < n} w[r][j] x[j][lane + 32 c]: the warp's rows r, weights w (one row of 32 per r,
// each read by every lane), x a streamed tile (lane reads its own columns).
template <int DC, int LD>
__device__ __forceinline__ void flash_accumulate(float (&acc)[kFlashRows][DC], const float (*w)[32],
                                                 const float (*x)[LD], int n) {
  const int lane = int(threadIdx.x % 32);
  for (int j = 0; j < n; ++j)
    for (int c = 0; c < DC; ++c) {
      const float xj = x[j][lane + 32 * c];
      for (int r = 0; r < kFlashRows; ++r) acc[r][c] += w[r][j] * xj;
    }
}

// out[row, col + d] = value(r, acc[r][c]) for the warp's rows r of the tile from row0 that exist (row <
// end) and its lane's columns d = lane + 32 c < D; out's row stride is W.
template <int DC, class Value>
__device__ __forceinline__ void flash_store(float* out, const float (&acc)[kFlashRows][DC], int64_t row0, int64_t end,
                                            int64_t W, int64_t col, int64_t D, Value value) {
  const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
  for (int r = 0; r < kFlashRows; ++r) {
    const int64_t row = row0 + warp * kFlashRows + r;
    if (row >= end) break;
    for (int c = 0; c < DC; ++c)
      if (lane + 32 * c < D) out[row * W + col + lane + 32 * c] = value(r, acc[r][c]);
  }
}

template <int DC>
__global__ void __launch_bounds__(kFlashThreads)
    flash_fwd_kernel(float* y, float* lse, const float* q, const float* k, const float* v, const int64_t* tiles,
                     int64_t H, int64_t D, float scale) {
  constexpr int DP = 32 * DC, R = kFlashRows;
  alignas(16) __shared__ float Qs[32][DP];
  __shared__ float Ks[32][DP + 1];
  __shared__ float Vs[32][DP];
  __shared__ float Ps[kFlashWarps][R][32];
  const int64_t t = blockIdx.x, h = blockIdx.y, W = H * D, col = h * D;
  const int64_t row0 = tiles[3 * t], gb = tiles[3 * t + 1], ge = tiles[3 * t + 2];
  const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
  flash_load<DP>(Qs, q, row0, ge - row0, W, col, D);
  float m[R], l[R], acc[R][DC], s[R];
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY, l[r] = 0.0f;
    for (int c = 0; c < DC; ++c) acc[r][c] = 0.0f;
  }
  for (int64_t kb = gb; kb < ge; kb += 32) {
    const int nk = int(ge - kb < 32 ? ge - kb : 32);
    __syncthreads();  // the last tile's readers are done
    flash_load<DP>(Ks, k, kb, nk, W, col, D);
    flash_load<DP>(Vs, v, kb, nk, W, col, D);
    __syncthreads();
    flash_dots<DP>(s, Qs, warp * R, Ks[lane]);
    for (int r = 0; r < R; ++r) {  // online softmax: rescale what the earlier tiles summed
      const float x = lane < nk ? s[r] * scale : -INFINITY;
      const float mx = fmaxf(m[r], warp_max(x));  // finite: lane 0 holds a key
      const float p = expf(x - mx), alpha = expf(m[r] - mx);
      l[r] = l[r] * alpha + warp_sum(p);
      m[r] = mx;
      for (int c = 0; c < DC; ++c) acc[r][c] *= alpha;
      Ps[warp][r][lane] = p;
    }
    __syncwarp();
    flash_accumulate<DC>(acc, Ps[warp], Vs, nk);
  }
  flash_store<DC>(y, acc, row0, ge, W, col, D, [&](int r, float a) { return a / l[r]; });
  if (lane == 0)
    for (int r = 0; r < R && row0 + warp * R + r < ge; ++r) lse[(row0 + warp * R + r) * H + h] = m[r] + logf(l[r]);
}

// dq_i = scale * sum_j dS_ij k_j with dS_ij = P_ij (<dy_i, v_j> - delta_i), P_ij = exp(s_ij - lse_i);
// delta_i = <dy_i, y_i> is computed here and written for the dk/dv kernel.
template <int DC>
__global__ void __launch_bounds__(kFlashThreads)
    flash_bwd_dq_kernel(float* dq, float* delta, const float* dy, const float* y, const float* lse, const float* q,
                        const float* k, const float* v, const int64_t* tiles, int64_t H, int64_t D, float scale) {
  constexpr int DP = 32 * DC, R = kFlashRows;
  alignas(16) __shared__ float Qs[32][DP];
  alignas(16) __shared__ float dOs[32][DP];
  __shared__ float Ks[32][DP + 1];
  __shared__ float Vs[32][DP + 1];
  __shared__ float dSs[kFlashWarps][R][32];
  const int64_t t = blockIdx.x, h = blockIdx.y, W = H * D, col = h * D;
  const int64_t row0 = tiles[3 * t], gb = tiles[3 * t + 1], ge = tiles[3 * t + 2];
  const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
  flash_load<DP>(Qs, q, row0, ge - row0, W, col, D);
  flash_load<DP>(dOs, dy, row0, ge - row0, W, col, D);
  __syncthreads();
  float L[R], dl[R], acc[R][DC], s[R], dp[R];
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + warp * R + r;
    float part = 0.0f;
    if (row < ge)
      for (int c = 0; c < DC; ++c)
        if (lane + 32 * c < D) part += dOs[warp * R + r][lane + 32 * c] * __ldg(y + row * W + col + lane + 32 * c);
    dl[r] = warp_sum(part);
    L[r] = row < ge ? __ldg(lse + row * H + h) : 0.0f;
    if (row < ge && lane == 0) delta[row * H + h] = dl[r];
    for (int c = 0; c < DC; ++c) acc[r][c] = 0.0f;
  }
  for (int64_t kb = gb; kb < ge; kb += 32) {
    const int nk = int(ge - kb < 32 ? ge - kb : 32);
    __syncthreads();
    flash_load<DP>(Ks, k, kb, nk, W, col, D);
    flash_load<DP>(Vs, v, kb, nk, W, col, D);
    __syncthreads();
    flash_dots<DP>(s, Qs, warp * R, Ks[lane]);
    flash_dots<DP>(dp, dOs, warp * R, Vs[lane]);
    for (int r = 0; r < R; ++r) {
      const float p = lane < nk ? expf(s[r] * scale - L[r]) : 0.0f;
      dSs[warp][r][lane] = p * (dp[r] - dl[r]);
    }
    __syncwarp();
    flash_accumulate<DC>(acc, dSs[warp], Ks, nk);
  }
  flash_store<DC>(dq, acc, row0, ge, W, col, D, [&](int, float a) { return a * scale; });
}

// dv_j = sum_i P_ij dy_i, dk_j = scale * sum_i dS_ij q_i: a block per key tile, the graph's queries
// streamed 32 at a time, lane i taking query i.
template <int DC>
__global__ void __launch_bounds__(kFlashThreads)
    flash_bwd_dkv_kernel(float* dk, float* dv, const float* delta, const float* dy, const float* lse, const float* q,
                         const float* k, const float* v, const int64_t* tiles, int64_t H, int64_t D, float scale) {
  constexpr int DP = 32 * DC, R = kFlashRows;
  alignas(16) __shared__ float Ks[32][DP];
  alignas(16) __shared__ float Vs[32][DP];
  __shared__ float Qs[32][DP + 1];
  __shared__ float dOs[32][DP + 1];
  __shared__ float Ps[kFlashWarps][R][32];
  __shared__ float dSs[kFlashWarps][R][32];
  __shared__ float Ls[32], Ds[32];
  const int64_t t = blockIdx.x, h = blockIdx.y, W = H * D, col = h * D;
  const int64_t key0 = tiles[3 * t], gb = tiles[3 * t + 1], ge = tiles[3 * t + 2];
  const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
  flash_load<DP>(Ks, k, key0, ge - key0, W, col, D);
  flash_load<DP>(Vs, v, key0, ge - key0, W, col, D);
  float ak[R][DC], av[R][DC], s[R], dp[R];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < DC; ++c) ak[r][c] = av[r][c] = 0.0f;
  for (int64_t qb = gb; qb < ge; qb += 32) {
    const int nq = int(ge - qb < 32 ? ge - qb : 32);
    __syncthreads();
    flash_load<DP>(Qs, q, qb, nq, W, col, D);
    flash_load<DP>(dOs, dy, qb, nq, W, col, D);
    if (threadIdx.x < 32) {
      const int i = int(threadIdx.x);
      Ls[i] = i < nq ? __ldg(lse + (qb + i) * H + h) : 0.0f;
      Ds[i] = i < nq ? __ldg(delta + (qb + i) * H + h) : 0.0f;
    }
    __syncthreads();
    flash_dots<DP>(s, Ks, warp * R, Qs[lane]);
    flash_dots<DP>(dp, Vs, warp * R, dOs[lane]);
    for (int r = 0; r < R; ++r) {
      const float p = lane < nq ? expf(s[r] * scale - Ls[lane]) : 0.0f;
      Ps[warp][r][lane] = p;
      dSs[warp][r][lane] = p * (dp[r] - Ds[lane]);
    }
    __syncwarp();
    for (int i = 0; i < nq; ++i)  // both sums in one pass (two flash_accumulate calls take 118 registers, not 96)
      for (int c = 0; c < DC; ++c) {
        const float gi = dOs[i][lane + 32 * c], qi = Qs[i][lane + 32 * c];
        for (int r = 0; r < R; ++r) {
          av[r][c] += Ps[warp][r][i] * gi;
          ak[r][c] += dSs[warp][r][i] * qi;
        }
      }
  }
  flash_store<DC>(dk, ak, key0, ge, W, col, D, [&](int, float a) { return a * scale; });
  flash_store<DC>(dv, av, key0, ge, W, col, D, [](int, float a) { return a; });
}

dim3 flash_grid(int64_t num_tiles, int64_t H, int64_t D, const char* name) {
  GNN_CHECK(D >= 1 && D <= kFlashMaxD, name, ": head width ", D, " is outside 1 .. ", kFlashMaxD);
  GNN_CHECK(H >= 1 && H <= 65535, name, ": ", H, " heads is outside 1 .. 65535 (the grid's y)");
  return dim3(blocks_for(num_tiles, 1, name), unsigned(H));
}
}  // namespace

void phi_rows_cuda(float* a, const float* q, int64_t n, int64_t D, int64_t ld, Stream stream) {
  GNN_LAUNCH_N("phi_rows_cuda", n * D, phi_kernel, a, q, n, D, ld);
}

void div_rows_cuda(float* y, int64_t ld, const float* num, const float* den, int64_t n, int64_t D, Stream stream) {
  GNN_LAUNCH_N("div_rows_cuda", n * D, div_kernel, y, ld, num, den, n, D);
}

void coef_rows_cuda(float* u, float* c, const float* dy, int64_t ld, const float* y, const float* den, int64_t n,
                    int64_t D, Stream stream) {
  if (n == 0) return;
  coef_kernel<<<blocks_for(n * 32, kThreads, "coef_rows_cuda"), kThreads, 0, stream>>>(u, c, dy, ld, y, den, n, D);
  GNN_CUDA_LAUNCH_CHECK("coef_rows_cuda");
}

void dphi_rows_cuda(float* dq, int64_t ld, const float* da, const float* q, int64_t n, int64_t D, Stream stream) {
  GNN_LAUNCH_N("dphi_rows_cuda", n * D, dphi_kernel, dq, ld, da, q, n, D);
}

void flash_attention_forward_cuda(float* y, float* lse, const float* q, const float* k, const float* v,
                                  const int64_t* tiles, int64_t num_tiles, int64_t H, int64_t D, Stream stream) {
  const char* name = "flash_attention_forward_cuda";
  if (num_tiles == 0) return;
  const dim3 grid = flash_grid(num_tiles, H, D, name);
  const float scale = 1.0f / std::sqrt(float(D));
  if (D <= 32) flash_fwd_kernel<1><<<grid, kFlashThreads, 0, stream>>>(y, lse, q, k, v, tiles, H, D, scale);
  else flash_fwd_kernel<2><<<grid, kFlashThreads, 0, stream>>>(y, lse, q, k, v, tiles, H, D, scale);
  GNN_CUDA_LAUNCH_CHECK(name);
}

void flash_attention_backward_cuda(float* dq, float* dk, float* dv, float* delta, const float* dy, const float* y,
                                   const float* lse, const float* q, const float* k, const float* v,
                                   const int64_t* tiles, int64_t num_tiles, int64_t H, int64_t D, Stream stream) {
  const char* name = "flash_attention_backward_cuda";
  if (num_tiles == 0) return;
  const dim3 grid = flash_grid(num_tiles, H, D, name);
  const float scale = 1.0f / std::sqrt(float(D));
  if (D <= 32) {
    flash_bwd_dq_kernel<1><<<grid, kFlashThreads, 0, stream>>>(dq, delta, dy, y, lse, q, k, v, tiles, H, D, scale);
    GNN_CUDA_LAUNCH_CHECK(name);
    flash_bwd_dkv_kernel<1><<<grid, kFlashThreads, 0, stream>>>(dk, dv, delta, dy, lse, q, k, v, tiles, H, D, scale);
  } else {
    flash_bwd_dq_kernel<2><<<grid, kFlashThreads, 0, stream>>>(dq, delta, dy, y, lse, q, k, v, tiles, H, D, scale);
    GNN_CUDA_LAUNCH_CHECK(name);
    flash_bwd_dkv_kernel<2><<<grid, kFlashThreads, 0, stream>>>(dk, dv, delta, dy, lse, q, k, v, tiles, H, D, scale);
  }
  GNN_CUDA_LAUNCH_CHECK(name);
}

}  // namespace gnn
