// The squeeze-and-excitation block on the host in float: squeeze_excite_avx512.cpp's row blocks, with
// their workspace allocated and filled here. Where they do not apply the op composes other ops, so the
// float reference (whose vmath calls want an ISA clone of their own) is never built.
#include <algorithm>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "base/error.h"
#include "kernels/gemm.h"
#include "kernels/squeeze_excite.h"

namespace gnn {
namespace {

int64_t max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// The AVX-512 kernels' workspace, n floats holding whatever the last call left (the kernels write their
// buffers before they read them; the caller zeroes the partial sums): the calling thread's, kept from call
// to call so that a step's calls do not map and fault fresh pages for it.
float* workspace(int64_t n) {
  static thread_local std::vector<float> ws;
  if (ws.size() < size_t(n)) ws.resize(size_t(n));
  return ws.data();
}

// b2, or F zeros
void bias_row(float* out, const float* b2, int64_t F) {
  for (int64_t f = 0; f < F; ++f) out[f] = b2 ? b2[f] : 0.0f;
}

// The backward kernels' workspace: the b2 row, W1^T [H, F], W2^T [F, H] and the chunks' partial sums
// (zeros) for R rows, then `thread` floats for each thread.
float* backward_workspace(const float* w1, const float* w2, const float* b2, int64_t R, int64_t F, int64_t H,
                          int64_t thread) {
  const int64_t chunks = (R + kSqueezeExciteChunk - 1) / kSqueezeExciteChunk, parts = chunks * (2 * F * H + H + F);
  float* ws = workspace(F + 2 * H * F + parts + max_threads() * thread);
  float *w1t = ws + F, *w2t = w1t + H * F;
  bias_row(ws, b2, F);
  for (int64_t k = 0; k < F; ++k)
    for (int64_t m = 0; m < H; ++m) {
      w1t[m * F + k] = w1[k * H + m];
      w2t[k * H + m] = w2[m * F + k];
    }
  std::fill_n(w2t + F * H, parts, 0.0f);
  return ws;
}

// What runs the AVX-512 kernels' products at the current precision: under bf16 products, AMX tiles where
// the bf16 GEMM runs on them (a tile's 32 k: F a multiple of 32), else VDPBF16PS (k in pairs)
SeProducts products(int64_t F) {
#if defined(__x86_64__)
  if (F <= 0 || F % 16 != 0 || gemm_cpu_precision() != GemmPrecision::kBf16) return SeProducts::kF32;
  if (gemm_bf16_kernel() == Bf16Kernel::kAmx) return F % 32 == 0 ? SeProducts::kTiles : SeProducts::kF32;
  return SeProducts::kDp;
#else
  (void)F;
  return SeProducts::kF32;
#endif
}

// The bf16 products' workspace (squeeze_excite.h, on tiles or VDPBF16PS), the weights packed (w1t, w2t: the
// backward's), or null where the products are f32 FMA chains
float* amx_workspace(const float* w1, const float* w2, const float* w1t, const float* w2t, int64_t F) {
  if (products(F) == SeProducts::kF32) return nullptr;
  static thread_local std::vector<float> ws;
  const size_t n = size_t(squeeze_excite_amx_floats(F, max_threads()));
  if (ws.size() < n) ws.resize(n);
  squeeze_excite_amx_pack(reinterpret_cast<uint32_t*>(ws.data()), w1, w2, w1t, w2t, F);
  return ws.data();
}

// The host kernels' refusals, where ag::squeeze_excite and ag::squeeze_excite_attention compose other ops
void check_vectorised(int64_t F, int64_t H) {
  GNN_CHECK(squeeze_excite_vectorised(F, H), "squeeze_excite: no host kernel for ", F, " channels squeezed to ", H,
            " (ag::squeeze_excite composes the ops there)");
}

// What the fused kernel itself needs, at any precision (squeeze_excite_attention_fused adds the op's rule
// for bf16 products, which reads the products' precision: a backward must not refuse the forward's shape
// when the precision changed between the two)
bool fused_shape(int64_t C, int64_t F, int64_t H) {
  return C >= 1 && C <= kSqueezeExciteAttentionMaxConfigs &&
         (kSqueezeExciteChunk % C == 0 || C % kSqueezeExciteChunk == 0) && squeeze_excite_vectorised(F, H);
}

void check_fused(int64_t C, int64_t F, int64_t H) {
  GNN_CHECK(fused_shape(C, F, H), "squeeze_excite_attention: no host kernel for ", C,
            " configs of ", F, " channels squeezed to ", H, " (ag::squeeze_excite_attention composes the ops there)");
}

}  // namespace

bool squeeze_excite_amx(int64_t F) { return products(F) == SeProducts::kTiles; }
bool squeeze_excite_dpbf16(int64_t F) { return products(F) == SeProducts::kDp; }

bool squeeze_excite_vectorised(int64_t F, int64_t H) {
#if defined(__x86_64__)
  return H == 16 && F > 0 && F % 16 == 0 && gemm_isa() == GemmIsa::kAvx512;
#else
  (void)F, (void)H;
  return false;
#endif
}

void squeeze_excite_forward_cpu(float* y, float* h, const float* x, const float* w1, const float* b1, const float* w2,
                                const float* b2, int64_t R, int64_t F, int64_t H) {
  check_vectorised(F, H);
#if defined(__x86_64__)
  float* ws = workspace(F + max_threads() * squeeze_excite_thread_floats(F, false));
  bias_row(ws, b2, F);
  squeeze_excite_forward_avx512(y, h, x, w1, b1, w2, R, F, ws, amx_workspace(w1, w2, nullptr, nullptr, F),
                                products(F));
#else
  (void)y, (void)h, (void)x, (void)w1, (void)b1, (void)w2, (void)b2, (void)R;
#endif
}

void squeeze_excite_backward_cpu(float* dx, float* dw1, float* db1, float* dw2, float* db2, const float* dy,
                                 const float* x, const float* h, const float* w1, const float* w2, const float* b2,
                                 int64_t R, int64_t F, int64_t H) {
  check_vectorised(F, H);
#if defined(__x86_64__)
  float* ws = backward_workspace(w1, w2, b2, R, F, H, squeeze_excite_thread_floats(F, true));
  float* amx_ws = amx_workspace(w1, w2, ws + F, ws + F + H * F, F);
  squeeze_excite_backward_avx512(dx, dw1, db1, dw2, db2, dy, x, h, w2, R, F, ws, amx_ws, products(F));
#else
  (void)dx, (void)dw1, (void)db1, (void)dw2, (void)db2, (void)dy;
  (void)x, (void)h, (void)w1, (void)w2, (void)b2, (void)R;
#endif
}

bool squeeze_excite_attention_fused(int64_t C, int64_t F, int64_t H) {
  // on tiles, a node's rows in whole blocks: the weight gradients' tile sums then meet the SE op's blocks;
  // on VDPBF16PS, blocks that start at even rows, so that the sums pair the rows as the SE op does
  const SeProducts p = products(F);
  const int64_t block = p == SeProducts::kTiles ? kSqueezeExciteBlock : p == SeProducts::kDp ? 2 : 1;
  return fused_shape(C, F, H) && C % block == 0;
}

void squeeze_excite_attention_forward_cpu(float* y, float* h, const float* x, const float* w1,
                                          const float* b1, const float* w2, const float* b2, const float* res,
                                          int64_t N, int64_t C, int64_t F, int64_t H, const float* beta, Act a,
                                          RowsDropout<float> drop) {
  check_fused(C, F, H);
#if defined(__x86_64__)
  float* ws = workspace(F + max_threads() * squeeze_excite_attention_thread_floats(C, F, false));
  bias_row(ws, b2, F);
  squeeze_excite_attention_forward_avx512(y, h, x, w1, b1, w2, res, N, C, F, *beta, a, drop, ws,
                                          amx_workspace(w1, w2, nullptr, nullptr, F), products(F));
#else
  (void)y, (void)h, (void)x, (void)w1, (void)b1, (void)w2, (void)b2, (void)res, (void)N;
  (void)beta, (void)a, (void)drop;
#endif
}

void squeeze_excite_attention_backward_cpu(float* dx, float* dres, float* dbeta, float* dw1, float* db1, float* dw2,
                                           float* db2, const float* dy, const float* x, const float* h,
                                           const float* res, const float* w1, const float* w2, const float* b2,
                                           int64_t N, int64_t C, int64_t F, int64_t H, const float* beta, Act a,
                                           RowsDropout<float> drop) {
  check_fused(C, F, H);
#if defined(__x86_64__)
  float* ws = backward_workspace(w1, w2, b2, N * C, F, H, squeeze_excite_attention_thread_floats(C, F, true));
  static thread_local std::vector<double> rows;  // each node's part of dbeta, then each thread's F doubles
  rows.resize(size_t(N + max_threads() * F));
  float* amx_ws = amx_workspace(w1, w2, ws + F, ws + F + H * F, F);
  squeeze_excite_attention_backward_avx512(dx, dres, rows.data(), dw1, db1, dw2, db2, dy, x, h, res, w2, N, C, F,
                                           *beta, a, drop, ws, amx_ws, products(F));
  if (dbeta) *dbeta = float(config_attention_dbeta(rows.data(), N));  // as config_attention_backward_cpu sums it
#else
  (void)dx, (void)dres, (void)dbeta, (void)dw1, (void)db1, (void)dw2, (void)db2, (void)dy, (void)x, (void)h;
  (void)res, (void)w1, (void)w2, (void)b2, (void)N, (void)beta, (void)a, (void)drop;
#endif
}

}  // namespace gnn
