#include <cmath>

#include "graph_cases.h"
#include "kernels/spmm.h"
#include "runtime/parallel.h"
#include "testing.h"

using namespace gnn;
using testing::csr_view;

TEST_CASE("spmm: hand-worked 4-node graph (an isolated node and a self-loop)") {
  // edges 0->1, 2->1, 1->2, 2->2 (self-loop); node 3 has no edges. F = 2.
  const int64_t src[] = {0, 2, 1, 2}, dst[] = {1, 1, 2, 2};
  const Graph g = Graph::from_edges(src, dst, 4, 4);
  const CsrView v = csr_view(g);
  const std::vector<float> x = {1, -1, 2, 5, 3, 0, 9, 9};  // rows: node 0..3
  std::vector<float> y(8, NAN);
  std::vector<int32_t> arg(8, 7);
  spmm_forward_cpu(y.data(), nullptr, x.data(), nullptr, v, 2, 2, 2, Reduce::kSum);
  CHECK(y == std::vector<float>{0, 0, 4, -1, 5, 5, 0, 0});
  spmm_forward_cpu(y.data(), nullptr, x.data(), nullptr, v, 2, 2, 2, Reduce::kMean);
  CHECK(y == std::vector<float>{0, 0, 2, -0.5f, 2.5f, 2.5f, 0, 0});
  spmm_forward_cpu(y.data(), arg.data(), x.data(), nullptr, v, 2, 2, 2, Reduce::kMax);
  CHECK(y == std::vector<float>{0, 0, 3, 0, 3, 5, 0, 0});
  CHECK(arg == std::vector<int32_t>{-1, -1, 1, 1, 3, 2, -1, -1});  // CSR positions of the winners
  const std::vector<float> w = {2, 1, 1, -1};
  spmm_forward_cpu(y.data(), nullptr, x.data(), w.data(), v, 2, 2, 2, Reduce::kSum);
  CHECK(y == std::vector<float>{0, 0, 5, -2, -1, 5, 0, 0});
}

TEST_CASE("spmm: fast CPU matches the double reference on the standard cases") {
  for (const auto& c : testing::standard_graph_cases(3)) {
    CAPTURE(c.name);
    const CsrView v = csr_view(c.graph);
    const int64_t N = c.graph.num_nodes, E = c.graph.num_edges;
    for (int64_t F : {1, 3, 8, 33, 64, 128, 257}) {
      if (c.name == "hub_10k" && F > 33) continue;  // keeps the suite fast; the hub's size is in its edges
      CAPTURE(F);
      const int64_t ld = F + (F % 2);  // a row stride wider than F, as for a slice of a wider tensor
      const auto x = testing::random_values<float>(static_cast<size_t>(N * ld), 1);
      const auto w = testing::random_values<float>(static_cast<size_t>(E), 2, 0.5f, 2.0f);
      const auto dy = testing::random_values<float>(static_cast<size_t>(N * ld), 3);
      const std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), dyd(dy.begin(), dy.end());
      for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
        for (bool weighted : {false, true}) {
          CAPTURE(reduce_name(op));
          CAPTURE(weighted);
          std::vector<float> y(static_cast<size_t>(N * ld), NAN), dx(static_cast<size_t>(N * ld), NAN), dw(static_cast<size_t>(E), NAN);
          std::vector<double> yd(static_cast<size_t>(N * ld), 0), dxd(static_cast<size_t>(N * ld), 0), dwd(static_cast<size_t>(E), 0);
          std::vector<int32_t> arg(static_cast<size_t>(N * F), -7), argd(static_cast<size_t>(N * F), -7);
          const float* wp = weighted ? w.data() : nullptr;
          const double* wpd = weighted ? wd.data() : nullptr;
          spmm_forward_ref<double>(yd.data(), argd.data(), xd.data(), wpd, v, F, ld, ld, op);
          spmm_forward_cpu(y.data(), arg.data(), x.data(), wp, v, F, ld, ld, op);
          for (int64_t r = 0; r < N; ++r)
            for (int64_t f = F; f < ld; ++f) y[size_t(r * ld + f)] = 0;  // padding columns are not outputs
          GNN_CHECK_CLOSE(y, yd);
          if (op == Reduce::kMax) CHECK(arg == argd);  // data movement: exact
          spmm_backward_x_ref<double>(dxd.data(), dyd.data(), argd.data(), wpd, v, F, ld, ld, op);
          spmm_backward_x_cpu(dx.data(), dy.data(), arg.data(), wp, v, F, ld, ld, op);
          for (int64_t r = 0; r < N; ++r)
            for (int64_t f = F; f < ld; ++f) dx[size_t(r * ld + f)] = 0;
          GNN_CHECK_CLOSE(dx, dxd);
          spmm_backward_w_ref<double>(dwd.data(), dyd.data(), xd.data(), argd.data(), v, F, ld, ld, op);
          spmm_backward_w_cpu(dw.data(), dy.data(), x.data(), arg.data(), v, F, ld, ld, op);
          GNN_CHECK_CLOSE(dw, dwd, 1e-4, 1e-4);
        }
      }
    }
  }
}

