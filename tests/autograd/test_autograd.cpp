// The tape (call order, accumulation, no-grad, detach) and every op against finite differences.
#include <doctest/doctest.h>

#include <tuple>
#include <vector>

#include "autograd/gradcheck.h"
#include "kernels/gemm.h"
#include "runtime/allocator.h"
#include "runtime/rng.h"
#include "testing.h"

namespace gnn {
namespace {

using testing::check_grads;
using testing::probe;
using testing::rand_var;

Graph small_graph(uint32_t seed, int64_t n = 9, int64_t e = 20) { return testing::random_graph(n, e, seed); }

TEST_CASE("autograd: a hand-worked chain, and a value used twice accumulates both paths") {
  ag::Var x(Tensor::from_vector<double>({2.0}, Shape{1}), true);
  // y = x * x + 3 x  ->  dy/dx = 2x + 3 = 7
  ag::Var y = ag::sum(ag::add(ag::mul(x, x), ag::scale(x, 3.0)));
  CHECK(y.value().item() == 10.0);
  ag::backward(y);
  CHECK(x.grad().item() == 7.0);
  CHECK(ag::tape_size() == 0);
  // A second backward adds to the gradient (accumulation across micro-batches) until zero_grad.
  ag::backward(ag::sum(ag::scale(x, 2.0)));
  CHECK(x.grad().item() == 9.0);
  x.zero_grad();
  CHECK_FALSE(x.has_grad());
}

double total(const Tensor& t) {
  double s = 0;
  for (double v : t.astype(DType::F64).to_vector<double>()) s += v;
  return s;
}

TEST_CASE("autograd: accumulation adds in place only into a gradient no one else holds") {
  for (DType dt : {DType::F32, DType::F64}) {
    CAPTURE(dtype_name(dt));
    const int64_t n = 1 << 17;  // past the elementwise grain: the threaded float path
    const ag::Var w = ag::Var::param(Tensor::full(Shape{n}, 1.5, dt));
    // w feeds two branches, so its gradient is set by one closure and accumulated by the other
    auto step = [&] { ag::backward(ag::sum(ag::add(ag::mul(w, w), ag::scale(w, 0.25)))); };
    step();  // 2 w + 0.25 = 3.25, the first path's tensor then the second's added
    CHECK(total(w.grad()) == doctest::Approx(3.25 * n));
    const Tensor kept = w.grad();  // a caller keeps the gradient it read: the next sum is a new tensor
    const void* kept_data = kept.data();
    step();
    CHECK(total(kept) == doctest::Approx(3.25 * n));
    CHECK(w.grad().data() != kept_data);
    CHECK(total(w.grad()) == doctest::Approx(6.5 * n));
    // no one else holds it now: the third backward adds into the same buffer
    const void* sole = w.grad().data();
    step();
    CHECK(w.grad().data() == sole);
    CHECK(total(w.grad()) == doctest::Approx(9.75 * n));
    // two gradients sharing one buffer (as when a closure hands one tensor to two inputs): adding to a's
    // must not change b's
    const ag::Var a = ag::Var::param(Tensor::full(Shape{n}, 1.0, dt));
    const ag::Var b = ag::Var::param(Tensor::full(Shape{n}, 1.0, dt));
    {
      const Tensor shared = Tensor::full(Shape{n}, 1.0, dt);
      a.set_grad(shared);
      b.set_grad(shared);
    }
    ag::backward(ag::sum(ag::scale(a, 2.0)));
    CHECK(total(a.grad()) == doctest::Approx(3.0 * n));
    CHECK(total(b.grad()) == doctest::Approx(1.0 * n));
    // add hands its dy to both inputs: a later part added to one leaves the other's as it was
    a.zero_grad(), b.zero_grad();
    const ag::Var y = ag::add(a, b);
    ag::backward(ag::sum(ag::add(ag::scale(y, 3.0), ag::scale(a, 0.5))));
    CHECK(total(a.grad()) == doctest::Approx(3.5 * n));
    CHECK(total(b.grad()) == doctest::Approx(3.0 * n));
  }
}

TEST_CASE("autograd: the tape holds no values: what no backward reads is freed with its last Var") {
  const int64_t n = 1 << 16, bytes = n * int64_t(sizeof(float));  // each intermediate: 256 KiB
  const ag::Var w = ag::Var::param(Tensor::full(Shape{n}, 1.0, DType::F32));
  const int64_t before = host_memory_stats().current_bytes;
  ag::Var loss;
  {
    const ag::Var a = ag::add(w, w);  // add and scale read no value backward; mul reads its inputs
    const ag::Var b = ag::scale(ag::reshape(a, 1, n), 3.0);
    loss = ag::sum(ag::mul(b, b));
  }
  // a and mul's output are gone, b stays (mul's closure reads it): one intermediate, not three.
  const int64_t held = host_memory_stats().current_bytes - before;
  CHECK(held >= bytes);
  CHECK(held < 2 * bytes);
  CHECK(loss.value().item() == doctest::Approx(36.0 * double(n)));
  ag::backward(loss);  // d/dw sum((6 w)^2) = 72 w
  const Tensor g = w.grad();
  CHECK(g.f32()[0] == 72.0f);
  CHECK(g.f32()[n - 1] == 72.0f);
  // The closures are spent: only w's gradient (and the 0-d loss) is left.
  CHECK(host_memory_stats().current_bytes - before < bytes + 4096);
}

TEST_CASE("autograd: no-grad records nothing, detach cuts the history, bad losses are refused") {
  ag::Var x(Tensor::from_vector<double>({1.0, 2.0}, Shape{2}), true);
  {
    ag::NoGrad ng;
    ag::Var y = ag::scale(x, 2.0);
    CHECK_FALSE(y.requires_grad());
    CHECK(ag::tape_size() == 0);
  }
  ag::Var d = ag::scale(x, 2.0).detach();
  CHECK_FALSE(d.requires_grad());
  ag::clear_tape();
  ag::Var c(Tensor::from_vector<double>({1.0}, Shape{1}));
  CHECK_THROWS_WITH_AS(ag::backward(ag::scale(x, 1.0)), doctest::Contains("one-element loss"), Error);
  ag::clear_tape();
  CHECK_THROWS_WITH_AS(ag::backward(c), doctest::Contains("does not depend"), Error);
  // Two losses built before one backward: the first backward consumes the tape, the second says so.
  ag::Var l1 = ag::sum(ag::scale(x, 1.0)), l2 = ag::sum(ag::scale(x, 2.0));
  ag::backward(l1);
  CHECK_THROWS_WITH_AS(ag::backward(l2), doctest::Contains("consumed by an earlier backward"), Error);
  CHECK_THROWS_WITH_AS(ag::add(x, c), doctest::Contains("shapes differ"), Error);
  ag::Var f(Tensor::from_vector<float>({1.f, 2.f}, Shape{2}));
  CHECK_THROWS_WITH_AS(ag::add(x, f), doctest::Contains("must be f64"), Error);
  ag::clear_tape();
}

TEST_CASE("autograd: backward from an output with a seed gradient equals backward of <y, dy>") {
  const ag::Var a = rand_var({5, 4}, 1), b = rand_var({4, 3}, 2);
  const Tensor dy = rand_var({5, 3}, 3, -1, 1, false).value();
  ag::backward(ag::sum(ag::mul(ag::relu(ag::matmul(a, b)), ag::Var(dy))));
  const std::vector<double> ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
  a.zero_grad(), b.zero_grad();
  const std::vector<double> seed = dy.to_vector<double>();
  ag::backward(ag::relu(ag::matmul(a, b)), dy);
  CHECK(dy.to_vector<double>() == seed);  // the caller's seed is not written
  const std::vector<double> ga2 = a.grad().to_vector<double>(), gb2 = b.grad().to_vector<double>();
  for (size_t i = 0; i < ga.size(); ++i) CHECK(ga2[i] == doctest::Approx(ga[i]).epsilon(1e-5));
  for (size_t i = 0; i < gb.size(); ++i) CHECK(gb2[i] == doctest::Approx(gb[i]).epsilon(1e-5));
  const ag::Var y = ag::matmul(a, b);
  CHECK_THROWS_WITH_AS(ag::backward(y, Tensor::zeros({3, 5}, DType::F64)),
                       doctest::Contains("backward: the seed gradient"), Error);
  ag::clear_tape();
}

TEST_CASE("autograd: a tape scope back-propagates a loss of its own and leaves the forward before it for later") {
  const ag::Var a = rand_var({5, 4}, 1), b = rand_var({4, 3}, 2);
  const Tensor dy = rand_var({5, 3}, 3, -1, 1, false).value();
  ag::backward(ag::sum(ag::mul(ag::relu(ag::matmul(a, b)), ag::Var(dy))));
  const std::vector<double> ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
  a.zero_grad(), b.zero_grad();
  // the forward, then a loss of a detached copy of its output in a scope (the host loss of a GPU step)
  const ag::Var y = ag::relu(ag::matmul(a, b));
  const size_t forward_entries = ag::tape_size();
  Tensor seed;
  {
    ag::TapeScope scope;
    CHECK(ag::tape_size() == 0);
    const ag::Var leaf(y.value().clone(), true);
    ag::backward(ag::sum(ag::mul(leaf, ag::Var(dy))));
    seed = leaf.grad();
    CHECK(!a.has_grad());  // the scope's backward never reached the forward
    ag::mul(leaf, leaf);  // left on the scope's tape: dropped with it
  }
  CHECK(ag::tape_size() == forward_entries);
  ag::backward(y, seed);
  CHECK(a.grad().to_vector<double>() == ga);
  CHECK(b.grad().to_vector<double>() == gb);
  CHECK(ag::tape_size() == 0);
}

TEST_CASE("autograd: arithmetic, matmul in all four transposes, activations") {
  ag::Var a = rand_var({4, 3}, 1), b = rand_var({4, 3}, 2), bias = rand_var({3}, 3), s = rand_var({1}, 4);
  check_grads({a, b}, [&] { return probe(ag::add(a, b)); });
  check_grads({a, b}, [&] { return probe(ag::sub(a, b)); });
  check_grads({a, b}, [&] { return probe(ag::mul(a, b)); });
  check_grads({a, bias}, [&] { return probe(ag::add_bias(a, bias)); });
  check_grads({a, s}, [&] { return probe(ag::scale_by(a, s)); });
  check_grads({a}, [&] { return ag::mean(ag::mul(a, a)); });
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      ag::Var A = rand_var(ta ? Shape{5, 4} : Shape{4, 5}, 5), B = rand_var(tb ? Shape{3, 5} : Shape{5, 3}, 6);
      check_grads({A, B}, [&] { return probe(ag::matmul(A, B, ta, tb)); });
    }
  for (Act act : {Act::kRelu, Act::kLeakyRelu, Act::kElu, Act::kGelu, Act::kSigmoid, Act::kTanh}) {
    CAPTURE(act_name(act));
    check_grads({a}, [&] { return probe(ag::activation(a, act, 0.2)); });
    check_grads({a, bias}, [&] { return probe(ag::bias_act(a, bias, act, 0.2)); });
  }
}

TEST_CASE("autograd: bias_act gives the same bits as activation(add_bias) on the host, value and gradients") {
  for (Act act : {Act::kNone, Act::kRelu, Act::kLeakyRelu, Act::kGelu, Act::kTanh}) {
    CAPTURE(act_name(act));
    const auto run = [&](bool fused) {
      ag::Var x(Tensor::from_vector(testing::random_values<float>(300 * 40, 11), Shape{300, 40}), true);
      ag::Var b(Tensor::from_vector(testing::random_values<float>(40, 12)), true);
      const ag::Var y = fused ? ag::bias_act(x, b, act, 0.1) : ag::activation(ag::add_bias(x, b), act, 0.1);
      ag::backward(y, Tensor::from_vector(testing::random_values<float>(300 * 40, 13), Shape{300, 40}));
      std::vector<std::vector<float>> out{y.value().to_vector<float>(), x.grad().to_vector<float>(),
                                          b.grad().to_vector<float>()};
      ag::clear_tape();
      return out;
    };
    const auto fused = run(true), composed = run(false);
    for (size_t i = 0; i < fused.size(); ++i) CHECK(fused[i] == composed[i]);
  }
  ag::Var x = rand_var({4, 3}, 1), b = rand_var({4}, 2);
  CHECK_THROWS_WITH_AS(ag::bias_act(x, b, Act::kRelu),
                       doctest::Contains("bias_act: b has 4 values for x with 3 columns"), Error);
}

TEST_CASE("autograd: matmul_bias gives the bits of add_bias(matmul) on the host, value and gradients") {
  // f64 (the reference kernels): finite differences for a, w and the bias
  ag::Var a = rand_var({5, 4}, 21), w = rand_var({4, 3}, 22), bias = rand_var({3}, 23);
  check_grads({a, w, bias}, [&] { return probe(ag::matmul_bias(a, w, bias)); });
  // float: the fused store against the two ops, over one K block and three, full and edge tiles
  for (auto [M, K, N] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{300, 40, 24}, {1000, 600, 130}}) {
    CAPTURE(K);
    const auto run = [&](bool fused) {
      ag::Var x(Tensor::from_vector(testing::random_values<float>(size_t(M * K), 11), Shape{M, K}), true);
      ag::Var W(Tensor::from_vector(testing::random_values<float>(size_t(K * N), 12), Shape{K, N}), true);
      ag::Var b(Tensor::from_vector(testing::random_values<float>(size_t(N), 13)), true);
      const ag::Var y = fused ? ag::matmul_bias(x, W, b) : ag::add_bias(ag::matmul(x, W), b);
      ag::backward(y, Tensor::from_vector(testing::random_values<float>(size_t(M * N), 14), Shape{M, N}));
      std::vector<std::vector<float>> out{y.value().to_vector<float>(), x.grad().to_vector<float>(),
                                          W.grad().to_vector<float>(), b.grad().to_vector<float>()};
      ag::clear_tape();
      return out;
    };
    const auto fused = run(true), composed = run(false);
    for (size_t i = 0; i < fused.size(); ++i) CHECK(fused[i] == composed[i]);
  }
  CHECK_THROWS_WITH_AS(ag::matmul_bias(a, w, rand_var({4}, 24)),
                       doctest::Contains("matmul_bias: bias has 4 values for 3 output columns"), Error);
  CHECK_THROWS_WITH_AS(ag::matmul_bias(a, rand_var({3, 3}, 25), bias),
                       doctest::Contains("matmul_bias: inner sizes differ"), Error);
}

