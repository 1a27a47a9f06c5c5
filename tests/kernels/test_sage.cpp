// The fused SAGE layer (kernels/sage.h): equal to its composition, its reference backward against
// finite differences, the same bits on any thread count, the CUDA kernels against the double
// reference, and the autograd op on the GPU against the host.
#include <cmath>
#include <cstring>

#include "autograd/device_check.h"
#include "device_buffers.h"
#include "graph_cases.h"
#include "kernels/sage.h"
#include "runtime/cuda.h"
#include "runtime/parallel.h"
#include "testing.h"

using namespace gnn;
using namespace gnn::testing;  // the helpers of testing.h, device_buffers.h and graph_cases.h

TEST_CASE("sage: the fused layer equals the composed one (mean gather, concat, GEMM, bias, activation)") {
  for (const auto& c : standard_graph_cases(5)) {
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
          const auto x = random_values<float>(static_cast<size_t>(N * F), 1);
          const auto W = random_values<float>(static_cast<size_t>(2 * F * O), 2, -0.5f, 0.5f);
          const auto b = random_values<float>(static_cast<size_t>(O), 3);
          const auto dy = random_values<float>(static_cast<size_t>(N * O), 4);
          const std::vector<double> xd(x.begin(), x.end()), Wd(W.begin(), W.end()), bd(b.begin(), b.end()),
              dyd(dy.begin(), dy.end());
          std::vector<double> yd(static_cast<size_t>(N * O)), zd(static_cast<size_t>(N * O)),
              dxd(static_cast<size_t>(N * F)), dWd(static_cast<size_t>(2 * F * O)), dbd(static_cast<size_t>(O));
          sage_forward_ref<double>(yd.data(), zd.data(), xd.data(), v, Wd.data(), bias ? bd.data() : nullptr, F, O, act,
                                   0.01);
          sage_backward_ref<double>(dxd.data(), dWd.data(), bias ? dbd.data() : nullptr, dyd.data(), zd.data(),
                                    xd.data(), v, Wd.data(), F, O, act, 0.01);
          std::vector<float> y(static_cast<size_t>(N * O), NAN), z(static_cast<size_t>(N * O), NAN),
              dx(static_cast<size_t>(N * F), NAN), dW(static_cast<size_t>(2 * F * O), NAN),
              db(static_cast<size_t>(O), NAN), h(static_cast<size_t>(N * 2 * F), NAN);
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
  const Graph g = random_graph(6, 12, 3);
  const CsrView v = csr_view(g);
  const int64_t N = 6, F = 3, O = 2;
  auto x = random_values<double>(static_cast<size_t>(N * F), 1);
  auto W = random_values<double>(static_cast<size_t>(2 * F * O), 2);
  auto b = random_values<double>(static_cast<size_t>(O), 3);
  const auto gout = random_values<double>(static_cast<size_t>(N * O), 4);
  for (Act act : {Act::kGelu, Act::kTanh, Act::kElu}) {
    CAPTURE(act_name(act));
    auto loss = [&]() {
      std::vector<double> y(static_cast<size_t>(N * O)), z(static_cast<size_t>(N * O));
      sage_forward_ref<double>(y.data(), z.data(), x.data(), v, W.data(), b.data(), F, O, act, 0.01);
      double l = 0;
      for (size_t i = 0; i < y.size(); ++i) l += y[i] * gout[i];
      return l;
    };
    std::vector<double> y(static_cast<size_t>(N * O)), z(static_cast<size_t>(N * O)), dx(static_cast<size_t>(N * F)),
        dW(static_cast<size_t>(2 * F * O)), db(static_cast<size_t>(O));
    sage_forward_ref<double>(y.data(), z.data(), x.data(), v, W.data(), b.data(), F, O, act, 0.01);
    sage_backward_ref<double>(dx.data(), dW.data(), db.data(), gout.data(), z.data(), x.data(), v, W.data(), F, O, act,
                              0.01);
    check_gradient(x, dx, loss);
    check_gradient(W, dW, loss);
    check_gradient(b, db, loss);
  }
}

TEST_CASE("sage: fused forward and backward are bitwise identical for any thread count") {
  const Graph g = random_graph(3000, 6000, 8, true);
  const CsrView v = csr_view(g);
  const int64_t N = 3000, F = 48, O = 40;
  const auto x = random_values<float>(static_cast<size_t>(N * F), 1);
  const auto W = random_values<float>(static_cast<size_t>(2 * F * O), 2);
  const auto b = random_values<float>(static_cast<size_t>(O), 3);
  const testing::ThreadsRestored saved;
  std::vector<float> out[2];
  for (int run = 0; run < 2; ++run) {
    set_num_threads(run == 0 ? 1 : std::max(2, saved.count));
    std::vector<float> y(static_cast<size_t>(N * O)), z(static_cast<size_t>(N * O)), dx(static_cast<size_t>(N * F)),
        dW(static_cast<size_t>(2 * F * O)), db(static_cast<size_t>(O));
    std::vector<float> h(static_cast<size_t>(N * 2 * F));
    sage_forward_cpu(y.data(), z.data(), h.data(), x.data(), v, W.data(), b.data(), F, O, Act::kRelu, 0.0f);
    std::vector<float> ws(static_cast<size_t>(sage_backward_workspace(N, F, O)));
    sage_backward_cpu(dx.data(), dW.data(), db.data(), y.data(), z.data(), h.data(), v, W.data(), F, O, Act::kRelu,
                      0.0f, ws.data());
    out[run] = y;
    for (const auto* part : {&dx, &dW, &db}) out[run].insert(out[run].end(), part->begin(), part->end());
  }
  CHECK(out[0] == out[1]);
}

TEST_CASE("cuda fused sage: forward (training and inference) and backward match the double reference") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  for (const auto& c : standard_graph_cases(5)) {
    CAPTURE(c.name);
    const Graph dg = c.graph.to(Device::cuda(0));
    const CsrView hv = csr_view(c.graph), dv = ag::csr_view(dg);
    const int64_t N = c.graph.num_nodes;
    for (auto [F, O] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 8}, {33, 17}, {128, 64}}) {
      for (Act act : {Act::kNone, Act::kRelu, Act::kGelu}) {
        for (bool bias : {false, true}) {
          CAPTURE(F);
          CAPTURE(O);
          CAPTURE(act_name(act));
          CAPTURE(bias);
          const auto x = random_values<float>(size_t(N * F), 1);
          const auto W = random_values<float>(size_t(2 * F * O), 2, -0.5f, 0.5f);
          const auto b = random_values<float>(size_t(O), 3);
          const auto dy = random_values<float>(size_t(N * O), 4);
          const std::vector<double> xd(x.begin(), x.end()), Wd(W.begin(), W.end()), bd(b.begin(), b.end()),
              dyd(dy.begin(), dy.end());
          std::vector<double> yd(size_t(N * O)), zd(size_t(N * O)), dxd(size_t(N * F)), dWd(size_t(2 * F * O)),
              dbd(static_cast<size_t>(O));
          sage_forward_ref<double>(yd.data(), zd.data(), xd.data(), hv, Wd.data(), bias ? bd.data() : nullptr, F, O,
                                   act, 0.01);
          sage_backward_ref<double>(dxd.data(), dWd.data(), bias ? dbd.data() : nullptr, dyd.data(), zd.data(),
                                    xd.data(), hv, Wd.data(), F, O, act, 0.01);
          const Tensor gx = on_gpu(x), gW = on_gpu(W), gb = on_gpu(b), gdy = on_gpu(dy);
          const float* bp = bias ? gb.f32() : nullptr;
          Tensor y = nan_gpu(N * O), z = nan_gpu(N * O), h = nan_gpu(N * 2 * F), dx = nan_gpu(N * F),
                 dW = nan_gpu(2 * F * O), db = nan_gpu(O), ws = nan_gpu(sage_backward_workspace_cuda(N, F, O));
          sage_forward_cuda(y.f32(), z.f32(), h.f32(), nullptr, gx.f32(), dv, gW.f32(), bp, F, O, act, 0.01f,
                            cuda_blas(0), s);
          sage_backward_cuda(dx.f32(), dW.f32(), bias ? db.f32() : nullptr, gdy.f32(), z.f32(), h.f32(), dv, gW.f32(),
                             F, O, act, 0.01f, ws.f32(), cuda_blas(0), s);
          const std::vector<float> yv = y.to_vector<float>();
          GNN_CHECK_CLOSE(yv, yd, 1e-4, 1e-4);
          GNN_CHECK_CLOSE(z.to_vector<float>(), zd, 1e-4, 1e-4);
          GNN_CHECK_CLOSE(dx.to_vector<float>(), dxd, 1e-4, 1e-4);
          GNN_CHECK_CLOSE(dW.to_vector<float>(), dWd, 1e-3, 1e-3);  // sums over all N rows
          if (bias) GNN_CHECK_CLOSE(db.to_vector<float>(), dbd, 1e-3, 1e-3);
          // inference: no z or h, the same y bits
          Tensor y_only = nan_gpu(N * O), scratch = nan_gpu(N * 2 * F);
          sage_forward_cuda(y_only.f32(), nullptr, nullptr, scratch.f32(), gx.f32(), dv, gW.f32(), bp, F, O, act, 0.01f,
                            cuda_blas(0), s);
          CHECK(same_bits(y_only.to_vector<float>(), yv));
        }
      }
    }
  }
