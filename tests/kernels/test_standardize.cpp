// Per-column standardisation with trainable statistics (kernels/standardize.h): hand-worked values,
// f32 against the f64 reference, and the GPU's bits equal to the host's (the column sums in f64 by fma
// in row order on both). Gradients by finite differences: the op case "standardize" (test_op_cases.cpp).
#include <cmath>

#include "device_buffers.h"
#include "graph_cases.h"
#include "kernels/standardize.h"
#include "runtime/cuda.h"
#include "testing.h"

using namespace gnn;
using namespace gnn::testing;

TEST_CASE("standardize: (x - mean) / (std + eps), and its backward by hand") {
  const std::vector<double> x = {1, 2, 3, 6}, mean = {2, 4}, std = {1, 2};  // [2, 2]
  std::vector<double> y(4);
  standardize_ref<double>(y.data(), x.data(), mean.data(), std.data(), 0.0, 2, 2);
  CHECK(y == std::vector<double>{-1, -1, 1, 1});
  const std::vector<double> dy = {1, 2, 3, 4};
  std::vector<double> dx(4), dmean(2), dstd(2);
  standardize_backward_ref<double>(dx.data(), dmean.data(), dstd.data(), dy.data(), y.data(), std.data(), 0.0, 2, 2);
  CHECK(dx == std::vector<double>{1, 1, 3, 2});
  CHECK(dmean == std::vector<double>{-4, -3});  // -(1 + 3) / 1, -(2 + 4) / 2
  CHECK(dstd == std::vector<double>{-2, -1});  // -(1 * -1 + 3 * 1) / 1, -(2 * -1 + 4 * 1) / 2
  // eps keeps a zero std finite: a constant column comes out (x - mean) / eps.
  const std::vector<double> zero = {0, 0};
  standardize_ref<double>(y.data(), x.data(), mean.data(), zero.data(), 1e-4, 2, 2);
  CHECK(y[0] == doctest::Approx(-1e4));
  // Only the wanted gradients are written.
  std::vector<double> dm(2, NAN);
  standardize_backward_ref<double>(nullptr, dm.data(), nullptr, dy.data(), y.data(), std.data(), 0.0, 2, 2);
  CHECK(dm == std::vector<double>{-4, -3});
}

// Random f32 inputs (std in [0.25, 1.25)) of R rows and F columns, and the host's forward and backward.
struct HostCase {
  int64_t R, F;
  std::vector<float> x, m, s, dy, y, dx, dm, ds;
  HostCase(int64_t rows, int64_t cols, uint64_t seed)
      : R(rows), F(cols), x(random_values<float>(size_t(R * F), seed)), m(random_values<float>(size_t(F), seed + 1)),
        s(random_values<float>(size_t(F), seed + 2)), dy(random_values<float>(size_t(R * F), seed + 3)),
        y(size_t(R * F)), dx(size_t(R * F)), dm(size_t(F)), ds(size_t(F)) {
    for (float& v : s) v = std::fabs(v) + 0.25f;
    standardize_ref<float>(y.data(), x.data(), m.data(), s.data(), 1e-4f, R, F);
    standardize_backward_ref<float>(dx.data(), dm.data(), ds.data(), dy.data(), y.data(), s.data(), 1e-4f, R, F);
  }
};

TEST_CASE("standardize: f32 against f64") {
  const HostCase c(1000, 140, 1);
  const int64_t R = c.R, F = c.F;
  std::vector<double> yd(static_cast<size_t>(R * F)), dxd(static_cast<size_t>(R * F)), dmd(static_cast<size_t>(F)),
      dsd(static_cast<size_t>(F));
  const std::vector<double> sd = to_double(c.s);
  standardize_ref<double>(yd.data(), to_double(c.x).data(), to_double(c.m).data(), sd.data(), 1e-4, R, F);
  standardize_backward_ref<double>(dxd.data(), dmd.data(), dsd.data(), to_double(c.dy).data(), yd.data(), sd.data(),
                                   1e-4, R, F);
  GNN_CHECK_CLOSE(c.y, yd, 1e-6, 1e-6);
  GNN_CHECK_CLOSE(c.dx, dxd, 1e-6, 1e-6);
  GNN_CHECK_CLOSE(c.dm, dmd, 1e-5, 1e-5);
  GNN_CHECK_CLOSE(c.ds, dsd, 1e-5, 1e-5);
}

TEST_CASE("cuda standardize: the host's bits") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream st = cuda_stream(0);
  const HostCase c(777, 140, 5);
  const int64_t R = c.R, F = c.F;
  Tensor gy = nan_gpu(R * F), gdx = nan_gpu(R * F), gdm = nan_gpu(F), gds = nan_gpu(F);
  const Tensor gs = on_gpu(c.s);
  standardize_cuda(gy.f32(), on_gpu(c.x).f32(), on_gpu(c.m).f32(), gs.f32(), 1e-4f, R, F, st);
  CHECK(same_bits(gy.to_vector<float>(), c.y));
  standardize_backward_cuda(gdx.f32(), gdm.f32(), gds.f32(), on_gpu(c.dy).f32(), on_gpu(c.y).f32(), gs.f32(), 1e-4f, R,
                            F, st);
  CHECK(same_bits(gdx.to_vector<float>(), c.dx));
  CHECK(same_bits(gdm.to_vector<float>(), c.dm));
  CHECK(same_bits(gds.to_vector<float>(), c.ds));
#endif
}