// Where a already holds a gradient when matmul's backward runs (another op read a after the product), the
// product's store adds dy op(b)^T to it (gemm_beta_adds_after) where it is a's alone: the bits of the two
// gradients added after, in f32 and bf16, for products within one k block, and past it and shared (left
// to accumulate), and by finite differences in f64.
TEST_CASE("autograd: matmul's input gradient added to the one its input holds, the bits of adding it after") {
  const bool bf16 = gemm_bf16_supported();
  if (!bf16) MESSAGE("this CPU has no AVX512-BF16: the bf16 products untested");
  for (auto [M, K, N, precision] : std::vector<std::tuple<int64_t, int64_t, int64_t, GemmPrecision>>{
           {1000, 128, 16, GemmPrecision::kF32},
           {300, 40, 200, GemmPrecision::kF32},
           {300, 40, 600, GemmPrecision::kF32},  // the product's K past one block: accumulate adds
           {1000, 128, 16, GemmPrecision::kBf16},
           {300, 40, 600, GemmPrecision::kBf16}}) {
    if (precision == GemmPrecision::kBf16 && !bf16) continue;
    CAPTURE(N);
    CAPTURE(gemm_precision_name(precision));
    const testing::PrecisionRestored precision_back(precision);
    const Tensor xs = Tensor::from_vector(testing::random_values<float>(size_t(M * K), 31), Shape{M, K});
    const Tensor ws = Tensor::from_vector(testing::random_values<float>(size_t(K * N), 32), Shape{K, N});
    const Tensor cs = Tensor::from_vector(testing::random_values<float>(size_t(M * K), 33), Shape{M, K});
    const Tensor dy = Tensor::from_vector(testing::random_values<float>(size_t(M * N), 34), Shape{M, N});
    const Tensor dz = Tensor::from_vector(testing::random_values<float>(size_t(M * K), 35), Shape{M, K});
    for (bool shared : {false, true}) {
      CAPTURE(shared);
      // x's gradient from the product (dy), from another op recorded after it (dz), or from both
      const auto grad = [&](bool product, bool other) {
        ag::Var x(xs.clone(), true), W(ws.clone(), true), c(cs.clone(), true);
        const ag::Var y = ag::matmul(x, W);
        const ag::Var z = shared ? ag::add(x, c) : ag::mul(x, c);  // add's backward hands dz itself to x and c
        if (product && other) {
          ag::backward(ag::concat_cols({y, z}), ag::concat_cols({ag::Var(dy), ag::Var(dz)}).value());
        } else {
          ag::backward(product ? y : z, product ? dy : dz);
        }
        return std::pair{x.grad().to_vector<float>(), W.grad().defined() ? W.grad().to_vector<float>()
                                                                         : std::vector<float>()};
      };
      const auto both = grad(true, true), p = grad(true, false), o = grad(false, true);
      std::vector<float> sum(p.first.size());
      for (size_t i = 0; i < sum.size(); ++i) sum[i] = o.first[i] + p.first[i];
      CHECK(both.first == sum);
      CHECK(both.second == p.second);  // W's gradient as before
    }
  }
  // f64: x read by a product and then by a product with itself, by finite differences
  const ag::Var a = rand_var({5, 4}, 41), w = rand_var({4, 3}, 42), v = rand_var({4, 2}, 43);
  check_grads({a, w, v}, [&] { return probe(ag::concat_cols({ag::matmul(a, w), ag::matmul(a, v), ag::mul(a, a)})); });
}

