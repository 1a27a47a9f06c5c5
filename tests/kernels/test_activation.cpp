// Activations (kernels/activation.h): hand-worked values, the CPU kernels against the double
// reference, each derivative against finite differences, the CUDA kernels (and bias_act, the dense
// layer's epilogue) against the reference, and the autograd op on the GPU against the host; the SE gate
// (x * sigmoid(z + b)) against the composed ops, by finite differences, and on the GPU.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "autograd/device_check.h"
#include "autograd/gradcheck.h"
#include "device_buffers.h"
#include "graph_cases.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "runtime/cuda.h"
#include "runtime/parallel.h"
#include "testing.h"

using namespace gnn;
using namespace gnn::testing;  // the helpers of testing.h, device_buffers.h and graph_cases.h

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
  auto x = random_values<float>(static_cast<size_t>(n), 1, -4.0f, 4.0f);
  for (int64_t i = 0; i < n; ++i)
    if (std::fabs(x[size_t(i)]) < 1e-3f) x[size_t(i)] = 0.5f;  // keep away from the kinks at 0
  const auto dy = random_values<float>(static_cast<size_t>(n), 2);
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
      double p = v;
      GNN_CHECK_FD(act_derivative(a, v, 0.2), central_difference(p, [&] { return act_value(a, p, 0.2); }), kFdScalar);
    }
  }
}

namespace {
// torch's derivative of each activation at NaN (torch.autograd on a NaN input): relu's backward keeps
// the gradient where x > 0, leaky_relu's scales it where not, elu's scales it where x <= 0; gelu,
// sigmoid and tanh carry the NaN
bool nan_derivative_is_torchs(Act a, float d, float slope) {
  switch (a) {
    case Act::kRelu:
      return d == 0.0f;
    case Act::kLeakyRelu:
      return d == slope;
    case Act::kNone:
    case Act::kElu:
      return d == 1.0f;
    default:
      return std::isnan(d);
  }
}
// x: values around the kinks with NaNs among them, long enough for the vector loops and their tails
std::vector<float> with_nans(size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = i % 3 == 0 ? NAN : (float(i % 7) - 3.0f) * 0.5f;
  return x;
}
}  // namespace

TEST_CASE("activations: a NaN goes through as in torch, in the scalar form and the CPU kernels") {
  const float slope = 0.2f;
  const int64_t n = 67;
  const auto x = with_nans(size_t(n));
  const std::vector<float> dy(size_t(n), 1.0f);
  for (Act a : kAll) {
    CAPTURE(act_name(a));
    CHECK(std::isnan(act_value(a, NAN, slope)));
    CHECK(std::isnan(act_value(a, double(NAN), double(slope))));
    CHECK(nan_derivative_is_torchs(a, act_derivative(a, NAN, slope), slope));
    const size_t N = static_cast<size_t>(n);
    std::vector<float> y(N), dx(N), yb(N), dxb(N);
    act_forward_cpu(y.data(), x.data(), n, a, slope);
    act_backward_cpu(dx.data(), dy.data(), x.data(), n, a, slope);
    const float zero = 0.0f;  // bias_act with a zero bias: its own loops
    bias_act_forward_cpu(yb.data(), x.data(), &zero, n, 1, a, slope);
    bias_act_backward_cpu(dxb.data(), nullptr, dy.data(), x.data(), &zero, n, 1, a, slope);
    for (int64_t i = 0; i < n; ++i) {
      CAPTURE(i);
      const float want = act_value(a, x[size_t(i)], slope);
      CHECK(std::isnan(y[size_t(i)]) == std::isnan(x[size_t(i)]));
      CHECK(std::isnan(yb[size_t(i)]) == std::isnan(x[size_t(i)]));
      if (std::isnan(x[size_t(i)])) {
        CHECK(nan_derivative_is_torchs(a, dx[size_t(i)], slope));
        CHECK(nan_derivative_is_torchs(a, dxb[size_t(i)], slope));
      } else {
        CHECK(y[size_t(i)] == doctest::Approx(want).epsilon(1e-6));
      }
    }
  }
  CHECK(!std::signbit(act_value(Act::kRelu, -0.0f, slope)));  // relu(-0) is +0, as before
}

