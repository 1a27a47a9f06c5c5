// Graph readout, sum / mean / max / log-sum-exp per graph (kernels/pooling.h): hand-worked values, the CPU kernels
// against the double reference and its backward against finite differences, the CUDA kernels against
// the reference (empty, single-node and 5000-node graphs), and the autograd op on the GPU against the host.
#include <cmath>
#include <cstring>

#include "autograd/device_check.h"
#include "device_buffers.h"
#include "graph_cases.h"
#include "kernels/pooling.h"
#include "runtime/cuda.h"
#include "runtime/parallel.h"
#include "testing.h"

using namespace gnn;
using namespace gnn::testing;  // the helpers of testing.h, device_buffers.h and graph_cases.h

TEST_CASE("pooling: hand-worked, reference, finite differences") {
  const int64_t ptr[] = {0, 2, 2, 3};  // graphs of 2, 0 and 1 nodes
  const float x[] = {1, 5, 3, 2, 7, 7};  // 3 nodes x 2 features
  float y[6];
  int32_t arg[6];
  pool_forward_cpu(y, nullptr, x, ptr, 3, 2, Reduce::kSum);
  CHECK(std::vector<float>(y, y + 6) == std::vector<float>{4, 7, 0, 0, 7, 7});
  pool_forward_cpu(y, arg, x, ptr, 3, 2, Reduce::kMax);
  CHECK(std::vector<float>(y, y + 6) == std::vector<float>{3, 5, 0, 0, 7, 7});
  CHECK(std::vector<int32_t>(arg, arg + 6) == std::vector<int32_t>{1, 0, -1, -1, 2, 2});

  const std::vector<int64_t> gp = {0, 0, 1, 9, 40, 41, 300};
  const int64_t G = 6, N = 300;
  for (int64_t F : {1, 3, 33, 128, 600}) {
    const auto xs = random_values<float>(static_cast<size_t>(N * F), 1);
    const auto dy = random_values<float>(static_cast<size_t>(G * F), 2);
    for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
      CAPTURE(F);
      CAPTURE(reduce_name(op));
      std::vector<double> yd(static_cast<size_t>(G * F)), dxd(static_cast<size_t>(N * F));
      std::vector<int32_t> argd(static_cast<size_t>(G * F)), args(static_cast<size_t>(G * F), 77);
      pool_forward_ref<double>(yd.data(), argd.data(), to_double(xs).data(), gp.data(), G, F, op);
      pool_backward_ref<double>(dxd.data(), to_double(dy).data(), argd.data(), gp.data(), G, F, op);
      std::vector<float> ys(static_cast<size_t>(G * F), NAN), dx(static_cast<size_t>(N * F), NAN);
      pool_forward_cpu(ys.data(), args.data(), xs.data(), gp.data(), G, F, op);
      pool_backward_cpu(dx.data(), dy.data(), args.data(), gp.data(), G, F, op);
      GNN_CHECK_CLOSE(ys, yd);
      GNN_CHECK_CLOSE(dx, dxd);
      if (op == Reduce::kMax) CHECK(args == argd);
    }
  }
  auto xd = random_values<double>(static_cast<size_t>(N * 2), 3);
  const auto gout = random_values<double>(static_cast<size_t>(G * 2), 4);
  for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
    std::vector<double> y(static_cast<size_t>(G * 2)), dx(static_cast<size_t>(N * 2));
    std::vector<int32_t> a(static_cast<size_t>(G * 2));
    pool_forward_ref<double>(y.data(), a.data(), xd.data(), gp.data(), G, 2, op);
    pool_backward_ref<double>(dx.data(), gout.data(), a.data(), gp.data(), G, 2, op);
    check_gradient(xd, dx, [&] {
      std::vector<double> yy(static_cast<size_t>(G * 2));
      std::vector<int32_t> aa(static_cast<size_t>(G * 2));
      pool_forward_ref<double>(yy.data(), aa.data(), xd.data(), gp.data(), G, 2, op);
      return dot(yy, gout);
    });
  }
}