TEST_CASE("autograd: matmul_cat gives the bits of matmul over concat_cols on the host, value and gradients") {
  // f64: finite differences for both parts, the weight and the bias
  ag::Var a = rand_var({5, 3}, 31), b = rand_var({5, 2}, 32), w = rand_var({5, 4}, 33), bias = rand_var({4}, 34);
  check_grads({a, b, w, bias}, [&] { return probe(ag::matmul_cat(a, b, w, bias)); });
  check_grads({a, b, w}, [&] { return probe(ag::matmul_cat(a, b, w)); });
  // float: against concat_cols, matmul and add_bias; the split on a K block's edge and inside one; in f32 and
  // with bf16 products (where d[a | b] is one product split between the two gradients, gemm_split_cpu, at
  // K1 = 256, and two at K1 = 40: the bits of the composed path's one 512- or 64-wide product either way)
  const bool bf16 = gemm_bf16_supported();
  if (!bf16) MESSAGE("this CPU has no AVX512-BF16: matmul_cat's bf16 products untested");
  for (auto [M, K1, K2, N, precision] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, GemmPrecision>>{
           {1000, 256, 256, 128, GemmPrecision::kF32},
           {300, 40, 24, 20, GemmPrecision::kF32},
           {1000, 256, 256, 128, GemmPrecision::kBf16},
           {300, 40, 24, 20, GemmPrecision::kBf16}}) {
    if (precision == GemmPrecision::kBf16 && !bf16) continue;
    CAPTURE(K1);
    CAPTURE(gemm_precision_name(precision));
    const testing::PrecisionRestored precision_back(precision);
    for (bool with_bias : {true, false}) {
      const auto run = [&](bool fused) {
        ag::Var x1(Tensor::from_vector(testing::random_values<float>(size_t(M * K1), 11), Shape{M, K1}), true);
        ag::Var x2(Tensor::from_vector(testing::random_values<float>(size_t(M * K2), 12), Shape{M, K2}), true);
        ag::Var W(Tensor::from_vector(testing::random_values<float>(size_t((K1 + K2) * N), 13), Shape{K1 + K2, N}),
                  true);
        ag::Var bv(Tensor::from_vector(testing::random_values<float>(size_t(N), 14)), true);
        const ag::Var bb = with_bias ? bv : ag::Var();
        ag::Var y;
        if (fused) y = ag::matmul_cat(x1, x2, W, bb);
        else y = ag::matmul(ag::concat_cols({x1, x2}), W);
        if (!fused && with_bias) y = ag::add_bias(y, bv);
        ag::backward(y, Tensor::from_vector(testing::random_values<float>(size_t(M * N), 15), Shape{M, N}));
        std::vector<std::vector<float>> out{y.value().to_vector<float>(), x1.grad().to_vector<float>(),
                                            x2.grad().to_vector<float>(), W.grad().to_vector<float>()};
        if (with_bias) out.push_back(bv.grad().to_vector<float>());
        ag::clear_tape();
        return out;
      };
      const auto fused = run(true), composed = run(false);
      for (size_t i = 0; i < fused.size(); ++i) CHECK(fused[i] == composed[i]);
    }
  }
  // only some inputs wanting a gradient: a frozen weight, a part without one
  for (int frozen = 0; frozen < 3; ++frozen) {
    CAPTURE(frozen);
    ag::Var x1 = rand_var({6, 3}, 41), x2 = rand_var({6, 2}, 42), W = rand_var({5, 4}, 43);
    ag::Var c1 = frozen == 0 ? ag::Var(x1.value()) : x1, c2 = frozen == 1 ? ag::Var(x2.value()) : x2;
    ag::Var cw = frozen == 2 ? ag::Var(W.value()) : W;
    ag::backward(ag::sum(ag::matmul_cat(c1, c2, cw)));
    ag::Var r1 = rand_var({6, 3}, 41), r2 = rand_var({6, 2}, 42), rw = rand_var({5, 4}, 43);
    ag::backward(ag::sum(ag::matmul(ag::concat_cols({r1, r2}), rw)));
    if (frozen != 0) CHECK(x1.grad().to_vector<double>() == r1.grad().to_vector<double>());
    if (frozen != 1) CHECK(x2.grad().to_vector<double>() == r2.grad().to_vector<double>());
    if (frozen != 2) CHECK(W.grad().to_vector<double>() == rw.grad().to_vector<double>());
    ag::clear_tape();
  }
  CHECK_THROWS_WITH_AS(ag::matmul_cat(a, rand_var({4, 2}, 35), w),
                       doctest::Contains("matmul_cat: a [5, 3] and b [4, 2] differ in rows"), Error);
  CHECK_THROWS_WITH_AS(ag::matmul_cat(a, b, rand_var({6, 4}, 36)),
                       doctest::Contains("does not take [a | b] of 5 columns"), Error);
}

