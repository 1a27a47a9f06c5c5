// Row-wise softmax, log-softmax and l2-normalise (kernels/rowwise.h): hand-worked values, the CPU
// kernels against the double reference and its backward against finite differences, and the CUDA
// kernels against the reference.
#include <cmath>

#include "device_buffers.h"
#include "graph_cases.h"
#include "kernels/layer_norm.h"
#include "kernels/rowwise.h"
#include "runtime/cuda.h"
#include "testing.h"

using namespace gnn;
using namespace gnn::testing;  // the helpers of testing.h, device_buffers.h and graph_cases.h

TEST_CASE("row-wise softmax, log-softmax, l2-normalise: reference and finite differences") {
  const float x[] = {0, std::log(3.0f), 3, 4};
  float y[4];
  rowwise_forward_cpu(y, x, 2, 2, RowOp::kSoftmax, 0);
  CHECK(y[0] == doctest::Approx(0.25));
  rowwise_forward_cpu(y, x, 2, 2, RowOp::kL2Normalize, 1e-12f);
  CHECK(y[2] == doctest::Approx(0.6));
  CHECK(y[3] == doctest::Approx(0.8));
  for (RowOp op : {RowOp::kSoftmax, RowOp::kLogSoftmax, RowOp::kL2Normalize}) {
    for (int64_t F : {1, 3, 8, 33, 257}) {
      CAPTURE(int(op));
      CAPTURE(F);
      const int64_t R = 50;
      const auto xs = random_values<float>(static_cast<size_t>(R * F), 1, -3.0f, 3.0f);
      const auto dy = random_values<float>(static_cast<size_t>(R * F), 2);
      std::vector<double> yd(static_cast<size_t>(R * F)), dxd(static_cast<size_t>(R * F));
      rowwise_forward_ref<double>(yd.data(), to_double(xs).data(), R, F, op, 1e-12);
      rowwise_backward_ref<double>(dxd.data(), yd.data(), to_double(dy).data(), to_double(xs).data(), R, F, op, 1e-12);
      std::vector<float> ys(static_cast<size_t>(R * F), NAN), dx(static_cast<size_t>(R * F), NAN);
      rowwise_forward_cpu(ys.data(), xs.data(), R, F, op, 1e-12f);
      rowwise_backward_cpu(dx.data(), ys.data(), dy.data(), xs.data(), R, F, op, 1e-12f);
      GNN_CHECK_CLOSE(ys, yd);
      GNN_CHECK_CLOSE(dx, dxd);
    }
    auto xd = random_values<double>(12, 3);
    const auto gout = random_values<double>(12, 4);
    std::vector<double> y2(12), dx2(12);
    rowwise_forward_ref<double>(y2.data(), xd.data(), 3, 4, op, 1e-12);
    rowwise_backward_ref<double>(dx2.data(), y2.data(), gout.data(), xd.data(), 3, 4, op, 1e-12);
    check_gradient(xd, dx2, [&] {
      std::vector<double> yy(12);
      rowwise_forward_ref<double>(yy.data(), xd.data(), 3, 4, op, 1e-12);
      return dot(yy, gout);
    });
  }
}