// One large graph over many channels, as a layout step pools [N, C*F]: the CPU kernels split it into blocks
// of channels over the threads; against the reference, and the same bits with one thread and with several.
TEST_CASE("pooling: one graph, many channels, over the threads") {
  const std::vector<int64_t> gp = {0, 2000};
  const int64_t N = 2000, F = 700;  // 3 blocks of channels, the last one partial
  const auto xs = random_values<float>(static_cast<size_t>(N * F), 5);
  const auto dy = random_values<float>(static_cast<size_t>(F), 6);
  const testing::ThreadsRestored saved;
  for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
    CAPTURE(reduce_name(op));
    std::vector<double> yd(static_cast<size_t>(F)), dxd(static_cast<size_t>(N * F));
    std::vector<int32_t> argd(static_cast<size_t>(F));
    pool_forward_ref<double>(yd.data(), argd.data(), to_double(xs).data(), gp.data(), 1, F, op);
    pool_backward_ref<double>(dxd.data(), to_double(dy).data(), argd.data(), gp.data(), 1, F, op);
    std::vector<float> ys[2], dxs[2];
    for (int run = 0; run < 2; ++run) {
      set_num_threads(run == 0 ? 1 : std::max(2, saved.count));
      std::vector<float> y(static_cast<size_t>(F), NAN), dx(static_cast<size_t>(N * F), NAN);
      std::vector<int32_t> arg(static_cast<size_t>(F), 77);
      pool_forward_cpu(y.data(), arg.data(), xs.data(), gp.data(), 1, F, op);
      pool_backward_cpu(dx.data(), dy.data(), arg.data(), gp.data(), 1, F, op);
      GNN_CHECK_CLOSE(y, yd);
      GNN_CHECK_CLOSE(dx, dxd);
      if (op == Reduce::kMax) CHECK(arg == argd);
      ys[run] = y, dxs[run] = dx;
    }
    CHECK(same_bits(ys[0], ys[1]));
    CHECK(same_bits(dxs[0], dxs[1]));
  }
}

// With a base (x's gradient so far) the backward writes base + its gradient: in place or into another
// buffer, the bits of the gradient written alone and then added (autograd's accumulate), on both sides of
// the CPU kernel's blocks of channels; the reference the same.
TEST_CASE("pooling: the backward adds to a base, in place or apart, with the bits of adding after") {
  const std::vector<int64_t> gp = {0, 0, 1, 9, 40, 41, 300};
  const int64_t G = 6, N = 300;
  for (int64_t F : {3, 600}) {
    const auto xs = random_values<float>(size_t(N * F), 1);
    const auto dy = random_values<float>(size_t(G * F), 2);
    const auto start = random_values<float>(size_t(N * F), 3);
    for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
      CAPTURE(F);
      CAPTURE(reduce_name(op));
      std::vector<float> y(size_t(G * F)), alone(size_t(N * F)), want(size_t(N * F));
      std::vector<int32_t> arg(size_t(G * F));
      pool_forward_cpu(y.data(), arg.data(), xs.data(), gp.data(), G, F, op);
      pool_backward_cpu(alone.data(), dy.data(), arg.data(), gp.data(), G, F, op);
      for (size_t i = 0; i < want.size(); ++i) want[i] = start[i] + alone[i];
      std::vector<float> in_place = start, apart(size_t(N * F), NAN);
      pool_backward_cpu(in_place.data(), dy.data(), arg.data(), gp.data(), G, F, op, in_place.data());
      pool_backward_cpu(apart.data(), dy.data(), arg.data(), gp.data(), G, F, op, start.data());
      CHECK(same_bits(in_place, want));
      CHECK(same_bits(apart, want));
      std::vector<float> ref_alone(size_t(N * F)), ref = start;
      pool_backward_ref<float>(ref_alone.data(), dy.data(), arg.data(), gp.data(), G, F, op);
      pool_backward_ref<float>(ref.data(), dy.data(), arg.data(), gp.data(), G, F, op, ref.data());
      for (size_t i = 0; i < want.size(); ++i) want[i] = start[i] + ref_alone[i];
      CHECK(same_bits(ref, want));
    }
  }
}