TEST_CASE("autograd: pool_mean_max gives the bits of the two pools and add, value and gradient") {
  // [N, C*F] rows of one graph and of three, in f32: against add(mean pool, max pool) with the max pool
  // recorded first (so the mean's backward runs first, as pool_mean_max's), alone and with x's gradient
  // already holding a part (another use of x).
  for (const std::vector<int64_t>& gp : {std::vector<int64_t>{0, 663}, std::vector<int64_t>{0, 5, 5, 200}}) {
    const int64_t N = gp.back(), F = 300, G = int64_t(gp.size()) - 1;
    const Tensor ptr = Tensor::from_vector(gp);
    for (bool other_use : {false, true}) {
      CAPTURE(G);
      CAPTURE(other_use);
      const auto run = [&](bool fused) {
        ag::Var x(Tensor::from_vector(testing::random_values<float>(size_t(N * F), 81), Shape{N, F}), true);
        ag::Var y;
        if (fused) {
          y = ag::pool_mean_max(x, ptr);
        } else {
          const ag::Var mx = ag::pool(x, ptr, Reduce::kMax);
          const ag::Var mn = ag::pool(x, ptr, Reduce::kMean);
          y = ag::add(mn, mx);
        }
        if (other_use) y = ag::add(ag::reshape(y, 1, G * F), ag::reshape(ag::pool(x, ptr, Reduce::kSum), 1, G * F));
        ag::backward(y, Tensor::from_vector(testing::random_values<float>(size_t(G * F), 82), y.shape()));
        std::vector<std::vector<float>> out{y.value().to_vector<float>(), x.grad().to_vector<float>()};
        ag::clear_tape();
        return out;
      };
      const auto fused = run(true), composed = run(false);
      CHECK(fused[0] == composed[0]);
      CHECK(fused[1] == composed[1]);
    }
  }
}

TEST_CASE("autograd: matmul_cat with an addend gives the bits of matmul_cat and then add") {
  // f64: finite differences with a separate addend and with the addend b itself (a layer's residual on its root)
  ag::Var a = rand_var({5, 3}, 71), b = rand_var({5, 4}, 72), w = rand_var({7, 4}, 73), bias = rand_var({4}, 74),
          r = rand_var({5, 4}, 75);
  check_grads({a, b, w, bias, r}, [&] { return probe(ag::matmul_cat(a, b, w, bias, r)); });
  check_grads({a, b, w}, [&] { return probe(ag::matmul_cat(a, b, w, ag::Var(), b)); });
  // float, against add(matmul_cat(...), addend) in f32 and with bf16 products, where the addend rides in the
  // product's store and b's whole gradient (dy w_b^T + dy) comes out of the split product; the addend b
  // itself or another input; only b, or no input, wanting a gradient besides.
  const bool bf16 = gemm_bf16_supported();
  if (!bf16) MESSAGE("this CPU has no AVX512-BF16: matmul_cat's addend in the product's store untested");
  for (auto [M, K1, K2, precision] :
       std::vector<std::tuple<int64_t, int64_t, int64_t, GemmPrecision>>{{1000, 256, 256, GemmPrecision::kF32},
                                                                         {300, 40, 24, GemmPrecision::kF32},
                                                                         {1000, 256, 256, GemmPrecision::kBf16},
                                                                         {300, 40, 24, GemmPrecision::kBf16}}) {
    if (precision == GemmPrecision::kBf16 && !bf16) continue;
    const int64_t N = K2;  // the output as wide as b, so that b can be the addend
    CAPTURE(M);
    CAPTURE(gemm_precision_name(precision));
    const testing::PrecisionRestored precision_back(precision);
    if (precision == GemmPrecision::kBf16) CHECK(gemm_adds_in_store(M, N, K1 + K2));
    // addend b; another; b with a frozen; b with only W frozen; b, which a later op also reads (so b holds a
    // gradient before matmul_cat's backward runs); a = b = the addend
    for (int variant = 0; variant < 6; ++variant) {
      if (variant == 5 && K1 != K2) continue;
      CAPTURE(variant);
      const auto run = [&](bool fused) {
        ag::Var x1(Tensor::from_vector(testing::random_values<float>(size_t(M * K1), 11), Shape{M, K1}), variant != 2);
        ag::Var x2(Tensor::from_vector(testing::random_values<float>(size_t(M * K2), 12), Shape{M, K2}), true);
        ag::Var W(Tensor::from_vector(testing::random_values<float>(size_t((K1 + K2) * N), 13), Shape{K1 + K2, N}),
                  variant != 3);
        ag::Var bv(Tensor::from_vector(testing::random_values<float>(size_t(N), 14)), true);
        ag::Var other(Tensor::from_vector(testing::random_values<float>(size_t(M * N), 16), Shape{M, N}), true);
        const ag::Var addend = variant == 1 ? other : x2, first = variant == 5 ? x2 : x1;
        ag::Var y =
            fused ? ag::matmul_cat(first, x2, W, bv, addend) : ag::add(ag::matmul_cat(first, x2, W, bv), addend);
        if (variant == 4) y = ag::add(y, ag::scale(x2, 0.5));
        ag::backward(y, Tensor::from_vector(testing::random_values<float>(size_t(M * N), 15), Shape{M, N}));
        std::vector<std::vector<float>> out{y.value().to_vector<float>(), x2.grad().to_vector<float>(),
                                            bv.grad().to_vector<float>()};
        if (variant != 2 && variant != 5) out.push_back(x1.grad().to_vector<float>());
        if (variant != 3) out.push_back(W.grad().to_vector<float>());
        if (variant == 1) out.push_back(other.grad().to_vector<float>());
        ag::clear_tape();
        return out;
      };
      const auto fused = run(true), composed = run(false);
      REQUIRE(fused.size() == composed.size());
      for (size_t i = 0; i < fused.size(); ++i)  // bitwise (== would take -0 for +0)
        CHECK(std::memcmp(fused[i].data(), composed[i].data(), fused[i].size() * 4) == 0);
    }
  }
  CHECK_THROWS_WITH_AS(ag::matmul_cat(a, b, w, bias, rand_var({5, 3}, 76)),
                       doctest::Contains("matmul_cat: addend [5, 3] is not the output's [5, 4]"), Error);
}

TEST_CASE("autograd: dropout keeps the expected fraction, scales by 1/(1-p), and routes gradients through its mask") {
  ag::Var x(Tensor::full(Shape{100000}, 1.0, DType::F32), true);
  Rng rng(7);
  ag::Var y = ag::dropout(x, 0.3, rng, true);
  const std::vector<float> v = y.value().to_vector<float>();
  int64_t kept = 0;
  for (float f : v) {
    CHECK((f == 0.f || std::fabs(f - 1.f / 0.7f) < 1e-6f));
    kept += f != 0.f;
  }
  CHECK(std::fabs(double(kept) / 1e5 - 0.7) < 0.01);
  ag::backward(ag::sum(y));
  CHECK(x.grad().to_vector<float>() == v);  // d/dx of sum(x * mask) is the mask
  CHECK(ag::dropout(x, 0.5, rng, false).node() == x.node());  // evaluation: the input itself
  ag::Var d = rand_var({6, 5}, 8);
  Rng r1(3);
  check_grads({d}, [&] {
    Rng r = r1;  // the same mask for every evaluation
    return probe(ag::dropout(d, 0.4, r, true));
  });
}

