// Dropout on the CPU: dropout_apply_ref's and dropout_configs_apply_ref's maps (kernels/dropout.h), each thread's
// part in a GNN_CPU_CLONES function, so the hash's 32-bit multiplies run as AVX2 / AVX-512 lanes (the
// baseline SSE2 has no packed 32-bit multiply). dropout_configs hashes a row's F mask values once and
// applies them to its C configs, where the reference hashes each of the C*F values. The same bits as the
// references: y = x * (0 or scale), with the same decision per element.
#include <algorithm>

#include "base/common.h"
#include "kernels/cpu_parts.h"
#include "kernels/dropout.h"

namespace gnn {

namespace {

GNN_CPU_CLONES void dropout_part(float* __restrict y, const float* __restrict x, int64_t b, int64_t e, uint32_t key,
                                 uint32_t threshold, float scale) {
  dropout_run(y + b, x + b, e - b, b, key, threshold, scale);
}

// Rows [b, e) of [R, C*F]: each row's mask in pieces of kPiece values, hashed once, then applied to its C configs.
constexpr int64_t kPiece = 512;
GNN_CPU_CLONES void dropout_configs_part(float* __restrict y, const float* __restrict x, int64_t b, int64_t e,
                                         int64_t C, int64_t F, uint32_t key, uint32_t threshold, float scale) {
  float m[kPiece];
  for (int64_t r = b; r < e; ++r)
    for (int64_t f0 = 0; f0 < F; f0 += kPiece) {
      const int64_t len = std::min(kPiece, F - f0);
      std::fill(m, m + len, 1.0f);
      dropout_run(m, m, len, r * F + f0, key, threshold, scale);  // 1 * scale is scale: the same m
      for (int64_t c = 0; c < C; ++c) {
        float* __restrict yr = y + (r * C + c) * F + f0;
        const float* __restrict xr = x + (r * C + c) * F + f0;
        for (int64_t f = 0; f < len; ++f) yr[f] = xr[f] * m[f];
      }
    }
}

}  // namespace

void dropout_apply_cpu(float* y, const float* x, int64_t n, uint64_t seed, uint32_t threshold, float scale) {
  const uint32_t key = dropout_key(seed);
  over_threads(n, kDropoutGrain, [&](int64_t b, int64_t e) { dropout_part(y, x, b, e, key, threshold, scale); });
}

void dropout_configs_apply_cpu(float* y, const float* x, int64_t R, int64_t C, int64_t F, uint64_t seed,
                               uint32_t threshold, float scale) {
  const uint32_t key = dropout_key(seed);
  const int64_t grain = std::max<int64_t>(1, kDropoutGrain / std::max<int64_t>(1, C * F));
  over_threads(R, grain,
               [&](int64_t b, int64_t e) { dropout_configs_part(y, x, b, e, C, F, key, threshold, scale); });
}

}  // namespace gnn
