// Layer norm (kernels/layer_norm.h): the CPU kernels against the double reference on any thread
// count, its backward against finite differences, the CUDA kernels against the reference, and the
// autograd op on the GPU against the host.
#include <cmath>

#include "autograd/device_check.h"
#include "device_buffers.h"
#include "graph_cases.h"
#include "kernels/layer_norm.h"
#include "runtime/cuda.h"
#include "runtime/parallel.h"
#include "testing.h"

using namespace gnn;
using namespace gnn::testing;  // the helpers of testing.h, device_buffers.h and graph_cases.h

TEST_CASE("layer norm: reference, finite differences, thread-count determinism") {
  const int64_t R = 1000, F = 37;
  const auto xs = random_values<float>(static_cast<size_t>(R * F), 1, -2.0f, 2.0f);
  const auto gm = random_values<float>(static_cast<size_t>(F), 2, 0.5f, 1.5f),
             bt = random_values<float>(static_cast<size_t>(F), 3);
  const auto dy = random_values<float>(static_cast<size_t>(R * F), 4);
  std::vector<double> yd(static_cast<size_t>(R * F)), md(static_cast<size_t>(R)), rd(static_cast<size_t>(R)),
      dxd(static_cast<size_t>(R * F)), dgd(static_cast<size_t>(F)), dbd(static_cast<size_t>(F));
  layer_norm_forward_ref<double>(yd.data(), md.data(), rd.data(), to_double(xs).data(), to_double(gm).data(),
                                 to_double(bt).data(), R, F, 1e-5);
  layer_norm_backward_ref<double>(dxd.data(), dgd.data(), dbd.data(), to_double(dy).data(), to_double(xs).data(),
                                  md.data(), rd.data(), to_double(gm).data(), R, F);
  std::vector<float> out[2];
  const testing::ThreadsRestored saved;
  for (int run = 0; run < 2; ++run) {
    set_num_threads(run == 0 ? 1 : std::max(2, saved.count));
    std::vector<float> y(static_cast<size_t>(R * F), NAN), m(static_cast<size_t>(R), NAN),
        r(static_cast<size_t>(R), NAN), dx(static_cast<size_t>(R * F), NAN), dg(static_cast<size_t>(F), NAN),
        db(static_cast<size_t>(F), NAN);
    layer_norm_forward_cpu(y.data(), m.data(), r.data(), xs.data(), gm.data(), bt.data(), R, F, 1e-5f);
    layer_norm_backward_cpu(dx.data(), dg.data(), db.data(), dy.data(), xs.data(), m.data(), r.data(), gm.data(), R, F);
    GNN_CHECK_CLOSE(y, yd);
    GNN_CHECK_CLOSE(dx, dxd, 1e-4, 1e-4);
    GNN_CHECK_CLOSE(dg, dgd, 1e-3, 1e-3);
    GNN_CHECK_CLOSE(db, dbd, 1e-3, 1e-3);
    out[run] = dx;
    out[run].insert(out[run].end(), dg.begin(), dg.end());
  }
  CHECK(out[0] == out[1]);
  auto xd = random_values<double>(15, 5);
  auto gd = random_values<double>(5, 6, 0.5, 1.5), bd = random_values<double>(5, 7);
  const auto gout = random_values<double>(15, 8);
  std::vector<double> y(15), m(3), r(3), dx(15), dg(5), db(5);
  layer_norm_forward_ref<double>(y.data(), m.data(), r.data(), xd.data(), gd.data(), bd.data(), 3, 5, 1e-5);
  layer_norm_backward_ref<double>(dx.data(), dg.data(), db.data(), gout.data(), xd.data(), m.data(), r.data(),
                                  gd.data(), 3, 5);
  auto loss = [&] {
    std::vector<double> yy(15), mm(3), rr(3);
    layer_norm_forward_ref<double>(yy.data(), mm.data(), rr.data(), xd.data(), gd.data(), bd.data(), 3, 5, 1e-5);
    return dot(yy, gout);
  };
  check_gradient(xd, dx, loss);
  check_gradient(gd, dg, loss);
  check_gradient(bd, db, loss);
}