TEST_CASE("autograd: column ops, head mean, head dot, gathers") {
  ag::Var a = rand_var({5, 3}, 1), b = rand_var({5, 2}, 2), w = rand_var({5, 6}, 3), att = rand_var({2, 3}, 4);
  check_grads({a, b}, [&] { return probe(ag::concat_cols({a, b, a})); });
  ag::Var c = rand_var({2, 3}, 5);
  check_grads({a, c}, [&] { return probe(ag::concat_rows({a, c, a})); });
  CHECK(ag::concat_rows({a, c}).value().f64()[5 * 3 + 4] == c.value().f64()[4]);  // row 5 is c's row 0
  CHECK_THROWS_WITH_AS(ag::concat_rows({a, b}), doctest::Contains("concat_rows: input 1 has 2 columns"), Error);
  check_grads({w}, [&] { return probe(ag::slice_cols(w, 1, 4)); });
  check_grads({w}, [&] { return probe(ag::slice_rows(w, 1, 4)); });
  CHECK(ag::slice_rows(w, 2, 3).value().f64()[4] == w.value().f64()[2 * 6 + 4]);
  CHECK_THROWS_WITH_AS(ag::slice_rows(w, 3, 6), doctest::Contains("slice_rows"), Error);
  check_grads({w}, [&] { return probe(ag::head_mean(w, 3)); });
  check_grads({w, att}, [&] { return probe(ag::head_dot(w, att)); });
  const Tensor idx = Tensor::from_vector<int32_t>({4, 0, 4, 2, 2, 2, 1});
  check_grads({a}, [&] { return probe(ag::gather_rows(a, idx)); });
  CHECK_THROWS_WITH_AS(ag::embedding(a, Tensor::from_vector<int32_t>({5})), doctest::Contains("outside the table"),
                       Error);
  CHECK_THROWS_WITH_AS(ag::slice_cols(w, 4, 7), doctest::Contains("slice_cols"), Error);
  const ag::Var same = ag::to_device(a, Device::cpu());  // already there: a itself, nothing recorded
  CHECK(same.node() == a.node());
  CHECK_THROWS_WITH_AS(ag::to_device(ag::Var(), Device::cpu()), doctest::Contains("to_device"), Error);
}

TEST_CASE("autograd: config-batched plumbing: reshape, join_configs, keep_grad_rows") {
  // x [4, 2] per node, c [4, 3*2] per node and config (C = 3): y [4, 3*(2+2)].
  ag::Var x = rand_var({4, 2}, 11), c = rand_var({4, 6}, 12);
  const ag::Var y = ag::join_configs(x, c, 3);
  REQUIRE(y.shape() == Shape{4, 12});
  CHECK(y.value().f64()[1 * 12 + 2 * 4 + 1] == x.value().f64()[1 * 2 + 1]);  // node 1, config 2, x column 1
  CHECK(y.value().f64()[1 * 12 + 2 * 4 + 3] == c.value().f64()[1 * 6 + 2 * 2 + 1]);  // its c column 1
  ag::clear_tape();
  check_grads({x, c}, [&] { return probe(ag::join_configs(x, c, 3)); });
  // Nothing per config: x repeated once per config, its gradient summed over them.
  const ag::Var nothing(Tensor::empty(Shape{4, 0}, DType::F64));
  const ag::Var r = ag::join_configs(x, nothing, 3);
  REQUIRE(r.shape() == Shape{4, 6});
  CHECK(r.value().f64()[2 * 6 + 1 * 2 + 1] == x.value().f64()[2 * 2 + 1]);  // node 2, config 1, column 1
  ag::clear_tape();
  check_grads({x}, [&] { return probe(ag::join_configs(x, nothing, 3)); });
  check_grads({c}, [&] { return probe(ag::reshape(ag::mul(c, c), 12, 2)); });
  // With a base: the join + base, finite differences for all three; in f32 the bits of add(join, base),
  // value and gradients, with something per config and without.
  ag::Var base = rand_var({4, 12}, 14), base6 = rand_var({4, 6}, 15);
  check_grads({x, c, base}, [&] { return probe(ag::join_configs(x, c, 3, base)); });
  check_grads({x, base6}, [&] { return probe(ag::join_configs(x, nothing, 3, base6)); });
  for (int64_t B : {int64_t(3), int64_t(0)}) {
    CAPTURE(B);
    const int64_t N = 300, A = 16, C = 7;
    const auto run = [&](bool fused) {
      auto var = [](int64_t r, int64_t k, uint64_t seed) {
        return ag::Var(Tensor::from_vector(testing::random_values<float>(size_t(r * k), seed), Shape{r, k}), true);
      };
      ag::Var xf = var(N, A, 21), cf = var(N, C * B, 22), bf = var(N, C * (A + B), 23);
      const ag::Var y = fused ? ag::join_configs(xf, cf, C, bf) : ag::add(ag::join_configs(xf, cf, C), bf);
      ag::backward(
          y, Tensor::from_vector(testing::random_values<float>(size_t(N * C * (A + B)), 24), Shape{N, C * (A + B)}));
      std::vector<std::vector<float>> out{y.value().to_vector<float>(), xf.grad().to_vector<float>(),
                                          bf.grad().to_vector<float>()};
      if (B) out.push_back(cf.grad().to_vector<float>());
      ag::clear_tape();
      return out;
    };
    const auto fused = run(true), composed = run(false);
    for (size_t i = 0; i < fused.size(); ++i) CHECK(fused[i] == composed[i]);
  }
  CHECK_THROWS_WITH_AS(ag::join_configs(x, c, 3, rand_var({4, 11}, 16)), doctest::Contains("is not the joined [4, 12]"),
                       Error);
  const Tensor keep = Tensor::from_vector<uint8_t>({1, 0, 0, 1});
  // A stop-gradient is not a derivative, so no finite differences: kept rows get exactly dy, cut rows 0.
  ag::Var z = rand_var({4, 6}, 13), z2 = rand_var({4, 6}, 13);
  ag::backward(probe(ag::keep_grad_rows(z, keep)));
  ag::backward(probe(z2));
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t j = 0; j < 6; ++j)
      CHECK(z.grad().f64()[r * 6 + j] == (keep.u8()[r] ? z2.grad().f64()[r * 6 + j] : 0.0));
  CHECK_THROWS_WITH_AS(ag::join_configs(x, rand_var({4, 5}, 1), 3), doctest::Contains("join_configs"), Error);
  CHECK_THROWS_WITH_AS(ag::reshape(x, 3, 3), doctest::Contains("cannot view"), Error);
  CHECK_THROWS_WITH_AS(ag::keep_grad_rows(x, Tensor::from_vector<uint8_t>({1})), doctest::Contains("keep"), Error);
}

