// Layers (directional finite-difference checks in double), losses, optimisers, checkpoints.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>

#include "apps/checkpoint.h"
#include "autograd/device_check.h"
#include "autograd/gradcheck.h"
#include "io/npz.h"
#include "nn/conv.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "testing.h"

namespace gnn {
namespace {

using testing::check_op;
using testing::probe;
using testing::rand;
using testing::rand_var;

// The derivative of f along one random direction over all params (and inputs), against
// sum(grad . direction): one check covers every parameter of a layer at once.
void check_directional(const std::vector<ag::Var>& vars, const std::function<ag::Var()>& f, uint32_t seed = 5) {
  for (const ag::Var& v : vars) v.zero_grad();
  ag::backward(f());
  std::vector<std::vector<double>> dir;
  double analytic = 0;
  for (size_t k = 0; k < vars.size(); ++k) {
    REQUIRE_MESSAGE(vars[k].has_grad(), "variable " << k << " got no gradient");
    dir.push_back(testing::random_values<double>(size_t(vars[k].value().numel()), seed + uint32_t(k)));
    const std::vector<double> g = vars[k].grad().to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) analytic += g[i] * dir[k][i];
  }
  auto shift = [&](double h) {
    for (size_t k = 0; k < vars.size(); ++k) {
      double* x = vars[k].value().f64();
      for (size_t i = 0; i < dir[k].size(); ++i) x[i] += h * dir[k][i];
    }
  };
  ag::NoGrad ng;
  const double h = testing::kFdStep;
  shift(h);
  const double lp = f().value().item();
  shift(-2 * h);
  const double lm = f().value().item();
  shift(h);
  const double numeric = (lp - lm) / (2 * h);
  GNN_CHECK_FD(analytic, numeric, testing::kFdTape);
}

std::vector<ag::Var> params_of(const nn::Module& m) {
  std::vector<ag::Var> out;
  for (const auto& p : m.parameters()) out.push_back(p.var);
  return out;
}

std::vector<ag::Var> with(std::vector<ag::Var> v, const ag::Var& x) {
  v.push_back(x);
  return v;
}

TEST_CASE("nn: parameters are named by path and seeded") {
  Rng r1(1), r2(1);
  nn::MLP a({4, 8, 3}, Act::kRelu, r1), b({4, 8, 3}, Act::kRelu, r2);
  const auto pa = a.parameters(), pb = b.parameters();
  REQUIRE(pa.size() == 4);
  CHECK(pa[0].name == "layers.0.weight");
  CHECK(pa[3].name == "layers.1.bias");
  CHECK(a.num_parameters() == 4 * 8 + 8 + 8 * 3 + 3);
  for (size_t i = 0; i < pa.size(); ++i)
    CHECK(pa[i].var.value().to_vector<float>() == pb[i].var.value().to_vector<float>());
  // Glorot bounds: every weight within sqrt(6 / (fan_in + fan_out)).
  Rng r(3);
  nn::GCNConv g(100, 50, r);
  for (float w : g.weight.value().to_vector<float>()) CHECK(std::fabs(w) <= std::sqrt(6.0 / 150));
}

TEST_CASE("nn: dense layers, directional gradient checks in double") {
  Rng rng(7);
  ag::Var x = rand_var({6, 4}, 1);
  nn::Linear lin(4, 3, rng);
  nn::MLP mlp({4, 5, 2}, Act::kGelu, rng);
  nn::LayerNorm ln(4);
  nn::GraphInstanceNorm in(4);
  nn::Embedding emb(5, 3, rng);
  for (nn::Module* m : std::initializer_list<nn::Module*>{&lin, &mlp, &ln, &in, &emb})
    nn::cast_parameters(*m, DType::F64);
  const Tensor gp = Tensor::from_vector<int64_t>({0, 2, 6});
  check_directional(with(params_of(lin), x), [&] { return probe(lin.forward(x)); });
  check_directional(with(params_of(mlp), x), [&] { return probe(mlp.forward(x)); });
  check_directional(with(params_of(ln), x), [&] { return probe(ln.forward(x)); });
  check_directional(with(params_of(in), x), [&] { return probe(in.forward(x, gp)); });
  const Tensor idx = Tensor::from_vector<int32_t>({1, 4, 1, 0});
  check_directional(params_of(emb), [&] { return probe(emb.forward(idx)); });
}

TEST_CASE("nn: an Embedding with max_norm renormalises the rows it looks up in place, and its gradient is a lookup's") {
  Rng rng(5);
  nn::Embedding emb(6, 8, rng), plain(6, 8, rng);  // N(0, 1) rows of 8: norms about 2.8
  emb.max_norm = 1;
  const std::vector<float> before = emb.weight.value().to_vector<float>();
  const Tensor idx = Tensor::from_vector<int32_t>({1, 4, 1, 0});
  ag::Var y = emb.forward(idx);
  const std::vector<float> after = emb.weight.value().to_vector<float>();
  for (int64_t k = 0; k < 6; ++k) {
    CAPTURE(k);
    double n0 = 0, n1 = 0;
    for (int64_t f = 0; f < 8; ++f) {
      n0 += double(before[size_t(k * 8 + f)]) * before[size_t(k * 8 + f)];
      n1 += double(after[size_t(k * 8 + f)]) * after[size_t(k * 8 + f)];
    }
    const bool looked_up = k == 0 || k == 1 || k == 4;
    if (looked_up && std::sqrt(n0) > 1) {
      CHECK(std::sqrt(n1) == doctest::Approx(std::sqrt(n0) / (std::sqrt(n0) + 1e-7)).epsilon(1e-6));
    } else {
      for (int64_t f = 0; f < 8; ++f) CHECK(after[size_t(k * 8 + f)] == before[size_t(k * 8 + f)]);
    }
  }
  CHECK(after != before);
  // The lookup reads the renormalised rows. A second lookup finds them at the norm, give or take a
  // rounding: a row rounded to just above it shrinks once more, by about 1e-7 (torch's own renorm does
  // the same), and none moves further.
  const std::vector<float> yv = y.value().to_vector<float>();
  for (int64_t f = 0; f < 8; ++f) CHECK(yv[size_t(8 + f)] == after[size_t(4 * 8 + f)]);
  emb.forward(idx);
  const std::vector<float> again = emb.weight.value().to_vector<float>();
  for (size_t i = 0; i < again.size(); ++i) CHECK(again[i] == doctest::Approx(after[i]).epsilon(1e-6));
  for (int64_t k : {0, 1, 4}) {
    double n = 0;
    for (int64_t f = 0; f < 8; ++f) n += double(again[size_t(k * 8 + f)]) * again[size_t(k * 8 + f)];
    CHECK(std::sqrt(n) <= 1 + 1e-6);
  }
  // The gradient is a plain lookup's (torch renorms under no_grad): the same as a table without max_norm
  // holding the renormalised values.
  Tensor plain_weight = plain.weight.value();  // a handle on the parameter's storage
  plain_weight.copy_from(emb.weight.value());
  const ag::Var r = ag::Var(Tensor::from_vector<float>(std::vector<float>(32, 0.5f), Shape{4, 8}));
  ag::backward(ag::sum(ag::mul(emb.forward(idx), r)));
  ag::backward(ag::sum(ag::mul(plain.forward(idx), r)));
  CHECK(emb.weight.grad().to_vector<float>() == plain.weight.grad().to_vector<float>());
  CHECK_THROWS_WITH_AS(ag::embedding_renorm_(emb.weight, Tensor::from_vector<int32_t>({6}), 1.0),
                       doctest::Contains("index[0] = 6 is outside the table's 6 rows"), std::exception);
  CHECK_THROWS_WITH_AS(ag::embedding_renorm_(emb.weight, idx, 0.0), doctest::Contains("max_norm must be positive"),
                       std::exception);
}

TEST_CASE("nn: a dense layer on joined node and config parts equals it on the join, which it never builds") {
  Rng rng(9);
  const int64_t N = 5, A = 4, B = 3, C = 3;
  ag::Var node = rand_var({N, A}, 11), config = rand_var({N, C * B}, 12);
  for (bool bias : {true, false}) {
    CAPTURE(bias);
    nn::Linear lin(A + B, 6, rng, bias);
    nn::cast_parameters(lin, DType::F64);
    const auto joined = [&] {
      return ag::reshape(lin.forward(ag::reshape(ag::join_configs(node, config, C), N * C, A + B)), N, C * 6);
    };
    const Tensor want = joined().value(), got = lin.forward_joined(node, config, C).value();
    REQUIRE(got.shape() == want.shape());
    for (int64_t i = 0; i < want.numel(); ++i) CHECK(got.f64()[i] == doctest::Approx(want.f64()[i]).epsilon(1e-12));
    check_directional(with(with(params_of(lin), node), config),
                      [&] { return probe(lin.forward_joined(node, config, C)); });
  }
  // No config columns: the node part alone, repeated per config.
  nn::Linear lin(A, 2, rng);
  nn::cast_parameters(lin, DType::F64);
  const ag::Var none(Tensor::empty(Shape{N, 0}, DType::F64));
  const Tensor y = lin.forward_joined(node, none, C).value(), one = lin.forward(node).value();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) CHECK(y.f64()[n * C * 2 + c * 2 + 1] == one.f64()[n * 2 + 1]);
  CHECK_THROWS_WITH_AS(lin.forward_joined(node, config, C), doctest::Contains("do not join"), Error);
}

