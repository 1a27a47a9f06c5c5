#include <cmath>

#include "graph_cases.h"
#include "kernels/activation.h"
#include "testing.h"

using namespace gnn;

namespace {
const Act kAll[] = {Act::kNone, Act::kRelu, Act::kLeakyRelu, Act::kElu, Act::kGelu, Act::kSigmoid, Act::kTanh};
}

TEST_CASE("activations: hand-worked values") {
  CHECK(act_value(Act::kRelu, -2.0, 0.1) == 0);
  CHECK(act_value(Act::kLeakyRelu, -2.0, 0.1) == doctest::Approx(-0.2));
  CHECK(act_value(Act::kElu, -1.0, 0.0) == doctest::Approx(std::exp(-1.0) - 1));
  CHECK(act_value(Act::kGelu, 1.0, 0.0) == doctest::Approx(0.8413447460685429));  // x * Phi(x)
  CHECK(act_value(Act::kSigmoid, 0.0, 0.0) == 0.5);
  CHECK(act_value(Act::kTanh, 0.5, 0.0) == doctest::Approx(std::tanh(0.5)));
  CHECK(parse_act("gelu") == Act::kGelu);
  CHECK_THROWS_WITH_AS(parse_act("swish"), doctest::Contains("unknown activation 'swish'"), Error);
}

TEST_CASE("activations: fast CPU matches the reference, derivatives match finite differences") {
  const int64_t n = 100003;
  auto x = testing::random_values<float>(static_cast<size_t>(n), 1, -4.0f, 4.0f);
  for (int64_t i = 0; i < n; ++i)
    if (std::fabs(x[size_t(i)]) < 1e-3f) x[size_t(i)] = 0.5f;  // keep away from the kinks at 0
  const auto dy = testing::random_values<float>(static_cast<size_t>(n), 2);
  const std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end());
  for (Act a : kAll) {
    CAPTURE(act_name(a));
    std::vector<float> y(static_cast<size_t>(n), NAN), dx(static_cast<size_t>(n), NAN);
    std::vector<double> yd(static_cast<size_t>(n)), dxd(static_cast<size_t>(n));
    act_forward_ref<double>(yd.data(), xd.data(), n, a, 0.2);
    act_backward_ref<double>(dxd.data(), dyd.data(), xd.data(), n, a, 0.2);
    act_forward_cpu(y.data(), x.data(), n, a, 0.2f);
    act_backward_cpu(dx.data(), dy.data(), x.data(), n, a, 0.2f);
    GNN_CHECK_CLOSE(y, yd);
    GNN_CHECK_CLOSE(dx, dxd);
    for (double v : {-2.5, -0.7, 0.3, 1.9}) {
      const double eps = 1e-6;
      const double fd = (act_value(a, v + eps, 0.2) - act_value(a, v - eps, 0.2)) / (2 * eps);
      CHECK(act_derivative(a, v, 0.2) == doctest::Approx(fd).epsilon(1e-6));
    }
  }
}