TEST_CASE("autograd: spmm sum/mean/max, with per-edge and per-head weights") {
  for (uint32_t seed : {11u, 12u}) {
    const Graph g = small_graph(seed);
    ag::Var x = rand_var({9, 4}, seed), w1 = rand_var({20}, seed + 1, 0.1, 1), wh = rand_var({20, 2}, seed + 2, 0.1, 1);
    for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
      CAPTURE(reduce_name(op));
      check_grads({x}, [&] { return probe(ag::spmm(g, x, op)); });
      check_grads({x, w1}, [&] { return probe(ag::spmm(g, x, op, w1)); });
      check_grads({x, wh}, [&] { return probe(ag::spmm(g, x, op, wh)); });
    }
  }
  // A bipartite graph: 7 source rows aggregated into 4 destination rows (config sharing's row blocks);
  // source 6 has no edge, destination 3 none either.
  const std::vector<int64_t> src = {0, 2, 2, 5, 1, 0, 4}, dst = {0, 0, 1, 1, 2, 2, 2};
  const Graph bi = Graph::from_bipartite_edges(src.data(), dst.data(), 7, 7, 4);
  CHECK(bi.num_sources() == 7);
  ag::Var xb = rand_var({7, 3}, 31), wb = rand_var({7}, 32, 0.1, 1);
  for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
    CAPTURE(reduce_name(op));
    REQUIRE(ag::spmm(bi, xb, op).shape() == Shape{4, 3});
    check_grads({xb, wb}, [&] { return probe(ag::spmm(bi, xb, op, wb)); });
  }
  // with two heads of weights (sum and mean: every head in one call): 4 rows out of 7, in double and in
  // float (the CPU kernels) alike
  ag::Var xh = rand_var({7, 4}, 33), wh2 = rand_var({7, 2}, 34, 0.1, 1);
  const ag::Var xh32 = ag::Var::param(xh.value().astype(DType::F32));
  const ag::Var wh32 = ag::Var::param(wh2.value().astype(DType::F32));
  for (Reduce op : {Reduce::kSum, Reduce::kMean}) {
    CAPTURE(reduce_name(op));
    REQUIRE(ag::spmm(bi, xh, op, wh2).shape() == Shape{4, 4});
    check_grads({xh, wh2}, [&] { return probe(ag::spmm(bi, xh, op, wh2)); });
    const ag::Var y32 = ag::spmm(bi, xh32, op, wh32);
    REQUIRE(y32.shape() == Shape{4, 4});
    ag::backward(ag::sum(y32));
    const ag::Var y64 = ag::spmm(bi, xh, op, wh2);
    xh.zero_grad(), wh2.zero_grad();
    ag::backward(ag::sum(y64));
    auto near = [](const Tensor& a, const Tensor& b) {
      const auto u = a.astype(DType::F64).to_vector<double>(), v = b.to_vector<double>();
      bool ok = u.size() == v.size();
      for (size_t i = 0; ok && i < u.size(); ++i) ok = std::abs(u[i] - v[i]) <= 1e-5 * (1 + std::abs(v[i]));
      return ok;
    };
    CHECK(near(y32.value(), y64.value()));
    CHECK(near(xh32.grad(), xh.grad()));
    CHECK(near(wh32.grad(), wh2.grad()));
    xh32.zero_grad(), wh32.zero_grad();
  }
  CHECK_THROWS_WITH_AS(ag::spmm(bi, rand_var({4, 3}, 1), Reduce::kSum), doctest::Contains("7 source nodes"), Error);
  CHECK_THROWS_WITH_AS(ag::segment_softmax(bi, rand_var({7, 1}, 1)), doctest::Contains("one node set"), Error);
  const Graph g = small_graph(3);
  CHECK_THROWS_WITH_AS(ag::spmm(g, rand_var({8, 4}, 1), Reduce::kSum), doctest::Contains("for a graph of 9 nodes"),
                       Error);
  CHECK_THROWS_WITH_AS(ag::spmm(g, rand_var({9, 5}, 1), Reduce::kSum, rand_var({20, 2}, 2)),
                       doctest::Contains("do not split into 2 heads"), Error);
}

TEST_CASE("autograd: spmm's backward adds to the gradient x holds, in one pass, with accumulate's bits") {
  // 600 columns: past the CPU kernel's blocks of 512, so a row's sum is added block by block; with two
  // heads (per-head edge weights) each head's 300 columns are added into its own column block
  const Graph g = small_graph(13, 9, 30);
  const int64_t F = 600;
  auto values = [](const Tensor& t) { return t.astype(DType::F64).to_vector<double>(); };
  for (const auto& [dt, heads, op] : std::vector<std::tuple<DType, int64_t, Reduce>>{{DType::F32, 1, Reduce::kSum},
                                                                                     {DType::F32, 1, Reduce::kMean},
                                                                                     {DType::F32, 1, Reduce::kMax},
                                                                                     {DType::F64, 1, Reduce::kSum},
                                                                                     {DType::F64, 1, Reduce::kMean},
                                                                                     {DType::F64, 1, Reduce::kMax},
                                                                                     {DType::F32, 2, Reduce::kMean},
                                                                                     {DType::F32, 2, Reduce::kMax}}) {
    CAPTURE(dtype_name(dt));
    CAPTURE(heads);
    CAPTURE(reduce_name(op));
    const ag::Var x = ag::Var::param(rand_var({9, F}, 5).value().astype(dt));
    const ag::Var r(rand_var({9, F}, 6, -1, 1, false).value().astype(dt));
    const ag::Var w = heads > 1 ? ag::Var(rand_var({30, heads}, 8, 0.1, 1, false).value().astype(dt)) : ag::Var();
    const Tensor start = rand_var({9, F}, 7).value().astype(dt);
    auto step = [&] { ag::backward(ag::sum(ag::mul(ag::spmm(g, x, op, w), r))); };
    auto allocations = [&] {  // tensors a step makes
      const int64_t before = host_memory_stats().total_allocations;
      step();
      return host_memory_stats().total_allocations - before;
    };
    const int64_t made = allocations();  // no gradient yet: the kernel's own tensor
    const Tensor fresh = x.grad();
    std::vector<double> want(size_t(9 * F));
    for (int64_t i = 0; i < 9 * F; ++i)  // start + the sum, rounded in dt as accumulate adds
      want[size_t(i)] = dt == DType::F32 ? double(start.f32()[i] + fresh.f32()[i]) : start.f64()[i] + fresh.f64()[i];
    // held alone: added in place, its buffer kept
    x.set_grad(start.clone());
    const void* buf = x.grad().data();
    CHECK(allocations() == made - 1);  // no tensor for spmm's part
    CHECK(x.grad().data() == buf);
    CHECK(values(x.grad()) == want);
    // held by the caller too: never written, the sum written straight into a new tensor
    const Tensor kept = start.clone();
    x.set_grad(kept);
    CHECK(allocations() == made);
    CHECK(x.grad().data() != kept.data());
    CHECK(values(x.grad()) == want);
    CHECK(values(kept) == values(start));
    // GIN's x + spmm(x): add hands x and spmm's output one dy, so x's gradient shares spmm's own dy
    if (heads == 1) {
      x.zero_grad();
      ag::backward(ag::sum(ag::mul(ag::add(x, ag::spmm(g, x, op)), r)));
      const Tensor rv = r.value();
      for (int64_t i = 0; i < 9 * F; ++i)  // r + the sum, as accumulate adds
        want[size_t(i)] = dt == DType::F32 ? double(rv.f32()[i] + fresh.f32()[i]) : rv.f64()[i] + fresh.f64()[i];
      CHECK(values(x.grad()) == want);
    }
  }
}