// The config part listed for K of N rows and one constant row for the others: the layer on the full config
// part (each unlisted row holding the constant for every config), values and gradients (f64).
TEST_CASE("nn: a dense layer on joined parts whose config part is constant off the listed rows") {
  Rng rng(10);
  const int64_t N = 6, A = 4, B = 3, C = 3;
  const ag::Var node = rand_var({N, A}, 21), listed = rand_var({2, C * B}, 22), constant = rand_var({1, B}, 23);
  const Tensor rows = Tensor::from_vector<int32_t>({2, 0, 2, 1, 2, 2});  // rows 1 and 3 listed, 2 = the constant
  // the full config part [N, C*B] from the same Vars, so gradients flow to listed and constant alike
  const auto full = [&] {
    const ag::Var repeated = ag::reshape(ag::gather_rows(constant, Tensor::zeros(Shape{C}, DType::I32)), 1, C * B);
    return ag::gather_rows(ag::concat_rows({listed, repeated}), rows);
  };
  for (bool bias : {true, false}) {
    CAPTURE(bias);
    nn::Linear lin(A + B, 5, rng, bias);
    nn::cast_parameters(lin, DType::F64);
    const Tensor want = lin.forward_joined(node, full(), C).value(),
                 got = lin.forward_joined_rows(node, listed, constant, rows, C).value();
    REQUIRE(got.shape() == want.shape());
    for (int64_t i = 0; i < want.numel(); ++i) CHECK(got.f64()[i] == doctest::Approx(want.f64()[i]).epsilon(1e-12));
    check_directional(with(with(with(params_of(lin), node), listed), constant),
                      [&] { return probe(lin.forward_joined_rows(node, listed, constant, rows, C)); });
  }
  // every row constant (no configurable node): K = 0
  nn::Linear lin(A + B, 2, rng);
  nn::cast_parameters(lin, DType::F64);
  const ag::Var none(Tensor::empty(Shape{0, C * B}, DType::F64));
  const Tensor all = Tensor::zeros(Shape{N}, DType::I32);
  const Tensor y = lin.forward_joined_rows(node, none, constant, all, C).value();
  const auto each = [&] {
    return ag::gather_rows(ag::reshape(ag::gather_rows(constant, Tensor::zeros(Shape{C}, DType::I32)), 1, C * B), all);
  };
  const Tensor z = lin.forward_joined(node, each(), C).value();
  for (int64_t i = 0; i < z.numel(); ++i) CHECK(y.f64()[i] == doctest::Approx(z.f64()[i]).epsilon(1e-12));
  CHECK_THROWS_WITH_AS(lin.forward_joined_rows(node, listed, constant, Tensor::zeros(Shape{N - 1}, DType::I32), C),
                       doctest::Contains("do not join"), Error);
}

