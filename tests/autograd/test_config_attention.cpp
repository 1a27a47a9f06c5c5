// ag::config_attention (kernels/config_attention.h) against the ops it fuses (scale_by, segment_softmax
// over each row's configs, mul, concat_cols, and with its epilogue add and activation), by finite
// differences in f64, and in float: the forward's bits, and the gradients within float rounding; on a
// GPU (or the emulator) against the host.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "autograd/device_check.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "runtime/cuda.h"
#include "testing.h"

using namespace gnn;
using testing::check_grads;
using testing::probe;
using testing::rand_var;

namespace {

// The C configs of each of R rows as one segment of the [R*C, D] view.
Graph config_segments(int64_t R, int64_t C) {
  std::vector<int64_t> src(size_t(R * C)), dst(src.size());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) src[size_t(r * C + c)] = c, dst[size_t(r * C + c)] = r;
  return Graph::from_edges(src.data(), dst.data(), int64_t(src.size()), std::max(R, C), "config axis");
}

ag::Var composed(const ag::Var& x, const ag::Var& beta, int64_t C) {
  const int64_t R = x.size(0), D = x.size(1) / C;
  const ag::Var rows = ag::reshape(x, R * C, D);
  const ag::Var w = ag::segment_softmax(config_segments(R, C), ag::scale_by(rows, beta));
  return ag::reshape(ag::concat_cols({rows, ag::mul(rows, w)}), R, C * 2 * D);
}
// The same with the epilogue: act(attention + residual).
ag::Var composed(const ag::Var& x, const ag::Var& beta, int64_t C, const ag::Var& res, Act act) {
  return ag::activation(ag::add(composed(x, beta, C), res), act);
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

}  // namespace

TEST_CASE("config attention: gradients by finite differences, and the composed ops' values (f64)") {
  for (auto [R, C, D] : {std::array<int64_t, 3>{5, 3, 4}, {1, 1, 3}, {7, 8, 2}}) {
    INFO("R = ", R, ", C = ", C, ", D = ", D);
    const ag::Var x = rand_var({R, C * D}, 11), beta = rand_var({1}, 12, 0.5, 2.5);
    check_grads({x, beta}, [&] { return probe(ag::config_attention(x, beta, C)); });
    const ag::Var y = ag::config_attention(x, beta, C), z = composed(x, beta, C);
    const std::vector<double> a = values(y.value()), b = values(z.value());
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-13));
    // with a residual and an activation after it, each activation the blocks use
    const ag::Var res = rand_var({R, C * 2 * D}, 13);
    for (Act act : {Act::kNone, Act::kGelu, Act::kRelu, Act::kTanh}) {
      INFO("act ", act_name(act));
      check_grads({x, beta, res}, [&] { return probe(ag::config_attention(x, beta, C, res, act)); });
      const std::vector<double> f = values(ag::config_attention(x, beta, C, res, act).value());
      const std::vector<double> g = values(composed(x, beta, C, res, act).value());
      for (size_t i = 0; i < f.size(); ++i) CHECK(f[i] == doctest::Approx(g[i]).epsilon(1e-13));
    }
    check_grads({x, beta}, [&] { return probe(ag::config_attention(x, beta, C, ag::Var(), Act::kGelu)); });
  }
}

TEST_CASE("config attention: in float, the composed ops' forward bits and their gradients within rounding") {
  const int64_t R = 301, C = 16, D = 24;
  const Tensor xs =
      Tensor::from_vector(testing::random_values<float>(size_t(R * C * D), 5, -3.0f, 3.0f), Shape{R, C * D});
  const ag::Var x1 = ag::Var::param(xs.clone()), b1 = ag::Var::param(Tensor::full(Shape{1}, 1.7, DType::F32));
  const ag::Var x2 = ag::Var::param(xs.clone()), b2 = ag::Var::param(Tensor::full(Shape{1}, 1.7, DType::F32));
  // (one forward and backward at a time: a backward consumes the whole tape)
  const ag::Var y1 = ag::config_attention(x1, b1, C);
  const std::vector<float> f1 = y1.value().to_vector<float>();
  const Tensor dy = Tensor::from_vector(testing::random_values<float>(f1.size(), 6), y1.shape());
  ag::backward(y1, dy);
  const ag::Var y2 = composed(x2, b2, C);
  const std::vector<float> f2 = y2.value().to_vector<float>();
  ag::backward(y2, dy);
  REQUIRE(f1.size() == f2.size());
  int64_t differ = 0;
  for (size_t i = 0; i < f1.size(); ++i) differ += f1[i] != f2[i];
  CHECK(differ == 0);
  const std::vector<float> g1 = x1.grad().to_vector<float>(), g2 = x2.grad().to_vector<float>();
  double worst = 0, scale = 0;  // the largest difference against the mean gradient's size
  for (size_t i = 0; i < g1.size(); ++i)
    worst = std::max(worst, double(std::fabs(g1[i] - g2[i]))), scale += std::fabs(g2[i]);
  scale /= double(g2.size());
  CHECK(worst <= 1e-4 * scale);
  const double db1 = b1.grad().item(), db2 = b2.grad().item();
  CHECK(db1 == doctest::Approx(db2).epsilon(1e-4));
  // the threads' chunks change nothing: the same op again gives the same bits
  const ag::Var x3 = ag::Var::param(xs.clone()), b3 = ag::Var::param(Tensor::full(Shape{1}, 1.7, DType::F32));
  ag::backward(ag::config_attention(x3, b3, C), dy);
  CHECK(b3.grad().item() == db1);
  const std::vector<float> g3 = x3.grad().to_vector<float>();
  CHECK(std::equal(g1.begin(), g1.end(), g3.begin()));
}