TEST_CASE("autograd: spmm_plus is add(plus, spmm), bit for bit, forward and backward") {
  const Graph g = small_graph(17, 9, 30);
  for (DType dt : {DType::F32, DType::F64})
    for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(reduce_name(op));
      const ag::Var x = ag::Var::param(rand_var({9, 600}, 1).value().astype(dt));
      const ag::Var p = ag::Var::param(rand_var({9, 600}, 2).value().astype(dt));
      const ag::Var r(rand_var({9, 600}, 3, -1, 1, false).value().astype(dt));
      // plus another Var, and plus x itself (GIN's x + the sum)
      for (const bool self : {false, true}) {
        CAPTURE(self);
        const ag::Var& q = self ? x : p;
        auto run = [&](auto f) {
          x.zero_grad(), p.zero_grad();
          const ag::Var y = f();
          ag::backward(ag::sum(ag::mul(y, r)));
          return std::vector<Tensor>{y.value(), x.grad(), self ? Tensor() : p.grad()};
        };
        const auto want = run([&] { return ag::add(q, ag::spmm(g, x, op)); });
        const auto got = run([&] { return ag::spmm_plus(g, x, op, q); });
        for (size_t i = 0; i < want.size(); ++i)
          if (want[i].defined())
            CHECK(want[i].astype(DType::F64).to_vector<double>() == got[i].astype(DType::F64).to_vector<double>());
      }
    }
  // x holding a gradient of its own already (the SpMM's part added in place), and x wanting none
  {
    const ag::Var x = ag::Var::param(rand_var({9, 600}, 1).value().astype(DType::F32));
    const ag::Var p = ag::Var::param(rand_var({9, 600}, 2).value().astype(DType::F32));
    const ag::Var r(rand_var({9, 600}, 3, -1, 1, false).value().astype(DType::F32));
    const Tensor start = rand_var({9, 600}, 7).value().astype(DType::F32);
    auto grads = [&](auto f) {
      x.set_grad(start.clone()), p.zero_grad();
      ag::backward(ag::sum(ag::mul(f(), r)));
      return std::pair{x.grad().to_vector<float>(), p.grad().to_vector<float>()};
    };
    CHECK(grads([&] { return ag::spmm_plus(g, x, Reduce::kMean, p); }) ==
          grads([&] { return ag::add(p, ag::spmm(g, x, Reduce::kMean)); }));
    const ag::Var c(x.value());  // a constant x, plus a parameter
    p.zero_grad();
    ag::backward(ag::sum(ag::mul(ag::spmm_plus(g, c, Reduce::kSum, p), r)));
    CHECK(p.grad().to_vector<float>() == r.value().to_vector<float>());
  }
  ag::Var x = rand_var({9, 4}, 4), p = rand_var({9, 4}, 5);
  check_grads({x, p}, [&] { return probe(ag::spmm_plus(g, x, Reduce::kMean, p)); });
  // a bipartite graph: 7 source rows into 4 destination rows, plus [4, F]; destination 3 has no edge
  const std::vector<int64_t> src = {0, 2, 2, 5, 1, 0, 4}, dst = {0, 0, 1, 1, 2, 2, 2};
  const Graph bi = Graph::from_bipartite_edges(src.data(), dst.data(), 7, 7, 4);
  ag::Var xb = rand_var({7, 3}, 8), pb = rand_var({4, 3}, 9);
  for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
    CAPTURE(reduce_name(op));
    check_grads({xb, pb}, [&] { return probe(ag::spmm_plus(bi, xb, op, pb)); });
  }
  CHECK_THROWS_WITH_AS(ag::spmm_plus(g, x, Reduce::kSum, rand_var({9, 3}, 6)), doctest::Contains("spmm_plus: plus"),
                       Error);
  CHECK_THROWS_WITH_AS(ag::spmm_plus(bi, xb, Reduce::kSum, rand_var({7, 3}, 6)), doctest::Contains("spmm_plus: plus"),
                       Error);
  CHECK_THROWS_WITH_AS(ag::spmm_plus(g, x, Reduce::kSum, ag::Var()), doctest::Contains("spmm_plus: plus is undefined"),
                       Error);
  CHECK_THROWS_WITH_AS(ag::spmm_plus(g, ag::Var(), Reduce::kSum, p), doctest::Contains("spmm_plus: x is undefined"),
                       Error);
  CHECK_THROWS_WITH_AS(ag::spmm_plus(g, rand_var({9}, 6), Reduce::kSum, p), doctest::Contains("spmm_plus: x must"),
                       Error);
  CHECK_THROWS_WITH_AS(ag::spmm_plus(g, rand_var({8, 4}, 6), Reduce::kSum, p), doctest::Contains("spmm_plus: x has"),
                       Error);
}

TEST_CASE("autograd: pool's backward adds to the gradient x holds, with accumulate's bits") {
  // SAGE-6th's readout, mean + max of one x: max's gradient is x's first, mean's is added to it; and on a
  // gradient the caller keeps, which is never written
  const Tensor gp = Tensor::from_vector<int64_t>({0, 5, 5, 12});
  const ag::Var x = ag::Var::param(rand_var({12, 300}, 1).value().astype(DType::F32));
  const ag::Var r(rand_var({3, 300}, 2, -1, 1, false).value().astype(DType::F32));
  auto grad_of = [&](auto f) {
    x.zero_grad();
    ag::backward(ag::sum(ag::mul(f(), r)));
    return x.grad().to_vector<float>();
  };
  const auto dmean = grad_of([&] { return ag::pool(x, gp, Reduce::kMean); });
  const auto dmax = grad_of([&] { return ag::pool(x, gp, Reduce::kMax); });
  std::vector<float> want(dmax.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = dmax[i] + dmean[i];
  auto both = [&] { return ag::add(ag::pool(x, gp, Reduce::kMean), ag::pool(x, gp, Reduce::kMax)); };
  CHECK(grad_of(both) == want);  // (no NaN: == is the bits up to signed zeros)
  const Tensor kept = Tensor::full(Shape{12, 300}, 0.5, DType::F32);
  x.set_grad(kept);
  ag::backward(ag::sum(ag::mul(ag::pool(x, gp, Reduce::kMean), r)));
  CHECK(x.grad().data() != kept.data());
  const auto got = x.grad().to_vector<float>();
  for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5f + dmean[i];
  CHECK(got == want);
  CHECK(total(kept) == doctest::Approx(0.5 * 12 * 300));
}

TEST_CASE("autograd: GAT scores and segment softmax, composed as a GAT aggregation") {
  const Graph g = small_graph(21, 10, 30);
  ag::Var as = rand_var({10, 3}, 1), ad = rand_var({10, 3}, 2), s = rand_var({30, 3}, 3), x = rand_var({10, 6}, 4);
  check_grads({as, ad}, [&] { return probe(ag::gat_scores(g, as, ad, 0.2)); });
  check_grads({s}, [&] { return probe(ag::segment_softmax(g, s)); });
  check_grads({as, ad, x}, [&] {
    return probe(ag::spmm(g, x, Reduce::kSum, ag::segment_softmax(g, ag::gat_scores(g, as, ad, 0.2))));
  });
}

TEST_CASE("autograd: row-wise ops, layer norm, instance norm, pooling") {
  ag::Var x = rand_var({7, 5}, 1), gm = rand_var({5}, 2, 0.5, 1.5), bt = rand_var({5}, 3);
  check_grads({x}, [&] { return probe(ag::softmax(x)); });
  check_grads({x}, [&] { return probe(ag::log_softmax(x)); });
  check_grads({x}, [&] { return probe(ag::l2_normalize(x)); });
  check_grads({x, gm, bt}, [&] { return probe(ag::layer_norm(x, gm, bt)); });
  check_grads({x}, [&] { return probe(ag::layer_norm(x, ag::Var(), ag::Var())); });
  const Tensor gp = Tensor::from_vector<int64_t>({0, 3, 3, 7});  // the middle graph is empty
  check_grads({x, gm, bt}, [&] { return probe(ag::instance_norm(x, gm, bt, gp)); });
  for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
    CAPTURE(reduce_name(op));
    check_grads({x}, [&] { return probe(ag::pool(x, gp, op)); });
  }
  check_grads({x}, [&] { return probe(ag::pool_logsumexp(x, gp)); });
  check_grads({x}, [&] { return probe(ag::add(ag::pool(x, gp, Reduce::kMean), ag::pool(x, gp, Reduce::kMax))); });
  CHECK_THROWS_WITH_AS(ag::pool_logsumexp(x, Tensor::from_vector<int64_t>({0, 8})), doctest::Contains("graph_ptr"),
                       Error);
  CHECK_THROWS_WITH_AS(ag::pool(x, Tensor::from_vector<int64_t>({0, 8}), Reduce::kSum), doctest::Contains("graph_ptr"),
                       Error);
}