TEST_CASE("row-wise kernels on the CPU are the float reference, bit for bit, and so is layer norm") {
  // The CPU kernels run the references per row inside their target clones (AVX-512, AVX2, baseline), whose
  // max and sums go in kernels/lane_sum.h's lanes: every clone must give the reference's bits. Widths
  // around a round of the lanes (16) and a stage (256).
  for (const int64_t F : {1, 15, 17, 255, 257, 513}) {
    CAPTURE(F);
    const int64_t R = 7;
    const auto xs = random_values<float>(static_cast<size_t>(R * F), 11, -4.0f, 4.0f);
    const auto dy = random_values<float>(static_cast<size_t>(R * F), 12);
    const auto gm = random_values<float>(static_cast<size_t>(F), 13, 0.5f, 1.5f);
    const auto bt = random_values<float>(static_cast<size_t>(F), 14);
    for (RowOp op : {RowOp::kSoftmax, RowOp::kLogSoftmax, RowOp::kL2Normalize}) {
      CAPTURE(int(op));
      std::vector<float> yr(static_cast<size_t>(R * F)), dxr(yr.size()), y(yr.size()), dx(yr.size());
      rowwise_forward_ref<float>(yr.data(), xs.data(), R, F, op, 1e-12f);
      rowwise_backward_ref<float>(dxr.data(), yr.data(), dy.data(), xs.data(), R, F, op, 1e-12f);
      rowwise_forward_cpu(y.data(), xs.data(), R, F, op, 1e-12f);
      rowwise_backward_cpu(dx.data(), y.data(), dy.data(), xs.data(), R, F, op, 1e-12f);
      CHECK(y == yr);
      CHECK(dx == dxr);
    }
    std::vector<float> yr(static_cast<size_t>(R * F)), mr(static_cast<size_t>(R)), rr(static_cast<size_t>(R)),
        dxr(yr.size()), dgr(static_cast<size_t>(F)), dbr(static_cast<size_t>(F));
    std::vector<float> y(yr.size()), m(mr.size()), r(rr.size()), dx(yr.size()), dg(dgr.size()), db(dbr.size());
    layer_norm_forward_ref<float>(yr.data(), mr.data(), rr.data(), xs.data(), gm.data(), bt.data(), R, F, 1e-5f);
    layer_norm_backward_ref<float>(dxr.data(), dgr.data(), dbr.data(), dy.data(), xs.data(), mr.data(), rr.data(),
                                   gm.data(), R, F);
    layer_norm_forward_cpu(y.data(), m.data(), r.data(), xs.data(), gm.data(), bt.data(), R, F, 1e-5f);
    layer_norm_backward_cpu(dx.data(), dg.data(), db.data(), dy.data(), xs.data(), m.data(), r.data(), gm.data(), R, F);
    CHECK(y == yr);
    CHECK(m == mr);
    CHECK(r == rr);
    CHECK(dx == dxr);  // (dgamma and dbeta sum per chunk of rows, then the chunks: not the reference's order)
  }
}

TEST_CASE("row-wise softmax and log-softmax: a NaN anywhere in a row gives a row of NaN, the other rows theirs") {
  // (the max and the sums run in lanes over stages of 256 columns: a NaN in the first column, and one in the
  // second stage's last, partial round of the lanes)
  const int64_t R = 3, F = 300;
  auto xs = random_values<float>(static_cast<size_t>(R * F), 5, -3.0f, 3.0f);
  xs[0] = NAN, xs[size_t(F + 293)] = NAN;
  for (RowOp op : {RowOp::kSoftmax, RowOp::kLogSoftmax}) {
    CAPTURE(int(op));
    std::vector<float> y(static_cast<size_t>(R * F));
    rowwise_forward_cpu(y.data(), xs.data(), R, F, op, 0.0f);
    double total = 0;
    for (int64_t f = 0; f < F; ++f) {
      CHECK(std::isnan(y[size_t(f)]));
      CHECK(std::isnan(y[size_t(F + f)]));
      CHECK(std::isfinite(y[size_t(2 * F + f)]));
      total += op == RowOp::kSoftmax ? y[size_t(2 * F + f)] : std::exp(double(y[size_t(2 * F + f)]));
    }
    CHECK(total == doctest::Approx(1.0).epsilon(1e-5));
  }
}

TEST_CASE("cuda row-wise softmax, log-softmax and l2-normalise match the double reference") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  // the row shapes of device_buffers.h
  for (auto [R, F] : kRowShapes) {
    CAPTURE(R);
    CAPTURE(F);
    const int64_t n = R * F;
    const auto a = random_values<float>(size_t(n), 1, -3.0f, 3.0f), dy = random_values<float>(size_t(n), 4);
    const Tensor ga = on_gpu(a), gdy = on_gpu(dy);
    const std::vector<double> ad(a.begin(), a.end()), dyd(dy.begin(), dy.end());
    for (RowOp op : {RowOp::kSoftmax, RowOp::kLogSoftmax, RowOp::kL2Normalize}) {
      CAPTURE(int(op));
      std::vector<double> yd(static_cast<size_t>(n)), dxd(static_cast<size_t>(n));
      rowwise_forward_ref<double>(yd.data(), ad.data(), R, F, op, 1e-12);
      rowwise_backward_ref<double>(dxd.data(), yd.data(), dyd.data(), ad.data(), R, F, op, 1e-12);
      Tensor y = nan_gpu(n), dx = nan_gpu(n);
      rowwise_forward_cuda(y.f32(), ga.f32(), R, F, op, 1e-12f, s);
      rowwise_backward_cuda(dx.f32(), y.f32(), gdy.f32(), ga.f32(), R, F, op, 1e-12f, s);
      GNN_CHECK_CLOSE(y.to_vector<float>(), yd);
      GNN_CHECK_CLOSE(dx.to_vector<float>(), dxd, 1e-4, 1e-4);
    }
  }
#endif
}