TEST_CASE("pooling: a max over more rows than int32 argmax can name is refused before anything is read") {
  const std::vector<int64_t> gp = {0, int64_t(1) << 31};
  float y[1], x[1] = {1.0f};
  int32_t argmax[1];
  CHECK_THROWS_WITH_AS(pool_forward_cpu(y, argmax, x, gp.data(), 1, 1, Reduce::kMax),
                       doctest::Contains("pool max: 2147483648 rows; its argmax holds rows in int32"), Error);
  CHECK_THROWS_WITH_AS(pool_mean_max_forward_cpu(y, argmax, x, gp.data(), 1, 1),
                       doctest::Contains("pool mean-max: 2147483648 rows"), Error);
}

TEST_CASE("pooling: mean + max in one pass has the bits of the two pools and add, each way") {
  // The CPU kernels against pool_forward_cpu / pool_backward_cpu composed (mean, max, then y = mean + max;
  // backward the mean's part, then the max's added in place), with an empty graph and a block past 256
  // channels, on 1 and 3 threads, with a base (in place and apart) and without; the reference against the
  // double composition likewise, and by finite differences. Also on x rounded to a few values (ties: the
  // first of equal maxima wins) with -0 among them, and an infinite dy (whose 0 * inf is the max part's NaN).
  const std::vector<int64_t> gp = {0, 0, 1, 9, 40, 41, 300};
  const int64_t G = 6, N = 300;
  for (int64_t F : {int64_t(3), int64_t(600), int64_t(-5)}) {
    const bool ties = F < 0;
    F = ties ? -F : F;
    CAPTURE(F);
    CAPTURE(ties);
    auto xs = random_values<float>(size_t(N * F), 11);
    if (ties) {
      for (float& v : xs) v = v < -0.5f ? -0.0f : std::round(v * 2.0f) / 2.0f;
      // graph 2 (rows 1-8), column 0: -0 then +0 as its largest values, the first winning the tie
      for (int64_t i = 1; i < 9; ++i) xs[size_t(i * F)] = i == 3 ? -0.0f : i == 6 ? 0.0f : -1.0f;
    }
    auto dy = random_values<float>(size_t(G * F), 12);
    if (ties) dy[size_t(2 * F + 1)] = INFINITY;  // graph 2 (8 rows): 0 * inf is NaN off its argmax row
    const auto start = random_values<float>(size_t(N * F), 13);
    std::vector<float> mean(size_t(G * F)), want(size_t(G * F));
    std::vector<int32_t> arg_want(size_t(G * F));
    pool_forward_cpu(mean.data(), nullptr, xs.data(), gp.data(), G, F, Reduce::kMean);
    pool_forward_cpu(want.data(), arg_want.data(), xs.data(), gp.data(), G, F, Reduce::kMax);
    for (size_t i = 0; i < want.size(); ++i) want[i] = mean[i] + want[i];
    std::vector<float> dx_want(size_t(N * F)), dx_base(size_t(N * F)), dx_apart(size_t(N * F));
    pool_backward_cpu(dx_want.data(), dy.data(), arg_want.data(), gp.data(), G, F, Reduce::kMean);
    pool_backward_cpu(dx_want.data(), dy.data(), arg_want.data(), gp.data(), G, F, Reduce::kMax, dx_want.data());
    pool_backward_cpu(dx_base.data(), dy.data(), arg_want.data(), gp.data(), G, F, Reduce::kMean, start.data());
    pool_backward_cpu(dx_base.data(), dy.data(), arg_want.data(), gp.data(), G, F, Reduce::kMax, dx_base.data());
    const ThreadsRestored saved;
    for (int threads : {1, 3}) {
      CAPTURE(threads);
      set_num_threads(threads);
      std::vector<float> y(size_t(G * F), NAN), dx(size_t(N * F), NAN), in_place = start, apart(size_t(N * F), NAN);
      std::vector<int32_t> arg(size_t(G * F), 77);
      pool_mean_max_forward_cpu(y.data(), arg.data(), xs.data(), gp.data(), G, F);
      CHECK(same_bits(y, want));
      CHECK(arg == arg_want);
      pool_mean_max_backward_cpu(dx.data(), dy.data(), arg.data(), gp.data(), G, F);
      pool_mean_max_backward_cpu(in_place.data(), dy.data(), arg.data(), gp.data(), G, F, in_place.data());
      pool_mean_max_backward_cpu(apart.data(), dy.data(), arg.data(), gp.data(), G, F, start.data());
      CHECK(same_bits(dx, dx_want));
      CHECK(same_bits(in_place, dx_base));
      CHECK(same_bits(apart, dx_base));
    }
    // the reference: the double pools composed, and finite differences
    const auto xd = to_double(xs), dyd = to_double(dy);
    std::vector<double> yd(size_t(G * F)), md(size_t(G * F)), wd(size_t(G * F)), dxd(size_t(N * F)), dxw(size_t(N * F));
    std::vector<int32_t> ad(size_t(G * F)), aw(size_t(G * F));
    pool_mean_max_forward_ref<double>(yd.data(), ad.data(), xd.data(), gp.data(), G, F);
    pool_forward_ref<double>(md.data(), nullptr, xd.data(), gp.data(), G, F, Reduce::kMean);
    pool_forward_ref<double>(wd.data(), aw.data(), xd.data(), gp.data(), G, F, Reduce::kMax);
    for (size_t i = 0; i < wd.size(); ++i) wd[i] = md[i] + wd[i];
    CHECK(std::memcmp(yd.data(), wd.data(), yd.size() * 8) == 0);
    CHECK(ad == aw);
    pool_mean_max_backward_ref<double>(dxd.data(), dyd.data(), ad.data(), gp.data(), G, F);
    pool_backward_ref<double>(dxw.data(), dyd.data(), aw.data(), gp.data(), G, F, Reduce::kMean);
    pool_backward_ref<double>(dxw.data(), dyd.data(), aw.data(), gp.data(), G, F, Reduce::kMax, dxw.data());
    CHECK(std::memcmp(dxd.data(), dxw.data(), dxd.size() * 8) == 0);  // bitwise: NaN from 0 * inf too
    if (F == 3 && !ties) {
      auto xv = xd;
      check_gradient(xv, dxd, [&] {
        std::vector<double> yy(size_t(G * F));
        std::vector<int32_t> aa(size_t(G * F));
        pool_mean_max_forward_ref<double>(yy.data(), aa.data(), xv.data(), gp.data(), G, F);
        return dot(yy, dyd);
      });
    }
  }
}