TEST_CASE("config attention: with the residual and GELU fused, the composed ops' forward bits in float") {
  const int64_t R = 97, C = 16, D = 24;
  const Tensor xs =
      Tensor::from_vector(testing::random_values<float>(size_t(R * C * D), 7, -3.0f, 3.0f), Shape{R, C * D});
  const Tensor rs = testing::rand(Shape{R, C * 2 * D}, 8);
  auto run = [&](bool fused) {
    const ag::Var x = ag::Var::param(xs.clone()), b = ag::Var::param(Tensor::full(Shape{1}, 1.3, DType::F32));
    const ag::Var r = ag::Var::param(rs.clone());
    const ag::Var y = fused ? ag::config_attention(x, b, C, r, Act::kGelu) : composed(x, b, C, r, Act::kGelu);
    const Tensor dy = testing::rand(y.shape(), 9);
    const std::vector<float> out = y.value().to_vector<float>();
    ag::backward(y, dy);
    return std::array<std::vector<float>, 4>{out, x.grad().to_vector<float>(), r.grad().to_vector<float>(),
                                             b.grad().to_vector<float>()};
  };
  const auto f = run(true), c = run(false);
  CHECK(f[0] == c[0]);  // the forward's bits
  CHECK(f[2] == c[2]);  // d residual = dy GELU'(z): the bits of the activation's backward
  double worst = 0, scale = 0;
  for (size_t i = 0; i < f[1].size(); ++i)
    worst = std::max(worst, double(std::fabs(f[1][i] - c[1][i]))), scale += std::fabs(c[1][i]);
  CHECK(worst <= 1e-4 * scale / double(f[1].size()));
  CHECK(f[3][0] == doctest::Approx(c[3][0]).epsilon(1e-4));
  CHECK(run(true) == f);  // the same bits again
  // without a residual (layout-tgraph's input blocks: the CPU backward's scratch row holds dz)
  auto plain = [&](bool fused) {
    const ag::Var x = ag::Var::param(xs.clone()), b = ag::Var::param(Tensor::full(Shape{1}, 1.3, DType::F32));
    const ag::Var y = fused ? ag::config_attention(x, b, C, ag::Var(), Act::kGelu) : ag::gelu(composed(x, b, C));
    const Tensor dy = testing::rand(y.shape(), 10);
    const std::vector<float> out = y.value().to_vector<float>();
    ag::backward(y, dy);
    return std::array<std::vector<float>, 3>{out, x.grad().to_vector<float>(), b.grad().to_vector<float>()};
  };
  const auto p = plain(true), q = plain(false);
  CHECK(p[0] == q[0]);
  double worst2 = 0, scale2 = 0;
  for (size_t i = 0; i < p[1].size(); ++i)
    worst2 = std::max(worst2, double(std::fabs(p[1][i] - q[1][i]))), scale2 += std::fabs(q[1][i]);
  CHECK(worst2 <= 1e-4 * scale2 / double(p[1].size()));
  CHECK(p[2][0] == doctest::Approx(q[2][0]).epsilon(1e-4));
}

