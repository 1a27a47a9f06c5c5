// Cross-config attention on the CPU: rows over threads in fixed chunks, each row's loops over the D
// channels vectorised in the AVX2 clone (the row functions inline into it).
#include <algorithm>
#include <vector>

#include "base/common.h"
#include "kernels/config_attention.h"

namespace gnn {

namespace {
constexpr int64_t kChunks = 64;  // fixed partial sums of dbeta, whatever the thread count
}

GNN_CPU_CLONES void config_attention_forward_cpu(float* y, float* w, const float* x, int64_t R, int64_t C, int64_t D,
                                                 float beta) {
#pragma omp parallel
  {
    std::vector<float> m(static_cast<size_t>(D)), sum(static_cast<size_t>(D));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < R; ++r)
      config_attention_row(y + r * C * 2 * D, w + r * C * D, x + r * C * D, C, D, beta, m.data(), sum.data());
  }
}

GNN_CPU_CLONES float config_attention_backward_cpu(float* dx, const float* dy, const float* x, const float* w,
                                                   int64_t R, int64_t C, int64_t D, float beta) {
  const int64_t chunks = std::min<int64_t>(kChunks, std::max<int64_t>(R, 1));
  std::vector<double> part(size_t(chunks), 0.0);
#pragma omp parallel
  {
    std::vector<float> aw(static_cast<size_t>(D)), wx(static_cast<size_t>(D));
#pragma omp for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
      double s = 0;
      for (int64_t r = k * R / chunks; r < (k + 1) * R / chunks; ++r)
        s += config_attention_row_backward(dx + r * C * D, dy + r * C * 2 * D, x + r * C * D, w + r * C * D, C, D, beta,
                                           aw.data(), wx.data());
      part[size_t(k)] = s;
    }
  }
  double dbeta = 0;
  for (double p : part) dbeta += p;
  return float(dbeta);
}

}  // namespace gnn