TEST_CASE("cuda activations: a NaN goes through as in torch") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  const float slope = 0.2f;
  const int64_t n = 67;
  const auto x = with_nans(size_t(n));
  const Tensor gx = on_gpu(x), gdy = on_gpu(std::vector<float>(size_t(n), 1.0f));
  for (Act a : kAll) {
    CAPTURE(act_name(a));
    Tensor y = nan_gpu(n), dx = nan_gpu(n);
    act_forward_cuda(y.f32(), gx.f32(), n, a, slope, s);
    act_backward_cuda(dx.f32(), gdy.f32(), gx.f32(), n, a, slope, s);
    const auto yh = y.to_vector<float>(), dxh = dx.to_vector<float>();
    for (int64_t i = 0; i < n; ++i) {
      CAPTURE(i);
      CHECK(std::isnan(yh[size_t(i)]) == std::isnan(x[size_t(i)]));
      if (std::isnan(x[size_t(i)])) CHECK(nan_derivative_is_torchs(a, dxh[size_t(i)], slope));
    }
  }
#endif
}

TEST_CASE("cuda activations match their references") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  const int64_t n = 100003;
  const auto x = random_values<float>(size_t(n), 1, -4.0f, 4.0f), dy = random_values<float>(size_t(n), 2);
  const Tensor gx = on_gpu(x), gdy = on_gpu(dy);
  for (Act a : {Act::kNone, Act::kRelu, Act::kLeakyRelu, Act::kElu, Act::kGelu, Act::kSigmoid, Act::kTanh}) {
    CAPTURE(act_name(a));
    std::vector<double> yd(static_cast<size_t>(n)), dxd(static_cast<size_t>(n));
    const std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end());
    act_forward_ref<double>(yd.data(), xd.data(), n, a, 0.1);
    act_backward_ref<double>(dxd.data(), dyd.data(), xd.data(), n, a, 0.1);
    Tensor y = nan_gpu(n), dx = nan_gpu(n);
    act_forward_cuda(y.f32(), gx.f32(), n, a, 0.1f, s);
    act_backward_cuda(dx.f32(), gdy.f32(), gx.f32(), n, a, 0.1f, s);
    GNN_CHECK_CLOSE(y.to_vector<float>(), yd);
    GNN_CHECK_CLOSE(dx.to_vector<float>(), dxd);
  }
#endif
}