#endif
}

TEST_CASE("cuda ops: fused SAGE (training and inference) matches the host") {
  GNN_SKIP_UNLESS_CUDA();
  const Graph g = random_graph(300, 2400, 35, true);
  const Tensor x = rand({300, 24}, 36), W = rand({48, 20}, 37), b = rand({20}, 38);
  for (Act act : {Act::kRelu, Act::kGelu, Act::kNone}) {
    CAPTURE(act_name(act));
    check_op(
        "sage_fused", {x, W, b}, [act](auto& v, const Graph& g) { return ag::sage_fused(g, v[0], v[1], v[2], act); },
        g);
  }
  check_op(
      "sage_fused without bias", {x, W},
      [](auto& v, const Graph& g) { return ag::sage_fused(g, v[0], v[1], ag::Var(), Act::kLeakyRelu, 0.2); }, g);
  // inference (no gradient recorded) gives the training forward's bits
  const Device gpu = Device::cuda(0);
  const Graph dg = g.to(gpu);
  const ag::Var xd(x.to(gpu)), Wp = ag::Var::param(W.to(gpu)), bp = ag::Var::param(b.to(gpu));
  const std::vector<float> train_y = ag::sage_fused(dg, xd, Wp, bp, Act::kRelu).value().to_vector<float>();
  ag::clear_tape();
  std::vector<float> infer_y;
  {
    ag::NoGrad off;
    infer_y = ag::sage_fused(dg, xd, Wp, bp, Act::kRelu).value().to_vector<float>();
  }
  CHECK(std::memcmp(train_y.data(), infer_y.data(), train_y.size() * sizeof(float)) == 0);
}

