// The squeeze-and-excitation block on the host: squeeze_excite_avx512.cpp's row blocks where they apply,
// the reference's loops otherwise (the forward over the threads, a block of rows each).
#include <algorithm>

#include "kernels/gemm.h"
#include "kernels/squeeze_excite.h"

namespace gnn {

#if defined(__x86_64__)
void squeeze_excite_forward_avx512(float* y, float* h, const float* x, const float* w1, const float* b1,
                                   const float* w2, const float* b2, int64_t R, int64_t F);
void squeeze_excite_backward_avx512(float* dx, float* dw1, float* db1, float* dw2, float* db2, const float* dy,
                                    const float* x, const float* h, const float* w1, const float* w2, const float* b2,
                                    int64_t R, int64_t F);
#endif

bool squeeze_excite_vectorised(int64_t F, int64_t H) {
#if defined(__x86_64__)
  return H == 16 && F > 0 && F % 16 == 0 && gemm_isa_supported(GemmIsa::kAvx512);
#else
  (void)F, (void)H;
  return false;
#endif
}

void squeeze_excite_forward_cpu(float* y, float* h, const float* x, const float* w1, const float* b1, const float* w2,
                                const float* b2, int64_t R, int64_t F, int64_t H) {
#if defined(__x86_64__)
  if (squeeze_excite_vectorised(F, H)) return squeeze_excite_forward_avx512(y, h, x, w1, b1, w2, b2, R, F);
#endif
  const int64_t block = 64, blocks = (R + block - 1) / block;
#pragma omp parallel for schedule(static) if (R * F * H > (1 << 18))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t r0 = b * block, n = std::min(block, R - r0);
    squeeze_excite_forward_ref(y + r0 * F, h + r0 * H, x + r0 * F, w1, b1, w2, b2, n, F, H);
  }
}

void squeeze_excite_backward_cpu(float* dx, float* dw1, float* db1, float* dw2, float* db2, const float* dy,
                                 const float* x, const float* h, const float* w1, const float* w2, const float* b2,
                                 int64_t R, int64_t F, int64_t H) {
#if defined(__x86_64__)
  if (squeeze_excite_vectorised(F, H))
    return squeeze_excite_backward_avx512(dx, dw1, db1, dw2, db2, dy, x, h, w1, w2, b2, R, F);
#endif
  squeeze_excite_backward_ref(dx, dw1, db1, dw2, db2, dy, x, h, w1, w2, b2, R, F, H);
}

}  // namespace gnn
