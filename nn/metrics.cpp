#include "nn/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/error.h"

namespace gnn::nn {

namespace {

// Pairs within runs of equal values of a sorted sequence: sum t (t - 1) / 2.
template <class Eq>
int64_t tied_pairs(const std::vector<int64_t>& order, Eq eq) {
  int64_t ties = 0, run = 1;
  for (size_t i = 1; i <= order.size(); ++i) {
    if (i < order.size() && eq(order[i - 1], order[i])) {
      ++run;
    } else {
      ties += run * (run - 1) / 2;
      run = 1;
    }
  }
  return ties;
}

// Sorts order by y with a merge sort, returning the number of strict inversions (pairs i < j in the
// input order with y_i > y_j).
int64_t sort_count_inversions(std::vector<int64_t>& order, const double* y) {
  std::vector<int64_t> buf(order.size());
  int64_t swaps = 0;
  for (size_t width = 1; width < order.size(); width *= 2) {
    for (size_t lo = 0; lo < order.size(); lo += 2 * width) {
      const size_t mid = std::min(lo + width, order.size()), hi = std::min(lo + 2 * width, order.size());
      size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) {
        if (y[order[j]] < y[order[i]]) {
          swaps += int64_t(mid - i);
          buf[k++] = order[j++];
        } else {
          buf[k++] = order[i++];
        }
      }
      while (i < mid) buf[k++] = order[i++];
      while (j < hi) buf[k++] = order[j++];
    }
    order.swap(buf);
  }
  return swaps;
}

void check_finite(const double* v, int64_t n, const char* what) {
  for (int64_t i = 0; i < n; ++i) GNN_CHECK(std::isfinite(v[i]), what, "[", i, "] is not finite");
}

}  // namespace

double kendall_tau_b(const double* x, const double* y, int64_t n) {
  check_finite(x, n, "kendall_tau_b: x");
  check_finite(y, n, "kendall_tau_b: y");
  if (n < 2) return std::numeric_limits<double>::quiet_NaN();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return x[a] != x[b] ? x[a] < x[b] : y[a] < y[b]; });
  const int64_t xtie = tied_pairs(order, [&](int64_t a, int64_t b) { return x[a] == x[b]; });
  const int64_t both = tied_pairs(order, [&](int64_t a, int64_t b) { return x[a] == x[b] && y[a] == y[b]; });
  const int64_t swaps = sort_count_inversions(order, y);  // order is now sorted by y
  const int64_t ytie = tied_pairs(order, [&](int64_t a, int64_t b) { return y[a] == y[b]; });
  const int64_t total = n * (n - 1) / 2;
  if (xtie == total || ytie == total) return std::numeric_limits<double>::quiet_NaN();
  const double con_minus_dis = double(total - xtie - ytie + both - 2 * swaps);
  return con_minus_dis / std::sqrt(double(total - xtie)) / std::sqrt(double(total - ytie));
}

double opa(const double* pred, const double* runtime, int64_t n) {
  check_finite(pred, n, "opa: pred");
  check_finite(runtime, n, "opa: runtime");
  int64_t pairs = 0, right = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      if (runtime[i] > runtime[j]) ++pairs, right += pred[i] > pred[j];
  return pairs ? double(right) / double(pairs) : std::numeric_limits<double>::quiet_NaN();
}

std::vector<int64_t> top_k_fastest(const double* pred, int64_t n, int64_t k) {
  check_finite(pred, n, "top_k_fastest: pred");
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const auto cmp = [&](int64_t a, int64_t b) { return pred[a] != pred[b] ? pred[a] < pred[b] : a < b; };
  k = std::min(k, n);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), cmp);
  order.resize(size_t(k));
  return order;
}

double slowdown_at_k(const double* pred, const double* runtime, int64_t n, int64_t k) {
  GNN_CHECK(n >= 1 && k >= 1, "slowdown_at_k: needs n >= 1 and k >= 1, got n = ", n, ", k = ", k);
  check_finite(runtime, n, "slowdown_at_k: runtime");
  const double best = *std::min_element(runtime, runtime + n);
  GNN_CHECK(best > 0, "slowdown_at_k: runtimes must be positive");
  double best_top = std::numeric_limits<double>::infinity();
  for (int64_t i : top_k_fastest(pred, n, k)) best_top = std::min(best_top, runtime[i]);
  return best_top / best - 1;
}

}  // namespace gnn::nn
