// Fused SAGE on the CPU. Forward, per block of kRows destination rows (one thread each):
//   h_blk = [mean of in-neighbours | x]  (a per-thread [kRows, 2F] buffer, built from the CSR)
//   z_blk = h_blk W (one serial GEMM, K = 2F), then bias and activation while it is in cache
// so the only full-size traffic is reading x (gathers and root rows) and writing y (and z).
// Backward, per block: recompute h_blk, dz_blk = dy * act'(z), dW_chunk += h_blk^T dz_blk,
// dh_blk = dz_blk W^T -> d_agg (kept) and d_root (straight into dx); then dx += the transposed
// mean-gather of d_agg over the CSC. dW and db are summed per fixed chunk of blocks and then in chunk
// order, so the bits do not depend on the thread count. Scratch is host vectors sized by the shapes.
#include <algorithm>
#include <vector>

#include "kernels/sage.h"

namespace gnn {
namespace {

constexpr int64_t kRows = 256;
constexpr int64_t kChunks = 16;  // fixed partial sums for dW / db, whatever the thread count

// h [rows, 2F] for destination rows i0 .. i0 + rows: the mean of their sources, then their own x.
inline void build_h(float* __restrict h, const float* __restrict x, const CsrView& g, int64_t i0, int64_t rows,
                    int64_t F) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t v = i0 + r;
    float* __restrict agg = h + r * 2 * F;
    const int32_t b = g.indptr[v], e = g.indptr[v + 1];
    if (b == e) {
      for (int64_t f = 0; f < F; ++f) agg[f] = 0.0f;
    } else {
      const float* __restrict x0 = x + int64_t(g.indices[b]) * F;
      for (int64_t f = 0; f < F; ++f) agg[f] = x0[f];
      for (int32_t p = b + 1; p < e; ++p) {
        const float* __restrict xr = x + int64_t(g.indices[p]) * F;
        for (int64_t f = 0; f < F; ++f) agg[f] += xr[f];
      }
      const float inv = 1.0f / float(e - b);
      for (int64_t f = 0; f < F; ++f) agg[f] *= inv;
    }
    const float* __restrict own = x + v * F;
    for (int64_t f = 0; f < F; ++f) agg[F + f] = own[f];
  }
}

}  // namespace

GNN_CPU_CLONES void sage_forward_cpu(float* y, float* z, const float* x, const CsrView& g, const float* W,
                                     const float* b, int64_t F, int64_t O, Act act, float slope) {
  const int64_t N = g.num_rows, blocks = (N + kRows - 1) / kRows;
#pragma omp parallel
  {
    std::vector<float> h(size_t(kRows * 2 * F));
#pragma omp for schedule(dynamic, 1)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t i0 = blk * kRows, rows = std::min(kRows, N - i0);
      build_h(h.data(), x, g, i0, rows, F);
      float* zb = (z ? z : y) + i0 * O;
      gemm_cpu_serial(false, false, rows, O, 2 * F, 1.0f, h.data(), 2 * F, W, O, 0.0f, zb, O);
      float* yb = y + i0 * O;
      dispatch_act(act, [&](auto A) {  // bias and activation while the block is in cache
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t o = 0; o < O; ++o) {
            const float v = zb[r * O + o] + (b ? b[o] : 0.0f);
            if (z) zb[r * O + o] = v;
            yb[r * O + o] = act_value(decltype(A)::value, v, slope);
          }
        }
      });
    }
  }
}

GNN_CPU_CLONES void sage_backward_cpu(float* dx, float* dW, float* db, const float* dy, const float* z,
                                      const float* x, const CsrView& g, const float* W, int64_t F, int64_t O, Act act,
                                      float slope) {
  const int64_t N = g.num_rows, blocks = (N + kRows - 1) / kRows;
  const int64_t chunks = std::max<int64_t>(1, std::min(kChunks, blocks));
  std::vector<float> dagg(size_t(N * F));
  std::vector<float> dW_part(size_t(chunks * 2 * F * O), 0.0f), db_part(size_t(chunks * O), 0.0f);
#pragma omp parallel
  {
    std::vector<float> h(size_t(kRows * 2 * F)), dz(size_t(kRows * O));
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t first = c * blocks / chunks, last = (c + 1) * blocks / chunks;
      float* dWc = dW_part.data() + c * 2 * F * O;
      float* dbc = db_part.data() + c * O;
      for (int64_t blk = first; blk < last; ++blk) {
        const int64_t i0 = blk * kRows, rows = std::min(kRows, N - i0);
        build_h(h.data(), x, g, i0, rows, F);
        dispatch_act(act, [&](auto A) {
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t o = 0; o < O; ++o) {
              const int64_t i = (i0 + r) * O + o;
              const float d = dy[i] * act_derivative(decltype(A)::value, z[i], slope);
              dz[size_t(r * O + o)] = d;
              dbc[o] += d;
            }
        });
        gemm_cpu_serial(true, false, 2 * F, O, rows, 1.0f, h.data(), 2 * F, dz.data(), O, blk == first ? 0.0f : 1.0f,
                        dWc, O);
        gemm_cpu_serial(false, true, rows, 2 * F, O, 1.0f, dz.data(), O, W, O, 0.0f, h.data(), 2 * F);  // dh
        for (int64_t r = 0; r < rows; ++r) {
          const float* dh = h.data() + r * 2 * F;
          std::copy(dh, dh + F, dagg.data() + (i0 + r) * F);
          std::copy(dh + F, dh + 2 * F, dx + (i0 + r) * F);
        }
      }
    }
  }
  // Fixed-order reductions of the chunk partials.
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < 2 * F * O; ++k) {
    float s = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) s += dW_part[size_t(c * 2 * F * O + k)];
    dW[k] = s;
  }
  if (db)
    for (int64_t o = 0; o < O; ++o) {
      float s = 0.0f;
      for (int64_t c = 0; c < chunks; ++c) s += db_part[size_t(c * O + o)];
      db[o] = s;
    }
  spmm_backward_x_cpu(dx, dagg.data(), nullptr, nullptr, g, F, F, F, Reduce::kMean, /*accumulate=*/true);
}

}  // namespace gnn