TEST_CASE("layer norm keeps a large common offset and long sums: summed in double, on the CPU and the GPU") {
  // Rows of 1e6 + U(-2, 2) (in float: the values' own spacing is 0.0625): against the double reference over
  // the same floats, y is off by about the mean's rounding (0.03 at most, over a standard deviation of
  // 1.15). Summed in float the mean was off by about 30 and y by up to 4.7 (torch: 0.027).
  const int64_t R = 3, F = 4096;
  std::vector<float> x = random_values<float>(size_t(R * F), 11, -2.0f, 2.0f);
  for (float& v : x) v = float(1e6 + double(v));
  std::vector<double> yd(static_cast<size_t>(R * F)), md(static_cast<size_t>(R)), rd(static_cast<size_t>(R));
  layer_norm_forward_ref<double>(yd.data(), md.data(), rd.data(), to_double(x).data(), nullptr, nullptr, R, F, 1e-5);
  const auto check = [&](const std::vector<float>& y, const std::vector<float>& m, const std::vector<float>& r) {
    for (int64_t i = 0; i < R; ++i) {
      CHECK(std::fabs(m[size_t(i)] - md[size_t(i)]) <= 0.04);
      CHECK(std::fabs(r[size_t(i)] / rd[size_t(i)] - 1) <= 1e-3);
    }
    double worst = 0;
    for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::fabs(y[i] - yd[i]));
    CHECK(worst <= 0.04);
  };
  std::vector<float> y(static_cast<size_t>(R * F)), m(static_cast<size_t>(R)), r(static_cast<size_t>(R));
  layer_norm_forward_cpu(y.data(), m.data(), r.data(), x.data(), nullptr, nullptr, R, F, 1e-5f);
  check(y, m, r);
  // And the variance: a million squares of +-0.9975 summed in float came 0.4% over (rstd 1.000406 for 1.002501).
  const int64_t W = 1000000;
  std::vector<float> alt(static_cast<size_t>(W)), yw(static_cast<size_t>(W));
  for (int64_t i = 0; i < W; ++i) alt[size_t(i)] = i % 2 ? -0.9975f : 0.9975f;
  float mw = 0, rw = 0;
  layer_norm_forward_cpu(yw.data(), &mw, &rw, alt.data(), nullptr, nullptr, 1, W, 1e-5f);
  CHECK(rw == doctest::Approx(1 / std::sqrt(double(0.9975f) * double(0.9975f) + 1e-5)).epsilon(1e-6));
  // And the backward's sums: dy = 1e4 everywhere has dx = 0 exactly; summed in float, 65536 columns gave 9.5.
  const int64_t B = 65536;
  const std::vector<float> xb = random_values<float>(static_cast<size_t>(B), 22, -2.0f, 2.0f),
                           dyb(static_cast<size_t>(B), 1e4f);
  std::vector<float> yb(static_cast<size_t>(B)), dxb(static_cast<size_t>(B));
  float mb = 0, rb = 0;
  layer_norm_forward_cpu(yb.data(), &mb, &rb, xb.data(), nullptr, nullptr, 1, B, 1e-5f);
  layer_norm_backward_cpu(dxb.data(), nullptr, nullptr, dyb.data(), xb.data(), &mb, &rb, nullptr, 1, B);
  double worst_dx = 0;
  for (float v : dxb) worst_dx = std::max(worst_dx, std::fabs(double(v)));
  CHECK(worst_dx <= 0.05);
#ifdef GNN_WITH_CUDA
  if (cuda_available()) {
    Tensor gy = nan_gpu(R * F), gm = nan_gpu(R), gr = nan_gpu(R);
    const Tensor gx = on_gpu(x);
    layer_norm_forward_cuda(gy.f32(), gm.f32(), gr.f32(), gx.f32(), nullptr, nullptr, R, F, 1e-5f, cuda_stream(0));
    check(gy.to_vector<float>(), gm.to_vector<float>(), gr.to_vector<float>());
  }
#endif
}