TEST_CASE("nn: graph layers, directional gradient checks in double") {
  const Graph g = testing::random_graph(12, 40, 3);
  Rng rng(11);
  ag::Var x = rand_var({12, 4}, 2);
  nn::SAGEConv sage_fused(4, 3, rng, {.act = Act::kRelu});
  nn::SAGEConv sage_max(4, 3, rng, {.aggr = Reduce::kMax, .residual = true});
  nn::SAGEConv sage_sum(4, 4, rng, {.aggr = Reduce::kSum, .root_weight = false, .residual = true});
  nn::GCNConv gcn(4, 3, rng);
  nn::GINConv gin({4, 6, 3}, rng);
  nn::GATConv gat_cat(4, 3, rng, {.heads = 2, .concat = true});
  nn::GATConv gat_mean(4, 3, rng, {.heads = 3, .concat = false, .add_self_loops = false});
  nn::GATConv gat_edge(4, 3, rng, {.heads = 2, .edge_dim = 2});
  nn::SelfAttention att(4, 2, rng), att_lin(4, 2, rng, true);
  for (nn::Module* m : std::initializer_list<nn::Module*>{&sage_fused, &sage_max, &sage_sum, &gcn, &gin, &gat_cat,
                                                          &gat_mean, &gat_edge, &att, &att_lin})
    nn::cast_parameters(*m, DType::F64);
  const Tensor edge_attr = Tensor::from_vector(testing::random_values<double>(80, 9), Shape{40, 2});
  const Tensor gp = Tensor::from_vector<int64_t>({0, 5, 12});
  SUBCASE("sage") {
    check_directional(with(params_of(sage_fused), x), [&] { return probe(sage_fused.forward(g, x)); });
    check_directional(with(params_of(sage_max), x), [&] { return probe(sage_max.forward(g, x)); });
    check_directional(with(params_of(sage_sum), x), [&] { return probe(sage_sum.forward(g, x)); });
  }
  SUBCASE("gcn, gin") {
    check_directional(with(params_of(gcn), x), [&] { return probe(gcn.forward(g, x)); });
    check_directional(with(params_of(gin), x), [&] { return probe(gin.forward(g, x)); });
  }
  SUBCASE("gat") {
    check_directional(with(params_of(gat_cat), x), [&] { return probe(gat_cat.forward(g, x)); });
    check_directional(with(params_of(gat_mean), x), [&] { return probe(gat_mean.forward(g, x)); });
    check_directional(with(params_of(gat_edge), x), [&] { return probe(gat_edge.forward(g, x, edge_attr)); });
    CHECK(gat_cat.forward(g, x).shape() == Shape({12, 6}));
    CHECK(gat_mean.forward(g, x).shape() == Shape({12, 3}));
    ag::clear_tape();
  }
  SUBCASE("readout") {
    nn::Readout ro({Reduce::kMean, Reduce::kMax, Reduce::kSum});
    check_directional({x}, [&] { return probe(ro.forward(x, gp)); });
    CHECK(ro.forward(x, gp).shape() == Shape({2, 12}));
    ag::clear_tape();
  }
  SUBCASE("self-attention") {
    check_directional(with(params_of(att), x), [&] { return probe(att.forward(x, gp)); });
    check_directional(with(params_of(att_lin), x), [&] { return probe(att_lin.forward(x, gp)); });
  }
}

