// Cross-config attention on the CPU: rows over threads (dbeta summed in fixed chunks, config_attention_dbeta),
// each row's loops over the D channels vectorised in the AVX2 clone (the row functions, and dispatch_act's
// lambdas, inline into it).
#include <algorithm>
#include <vector>

#include "base/common.h"
#include "kernels/config_attention.h"

namespace gnn {

GNN_CPU_CLONES void config_attention_forward_cpu(float* y, float* w, const float* x, const float* res, int64_t R,
                                                 int64_t C, int64_t D, const float* beta, Act a,
                                                 RowsDropout<float> drop) {
  const float b = *beta;
#pragma omp parallel
  {
    std::vector<float> m(static_cast<size_t>(D)), sum(static_cast<size_t>(D));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < R; ++r)
      dispatch_act(a, [&](auto A) GNN_INLINE {  // the activation a constant in each row's loops
        config_attention_row(y + r * C * 2 * D, w + r * C * D, x + r * C * D, res ? res + r * C * 2 * D : nullptr, C, D,
                             b, A, m.data(), sum.data(), drop, r);
      });
  }
}

GNN_CPU_CLONES void config_attention_backward_cpu(float* dx, float* dres, float* dbeta, const float* dy, const float* x,
                                                  const float* w, const float* res, int64_t R, int64_t C, int64_t D,
                                                  const float* beta, Act a, RowsDropout<float> drop) {
  const float b = *beta;
  std::vector<double> rows(static_cast<size_t>(R));  // each row's part of dbeta
#pragma omp parallel
  {
    std::vector<float> aw(static_cast<size_t>(D)), wx(static_cast<size_t>(D));
    std::vector<double> db(static_cast<size_t>(D));
    std::vector<float> scratch(static_cast<size_t>((a != Act::kNone || drop.mask.on) && !dres ? C * 2 * D : 0));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t o = r * C * 2 * D;
      rows[size_t(r)] = dispatch_act(a, [&](auto A) GNN_INLINE {
        return config_attention_row_backward_act(dx + r * C * D, dres ? dres + o : nullptr, dy + o, x + r * C * D,
                                                 w + r * C * D, res ? res + o : nullptr, C, D, b, A, scratch.data(),
                                                 aw.data(), wx.data(), db.data(), drop, r);
      });
    }
  }
  *dbeta = float(config_attention_dbeta(rows.data(), R));
}

}  // namespace gnn
