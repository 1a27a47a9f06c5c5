// Competition metrics: Kendall tau-b against values scipy computed (tests/data/make_metrics_fixtures.py),
// OPA, slowdown@K and the top-K order, each on hand-worked cases.
#include <doctest/doctest.h>

#include <cmath>

#include "io/npz.h"
#include "nn/metrics.h"
#include "testing.h"

namespace gnn {
namespace {

TEST_CASE("metrics: Kendall tau-b equals scipy.stats.kendalltau, ties included") {
  const auto a = NpzReader(testing::source_path("tests/data/metrics/kendall.npz")).load_all();
  int cases = 0;
  for (int i = 0; a.count("x_" + std::to_string(i)); ++i, ++cases) {
    CAPTURE(i);
    const auto x = a.at("x_" + std::to_string(i)).to_vector<double>(),
               y = a.at("y_" + std::to_string(i)).to_vector<double>();
    const double want = a.at("tau_" + std::to_string(i)).item();
    const double got = nn::kendall_tau_b(x.data(), y.data(), int64_t(x.size()));
    if (std::isnan(want)) CHECK(std::isnan(got));
    else CHECK(got == doctest::Approx(want).epsilon(1e-12));
  }
  CHECK(cases == 9);
}

TEST_CASE("metrics: OPA, slowdown@K and top-K on hand-worked cases") {
  const double runtime[] = {4, 1, 3, 2}, pred[] = {0.9, 0.3, 0.1, 0.5};
  // pairs with runtime_i > runtime_j: (0,1) (0,2) (0,3) (2,1) (2,3) (3,1); right: pred_0 > all three,
  // pred_2 > pred_1? no; pred_2 > pred_3? no; pred_3 > pred_1? yes -> 4 of 6
  CHECK(nn::opa(pred, runtime, 4) == doctest::Approx(4.0 / 6));
  CHECK(nn::top_k_fastest(pred, 4, 2) == std::vector<int64_t>{2, 1});
  CHECK(nn::slowdown_at_k(pred, runtime, 4, 1) == doctest::Approx(2.0));  // predicted best runs 3 vs 1
  CHECK(nn::slowdown_at_k(pred, runtime, 4, 2) == doctest::Approx(0.0));
  const double tied[] = {1, 1, 1, 1};
  CHECK(nn::top_k_fastest(tied, 4, 10) == std::vector<int64_t>{0, 1, 2, 3});
  // Without ties tau = 2 OPA - 1
  const double r2[] = {5, 3, 8, 1, 9}, p2[] = {2, 1, 4, 3, 5};
  CHECK(nn::kendall_tau_b(p2, r2, 5) == doctest::Approx(2 * nn::opa(p2, r2, 5) - 1));
  const double bad[] = {1, NAN};
  CHECK_THROWS_WITH_AS(nn::kendall_tau_b(bad, r2, 2), doctest::Contains("x[1] is not finite"), Error);
}

}  // namespace
}  // namespace gnn