namespace {
// graphs of 1, 299, 5000 (wider than a CUDA block) and 0 rows; F = 37 (vectors and a remainder) or another
// (300: the CPU's two blocks of channels); NaNs put by nan_terms. Returns x and the expected max and argmax
// (amax_first) of each graph and column.
struct NanPool {
  std::vector<int64_t> ptr{0, 1, 300, 5300, 5300};
  int64_t G = 4, N = 5300, F;
  std::vector<float> x;
  std::vector<float> want_y;
  std::vector<int32_t> want_arg;
  explicit NanPool(int64_t f = 37) : F(f), x(random_values<float>(size_t(N * f), 21)) {
    for (int64_t g = 0; g < G; ++g)
      for (int64_t f = 0; f < F; ++f)
        for (int64_t i : nan_terms(f, ptr[g + 1] - ptr[g], g)) x[size_t((ptr[g] + i) * F + f)] = NAN;
    for (int64_t g = 0; g < G; ++g)
      for (int64_t f = 0; f < F; ++f) {
        const AmaxFirst m = amax_first(ptr[g + 1] - ptr[g], [&](int64_t i) { return x[size_t((ptr[g] + i) * F + f)]; });
        want_y.push_back(m.value);
        want_arg.push_back(m.arg < 0 ? -1 : int32_t(ptr[g] + m.arg));
      }
  }
  // values false: y is not the max itself (mean + max), only NaN where it is
  void check(const std::vector<float>& y, const std::vector<int32_t>& arg, bool values = true) const {
    for (size_t k = 0; k < want_y.size(); ++k) {
      CAPTURE(k);
      CHECK(std::isnan(y[k]) == std::isnan(want_y[k]));
      if (values && !std::isnan(want_y[k])) CHECK(y[k] == want_y[k]);
      CHECK(arg[k] == want_arg[k]);
    }
  }
};
}  // namespace