// Dropout fused into the attention's pass against ag::dropout / ag::dropout_configs after the op, from
// the same seed: the forward and every gradient the same bits (dy is masked before the op's backward
// either way), with and without the residual, the activation and the configs' shared mask.
TEST_CASE("config attention: dropout fused, the bits of dropout after the op") {
  const int64_t R = 23, C = 16, D = 24;
  const Tensor xs =
      Tensor::from_vector(testing::random_values<float>(size_t(R * C * D), 3, -3.0f, 3.0f), Shape{R, C * D});
  const Tensor rs = testing::rand(Shape{R, C * 2 * D}, 4), dys = testing::rand(Shape{R, C * 2 * D}, 5);
  const double p = 0.3;
  const uint64_t seed = Rng(42).next();
  for (Act act : {Act::kGelu, Act::kNone})
    for (bool with_res : {true, false})
      for (bool shared : {false, true}) {
        INFO("act ", int(act), ", residual ", with_res, ", shared mask ", shared);
        auto run = [&](bool fused) {
          const ag::Var x = ag::Var::param(xs.clone()), b = ag::Var::param(Tensor::full(Shape{1}, 1.3, DType::F32));
          const ag::Var r = with_res ? ag::Var::param(rs.clone()) : ag::Var();
          ag::Var y;
          if (fused) {
            y = ag::config_attention(x, b, C, r, act, {p, seed, shared});
          } else {
            Rng rng(42);  // whose first draw is `seed`
            const ag::Var z = ag::config_attention(x, b, C, r, act);
            y = shared ? ag::dropout_configs(z, p, rng, true, C) : ag::dropout(z, p, rng, true);
          }
          const std::vector<float> out = y.value().to_vector<float>();
          ag::backward(y, dys);
          return std::array<std::vector<float>, 4>{out, x.grad().to_vector<float>(), b.grad().to_vector<float>(),
                                                   with_res ? r.grad().to_vector<float>() : std::vector<float>()};
        };
        const auto f = run(true), c = run(false);
        CHECK(f[0] == c[0]);
        CHECK(f[1] == c[1]);
        CHECK(f[2] == c[2]);
        CHECK(f[3] == c[3]);
        const auto zeros = std::count(f[0].begin(), f[0].end(), 0.0f);
        CHECK(zeros > int64_t(0.25 * double(f[0].size())));  // the mask did drop (p = 0.3)
        CHECK(zeros < int64_t(0.35 * double(f[0].size())));
      }
  // gradients by finite differences in f64 with the mask fixed by the seed
  const ag::Var x = rand_var({5, 3 * 4}, 21), beta = rand_var({1}, 22, 0.5, 2.5), res = rand_var({5, 3 * 8}, 23);
  check_grads({x, beta, res}, [&] {
    return probe(ag::config_attention(x, beta, 3, res, Act::kGelu, {0.4, 7, false}));
  });
  check_grads({x, beta}, [&] {
    return probe(ag::config_attention(x, beta, 3, ag::Var(), Act::kNone, {0.4, 7, true}));
  });
  CHECK_THROWS_WITH_AS(ag::config_attention(x, beta, 3, res, Act::kGelu, {1.0, 7, false}),
                       doctest::Contains("dropout p must lie in [0, 1), got 1"), Error);
}

TEST_CASE("cuda ops: config attention, alone, with the residual and GELU, and dropout, against the host") {
  if (!cuda_available()) {
    MESSAGE("SKIP: no CUDA device (" << cuda_status() << ")");
    return;
  }
  const int64_t R = 37, C = 8, D = 12;
  const Tensor x = testing::rand(Shape{R, C * D}, 1), beta = Tensor::full(Shape{1}, 1.4, DType::F32);
  const Tensor res = testing::rand(Shape{R, C * 2 * D}, 2);
  testing::check_op("config_attention", {x, beta},
                    [&](const std::vector<ag::Var>& v, const Graph&) { return ag::config_attention(v[0], v[1], C); });
  testing::check_op("config_attention + residual + gelu", {x, beta, res},
                    [&](const std::vector<ag::Var>& v, const Graph&) {
                      return ag::config_attention(v[0], v[1], C, v[2], Act::kGelu);
                    });
  testing::check_op("config_attention + gelu", {x, beta}, [&](const std::vector<ag::Var>& v, const Graph&) {
    return ag::config_attention(v[0], v[1], C, ag::Var(), Act::kGelu);
  });
  testing::check_op("config_attention + residual + gelu + dropout", {x, beta, res},
                    [&](const std::vector<ag::Var>& v, const Graph&) {
                      return ag::config_attention(v[0], v[1], C, v[2], Act::kGelu, {0.3, 11, false});
                    });
  testing::check_op("config_attention + dropout, configs sharing the mask", {x, beta},
                    [&](const std::vector<ag::Var>& v, const Graph&) {
                      return ag::config_attention(v[0], v[1], C, ag::Var(), Act::kNone, {0.3, 12, true});
                    });
}

TEST_CASE("config attention: shapes that do not fit are refused naming the argument") {
  const ag::Var x = rand_var({4, 12}, 1), beta = rand_var({1}, 2);
  CHECK_THROWS_WITH_AS(ag::config_attention(x, beta, 5), doctest::Contains("is not [N, C*D] for C = 5"), Error);
  CHECK_THROWS_WITH_AS(ag::config_attention(x, rand_var({2}, 3), 3), doctest::Contains("beta must have one element"),
                       Error);
  CHECK_THROWS_WITH_AS(ag::config_attention(x, beta, 0), doctest::Contains("for C = 0"), Error);
  CHECK_THROWS_WITH_AS(ag::config_attention(x, beta, 3, ag::Var(), Act::kLeakyRelu),
                       doctest::Contains("takes no slope"), Error);
  CHECK_THROWS_WITH_AS(ag::config_attention(x, beta, 3, rand_var({4, 12}, 4)),
                       doctest::Contains("residual f64[4, 12] on cpu is not the output's [4, 24]"), Error);
}