TEST_CASE("nn: SAGEConv's fused path equals its composed path") {
  const Graph g = testing::random_graph(50, 150, 5);
  Rng r1(2), r2(2);
  nn::SAGEConv fused(8, 6, r1, {.act = Act::kLeakyRelu}), composed(8, 6, r2, {.act = Act::kLeakyRelu, .fused = false});
  const ag::Var x(Tensor::from_vector(testing::random_values<float>(400, 3), Shape{50, 8}));
  ag::Var yf = fused.forward(g, x);
  ag::backward(ag::sum(ag::mul(yf, yf)));
  ag::Var yc = composed.forward(g, x);
  ag::backward(ag::sum(ag::mul(yc, yc)));
  GNN_CHECK_CLOSE(yf.value().to_vector<float>(), yc.value().to_vector<float>(), 1e-5, 1e-5);
  GNN_CHECK_CLOSE(fused.weight.grad().to_vector<float>(), composed.weight.grad().to_vector<float>(), 1e-4, 1e-4);
  GNN_CHECK_CLOSE(fused.bias.grad().to_vector<float>(), composed.bias.grad().to_vector<float>(), 1e-4, 1e-4);
}

TEST_CASE("nn: GCNConv on a hand-worked path graph") {
  // 0 - 1 - 2 (both directions), self-loops added: deg = 2, 3, 2.
  const int64_t s[] = {0, 1, 1, 2}, d[] = {1, 0, 2, 1};
  const Graph g = Graph::from_edges(s, d, 4, 3);
  Rng rng(1);
  nn::GCNConv conv(1, 1, rng, false);
  conv.weight.set_value(Tensor::full(Shape{1, 1}, 1.0, DType::F32));
  const ag::Var x(Tensor::from_vector<float>({1, 2, 4}, Shape{3, 1}));
  const std::vector<float> y = conv.forward(g, x).value().to_vector<float>();
  // y_0 = x0/2 + x1/sqrt(6); y_1 = x0/sqrt(6) + x1/3 + x2/sqrt(6); y_2 = x1/sqrt(6) + x2/2
  CHECK(y[0] == doctest::Approx(0.5 + 2 / std::sqrt(6.0)).epsilon(1e-6));
  CHECK(y[1] == doctest::Approx(1 / std::sqrt(6.0) + 2.0 / 3 + 4 / std::sqrt(6.0)).epsilon(1e-6));
  CHECK(y[2] == doctest::Approx(2 / std::sqrt(6.0) + 2.0).epsilon(1e-6));
}

namespace {
// ListMLE over one group already in its true order (u_r = pred_r / T with the sign folded in), in long
// double directly from the definition, one shift by the group's maximum: long double's range holds
// exp(-11000), so gaps of thousands do not underflow here
std::pair<double, std::vector<double>> list_mle_long(const std::vector<double>& u) {
  const size_t n = u.size();
  long double m = -INFINITY, loss = 0;
  for (double v : u) m = std::max(m, (long double)v);
  std::vector<long double> L(n);
  for (size_t r = n; r-- > 0;) {
    long double sum = 0;
    for (size_t l = r; l < n; ++l) sum += std::exp((long double)u[l] - m);
    L[r] = std::log(sum) + m;
    loss += L[r] - u[r];
  }
  std::vector<double> du(n);
  for (size_t r = 0; r < n; ++r) {
    long double acc = -1;
    for (size_t q = 0; q <= r; ++q) acc += std::exp((long double)u[r] - L[q]);
    du[r] = double(acc);
  }
  return {double(loss), du};
}
}  // namespace

TEST_CASE("nn: ListMLE where a suffix is far below the group's largest score, and hinge keeps a NaN") {
  // One maximum for the whole group made a suffix 745 below it underflow: pred [0, 800] in its true
  // order (fastest first, u = -pred) gave a loss of -inf and a NaN gradient; the loss is e^-800.
  struct Case {
    std::vector<double> pred;
    double temperature;
    bool slowest_first;
  };
  const Case cases[] = {{{0, 800}, 1, false},
                        {{0, 8}, 0.01, false},
                        {{0, 740}, 1, false},
                        {{0, 800, 1600}, 1, false},
                        {{800, 0}, 1, true},
                        {{800, 0}, 1, false},
                        {{-900, 5, 1200, -3}, 1, false},
                        {{3000, -20, 0.5, 7, -3000, 12}, 0.5, true}};
  for (const Case& c : cases) {
    const size_t n = c.pred.size();
    CAPTURE(n);
    CAPTURE(c.pred[1]);
    // targets 0, 1, 2...: the true order is the index order (fastest first), reversed when slowest_first
    std::vector<double> target(n), u(n);
    for (size_t i = 0; i < n; ++i) target[i] = double(i);
    const double s = c.slowest_first ? 1.0 : -1.0;
    for (size_t r = 0; r < n; ++r) u[r] = s * c.pred[c.slowest_first ? n - 1 - r : r] / c.temperature;
    const auto [want, du] = list_mle_long(u);
    ag::Var p(Tensor::from_vector<double>(c.pred), true);
    const ag::Var loss =
        nn::list_mle_loss(p, Tensor::from_vector<double>(target), Tensor::from_vector<int64_t>({0, int64_t(n)}),
                          c.temperature, c.slowest_first);
    ag::backward(loss);
    CHECK(loss.value().item() == doctest::Approx(want).epsilon(1e-12));
    const auto g = p.grad().to_vector<double>();
    for (size_t r = 0; r < n; ++r) {
      CAPTURE(r);
      const size_t i = c.slowest_first ? n - 1 - r : r;
      CHECK(std::isfinite(g[i]));
      CHECK(g[i] == doctest::Approx(s * du[r] / c.temperature).epsilon(1e-12).scale(1e-300));
    }
    ag::clear_tape();
  }
  // a NaN prediction: torch's clamp(margin - d, min=0) keeps it, and its gradient there is 0
  ag::Var p(Tensor::from_vector<double>({NAN, 0.0}), true);
  const ag::Var hinge =
      nn::pairwise_hinge_loss(p, Tensor::from_vector<double>({1, 0}), Tensor::from_vector<int64_t>({0, 2}), 0.1);
  ag::backward(hinge);
  CHECK(std::isnan(hinge.value().item()));
  CHECK(p.grad().to_vector<double>() == std::vector<double>{0.0, 0.0});
  ag::clear_tape();
}

