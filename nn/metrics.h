// The TpuGraphs competition metrics, per graph. pred: the model's scores, runtime-like (lower means
// predicted faster); runtime: measured. Both n values.
//   kendall_tau_b: scipy.stats.kendalltau (variant b): (C - D) / sqrt((n0 - n1) (n0 - n2)), where
//                  n0 = n(n-1)/2, n1 / n2 = pairs tied in pred / in runtime. O(n log n) (Knight's
//                  algorithm, as scipy), NaN when either side is constant, as scipy.
//   opa:           over pairs with runtime_i > runtime_j, the fraction with pred_i > pred_j (NaN: no pairs)
//   slowdown@K:    min runtime among the K predicted fastest / min runtime - 1   (the paper's error@K)
//   tile score:    1 - slowdown@5 (the Kaggle tile metric, 2 - best of top 5 / best)
// top_k_fastest orders configs by pred ascending, ties by index: what a submission row lists.
#pragma once
#include <cstdint>
#include <vector>

namespace gnn::nn {

double kendall_tau_b(const double* x, const double* y, int64_t n);
double opa(const double* pred, const double* runtime, int64_t n);
double slowdown_at_k(const double* pred, const double* runtime, int64_t n, int64_t k);
std::vector<int64_t> top_k_fastest(const double* pred, int64_t n, int64_t k);  // k >= n: all of them

}  // namespace gnn::nn