TEST_CASE("autograd: fused SAGE equals its composition, values and gradients, in double and in float") {
  const Graph g = small_graph(31, 12, 30);
  for (Act act : {Act::kNone, Act::kRelu, Act::kLeakyRelu}) {
    CAPTURE(act_name(act));
    ag::Var x = rand_var({12, 4}, 1), W = rand_var({8, 3}, 2), b = rand_var({3}, 3);
    check_grads({x, W, b}, [&] { return probe(ag::sage_fused(g, x, W, b, act, 0.1)); });
    auto composed = [&](const ag::Var& x, const ag::Var& W, const ag::Var& b) {
      ag::Var h = ag::concat_cols({ag::spmm(g, x, Reduce::kMean), x});
      return ag::activation(ag::add_bias(ag::matmul(h, W), b), act, 0.1);
    };
    for (DType dt : {DType::F64, DType::F32}) {
      ag::Var xs(x.value().astype(dt), true), Ws(W.value().astype(dt), true), bs(b.value().astype(dt), true);
      ag::Var xc(x.value().astype(dt), true), Wc(W.value().astype(dt), true), bc(b.value().astype(dt), true);
      // One backward per forward: backward consumes the whole tape.
      ag::Var yf = ag::sage_fused(g, xs, Ws, bs, act, 0.1);
      ag::backward(ag::sum(ag::mul(yf, ag::Var(yf.value()))));
      ag::Var yc = composed(xc, Wc, bc);
      ag::backward(ag::sum(ag::mul(yc, ag::Var(yc.value()))));
      const double tol = dt == DType::F64 ? 1e-12 : 1e-5;
      auto close = [tol](const Tensor& a, const Tensor& b) {
        GNN_CHECK_CLOSE(a.astype(DType::F64).to_vector<double>(), b.astype(DType::F64).to_vector<double>(), tol, tol);
      };
      close(yf.value(), yc.value());
      close(xs.grad(), xc.grad());
      close(Ws.grad(), Wc.grad());
      close(bs.grad(), bc.grad());
    }
  }
}

TEST_CASE("autograd: self-attention over graphs, full and linear") {
  const Tensor gp = Tensor::from_vector<int64_t>({0, 4, 4, 9});
  ag::Var q = rand_var({9, 6}, 1), k = rand_var({9, 6}, 2), v = rand_var({9, 6}, 3);
  for (bool linear : {false, true}) {
    CAPTURE(linear);
    check_grads({q, k, v}, [&] { return probe(ag::graph_attention(q, k, v, gp, 2, linear)); });
  }
  // Full attention by hand for one node: graph 0 (rows 0..3), head 0 (columns 0..2).
  ag::Var y = ag::graph_attention(q, k, v, gp, 2, false);
  const auto Q = q.value().to_vector<double>(), K = k.value().to_vector<double>(), V = v.value().to_vector<double>();
  double w[4], z = 0;
  for (int j = 0; j < 4; ++j) {
    double s = 0;
    for (int d = 0; d < 3; ++d) s += Q[size_t(1 * 6 + d)] * K[size_t(j * 6 + d)];
    z += (w[j] = std::exp(s / std::sqrt(3.0)));
  }
  double want = 0;
  for (int j = 0; j < 4; ++j) want += w[j] / z * V[size_t(j * 6 + 2)];
  CHECK(y.value().to_vector<double>()[1 * 6 + 2] == doctest::Approx(want).epsilon(1e-12));
  // With a bias: each graph's [n, n] block added to every head's scores, so exp(s_ij) becomes
  // w_ij exp(s_ij) for bias log w_ij (node 1 of graph 0 weighs node 3 by 0.1, graph 2's 5 x 5 block 0).
  std::vector<double> bias(16 + 0 + 25, 0.0);
  bias[1 * 4 + 3] = std::log(0.1);
  bias[16 + 7] = -0.7;
  const Tensor bt = Tensor::from_vector(bias);
  check_grads({q, k, v}, [&] { return probe(ag::graph_attention(q, k, v, gp, 2, false, bt)); });
  ag::Var yb = ag::graph_attention(q, k, v, gp, 2, false, bt);
  w[3] *= 0.1, z = w[0] + w[1] + w[2] + w[3], want = 0;
  for (int j = 0; j < 4; ++j) want += w[j] / z * V[size_t(j * 6 + 2)];
  CHECK(yb.value().to_vector<double>()[1 * 6 + 2] == doctest::Approx(want).epsilon(1e-12));
  CHECK(yb.value().to_vector<double>()[0] == doctest::Approx(y.value().to_vector<double>()[0]).epsilon(1e-12));
  CHECK_THROWS_WITH_AS(ag::graph_attention(q, k, v, gp, 2, false, Tensor::from_vector(std::vector<double>(40))),
                       doctest::Contains("bias must be f64 [41]"), Error);
  CHECK_THROWS_WITH_AS(ag::graph_attention(q, k, v, gp, 2, true, bt), doctest::Contains("not the linear one"), Error);
  ag::clear_tape();
}

TEST_CASE("autograd: float ops run the fast kernels and agree with the double path") {
  const Graph g = small_graph(41, 50, 200);
  ag::Var x = rand_var({50, 16}, 1), W = rand_var({16, 8}, 2);
  auto run = [&](DType dt) {
    ag::Var xs(x.value().astype(dt), true), Ws(W.value().astype(dt), true);
    ag::Var y = ag::log_softmax(ag::spmm(g, ag::relu(ag::matmul(xs, Ws)), Reduce::kMean));
    ag::backward(ag::sum(ag::mul(y, y)));
    return std::pair{y.value().astype(DType::F64).to_vector<double>(),
                     Ws.grad().astype(DType::F64).to_vector<double>()};
  };
  const auto [y32, g32] = run(DType::F32);
  const auto [y64, g64] = run(DType::F64);
  GNN_CHECK_CLOSE(y32, y64, 1e-4, 1e-4);
  GNN_CHECK_CLOSE(g32, g64, 1e-3, 1e-3);
}

}  // namespace
}  // namespace gnn