TEST_CASE("pooling: a NaN row makes the max NaN wherever it comes, as torch's amax, at the first NaN's row") {
  // The max kept a NaN only where it came first (v > max is false for NaN): one later in a graph vanished.
  for (const int64_t F : {37, 300}) {
    CAPTURE(F);
    const NanPool c(F);
    const size_t n = size_t(c.G * c.F);
    std::vector<float> y(n, 7.0f);
    std::vector<int32_t> arg(n, 7);
    pool_forward_ref<float>(y.data(), arg.data(), c.x.data(), c.ptr.data(), c.G, c.F, Reduce::kMax);
    c.check(y, arg);
    std::fill(y.begin(), y.end(), 7.0f), std::fill(arg.begin(), arg.end(), 7);  // (each call writes its own)
    pool_forward_cpu(y.data(), arg.data(), c.x.data(), c.ptr.data(), c.G, c.F, Reduce::kMax);
    c.check(y, arg);
    std::fill(y.begin(), y.end(), 7.0f), std::fill(arg.begin(), arg.end(), 7);
    // mean + max in one pass: NaN where the max is (the mean is NaN there too), the max's argmax
    pool_mean_max_forward_cpu(y.data(), arg.data(), c.x.data(), c.ptr.data(), c.G, c.F);
    c.check(y, arg, false);
  }
}

TEST_CASE("cuda pooling: a NaN row makes the max NaN wherever it comes, at the first NaN's row") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  const NanPool c;
  const Tensor gx = on_gpu(c.x), gptr = on_gpu(c.ptr);
  Tensor y = nan_gpu(c.G * c.F), arg = Tensor::full({c.G * c.F}, 7, DType::I32, Device::cuda(0));
  pool_forward_cuda(y.f32(), arg.i32(), gx.f32(), gptr.i64(), c.G, c.F, Reduce::kMax, s);
  c.check(y.to_vector<float>(), arg.to_vector<int32_t>());
#endif
}

TEST_CASE("pooling: log-sum-exp of a NaN is NaN, and a million rows keep their sum") {
  // NaN anywhere in a column, before or after an infinity or alone: NaN, as torch.logsumexp (std::max passed
  // over it: [nan] gave -inf, [inf, nan] and [nan, inf] inf). The exponentials summed in double: 1e6 rows of
  // U(0, 0.01) summed in float were 4e-3 off (torch 6e-7).
  const float nan = NAN, inf = INFINITY;
  const int64_t ptr[] = {0, 1, 3, 5, 8};
  const float x[] = {nan, inf, nan, nan, inf, 1, nan, 2};
  const int64_t M = 1000000;
  const std::vector<int64_t> big_ptr = {0, M};
  const auto big = random_values<float>(size_t(M), 21, 0.0f, 0.01f);
  double sum = 0;
  for (float v : big) sum += std::exp(double(v));
  const double want = std::log(sum);
  const auto check = [&](const std::vector<float>& y, float y_big) {
    for (size_t g = 0; g < y.size(); ++g) CHECK_MESSAGE(std::isnan(y[g]), g);
    CHECK(std::fabs(y_big - want) <= 2e-6 * want);
  };
  std::vector<float> y(4);
  float y_big = 0;
  pool_logsumexp_forward_cpu(y.data(), x, ptr, 4, 1);
  pool_logsumexp_forward_cpu(&y_big, big.data(), big_ptr.data(), 1, 1);
  check(y, y_big);
  std::vector<double> yd(4);
  const std::vector<double> xd(x, x + 8);
  pool_logsumexp_forward_ref<double>(yd.data(), xd.data(), ptr, 4, 1);
  for (double v : yd) CHECK(std::isnan(v));
#ifdef GNN_WITH_CUDA
  if (cuda_available()) {
    const Stream s = cuda_stream(0);
    Tensor gy = nan_gpu(4), gyb = nan_gpu(1);
    const Tensor gx = on_gpu(std::vector<float>(x, x + 8)), gp = on_gpu(std::vector<int64_t>(ptr, ptr + 5)),
                 gb = on_gpu(big), gbp = on_gpu(big_ptr);
    pool_logsumexp_forward_cuda(gy.f32(), gx.f32(), gp.i64(), 4, 1, s);
    pool_logsumexp_forward_cuda(gyb.f32(), gb.f32(), gbp.i64(), 1, 1, s);
    check(gy.to_vector<float>(), gyb.to_vector<float>()[0]);
  }
#endif
}