TEST_CASE("nn: losses, hand-worked values and finite differences") {
  const Tensor t = Tensor::from_vector<double>({3, 1, 2, 5, 4});
  const Tensor gp = Tensor::from_vector<int64_t>({0, 3, 5});
  // ListMLE by hand on one group of two: true order b (t=1) then a (t=2); u = -p
  {
    ag::Var p(Tensor::from_vector<double>({0.5, -0.2}), true);
    const double la = std::log(std::exp(0.2) + std::exp(-0.5)) - 0.2;  // first pick b
    CHECK(nn::list_mle_loss(p, Tensor::from_vector<double>({2, 1}), Tensor::from_vector<int64_t>({0, 2}))
              .value()
              .item() == doctest::Approx(la));
    ag::clear_tape();
  }
  // ListMLE from the slowest (allRank's order) by hand on one group of three: true order slowest first
  // c (t=3), a (t=2), b (t=1); u = +p. It is not the fastest-first loss: Plackett-Luce of an order and
  // of its reverse differ once a group has three.
  {
    ag::Var p(Tensor::from_vector<double>({0.5, -0.2, 0.1}), true);
    const Tensor t3 = Tensor::from_vector<double>({2, 1, 3});
    const Tensor g3 = Tensor::from_vector<int64_t>({0, 3});
    const double e = std::log(std::exp(0.1) + std::exp(0.5) + std::exp(-0.2)) - 0.1 +  // first pick c
                     std::log(std::exp(0.5) + std::exp(-0.2)) - 0.5;  // then a; b is the last
    const double f = std::log(std::exp(0.2) + std::exp(-0.5) + std::exp(-0.1)) - 0.2 +  // fastest: b,
                     std::log(std::exp(-0.5) + std::exp(-0.1)) + 0.5;  // then a; c is the last
    CHECK(nn::list_mle_loss(p, t3, g3, 1.0, true).value().item() == doctest::Approx(e));
    CHECK(nn::list_mle_loss(p, t3, g3).value().item() == doctest::Approx(f));
    CHECK(std::abs(e - f) > 1e-3);
    ag::clear_tape();
  }
  // Pairwise hinge by hand: pairs (i slower than j): (0,1), (0,2), (2,1) in group 0; (3,4) in group 1
  {
    ag::Var p(Tensor::from_vector<double>({0.0, 0.05, 0.3, 1.0, 0.0}), true);
    const double want = (std::max(0.0, 0.1 - (0.0 - 0.05)) + std::max(0.0, 0.1 - (0.0 - 0.3)) +
                         std::max(0.0, 0.1 - (0.3 - 0.05)) + std::max(0.0, 0.1 - 1.0)) /
                        4;
    CHECK(nn::pairwise_hinge_loss(p, t, gp, 0.1).value().item() == doctest::Approx(want));
    ag::clear_tape();
  }
  ag::Var p = rand_var({5}, 3);
  testing::check_grads({p}, [&] { return nn::mse_loss(p, t); });
  testing::check_grads({p}, [&] { return nn::mape_loss(p, t); });
  {
    // a target read in other units: |p - s t| / |s t|
    const Tensor ns = Tensor::from_vector<double>({2e9, 5e8});
    ag::Var q(Tensor::from_vector<double>({3.0, 0.25}), true);
    CHECK(nn::mape_loss(q, ns, 1e-9).value().item() == doctest::Approx((0.5 + 0.5) / 2));
    ag::clear_tape();
  }
  {
    // log_mape by hand: |exp(p) - t| / t on positive runtimes
    const Tensor rt = Tensor::from_vector<double>({2.0, 0.5, 10.0});
    ag::Var lp(Tensor::from_vector<double>({std::log(3.0), std::log(0.5), std::log(4.0)}), true);
    CHECK(nn::log_mape_loss(lp, rt).value().item() == doctest::Approx((0.5 + 0.0 + 0.6) / 3));
    ag::clear_tape();
    ag::Var q = rand_var({3}, 5);
    testing::check_grads({q}, [&] { return nn::log_mape_loss(q, rt); });
    CHECK_THROWS_WITH_AS(nn::log_mape_loss(q, Tensor::from_vector<double>({1.0, 0.0, 2.0})),
                         doctest::Contains("target 1 is 0"), Error);
    ag::clear_tape();
  }
  testing::check_grads({p}, [&] { return nn::pairwise_hinge_loss(p, t, gp, 0.5); });
  testing::check_grads({p}, [&] { return nn::pairwise_logistic_loss(p, t, gp); });
  testing::check_grads({p}, [&] { return nn::list_mle_loss(p, t, gp, 10.0); });
  testing::check_grads({p}, [&] { return nn::list_mle_loss(p, t, gp, 0.5, true); });
  ag::Var logits = rand_var({6, 4}, 4);
  const Tensor labels = Tensor::from_vector<int32_t>({0, 3, 1, 1, 2, 0});
  testing::check_grads({logits}, [&] {
    return nn::cross_entropy(logits, labels, Tensor::from_vector<int32_t>({1, 4, 5}));
  });
  CHECK(nn::cross_entropy(ag::Var(Tensor::zeros(Shape{2, 4}, DType::F64)), Tensor::from_vector<int32_t>({0, 1}))
            .value()
            .item() == doctest::Approx(std::log(4.0)));
  CHECK_THROWS_WITH_AS(nn::cross_entropy(logits, Tensor::from_vector<int32_t>({0, 9, 1, 1, 2, 0})),
                       doctest::Contains("label 9 of row 1"), Error);
  CHECK_THROWS_WITH_AS(nn::mse_loss(p, Tensor::from_vector<double>({1, 2, NAN, 4, 5})), doctest::Contains("non-finite"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::list_mle_loss(p, t, Tensor::from_vector<int64_t>({0, 4})), doctest::Contains("group_ptr"),
                       Error);
  ag::clear_tape();
}

TEST_CASE("cuda ops: the ranking losses take GPU predictions and return their gradient there") {
  GNN_SKIP_UNLESS_CUDA();
  const Tensor target = Tensor::from_vector(testing::random_values<double>(40, 41, 1.0, 10.0));
  const Tensor groups = Tensor::from_vector(std::vector<int64_t>{0, 10, 20, 30, 40});
  check_op("list_mle_loss", {rand({40, 1}, 42)}, [target, groups](auto& v, auto&) {
    return ag::reshape(nn::list_mle_loss(v[0], target, groups, 10.0), 1, 1);
  });
  check_op("mse_loss", {rand({40, 1}, 43)},
           [target](auto& v, auto&) { return ag::reshape(nn::mse_loss(v[0], target), 1, 1); });
  // As the trainer runs them: on the host copy of the prediction, the loss a host value
  const ag::Var pred = ag::Var::param(rand({40, 1}, 44).to(Device::cuda(0)));
  const ag::Var loss = nn::list_mle_loss(ag::to_device(pred, Device::cpu()), target, groups, 10.0);
  CHECK(loss.device() == Device::cpu());
  ag::backward(loss);
  REQUIRE(pred.has_grad());
  CHECK(pred.grad().device() == Device::cuda(0));
  const ag::Var host_pred = ag::Var::param(pred.value().to(Device::cpu()));
  ag::backward(nn::list_mle_loss(host_pred, target, groups, 10.0));
  const std::vector<float> got = pred.grad().to_vector<float>(), want = host_pred.grad().to_vector<float>();
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == want[i]);
}