TEST_CASE("spmm: the reference backward matches central finite differences (double)") {
  const Graph g = testing::random_graph(7, 16, 11);
  const CsrView v = csr_view(g);
  const int64_t N = 7, E = 16, F = 3;
  auto x = testing::random_values<double>(static_cast<size_t>(N * F), 4);  // distinct values: no ties for max
  auto w = testing::random_values<double>(static_cast<size_t>(E), 5, 0.5, 1.5);
  const auto gout = testing::random_values<double>(static_cast<size_t>(N * F), 6);
  for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
    CAPTURE(reduce_name(op));
    auto loss = [&](const std::vector<double>& xs, const std::vector<double>& ws) {
      std::vector<double> y(static_cast<size_t>(N * F));
      std::vector<int32_t> a(static_cast<size_t>(N * F));
      spmm_forward_ref<double>(y.data(), a.data(), xs.data(), ws.data(), v, F, F, F, op);
      double l = 0;
      for (size_t i = 0; i < y.size(); ++i) l += y[i] * gout[i];
      return l;
    };
    std::vector<double> y(static_cast<size_t>(N * F)), dx(static_cast<size_t>(N * F)), dw(static_cast<size_t>(E));
    std::vector<int32_t> arg(static_cast<size_t>(N * F));
    spmm_forward_ref<double>(y.data(), arg.data(), x.data(), w.data(), v, F, F, F, op);
    spmm_backward_x_ref<double>(dx.data(), gout.data(), arg.data(), w.data(), v, F, F, F, op);
    spmm_backward_w_ref<double>(dw.data(), gout.data(), x.data(), arg.data(), v, F, F, F, op);
    const double eps = 1e-6;
    for (size_t i = 0; i < x.size(); ++i) {
      auto xp = x, xm = x;
      xp[i] += eps, xm[i] -= eps;
      CHECK(dx[i] == doctest::Approx((loss(xp, w) - loss(xm, w)) / (2 * eps)).epsilon(1e-3).scale(1e-2));
    }
    for (size_t i = 0; i < w.size(); ++i) {
      auto wp = w, wm = w;
      wp[i] += eps, wm[i] -= eps;
      CHECK(dw[i] == doctest::Approx((loss(x, wp) - loss(x, wm)) / (2 * eps)).epsilon(1e-3).scale(1e-2));
    }
  }
}

TEST_CASE("spmm: forward and backward are bitwise identical for any thread count") {
  const Graph g = testing::random_graph(5000, 20000, 9, true);
  const CsrView v = csr_view(g);
  const int64_t F = 40;
  const auto x = testing::random_values<float>(static_cast<size_t>(5000 * F), 1);
  const auto w = testing::random_values<float>(20000, 2);
  const int saved = num_threads();
  std::vector<float> out[2];
  for (int run = 0; run < 2; ++run) {
    set_num_threads(run == 0 ? 1 : std::max(2, saved));
    std::vector<float> y(static_cast<size_t>(5000 * F)), dx(static_cast<size_t>(5000 * F)), dw(20000);
    spmm_forward_cpu(y.data(), nullptr, x.data(), w.data(), v, F, F, F, Reduce::kMean);
    spmm_backward_x_cpu(dx.data(), x.data(), nullptr, w.data(), v, F, F, F, Reduce::kMean);
    spmm_backward_w_cpu(dw.data(), x.data(), y.data(), nullptr, v, F, F, F, Reduce::kMean);
    out[run] = y;
    out[run].insert(out[run].end(), dx.begin(), dx.end());
    out[run].insert(out[run].end(), dw.begin(), dw.end());
  }
  set_num_threads(saved);
  CHECK(out[0] == out[1]);
}