TEST_CASE("pooling: log-sum-exp, hand-worked, reference, finite differences") {
  const int64_t ptr[] = {0, 2, 2, 3};  // graphs of 2, 0 and 1 nodes
  const float x[] = {0, 1000, 0, 999, -3, 7};  // 3 nodes x 2 features; exp(1000) overflows without the max
  float y[6];
  pool_logsumexp_forward_cpu(y, x, ptr, 3, 2);
  CHECK(y[0] == doctest::Approx(std::log(2.0)));
  CHECK(y[1] == doctest::Approx(1000 + std::log1p(std::exp(-1.0))));
  CHECK(std::vector<float>(y + 2, y + 6) == std::vector<float>{0, 0, -3, 7});
  // Infinite maxima give themselves, as torch.logsumexp: a column of -inf, and a row of +inf.
  const float xi[] = {-INFINITY, 1, -INFINITY, INFINITY, 2, 3};
  pool_logsumexp_forward_cpu(y, xi, ptr, 3, 2);
  CHECK(y[0] == -INFINITY);
  CHECK(y[1] == INFINITY);
  double yd_inf[6];
  const double xid[] = {-INFINITY, 1, -INFINITY, INFINITY, 2, 3};
  pool_logsumexp_forward_ref<double>(yd_inf, xid, ptr, 3, 2);
  CHECK(yd_inf[0] == -INFINITY);
  CHECK(yd_inf[1] == INFINITY);

  const std::vector<int64_t> gp = {0, 0, 1, 9, 40, 41, 300};
  const int64_t G = 6, N = 300;
  for (int64_t F : {1, 3, 33, 128}) {
    CAPTURE(F);
    const auto xs = random_values<float>(static_cast<size_t>(N * F), 1);
    const auto dy = random_values<float>(static_cast<size_t>(G * F), 2);
    std::vector<double> yd(static_cast<size_t>(G * F)), dxd(static_cast<size_t>(N * F));
    pool_logsumexp_forward_ref<double>(yd.data(), to_double(xs).data(), gp.data(), G, F);
    pool_logsumexp_backward_ref<double>(dxd.data(), to_double(dy).data(), to_double(xs).data(), yd.data(), gp.data(), G,
                                        F);
    std::vector<float> ys(static_cast<size_t>(G * F), NAN), dx(static_cast<size_t>(N * F), NAN);
    pool_logsumexp_forward_cpu(ys.data(), xs.data(), gp.data(), G, F);
    pool_logsumexp_backward_cpu(dx.data(), dy.data(), xs.data(), ys.data(), gp.data(), G, F);
    GNN_CHECK_CLOSE(ys, yd);
    GNN_CHECK_CLOSE(dx, dxd);
  }
  auto xd = random_values<double>(static_cast<size_t>(N * 2), 3);
  const auto gout = random_values<double>(static_cast<size_t>(G * 2), 4);
  std::vector<double> yv(static_cast<size_t>(G * 2)), dx(static_cast<size_t>(N * 2));
  pool_logsumexp_forward_ref<double>(yv.data(), xd.data(), gp.data(), G, 2);
  pool_logsumexp_backward_ref<double>(dx.data(), gout.data(), xd.data(), yv.data(), gp.data(), G, 2);
  check_gradient(xd, dx, [&] {
    std::vector<double> yy(static_cast<size_t>(G * 2));
    pool_logsumexp_forward_ref<double>(yy.data(), xd.data(), gp.data(), G, 2);
    return dot(yy, gout);
  });
}