TEST_CASE("cuda activations: bias_act, the dense layer's epilogue, matches the double reference") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  // the row shapes of device_buffers.h (the bias gradient's column sums over 1, a few and 256 slices)
  for (auto [R, F] : kRowShapes) {
    CAPTURE(R);
    CAPTURE(F);
    const int64_t n = R * F;
    const auto a = random_values<float>(size_t(n), 1, -3.0f, 3.0f);
    const auto row = random_values<float>(size_t(F), 3), dy = random_values<float>(size_t(n), 4);
    const Tensor ga = on_gpu(a), grow = on_gpu(row), gdy = on_gpu(dy);
    std::vector<double> bias(static_cast<size_t>(n));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t f = 0; f < F; ++f) bias[size_t(r * F + f)] = double(a[size_t(r * F + f)]) + double(row[size_t(f)]);
    const int64_t nws = column_sum_workspace_cuda(R, F);
    Tensor ws = nan_gpu(std::max<int64_t>(nws, 1));
    float* wsp = nws ? ws.f32() : nullptr;
    const std::vector<double> ad(a.begin(), a.end()), dyd(dy.begin(), dy.end());
    // the dense layer's epilogue: y = act(a + row) (z keeps a + row), dx = dy act'(a + row), db = sums of dx
    const std::vector<double> rowd(row.begin(), row.end());
    for (Act act : {Act::kLeakyRelu, Act::kGelu}) {
      CAPTURE(act_name(act));
      std::vector<double> yd(static_cast<size_t>(n)), dxd(static_cast<size_t>(n)), dbd(static_cast<size_t>(F));
      bias_act_forward_ref<double>(yd.data(), ad.data(), rowd.data(), R, F, act, 0.1);
      bias_act_backward_ref<double>(dxd.data(), dbd.data(), dyd.data(), ad.data(), rowd.data(), R, F, act, 0.1);
      Tensor yb = nan_gpu(n), zb = nan_gpu(n), dxb = nan_gpu(n), dxn = nan_gpu(n), db = nan_gpu(F);
      bias_act_forward_cuda(yb.f32(), zb.f32(), ga.f32(), grow.f32(), R, F, act, 0.1f, s);
      bias_act_backward_cuda(dxb.f32(), db.f32(), gdy.f32(), ga.f32(), grow.f32(), R, F, act, 0.1f, wsp, s);
      bias_act_backward_cuda(dxn.f32(), nullptr, gdy.f32(), ga.f32(), grow.f32(), R, F, act, 0.1f, nullptr, s);
      GNN_CHECK_CLOSE(yb.to_vector<float>(), yd, 1e-4, 1e-4);
      GNN_CHECK_CLOSE(zb.to_vector<float>(), bias, 1e-4, 1e-4);
      GNN_CHECK_CLOSE(dxb.to_vector<float>(), dxd, 1e-4, 1e-4);
      GNN_CHECK_CLOSE(db.to_vector<float>(), dbd, 1e-4, 1e-4);
      CHECK(same_bits(dxn.to_vector<float>(), dxb.to_vector<float>()));  // without db: the same dx
    }
  }
#endif
}

TEST_CASE("cuda ops: bias_act matches the host, value and gradient") {
  GNN_SKIP_UNLESS_CUDA();
  const Tensor a = rand({37, 24}, 1), bias = rand({24}, 3);
  for (Act act : {Act::kNone, Act::kLeakyRelu, Act::kGelu})  // 37 rows: one slice; 9000: column sums in slices
    for (const Tensor& x : {a, rand({9000, 24}, 14)})
      check_op("bias_act", {x, bias}, [act](auto& v, auto&) { return ag::bias_act(v[0], v[1], act, 0.1); });
}

TEST_CASE("cuda ops: matmul_bias and matmul_cat match the host, value and gradients") {
  GNN_SKIP_UNLESS_CUDA();
  for (int64_t K : {24, 300})  // one K block and two on the host
    check_op("matmul_bias", {rand({37, K}, 1), rand({K, 20}, 2), rand({20}, 3)},
             [](auto& v, auto&) { return ag::matmul_bias(v[0], v[1], v[2]); });
  for (auto [K1, K2] : {std::pair<int64_t, int64_t>{24, 16}, {256, 40}, {0, 12}, {12, 0}}) {  // a part may be empty
    check_op("matmul_cat", {rand({37, K1}, 4), rand({37, K2}, 5), rand({K1 + K2, 20}, 6), rand({20}, 7)},
             [](auto& v, auto&) { return ag::matmul_cat(v[0], v[1], v[2], v[3]); });
    check_op("matmul_cat without a bias", {rand({37, K1}, 4), rand({37, K2}, 5), rand({K1 + K2, 20}, 6)},
             [](auto& v, auto&) { return ag::matmul_cat(v[0], v[1], v[2]); });
  }
}

