// One GEMM check shared by the CPU and CUDA tests: random op(A), op(B) and C (NaN when beta is 0) with
// row strides `pad` wider than needed, the implementation under test run on them, and the result
// compared with the double reference. The padding columns of C must keep their values.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "graph_cases.h"
#include "kernels/gemm.h"

namespace gnn::testing {

// C = alpha op(A) op(B) + beta C on host buffers (a device implementation copies them over and back).
using GemmRun = std::function<void(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc)>;

inline void check_gemm_case(const char* name, const GemmRun& run, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                            float alpha, float beta, int64_t pad = 0) {
  CAPTURE(name);
  CAPTURE(ta);
  CAPTURE(tb);
  CAPTURE(M);
  CAPTURE(N);
  CAPTURE(K);
  CAPTURE(beta);
  const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  const auto A = random_values<float>(static_cast<size_t>((ta ? K : M) * lda), 1),
             B = random_values<float>(static_cast<size_t>((tb ? N : K) * ldb), 2);
  std::vector<float> C = beta == 0 ? std::vector<float>(static_cast<size_t>(M * ldc), NAN)
                                   : random_values<float>(static_cast<size_t>(M * ldc), 3);
  const std::vector<float> C0 = C;
  std::vector<double> Ad(A.begin(), A.end()), Bd(B.begin(), B.end()), Cd(C.begin(), C.end());
  gemm_ref<double>(ta, tb, M, N, K, alpha, Ad.data(), lda, Bd.data(), ldb, beta, Cd.data(), ldc);
  run(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  double worst = 0;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = N; j < ldc; ++j) {  // padding is not written: it keeps its NaN or value
      const float got = C[size_t(i * ldc + j)], was = C0[size_t(i * ldc + j)];
      if (!(std::isnan(was) ? std::isnan(got) : got == was)) {
        CHECK_MESSAGE(false, "padding element (" << i << ", " << j << ") was written: " << got);
        return;
      }
    }
    for (int64_t j = 0; j < N; ++j) {
      const double want = Cd[size_t(i * ldc + j)], got = C[size_t(i * ldc + j)];
      // float accumulation over K terms of magnitude <= 1: error grows like sqrt(K) * eps
      const double tol = 1e-5 + 2e-6 * double(K) * std::fabs(alpha);
      worst = std::max(worst, std::fabs(got - want) - tol);
      if (!(std::fabs(got - want) <= tol)) {
        CHECK_MESSAGE(false, "first bad element (" << i << ", " << j << "): got " << got << ", want " << want);
        return;
      }
    }
  }
  CHECK(worst <= 0);
}

}  // namespace gnn::testing