// ---- sage_combine: a narrowing layer's mean after its product ------------------------------------------

TEST_CASE("sage combine: the reference is the mean gather of the products' first halves plus the second, in double") {
  for (const auto& c : standard_graph_cases(6)) {
    CAPTURE(c.name);
    const CsrView v = csr_view(c.graph);
    const int64_t N = c.graph.num_nodes;
    for (auto [C, O] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 5}, {2, 16}}) {
      if (c.name == "hub_10k" && C * O > 6) continue;
      CAPTURE(C);
      CAPTURE(O);
      const auto qf = random_values<float>(size_t(N * 2 * C * O), 1), bf = random_values<float>(size_t(O), 2);
      const auto dyf = random_values<float>(size_t(N * C * O), 3);
      const std::vector<double> q(qf.begin(), qf.end()), b(bf.begin(), bf.end()), dy(dyf.begin(), dyf.end());
      // the halves as their own arrays, per (node, config) row: agg [N, C*O] and root [N, C*O]
      std::vector<double> agg(size_t(N * C * O)), root(size_t(N * C * O)), mean(size_t(N * C * O));
      for (int64_t i = 0; i < N * C; ++i)
        for (int64_t o = 0; o < O; ++o) {
          agg[size_t(i * O + o)] = q[size_t(i * 2 * O + o)];
          root[size_t(i * O + o)] = q[size_t(i * 2 * O + O + o)];
        }
      spmm_forward_ref<double>(mean.data(), nullptr, agg.data(), nullptr, v, C * O, C * O, C * O, Reduce::kMean);
      std::vector<double> want(size_t(N * C * O)), y(size_t(N * C * O)), y_nb(size_t(N * C * O));
      for (int64_t i = 0; i < N * C * O; ++i) want[size_t(i)] = mean[size_t(i)] + root[size_t(i)] + b[size_t(i % O)];
      sage_combine_forward_ref<double>(y.data(), q.data(), b.data(), v, C, O);
      GNN_CHECK_CLOSE(y, want, 1e-12, 1e-12);
      sage_combine_forward_ref<double>(y_nb.data(), q.data(), nullptr, v, C, O);
      for (int64_t i = 0; i < N * C * O; ++i)
        CHECK(y_nb[size_t(i)] == doctest::Approx(y[size_t(i)] - b[size_t(i % O)]));
      // backward: the agg half is spmm's transposed mean gather of dy, the root half dy itself
      std::vector<double> dagg(size_t(N * C * O)), dq(size_t(N * 2 * C * O));
      spmm_backward_x_ref<double>(dagg.data(), dy.data(), nullptr, nullptr, v, C * O, C * O, C * O, Reduce::kMean);
      sage_combine_backward_ref<double>(dq.data(), dy.data(), v, C, O);
      std::vector<double> dq_want(size_t(N * 2 * C * O));
      for (int64_t i = 0; i < N * C; ++i)
        for (int64_t o = 0; o < O; ++o) {
          dq_want[size_t(i * 2 * O + o)] = dagg[size_t(i * O + o)];
          dq_want[size_t(i * 2 * O + O + o)] = dy[size_t(i * O + o)];
        }
      GNN_CHECK_CLOSE(dq, dq_want, 1e-12, 1e-12);
    }
  }
}