TEST_CASE("nn: Adam, AdamW and SGD match their update rules step by step") {
  auto make = [](double v) { return nn::NamedParam{"w", ag::Var::param(Tensor::full(Shape{1}, v, DType::F64))}; };
  const double g1 = 0.5, g2 = -1.0;
  auto set_grad = [](const nn::NamedParam& p, double g) { p.var.set_grad(Tensor::full(Shape{1}, g, DType::F64)); };
  {  // Adam with L2 weight decay, two steps
    nn::NamedParam p = make(1.0);
    nn::Adam adam(nn::one_group({p}, 0.1), 0.01);
    double w = 1.0, m = 0, v = 0;
    int t = 0;
    for (double g : {g1, g2}) {
      set_grad(p, g);
      adam.step();
      const double gg = g + 0.1 * w;
      ++t, m = 0.9 * m + 0.1 * gg, v = 0.999 * v + 0.001 * gg * gg;
      w -= 0.01 * (m / (1 - std::pow(0.9, t))) / (std::sqrt(v / (1 - std::pow(0.999, t))) + 1e-8);
      CHECK(p.var.value().item() == doctest::Approx(w).epsilon(1e-12));
    }
  }
  {  // AdamW: decay applied to the weight, not the gradient
    nn::NamedParam p = make(1.0);
    nn::Adam adamw(nn::one_group({p}, 0.1), 0.01, true);
    set_grad(p, g1);
    adamw.step();
    const double w = 1.0 * (1 - 0.01 * 0.1) - 0.01 * 1.0;  // first Adam step moves by lr * sign(g)
    CHECK(p.var.value().item() == doctest::Approx(w).epsilon(1e-6));
  }
  {  // SGD with momentum 0.9: v1 = g1, v2 = 0.9 g1 + g2
    nn::NamedParam p = make(1.0);
    nn::SGD sgd(nn::one_group({p}), 0.1, 0.9);
    set_grad(p, g1);
    sgd.step();
    set_grad(p, g2);
    sgd.step();
    CHECK(p.var.value().item() == doctest::Approx(1.0 - 0.1 * g1 - 0.1 * (0.9 * g1 + g2)));
  }
}