TEST_CASE("cuda pooling matches the double reference (empty, single-node and 5000-node graphs)") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  // graphs of 0, 1, 5000 (wider than any block) and 37 nodes; F = 1, 33, 130
  const std::vector<int64_t> ptr = {0, 0, 1, 5001, 5038};
  const int64_t N = ptr.back(), G = int64_t(ptr.size()) - 1;
  const Tensor gptr = on_gpu(ptr);
  for (int64_t F : {1, 33, 130}) {
    const auto px = random_values<float>(size_t(N * F), 3), pdy = random_values<float>(size_t(G * F), 4);
    const std::vector<double> pxd(px.begin(), px.end()), pdyd(pdy.begin(), pdy.end());
    const Tensor gpx = on_gpu(px), gpdy = on_gpu(pdy);
    for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
      CAPTURE(F);
      CAPTURE(reduce_name(op));
      std::vector<double> yd(size_t(G * F)), dxd(size_t(N * F));
      std::vector<int32_t> argd(size_t(G * F), -7);
      pool_forward_ref<double>(yd.data(), argd.data(), pxd.data(), ptr.data(), G, F, op);
      pool_backward_ref<double>(dxd.data(), pdyd.data(), argd.data(), ptr.data(), G, F, op);
      Tensor y = nan_gpu(G * F), dx = nan_gpu(N * F), arg = Tensor::full({G * F}, -7, DType::I32, Device::cuda(0));
      pool_forward_cuda(y.f32(), arg.i32(), gpx.f32(), gptr.i64(), G, F, op, s);
      pool_backward_cuda(dx.f32(), gpdy.f32(), arg.i32(), gptr.i64(), N, G, F, op, nullptr, s);
      GNN_CHECK_CLOSE(y.to_vector<float>(), yd);
      if (op == Reduce::kMax) CHECK(arg.to_vector<int32_t>() == argd);
      GNN_CHECK_CLOSE(dx.to_vector<float>(), dxd);
      // with a base: base + the gradient, in place and into another buffer, the bits of adding after
      const auto start = random_values<float>(size_t(N * F), 5);
      Tensor in_place = on_gpu(start), base = on_gpu(start), apart = nan_gpu(N * F);
      pool_backward_cuda(in_place.f32(), gpdy.f32(), arg.i32(), gptr.i64(), N, G, F, op, in_place.f32(), s);
      pool_backward_cuda(apart.f32(), gpdy.f32(), arg.i32(), gptr.i64(), N, G, F, op, base.f32(), s);
      std::vector<float> want = dx.to_vector<float>();
      for (size_t i = 0; i < want.size(); ++i) want[i] = start[i] + want[i];
      CHECK(same_bits(in_place.to_vector<float>(), want));
      CHECK(same_bits(apart.to_vector<float>(), want));
    }
    // Log-sum-exp on inputs near 100, whose exp overflows f32 without the shift by the max.
    std::vector<float> big(px);
    for (float& v : big) v += 100.0f;
    const std::vector<double> bigd(big.begin(), big.end());
    const Tensor gbig = on_gpu(big);
    std::vector<double> yd(size_t(G * F)), dxd(size_t(N * F));
    pool_logsumexp_forward_ref<double>(yd.data(), bigd.data(), ptr.data(), G, F);
    pool_logsumexp_backward_ref<double>(dxd.data(), pdyd.data(), bigd.data(), yd.data(), ptr.data(), G, F);
    Tensor y = nan_gpu(G * F), dx = nan_gpu(N * F);
    pool_logsumexp_forward_cuda(y.f32(), gbig.f32(), gptr.i64(), G, F, s);
    pool_logsumexp_backward_cuda(dx.f32(), gpdy.f32(), gbig.f32(), y.f32(), gptr.i64(), N, G, F, s);
    GNN_CHECK_CLOSE(y.to_vector<float>(), yd);
    GNN_CHECK_CLOSE(dx.to_vector<float>(), dxd);
  }
#endif
}

TEST_CASE("cuda ops: pooling per graph, with an empty graph, matches the host") {
  GNN_SKIP_UNLESS_CUDA();
  const Tensor gp = Tensor::from_vector(std::vector<int64_t>{0, 9, 9, 40, 41, 70});  // graph 1 empty
  const Tensor x = rand({70, 40}, 11);
  for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax})
    check_op("pool", {x}, [gp, op](auto& v, auto&) { return ag::pool(v[0], gp, op); });
  check_op("pool_logsumexp", {x}, [gp](auto& v, auto&) { return ag::pool_logsumexp(v[0], gp); });
}
