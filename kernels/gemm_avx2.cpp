// SGEMM with AVX2 + FMA: a 6 x 16 micro-tile (12 accumulators, 2 B registers, 1 broadcast of 16), 6 x 8
// for a product at most 8 wide (gemm_detail::run_shaped).
// Compiled with -mavx2 -mfma (CMakeLists.txt); only called when the CPU has both.
#include <immintrin.h>

#include "kernels/gemm.h"
#include "kernels/gemm_blocked.h"

namespace gnn {
namespace {
struct Avx2 {
  using T = __m256;
  static constexpr int W = 8;
  static T zero() { return _mm256_setzero_ps(); }
  static T set1(float x) { return _mm256_set1_ps(x); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static T bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
};
}  // namespace

void gemm_avx2(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel, const float* bias,
               GemmCat cat) {
  gemm_detail::run_shaped<Avx2, 6, 2>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias,
                                      gemm_detail::Cat{cat.a2, cat.lda2, cat.k1});
}

}  // namespace gnn