TEST_CASE("nn: clipping, schedules, SWA") {
  nn::NamedParam a{"a", ag::Var::param(Tensor::zeros(Shape{2}, DType::F32))};
  a.var.set_grad(Tensor::from_vector<float>({3, 4}));
  CHECK(nn::clip_grad_norm({a}, 1.0) == doctest::Approx(5.0));
  const auto g = a.var.grad().to_vector<float>();
  CHECK(g[0] == doctest::Approx(0.6).epsilon(1e-5));
  CHECK(g[1] == doctest::Approx(0.8).epsilon(1e-5));
  nn::LrSchedule s{.kind = nn::LrSchedule::Kind::kCosine, .base = 1.0, .warmup = 10, .total = 110};
  CHECK(s.at(0) == doctest::Approx(0.1));
  CHECK(s.at(9) == doctest::Approx(1.0));
  CHECK(s.at(60) == doctest::Approx(0.5));
  CHECK(s.at(110) == doctest::Approx(0.0));
  nn::LrSchedule st{.kind = nn::LrSchedule::Kind::kStep, .base = 1.0, .step_size = 5, .gamma = 0.5};
  CHECK(st.at(4) == 1.0);
  CHECK(st.at(5) == 0.5);
  CHECK(st.at(12) == 0.25);
  // The 2nd place's MultiStepLR over a run of 400 steps: x 1/sqrt(10) from steps 240, 280, 320 and 360 on.
  const nn::LrSchedule ms = nn::LrSchedule::of(nn::LrSchedule::Kind::kMultiStep, 1.0, 0, 400);
  CHECK(ms.at(0) == 1.0);
  CHECK(ms.at(239) == 1.0);
  CHECK(ms.at(240) == doctest::Approx(1 / std::sqrt(10.0)));
  CHECK(ms.at(319) == doctest::Approx(0.1));
  CHECK(ms.at(359) == doctest::Approx(0.1 / std::sqrt(10.0)));
  CHECK(ms.at(360) == doctest::Approx(0.01));
  CHECK(ms.at(399) == doctest::Approx(0.01));
  nn::Swa swa(2);
  for (float v : {1.f, 2.f, 4.f}) {
    a.var.set_value(Tensor::full(Shape{2}, v, DType::F32));
    swa.snapshot({a});
  }
  swa.apply({a});
  CHECK(a.var.value().to_vector<float>() == std::vector<float>{3.f, 3.f});  // the last two: (2 + 4) / 2
}

TEST_CASE(
    "nn: clip_grad_norm over f32 and f64 parameters of several chunks is the serial norm, then scales each gradient") {
  std::vector<nn::NamedParam> ps;
  std::vector<std::vector<double>> grads;
  double ss = 0;
  for (int64_t n : {int64_t(20000), int64_t(3), int64_t(0), int64_t(9000)}) {
    const bool f64 = n == 3;
    const auto g = testing::random_values<double>(size_t(n), uint32_t(n) + 1);
    std::vector<double> stored;
    for (double x : g) stored.push_back(f64 ? x : double(float(x)));  // the value the gradient holds
    for (double x : stored) ss += x * x;
    Tensor gt = Tensor::from_vector(g);
    std::string name = "p";
    name += std::to_string(ps.size());
    ps.push_back({name, ag::Var::param(Tensor::zeros(Shape{n}, f64 ? DType::F64 : DType::F32))});
    ps.back().var.set_grad(f64 ? gt : gt.astype(DType::F32));
    grads.push_back(stored);
  }
  const double norm = nn::clip_grad_norm(ps, 1.0);
  CHECK(norm == doctest::Approx(std::sqrt(ss)).epsilon(1e-13));
  const double s = 1.0 / (norm + 1e-6);
  for (size_t k = 0; k < ps.size(); ++k) {
    const Tensor g = ps[k].var.grad().astype(DType::F64);
    for (size_t i = 0; i < grads[k].size(); ++i) {
      const double want = ps[k].var.dtype() == DType::F64 ? grads[k][i] * s : double(float(grads[k][i] * s));
      REQUIRE(g.f64()[i] == want);
    }
  }
  // a parameter whose gradient has another dtype is named
  ps[1].var.set_grad(Tensor::zeros(Shape{3}, DType::F32));
  CHECK_THROWS_WITH_AS(nn::clip_grad_norm(ps, 1.0), doctest::Contains("clip_grad_norm: p1 is f64"), Error);
}

TEST_CASE("nn: two accumulated half-batches step exactly like one full batch") {
  const Graph g = testing::random_graph(20, 60, 8);
  const ag::Var x(Tensor::from_vector(testing::random_values<double>(20 * 4, 1), Shape{20, 4}));
  const Tensor labels =
      Tensor::from_vector<int32_t>(std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1});
  const Tensor first = Tensor::from_vector<int32_t>({0, 1, 2, 3, 4}),
               second = Tensor::from_vector<int32_t>({5, 6, 7, 8, 9});
  const Tensor both = Tensor::from_vector<int32_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  std::vector<std::vector<double>> after;
  for (bool accumulate : {false, true}) {
    Rng rng(4);
    nn::GCNConv conv(4, 3, rng);
    nn::cast_parameters(conv, DType::F64);
    nn::Adam adam(nn::one_group(conv.parameters()), 0.01);
    if (accumulate) {
      for (const Tensor& rows : {first, second}) ag::backward(nn::cross_entropy(conv.forward(g, x), labels, rows));
      adam.scale_grads(0.5);
    } else {
      ag::backward(nn::cross_entropy(conv.forward(g, x), labels, both));
    }
    adam.step();
    after.push_back(conv.weight.value().to_vector<double>());
  }
  GNN_CHECK_CLOSE(after[1], after[0], 1e-12, 1e-9);
}