TEST_CASE("gate: the composed ops' bits, finite differences, the CPU kernel against the reference") {
  // f64, through the op: every input's gradient, with the bias and without
  const ag::Var x = rand_var({9, 6}, 41), z = rand_var({9, 6}, 42, -3, 3), b = rand_var({6}, 43);
  check_grads({x, z, b}, [&] { return probe(ag::gate(x, z, b)); });
  check_grads({x, z}, [&] { return probe(ag::gate(x, z, ag::Var())); });
  // float: mul(x, bias_act(z, b, sigmoid)), forward and every gradient, bit for bit
  const Tensor xs = rand({301, 128}, 44), zs = rand({301, 128}, 45), bs = rand({128}, 46), dy = rand({301, 128}, 47);
  auto run = [&](bool fused) {
    const ag::Var a = ag::Var::param(xs.clone()), c = ag::Var::param(zs.clone()), d = ag::Var::param(bs.clone());
    const ag::Var y = fused ? ag::gate(a, c, d) : ag::mul(a, ag::bias_act(c, d, Act::kSigmoid));
    const std::vector<float> out = y.value().to_vector<float>();
    ag::backward(y, dy);
    return std::array<std::vector<float>, 4>{out, a.grad().to_vector<float>(), c.grad().to_vector<float>(),
                                             d.grad().to_vector<float>()};
  };
  const auto f = run(true), c = run(false);
  for (size_t k = 0; k < f.size(); ++k) CHECK(f[k] == c[k]);
  // the CPU kernel against the float reference on a shape with a tail
  const int64_t R = 77, F = 19;
  const auto xv = random_values<float>(size_t(R * F), 48), zv = random_values<float>(size_t(R * F), 49, -4.0f, 4.0f),
             bv = random_values<float>(size_t(F), 50), gv = random_values<float>(size_t(R * F), 51);
  std::vector<float> yr(size_t(R * F)), y(yr.size()), dxr(yr.size()), dx(yr.size()), dzr(yr.size()), dz(yr.size());
  std::vector<float> dbr(static_cast<size_t>(F)), db(static_cast<size_t>(F));
  gate_forward_ref<float>(yr.data(), xv.data(), zv.data(), bv.data(), R, F);
  gate_forward_cpu(y.data(), xv.data(), zv.data(), bv.data(), R, F);
  gate_backward_ref<float>(dxr.data(), dzr.data(), dbr.data(), gv.data(), xv.data(), zv.data(), bv.data(), R, F);
  gate_backward_cpu(dx.data(), dz.data(), db.data(), gv.data(), xv.data(), zv.data(), bv.data(), R, F);
  CHECK(y == yr);
  CHECK(dx == dxr);
  CHECK(dz == dzr);
  CHECK(db == dbr);  // summed over the rows as each chunk writes them: column_sum's bits
  // rows enough for several column chunks, on one thread and on all: the bits of column_sum's order
  const int64_t R2 = 3 * kColumnChunk + 17;
  const auto x2 = random_values<float>(size_t(R2 * F), 52), z2 = random_values<float>(size_t(R2 * F), 53, -4.0f, 4.0f),
             g2 = random_values<float>(size_t(R2 * F), 54);
  std::vector<float> dx2(x2.size()), dz2(x2.size()), want(static_cast<size_t>(F));
  gate_backward_ref<float>(dx2.data(), dz2.data(), want.data(), g2.data(), x2.data(), z2.data(), bv.data(), R2, F);
  const testing::ThreadsRestored saved;
  for (int threads : {1, std::max(2, saved.count)}) {
    set_num_threads(threads);
    std::vector<float> got(static_cast<size_t>(F), NAN);
    gate_backward_cpu(dx2.data(), dz2.data(), got.data(), g2.data(), x2.data(), z2.data(), bv.data(), R2, F);
    CHECK_MESSAGE(got == want, threads, " threads");
  }
  // shapes that do not fit are refused, naming the argument
  CHECK_THROWS_WITH_AS(ag::gate(x, rand_var({9, 5}, 1), b), doctest::Contains("gate: z f64[9, 5] on cpu is not x's"),
                       Error);
  CHECK_THROWS_WITH_AS(ag::gate(x, z, rand_var({5}, 1)), doctest::Contains("gate: b has 5 values"), Error);
}

TEST_CASE("cuda ops: gate matches the host, value and gradient") {
  GNN_SKIP_UNLESS_CUDA();
  const Tensor x = rand({37, 24}, 61), z = rand({37, 24}, 62), b = rand({24}, 63);
  check_op("gate", {x, z, b}, [](auto& v, auto&) { return ag::gate(v[0], v[1], v[2]); });
  check_op("gate without a bias", {x, z}, [](auto& v, auto&) { return ag::gate(v[0], v[1], ag::Var()); });
}