TEST_CASE("sage combine: the CPU kernels have the float reference's bits, on any thread count") {
  const testing::ThreadsRestored saved;
  for (const auto& c : standard_graph_cases(7)) {
    CAPTURE(c.name);
    const CsrView v = csr_view(c.graph);
    const int64_t N = c.graph.num_nodes;
    for (auto [C, O] : std::vector<std::pair<int64_t, int64_t>>{{1, 3}, {4, 17}, {64, 128}}) {
      if (N * C * O > (int64_t(1) << 21)) continue;
      CAPTURE(C);
      CAPTURE(O);
      const auto q = random_values<float>(size_t(N * 2 * C * O), 1), b = random_values<float>(size_t(O), 2);
      const auto dy = random_values<float>(size_t(N * C * O), 3);
      for (bool bias : {false, true}) {
        CAPTURE(bias);
        std::vector<float> y_ref(size_t(N * C * O)), dq_ref(size_t(N * 2 * C * O));
        sage_combine_forward_ref<float>(y_ref.data(), q.data(), bias ? b.data() : nullptr, v, C, O);
        sage_combine_backward_ref<float>(dq_ref.data(), dy.data(), v, C, O);
        for (int threads : {1, 2, 3}) {
          CAPTURE(threads);
          set_num_threads(threads);
          std::vector<float> y(size_t(N * C * O), NAN), dq(size_t(N * 2 * C * O), NAN);
          sage_combine_forward_cpu(y.data(), q.data(), bias ? b.data() : nullptr, v, C, O);
          sage_combine_backward_cpu(dq.data(), dy.data(), v, C, O);
          CHECK(y == y_ref);
          CHECK(dq == dq_ref);
        }
      }
    }
  }
}

TEST_CASE("cuda sage combine: forward and backward have the host's bits") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  for (const auto& c : standard_graph_cases(8)) {
    CAPTURE(c.name);
    const Graph dg = c.graph.to(Device::cuda(0));
    const CsrView hv = csr_view(c.graph), dv = ag::csr_view(dg);
    const int64_t N = c.graph.num_nodes, C = 3, O = 20;
    const auto q = random_values<float>(size_t(N * 2 * C * O), 1), b = random_values<float>(size_t(O), 2);
    const auto dy = random_values<float>(size_t(N * C * O), 3);
    const Tensor gq = on_gpu(q), gb = on_gpu(b), gdy = on_gpu(dy);
    for (bool bias : {false, true}) {
      CAPTURE(bias);
      std::vector<float> y(size_t(N * C * O)), dq(size_t(N * 2 * C * O));
      sage_combine_forward_cpu(y.data(), q.data(), bias ? b.data() : nullptr, hv, C, O);
      sage_combine_backward_cpu(dq.data(), dy.data(), hv, C, O);
      Tensor gy = nan_gpu(N * C * O), gdq = nan_gpu(N * 2 * C * O);
      sage_combine_forward_cuda(gy.f32(), gq.f32(), bias ? gb.f32() : nullptr, dv, C, O, s);
      sage_combine_backward_cuda(gdq.f32(), gdy.f32(), dv, C, O, s);
      CHECK(same_bits(gy.to_vector<float>(), y));
      CHECK(same_bits(gdq.to_vector<float>(), dq));
    }
  }
#endif
}

TEST_CASE("sage combine: shapes that do not fit are refused naming the argument") {
  const Graph g = random_graph(10, 30, 9, true);
  const ag::Var q(rand({10, 2 * 3 * 4}, 1)), b(rand({4}, 2));
  CHECK(ag::sage_combine(g, q, 3, b).shape() == Shape{10, 12});
  CHECK_THROWS_WITH_AS(ag::sage_combine(g, ag::Var(rand({9, 24}, 1)), 3, b), doctest::Contains("q has 9 rows"), Error);
  CHECK_THROWS_WITH_AS(ag::sage_combine(g, ag::Var(rand({10, 25}, 1)), 3, b), doctest::Contains("q's 25 columns"),
                       Error);
  CHECK_THROWS_WITH_AS(ag::sage_combine(g, q, 3, ag::Var(rand({5}, 2))), doctest::Contains("b has 5 values"), Error);
  CHECK_THROWS_WITH_AS(ag::sage_combine(g, q, 0, b), doctest::Contains("configs must be at least 1"), Error);
  // the root half is each row's own: a graph whose sources are other rows is refused
  const int64_t src[] = {0, 1, 2}, dst[] = {1, 2, 0};
  const Graph bi = Graph::from_bipartite_edges(src, dst, 3, 12, 10);
  CHECK_THROWS_WITH_AS(ag::sage_combine(bi, q, 3, b), doctest::Contains("needs one node set"), Error);
}