TEST_CASE("nn: GATConv value dropout acts in training only, reproducibly from the seed") {
  const Graph g = testing::random_graph(20, 60, 4);
  const ag::Var x(Tensor::from_vector(testing::random_values<float>(20 * 6, 2), Shape{20, 6}));
  auto out = [&](double pv, bool training) {
    Rng rng(7);  // the same parameters and dropout stream for every layer built here
    nn::GATConv m(6, 4, rng, {.heads = 2, .value_dropout = pv});
    if (!training) m.eval();
    return m.forward(g, x).value().to_vector<float>();
  };
  CHECK(out(0.5, false) == out(0.0, false));  // eval: no dropout anywhere
  CHECK(out(0.0, true) == out(0.0, false));  // no attention dropout either: training is eval
  const auto a = out(0.5, true), b = out(0.5, true);
  CHECK(a == b);  // the seed fixes the mask
  CHECK(a != out(0.0, true));  // and the mask changes the output
  int changed = 0;
  const auto e = out(0.0, true);
  for (size_t i = 0; i < a.size(); ++i) changed += a[i] != e[i];
  CHECK(changed > int(a.size()) / 2);  // most outputs aggregate at least one dropped or rescaled value
}

TEST_CASE("nn: checkpoints round-trip parameters and optimiser state, a resumed run matches an unbroken one") {
  testing::TempDir dir;
  const Graph g = testing::random_graph(30, 90, 2);
  const ag::Var x(Tensor::from_vector(testing::random_values<float>(30 * 5, 1), Shape{30, 5}));
  const Tensor labels = Tensor::from_vector<int32_t>(std::vector<int32_t>(30, 1));
  auto train = [&](nn::GATConv& m, nn::Adam& opt, int steps) {
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      ag::backward(nn::cross_entropy(m.forward(g, x), labels));
      opt.step();
    }
  };
  Rng r1(5);
  nn::GATConv a(5, 2, r1, {.heads = 2, .concat = false});
  nn::Adam oa(nn::one_group(a.parameters()), 0.05);
  train(a, oa, 3);
  save_checkpoint(dir.file("ck.npz"), a.parameters(), &oa, {{"meta/epoch", Tensor::full(Shape{}, 3, DType::I64)}});
  train(a, oa, 2);
  Rng r2(99);
  nn::GATConv b(5, 2, r2, {.heads = 2, .concat = false});
  nn::Adam ob(nn::one_group(b.parameters()), 0.05);
  load_checkpoint(dir.file("ck.npz"), b.parameters(), &ob);
  CHECK(NpzReader(dir.file("ck.npz")).load_keys({"meta/epoch"}).at("meta/epoch").item() == 3);  // kept beside
  CHECK(ob.steps() == 3);
  train(b, ob, 2);
  for (size_t i = 0; i < a.parameters().size(); ++i)
    CHECK(a.parameters()[i].var.value().to_vector<float>() == b.parameters()[i].var.value().to_vector<float>());
  // A checkpoint for another model is refused and leaves the model untouched.
  Rng r3(1);
  nn::GATConv c(5, 3, r3, {.heads = 2});
  const auto before = c.weight.value().to_vector<float>();
  CHECK_THROWS_WITH_AS(load_checkpoint(dir.file("ck.npz"), c.parameters(), nullptr),
                       doctest::Contains("parameter 'weight'"), Error);
  CHECK(c.weight.value().to_vector<float>() == before);
  // numpy reads it by name
  const std::string py = testing::python_with_numpy();
  if (py.empty()) return testing::skip("no python3 with numpy for the cross-check");
  const std::string cmd = py + " -c \"import numpy as np; d = np.load('" + dir.file("ck.npz") +
                          "'); print(d['params/weight'].shape, int(d['optim/step']))\"";
  FILE* f = popen(cmd.c_str(), "r");
  char buf[256] = {};
  REQUIRE(f);
  const size_t n = fread(buf, 1, sizeof buf - 1, f);
  pclose(f);
  CHECK(std::string(buf, n) == "(5, 4) 3\n");
}

TEST_CASE("nn: a checkpoint's weights are checked as stored and in the model's dtype") {
  testing::TempDir dir;
  const ag::Var w(Tensor::from_vector(std::vector<float>{1, 2}, Shape{2}));
  const std::vector<nn::NamedParam> params{{"w", w}};
  const auto load = [&](std::vector<double> stored) {
    save_npz(dir.file("ck.npz"), {{"params/w", Tensor::from_vector(stored, Shape{2})}});
    load_checkpoint(dir.file("ck.npz"), params, nullptr);
  };
  load({3, 4});  // f64 weights into an f32 model: converted
  CHECK(w.value().to_vector<float>() == std::vector<float>{3, 4});
  CHECK_THROWS_WITH_AS(load({5, std::nan("")}), doctest::Contains("parameter 'w' holds a non-finite value (nan) at 1"),
                       Error);
  CHECK_THROWS_WITH_AS(load({5, 1e300}), doctest::Contains("parameter 'w' holds values too large for f32"), Error);
  CHECK(w.value().to_vector<float>() == std::vector<float>{3, 4});  // (a refused checkpoint leaves it as it was)
}

}  // namespace
}  // namespace gnn