TEST_CASE("layer norm of values past 1.8e19: the squares in double, as the double reference, CPU and GPU") {
  // Row 0 of ordinary values, row 1 of them times 1e20, row 2 ordinary with one 1e30, row 3 with +-2e19
  // (squares past the float range, their mean within it: rstd formed in float): a square past the float range
  // made the variance inf and rstd 0, so rows 1 to 3 gave y = 0 (torch's float32: 0, or NaN at 3e38) and dx = 0.
  const int64_t R = 4, F = 37;
  std::vector<float> x = random_values<float>(size_t(R * F), 31, -2.0f, 2.0f);
  for (int64_t f = 0; f < F; ++f) x[size_t(F + f)] *= 1e20f;
  x[size_t(2 * F + 5)] = 1e30f;
  x[size_t(3 * F + 1)] = 2e19f, x[size_t(3 * F + 30)] = -2e19f;
  const std::vector<float> dy = random_values<float>(size_t(R * F), 32);
  std::vector<double> yd(static_cast<size_t>(R * F)), md(static_cast<size_t>(R)), rd(static_cast<size_t>(R)),
      dxd(static_cast<size_t>(R * F));
  const std::vector<double> xd = to_double(x), dyd = to_double(dy);
  layer_norm_forward_ref<double>(yd.data(), md.data(), rd.data(), xd.data(), nullptr, nullptr, R, F, 1e-5);
  layer_norm_backward_ref<double>(dxd.data(), nullptr, nullptr, dyd.data(), xd.data(), md.data(), rd.data(), nullptr, R,
                                  F);
  const auto check = [&](const std::vector<float>& y, const std::vector<float>& r) {
    for (int64_t i = 0; i < R; ++i) CHECK(r[size_t(i)] / rd[size_t(i)] == doctest::Approx(1).epsilon(1e-6));
    CHECK(compare(y, yd, 1e-5, 1e-4).index == -1);
  };
  std::vector<float> y(static_cast<size_t>(R * F)), m(static_cast<size_t>(R)), r(static_cast<size_t>(R)),
      dx(static_cast<size_t>(R * F));
  layer_norm_forward_cpu(y.data(), m.data(), r.data(), x.data(), nullptr, nullptr, R, F, 1e-5f);
  check(y, r);
  layer_norm_backward_cpu(dx.data(), nullptr, nullptr, dy.data(), x.data(), m.data(), r.data(), nullptr, R, F);
  for (int64_t i = 0; i < R; ++i) {  // (row by row: row 1's dx is about 1e-20)
    double worst = 0, top = 0;
    for (int64_t f = 0; f < F; ++f) {
      const size_t k = size_t(i * F + f);
      worst = std::max(worst, std::fabs(dx[k] - dxd[k])), top = std::max(top, std::fabs(dxd[k]));
    }
    CAPTURE(i);
    CHECK(top > 0);
    CHECK(worst <= 1e-4 * top);
  }
#ifdef GNN_WITH_CUDA
  if (cuda_available()) {
    Tensor gy = nan_gpu(R * F), gm = nan_gpu(R), gr = nan_gpu(R);
    const Tensor gx = on_gpu(x);
    layer_norm_forward_cuda(gy.f32(), gm.f32(), gr.f32(), gx.f32(), nullptr, nullptr, R, F, 1e-5f, cuda_stream(0));
    check(gy.to_vector<float>(), gr.to_vector<float>());
  }
#endif
}

TEST_CASE("cuda layer norm matches the double reference") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  for (auto [R, F] : kElementShapes) {
    CAPTURE(R);
    CAPTURE(F);
    const int64_t n = R * F;
    const auto x = random_values<float>(size_t(n), 1, -3.0f, 3.0f), dy = random_values<float>(size_t(n), 2);
    const auto gamma = random_values<float>(size_t(F), 3), beta = random_values<float>(size_t(F), 4);
    const std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end()), gd(gamma.begin(), gamma.end()),
        bd(beta.begin(), beta.end());
    std::vector<double> yd(static_cast<size_t>(n)), md(static_cast<size_t>(R)), rd(static_cast<size_t>(R)),
        dxd(static_cast<size_t>(n)), dgd(static_cast<size_t>(F)), dbd(static_cast<size_t>(F));
    layer_norm_forward_ref<double>(yd.data(), md.data(), rd.data(), xd.data(), gd.data(), bd.data(), R, F, 1e-5);
    layer_norm_backward_ref<double>(dxd.data(), dgd.data(), dbd.data(), dyd.data(), xd.data(), md.data(), rd.data(),
                                    gd.data(), R, F);
    Tensor y = nan_gpu(n), m = nan_gpu(R), r = nan_gpu(R), dx = nan_gpu(n), dg = nan_gpu(F), db = nan_gpu(F),
           ws = nan_gpu(layer_norm_backward_workspace_cuda(R, F));
    const Tensor gx = on_gpu(x), gdy = on_gpu(dy), gg = on_gpu(gamma), gb = on_gpu(beta);
    layer_norm_forward_cuda(y.f32(), m.f32(), r.f32(), gx.f32(), gg.f32(), gb.f32(), R, F, 1e-5f, s);
    layer_norm_backward_cuda(dx.f32(), dg.f32(), db.f32(), gdy.f32(), gx.f32(), m.f32(), r.f32(), gg.f32(), R, F,
                             ws.f32(), s);
    GNN_CHECK_CLOSE(y.to_vector<float>(), yd, 1e-4, 1e-4);
    GNN_CHECK_CLOSE(dx.to_vector<float>(), dxd, 1e-3, 1e-3);
    GNN_CHECK_CLOSE(dg.to_vector<float>(), dgd, 1e-3, 1e-3);
    GNN_CHECK_CLOSE(db.to_vector<float>(), dbd, 1e-4, 1e-4);
  }
#endif
}

TEST_CASE("cuda ops: layer norm matches the host, value and gradient") {
  GNN_SKIP_UNLESS_CUDA();
  const Tensor a = rand({37, 24}, 1), bias = rand({24}, 3);
  check_op("layer_norm", {a, bias, rand({24}, 10)},
           [](auto& v, auto&) { return ag::layer_norm(v[0], v[1], v[2], 1e-5); });
  check_op("layer_norm without affine", {a}, [](auto& v, auto&) { return ag::layer_norm(v[0], ag::Var(), ag::Var()); });
}
