#include <cmath>

#include "graph_cases.h"
#include "kernels/sage.h"
#include "runtime/parallel.h"
#include "testing.h"

using namespace gnn;
using testing::csr_view;

TEST_CASE("sage: the fused layer equals the composed one (mean gather, concat, GEMM, bias, activation)") {
  for (const auto& c : testing::standard_graph_cases(5)) {
    CAPTURE(c.name);
    const CsrView v = csr_view(c.graph);
    const int64_t N = c.graph.num_nodes;
    for (auto [F, O] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 8}, {33, 17}, {64, 64}}) {
      if (c.name == "hub_10k" && F > 3) continue;
      for (Act act : {Act::kNone, Act::kRelu, Act::kGelu, Act::kTanh}) {
        for (bool bias : {false, true}) {
          CAPTURE(F);
          CAPTURE(O);
          CAPTURE(act_name(act));
          CAPTURE(bias);
          const auto x = testing::random_values<float>(static_cast<size_t>(N * F), 1);
          const auto W = testing::random_values<float>(static_cast<size_t>(2 * F * O), 2, -0.5f, 0.5f);
          const auto b = testing::random_values<float>(static_cast<size_t>(O), 3);
          const auto dy = testing::random_values<float>(static_cast<size_t>(N * O), 4);
          const std::vector<double> xd(x.begin(), x.end()), Wd(W.begin(), W.end()), bd(b.begin(), b.end()),
              dyd(dy.begin(), dy.end());
          std::vector<double> yd(static_cast<size_t>(N * O)), zd(static_cast<size_t>(N * O)), dxd(static_cast<size_t>(N * F)), dWd(static_cast<size_t>(2 * F * O)),
              dbd(static_cast<size_t>(O));
          sage_forward_ref<double>(yd.data(), zd.data(), xd.data(), v, Wd.data(), bias ? bd.data() : nullptr, F, O, act,
                                   0.01);
          sage_backward_ref<double>(dxd.data(), dWd.data(), bias ? dbd.data() : nullptr, dyd.data(), zd.data(),
                                    xd.data(), v, Wd.data(), F, O, act, 0.01);
          std::vector<float> y(static_cast<size_t>(N * O), NAN), z(static_cast<size_t>(N * O), NAN), dx(static_cast<size_t>(N * F), NAN),
              dW(static_cast<size_t>(2 * F * O), NAN), db(static_cast<size_t>(O), NAN), h(static_cast<size_t>(N * 2 * F), NAN);
          sage_forward_cpu(y.data(), z.data(), h.data(), x.data(), v, W.data(), bias ? b.data() : nullptr, F, O, act,
                           0.01f);
          GNN_CHECK_CLOSE(y, yd);
          GNN_CHECK_CLOSE(z, zd);
          std::vector<float> ws(static_cast<size_t>(sage_backward_workspace(N, F, O)), NAN);
          sage_backward_cpu(dx.data(), dW.data(), bias ? db.data() : nullptr, dy.data(), z.data(), h.data(), v,
                            W.data(), F, O, act, 0.01f, ws.data());
          // dW and db sum over all N rows: float error grows with N (the hub and power-law cases).
          GNN_CHECK_CLOSE(dx, dxd, 1e-4, 1e-4);
          GNN_CHECK_CLOSE(dW, dWd, 1e-3, 1e-3);
          if (bias) GNN_CHECK_CLOSE(db, dbd, 1e-3, 1e-3);
          std::vector<float> y_only(static_cast<size_t>(N * O), NAN);  // inference: no z
          sage_forward_cpu(y_only.data(), nullptr, nullptr, x.data(), v, W.data(), bias ? b.data() : nullptr, F, O, act,
                           0.01f);
          CHECK(testing::compare(y_only, y, 0, 0).index < 0);
        }
      }
    }
  }
}

TEST_CASE("sage: the reference backward matches central finite differences (double)") {
  const Graph g = testing::random_graph(6, 12, 3);
  const CsrView v = csr_view(g);
  const int64_t N = 6, F = 3, O = 2;
  auto x = testing::random_values<double>(static_cast<size_t>(N * F), 1);
  auto W = testing::random_values<double>(static_cast<size_t>(2 * F * O), 2);
  auto b = testing::random_values<double>(static_cast<size_t>(O), 3);
  const auto gout = testing::random_values<double>(static_cast<size_t>(N * O), 4);
  for (Act act : {Act::kGelu, Act::kTanh, Act::kElu}) {
    CAPTURE(act_name(act));
    auto loss = [&]() {
      std::vector<double> y(static_cast<size_t>(N * O)), z(static_cast<size_t>(N * O));
      sage_forward_ref<double>(y.data(), z.data(), x.data(), v, W.data(), b.data(), F, O, act, 0.01);
      double l = 0;
      for (size_t i = 0; i < y.size(); ++i) l += y[i] * gout[i];
      return l;
    };
    std::vector<double> y(static_cast<size_t>(N * O)), z(static_cast<size_t>(N * O)), dx(static_cast<size_t>(N * F)), dW(static_cast<size_t>(2 * F * O)), db(static_cast<size_t>(O));
    sage_forward_ref<double>(y.data(), z.data(), x.data(), v, W.data(), b.data(), F, O, act, 0.01);
    sage_backward_ref<double>(dx.data(), dW.data(), db.data(), gout.data(), z.data(), x.data(), v, W.data(), F, O, act,
                              0.01);
    const double eps = 1e-6;
    for (auto [param, grad] : {std::pair{&x, &dx}, std::pair{&W, &dW}, std::pair{&b, &db}}) {
      for (size_t i = 0; i < param->size(); ++i) {
        const double keep = (*param)[i];
        (*param)[i] = keep + eps;
        const double lp = loss();
        (*param)[i] = keep - eps;
        const double lm = loss();
        (*param)[i] = keep;
        CHECK((*grad)[i] == doctest::Approx((lp - lm) / (2 * eps)).epsilon(1e-3).scale(1e-2));
      }
    }
  }
}

TEST_CASE("sage: fused forward and backward are bitwise identical for any thread count") {
  const Graph g = testing::random_graph(3000, 6000, 8, true);
  const CsrView v = csr_view(g);
  const int64_t N = 3000, F = 48, O = 40;
  const auto x = testing::random_values<float>(static_cast<size_t>(N * F), 1);
  const auto W = testing::random_values<float>(static_cast<size_t>(2 * F * O), 2);
  const auto b = testing::random_values<float>(static_cast<size_t>(O), 3);
  const int saved = num_threads();
  std::vector<float> out[2];
  for (int run = 0; run < 2; ++run) {
    set_num_threads(run == 0 ? 1 : std::max(2, saved));
    std::vector<float> y(static_cast<size_t>(N * O)), z(static_cast<size_t>(N * O)), dx(static_cast<size_t>(N * F)), dW(static_cast<size_t>(2 * F * O)), db(static_cast<size_t>(O));
    std::vector<float> h(static_cast<size_t>(N * 2 * F));
    sage_forward_cpu(y.data(), z.data(), h.data(), x.data(), v, W.data(), b.data(), F, O, Act::kRelu, 0.0f);
    std::vector<float> ws(static_cast<size_t>(sage_backward_workspace(N, F, O)));
    sage_backward_cpu(dx.data(), dW.data(), db.data(), y.data(), z.data(), h.data(), v, W.data(), F, O, Act::kRelu, 0.0f,
                      ws.data());
    out[run] = y;
    for (const auto* part : {&dx, &dW, &db}) out[run].insert(out[run].end(), part->begin(), part->end());
  }
  set_num_threads(saved);
  CHECK(out[0] == out[1]);
}
