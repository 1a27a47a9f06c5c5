// Graph instance norm (kernels/instance_norm.h): the CPU kernels against the double reference (empty
// graphs included) and bit for bit against the float one, its backward against finite differences, the
// CUDA kernels against the reference, and the autograd op on the GPU against the host; with a residual
// and an activation, by finite differences and against the composed ops.
#include <array>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "autograd/device_check.h"
#include "autograd/gradcheck.h"
#include "device_buffers.h"
#include "graph_cases.h"
#include "kernels/instance_norm.h"
#include "runtime/cuda.h"
#include "runtime/parallel.h"
#include "runtime/rng.h"
#include "testing.h"

using namespace gnn;
using namespace gnn::testing;  // the helpers of testing.h, device_buffers.h and graph_cases.h

TEST_CASE("graph instance norm: reference, finite differences, empty graphs") {
  const std::vector<int64_t> gp = {0, 3, 3, 10, 11};  // graphs of 3, 0, 7 and 1 nodes
  const int64_t G = 4, N = 11, F = 5;
  const auto xs = random_values<float>(static_cast<size_t>(N * F), 1, -2.0f, 2.0f);
  const auto gm = random_values<float>(static_cast<size_t>(F), 2, 0.5f, 1.5f),
             bt = random_values<float>(static_cast<size_t>(F), 3);
  const auto dy = random_values<float>(static_cast<size_t>(N * F), 4);
  std::vector<double> yd(static_cast<size_t>(N * F)), md(static_cast<size_t>(G * F)), rd(static_cast<size_t>(G * F)),
      dxd(static_cast<size_t>(N * F)), dgd(static_cast<size_t>(F)), dbd(static_cast<size_t>(F));
  instance_norm_forward_ref<double>(yd.data(), md.data(), rd.data(), to_double(xs).data(), nullptr,
                                    to_double(gm).data(), to_double(bt).data(), gp.data(), G, F, 1e-5, Act::kNone);
  instance_norm_backward_ref<double>(dxd.data(), dgd.data(), dbd.data(), to_double(dy).data(), to_double(xs).data(),
                                     nullptr, md.data(), rd.data(), to_double(gm).data(), nullptr, gp.data(), G, F,
                                     Act::kNone);
  std::vector<float> y(static_cast<size_t>(N * F), NAN), m(static_cast<size_t>(G * F), NAN),
      r(static_cast<size_t>(G * F), NAN), dx(static_cast<size_t>(N * F), NAN), dg(static_cast<size_t>(F), NAN),
      db(static_cast<size_t>(F), NAN);
  instance_norm_forward_cpu(y.data(), m.data(), r.data(), xs.data(), nullptr, gm.data(), bt.data(), gp.data(), G, F,
                            1e-5f, Act::kNone);
  instance_norm_backward_cpu(dx.data(), dg.data(), db.data(), dy.data(), xs.data(), nullptr, m.data(), r.data(),
                             gm.data(), nullptr, gp.data(), G, F, Act::kNone);
  GNN_CHECK_CLOSE(y, yd);
  GNN_CHECK_CLOSE(dx, dxd, 1e-4, 1e-4);
  GNN_CHECK_CLOSE(dg, dgd);
  GNN_CHECK_CLOSE(db, dbd);
  CHECK(y[10 * F] == doctest::Approx(bt[0]));  // a one-node graph normalises to beta
  auto xd = to_double(xs), gd = to_double(gm), bd = to_double(bt);
  const auto gout = to_double(dy);
  auto loss = [&] {
    std::vector<double> yy(static_cast<size_t>(N * F)), mm(static_cast<size_t>(G * F)), rr(static_cast<size_t>(G * F));
    instance_norm_forward_ref<double>(yy.data(), mm.data(), rr.data(), xd.data(), nullptr, gd.data(), bd.data(),
                                      gp.data(), G, F, 1e-5, Act::kNone);
    return dot(yy, gout);
  };
  check_gradient(xd, dxd, loss);
  check_gradient(gd, dgd, loss);
  check_gradient(bd, dbd, loss);
}

TEST_CASE(
    "graph instance norm: the blocked CPU kernel is the float reference, bit for bit, over many channels, with a "
    "residual and GELU or not") {
  // The kernel's blocks of channels shrink as a graph's rows grow, and as threads need tasks
  // (kernels/instance_norm_cpu.cpp): with one thread, 150 channels over graphs of 40, 0 and 7 rows are one
  // block; 2,100 over 10 rows are 1024, 1024 and 52; 200 over one graph of 3,000 rows 128 and 72; with 16
  // threads the blocks narrow to 128 and 64; 64 over 9,000 rows are one block of 64, too large to keep
  // its sums x + res between passes (2 MiB), so the forward writes them into y and the backward sums
  // them again (and over 9,003 rows, whose last trip of the sums over rows is three rows, not four).
  // Every width, and both ways, give the reference's bits.
  const testing::ThreadsRestored saved;
  for (const int threads : {1, 2, 16}) {
    set_num_threads(threads);
    CAPTURE(threads);
    for (const auto& [gp, F] : {std::pair<std::vector<int64_t>, int64_t>{{0, 40, 40, 47}, 150},
                                {{0, 10}, 2100},
                                {{0, 3000}, 200},
                                {{0, 9000}, 64},
                                {{0, 9003}, 64}}) {
      const int64_t G = int64_t(gp.size()) - 1, N = gp.back();
      CAPTURE(F);
      const auto xs = random_values<float>(static_cast<size_t>(N * F), 5, -3.0f, 3.0f);
      const auto gm = random_values<float>(static_cast<size_t>(F), 6, 0.5f, 1.5f),
                 bt = random_values<float>(static_cast<size_t>(F), 7);
      const auto dy = random_values<float>(static_cast<size_t>(N * F), 8);
      const auto rv = random_values<float>(static_cast<size_t>(N * F), 9, -3.0f, 3.0f);
      // affine or not; with a residual (which both ways keep in a scratch block, or the forward sums into
      // y and the backward sums again when the block is too large to keep) or not; GELU after it or not
      for (int variant = 0; variant < 8; ++variant) {
        const bool affine = variant & 1, with_res = variant & 2, gelu = variant & 4;
        CAPTURE(affine);
        CAPTURE(with_res);
        CAPTURE(gelu);
        const float* res = with_res ? rv.data() : nullptr;
        const Act act = gelu ? Act::kGelu : Act::kNone;
        const float* g = affine ? gm.data() : nullptr;
        const float* b = affine ? bt.data() : nullptr;
        std::vector<float> yr(static_cast<size_t>(N * F)), mr(static_cast<size_t>(G * F)),
            rr(static_cast<size_t>(G * F)), dxr(static_cast<size_t>(N * F)), dgr(static_cast<size_t>(F)),
            dbr(static_cast<size_t>(F));
        instance_norm_forward_ref<float>(yr.data(), mr.data(), rr.data(), xs.data(), res, g, b, gp.data(), G, F, 1e-5f,
                                         act);
        instance_norm_backward_ref<float>(dxr.data(), dgr.data(), dbr.data(), dy.data(), xs.data(), res, mr.data(),
                                          rr.data(), g, b, gp.data(), G, F, act);
        std::vector<float> y(static_cast<size_t>(N * F), NAN), m(static_cast<size_t>(G * F), NAN),
            r(static_cast<size_t>(G * F), NAN), dx(static_cast<size_t>(N * F), NAN), dg(static_cast<size_t>(F), NAN),
            db(static_cast<size_t>(F), NAN);
        instance_norm_forward_cpu(y.data(), m.data(), r.data(), xs.data(), res, g, b, gp.data(), G, F, 1e-5f, act);
        instance_norm_backward_cpu(dx.data(), dg.data(), db.data(), dy.data(), xs.data(), res, m.data(), r.data(), g, b,
                                   gp.data(), G, F, act);
        CHECK(y == yr);
        CHECK(m == mr);
        CHECK(r == rr);
        CHECK(dx == dxr);
        // y may be x or res (the header's contract): the same bits written over either input
        for (const bool over_x : {true, false}) {
          if (!with_res && !over_x) continue;
          CAPTURE(over_x);
          std::vector<float> io = over_x ? xs : rv;
          instance_norm_forward_cpu(io.data(), m.data(), r.data(), over_x ? io.data() : xs.data(),
                                    over_x ? res : io.data(), g, b, gp.data(), G, F, 1e-5f, act);
          CHECK(io == yr);
        }
        // dgamma, dbeta: per-graph partials summed in graph order (the reference sums on across graphs)
        for (int64_t f = 0; f < F; ++f) {
          CHECK(dg[size_t(f)] == doctest::Approx(dgr[size_t(f)]).epsilon(1e-5));
          CHECK(db[size_t(f)] == doctest::Approx(dbr[size_t(f)]).epsilon(1e-5));
        }
      }
    }
  }
}

TEST_CASE("cuda graph instance norm matches the double reference (empty, single-node and 5000-node graphs)") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  const std::vector<int64_t> ptr = {0, 0, 1, 5001, 5038};
  const int64_t N = ptr.back(), G = int64_t(ptr.size()) - 1;
  const Tensor gptr = on_gpu(ptr);
  for (int64_t F : {1, 33, 130}) {
    for (bool affine : {false, true}) {
      CAPTURE(F);
      CAPTURE(affine);
      const auto x = random_values<float>(size_t(N * F), 1, -2.0f, 3.0f);
      const auto dy = random_values<float>(size_t(N * F), 2);
      const auto gamma = random_values<float>(size_t(F), 3, 0.5f, 1.5f), beta = random_values<float>(size_t(F), 4);
      const std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end()), gd(gamma.begin(), gamma.end()),
          bd(beta.begin(), beta.end());
      std::vector<double> yd(size_t(N * F)), md(size_t(G * F)), rd(size_t(G * F)), dxd(size_t(N * F)),
          dgd(static_cast<size_t>(F)), dbd(static_cast<size_t>(F));
      instance_norm_forward_ref<double>(yd.data(), md.data(), rd.data(), xd.data(), nullptr,
                                        affine ? gd.data() : nullptr, affine ? bd.data() : nullptr, ptr.data(), G, F,
                                        1e-5, Act::kNone);
      instance_norm_backward_ref<double>(dxd.data(), dgd.data(), dbd.data(), dyd.data(), xd.data(), nullptr, md.data(),
                                         rd.data(), affine ? gd.data() : nullptr, nullptr, ptr.data(), G, F,
                                         Act::kNone);
      const Tensor gx = on_gpu(x), gdy = on_gpu(dy), gg = on_gpu(gamma), gb = on_gpu(beta);
      Tensor y = nan_gpu(N * F), mean = nan_gpu(G * F), rstd = nan_gpu(G * F), dx = nan_gpu(N * F), dg = nan_gpu(F),
             db = nan_gpu(F), ws = nan_gpu(2 * G * F);
      const float* gp = affine ? gg.f32() : nullptr;
      instance_norm_forward_cuda(y.f32(), mean.f32(), rstd.f32(), gx.f32(), nullptr, gp, affine ? gb.f32() : nullptr,
                                 gptr.i64(), G, F, 1e-5f, Act::kNone, s);
      instance_norm_backward_cuda(dx.f32(), dg.f32(), db.f32(), gdy.f32(), gx.f32(), nullptr, mean.f32(), rstd.f32(),
                                  gp, nullptr, gptr.i64(), G, F, Act::kNone, ws.f32(), s);
      GNN_CHECK_CLOSE(y.to_vector<float>(), yd, 1e-4, 1e-4);
      GNN_CHECK_CLOSE(mean.to_vector<float>(), md);
      GNN_CHECK_CLOSE(rstd.to_vector<float>(), rd, 1e-3, 1e-4);  // the empty graph's 1/sqrt(eps) = 316
      GNN_CHECK_CLOSE(dx.to_vector<float>(), dxd, 1e-3, 1e-3);
      GNN_CHECK_CLOSE(dg.to_vector<float>(), dgd, 1e-3, 1e-4);
      GNN_CHECK_CLOSE(db.to_vector<float>(), dbd, 1e-3, 1e-4);
    }
  }
#endif
}

TEST_CASE("instance norm keeps a large common offset and long sums: summed in double, on the CPU and the GPU") {
  // Two graphs of 3000 and 1000 rows of 1e6 + U(-2, 2) (and a residual of U(-1, 1)), 40 channels: as the
  // layer norm's test (tests/kernels/test_layer_norm.cpp), y within the mean's rounding of the double
  // reference over the same floats; summed in float the mean was off by several units.
  const std::vector<int64_t> ptr = {0, 3000, 4000};
  const int64_t N = ptr.back(), G = 2, F = 40;
  std::vector<float> x = random_values<float>(size_t(N * F), 12, -2.0f, 2.0f);
  for (float& v : x) v = float(1e6 + double(v));
  const std::vector<float> res = random_values<float>(size_t(N * F), 13);
  for (const bool with_res : {false, true}) {
    CAPTURE(with_res);
    const float* rp = with_res ? res.data() : nullptr;
    std::vector<double> yd(static_cast<size_t>(N * F)), md(static_cast<size_t>(G * F)), rd(static_cast<size_t>(G * F)),
        sd = to_double(x);
    if (with_res)  // (the sum s = x + res as the kernel forms it, in float)
      for (size_t i = 0; i < sd.size(); ++i) sd[i] = double(x[i] + res[i]);
    instance_norm_forward_ref<double>(yd.data(), md.data(), rd.data(), sd.data(), nullptr, nullptr, nullptr, ptr.data(),
                                      G, F, 1e-5, Act::kNone);
    const auto check = [&](const std::vector<float>& y, const std::vector<float>& m, const std::vector<float>& r) {
      double worst_m = 0, worst_r = 0, worst_y = 0;
      for (size_t i = 0; i < m.size(); ++i)
        worst_m = std::max(worst_m, std::fabs(m[i] - md[i])), worst_r = std::max(worst_r, std::fabs(r[i] / rd[i] - 1));
      for (size_t i = 0; i < y.size(); ++i) worst_y = std::max(worst_y, std::fabs(y[i] - yd[i]));
      CHECK(worst_m <= 0.04);
      CHECK(worst_r <= 1e-3);
      CHECK(worst_y <= 0.05);
    };
    std::vector<float> y(static_cast<size_t>(N * F)), m(static_cast<size_t>(G * F)), r(static_cast<size_t>(G * F));
    instance_norm_forward_cpu(y.data(), m.data(), r.data(), x.data(), rp, nullptr, nullptr, ptr.data(), G, F, 1e-5f,
                              Act::kNone);
    check(y, m, r);

#ifdef GNN_WITH_CUDA
    if (cuda_available()) {
      Tensor gy = nan_gpu(N * F), gm = nan_gpu(G * F), gr = nan_gpu(G * F);
      const Tensor gx = on_gpu(x), gres = on_gpu(res), gptr = on_gpu(ptr);
      instance_norm_forward_cuda(gy.f32(), gm.f32(), gr.f32(), gx.f32(), with_res ? gres.f32() : nullptr, nullptr,
                                 nullptr, gptr.i64(), G, F, 1e-5f, Act::kNone, cuda_stream(0));
      check(gy.to_vector<float>(), gm.to_vector<float>(), gr.to_vector<float>());
    }
#endif
  }
  // The backward's sums: dy = 1e4 everywhere has dx = 0 exactly (summed in float, a graph of 1e5 rows gave
  // 7.4).
  const int64_t R = 100000;
  const std::vector<int64_t> one = {0, R};
  const std::vector<float> xr = random_values<float>(static_cast<size_t>(R), 23, -2.0f, 2.0f),
                           dy(static_cast<size_t>(R), 1e4f);
  std::vector<float> yr(static_cast<size_t>(R)), dx(static_cast<size_t>(R));
  float mr = 0, rr = 0;
  instance_norm_forward_cpu(yr.data(), &mr, &rr, xr.data(), nullptr, nullptr, nullptr, one.data(), 1, 1, 1e-5f,
                            Act::kNone);
  instance_norm_backward_cpu(dx.data(), nullptr, nullptr, dy.data(), xr.data(), nullptr, &mr, &rr, nullptr, nullptr,
                             one.data(), 1, 1, Act::kNone);
  double worst_dx = 0;
  for (float v : dx) worst_dx = std::max(worst_dx, std::fabs(double(v)));
  CHECK(worst_dx <= 0.05);
}

TEST_CASE("instance norm of values past 1.8e19: the squares in double, as the double reference, CPU and GPU") {
  // Two graphs of 5 and 300 rows, 40 channels: channel 3 times 1e20 in graph 0, one 1e30 in channel 33 of
  // graph 1, +-2e19 in its channel 7 (squares past the float range, their mean within it), the rest
  // ordinary. A square past the float range made the variance inf and rstd 0: y = 0 and dx = 0 in those
  // channels. On the GPU the block sums its channels again only where one of them met one.
  const std::vector<int64_t> ptr = {0, 5, 305};
  const int64_t N = ptr.back(), G = 2, F = 40;
  std::vector<float> x = random_values<float>(size_t(N * F), 41, -2.0f, 2.0f);
  for (int64_t i = 0; i < 5; ++i) x[size_t(i * F + 3)] *= 1e20f;
  x[size_t(100 * F + 33)] = 1e30f;
  x[size_t(15 * F + 7)] = 2e19f, x[size_t(200 * F + 7)] = -2e19f;
  const std::vector<float> dy = random_values<float>(size_t(N * F), 42);
  std::vector<double> yd(static_cast<size_t>(N * F)), md(static_cast<size_t>(G * F)), rd(static_cast<size_t>(G * F)),
      dxd(static_cast<size_t>(N * F));
  const std::vector<double> xd = to_double(x), dyd = to_double(dy);
  instance_norm_forward_ref<double>(yd.data(), md.data(), rd.data(), xd.data(), nullptr, nullptr, nullptr, ptr.data(),
                                    G, F, 1e-5, Act::kNone);
  instance_norm_backward_ref<double>(dxd.data(), nullptr, nullptr, dyd.data(), xd.data(), nullptr, md.data(), rd.data(),
                                     nullptr, nullptr, ptr.data(), G, F, Act::kNone);
  const auto check = [&](const std::vector<float>& y, const std::vector<float>& r) {
    for (size_t k = 0; k < r.size(); ++k) CHECK(r[k] / rd[k] == doctest::Approx(1).epsilon(1e-6));
    CHECK(compare(y, yd, 1e-5, 1e-4).index == -1);
  };
  std::vector<float> y(static_cast<size_t>(N * F)), m(static_cast<size_t>(G * F)), r(static_cast<size_t>(G * F)),
      dx(static_cast<size_t>(N * F));
  instance_norm_forward_cpu(y.data(), m.data(), r.data(), x.data(), nullptr, nullptr, nullptr, ptr.data(), G, F, 1e-5f,
                            Act::kNone);
  check(y, r);
  instance_norm_backward_cpu(dx.data(), nullptr, nullptr, dy.data(), x.data(), nullptr, m.data(), r.data(), nullptr,
                             nullptr, ptr.data(), G, F, Act::kNone);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t f = 0; f < F; ++f) {  // (channel by channel: channel 3's dx in graph 0 is about 1e-20)
      double worst = 0, top = 0;
      for (int64_t i = ptr[size_t(g)]; i < ptr[size_t(g) + 1]; ++i) {
        const size_t k = size_t(i * F + f);
        worst = std::max(worst, std::fabs(dx[k] - dxd[k])), top = std::max(top, std::fabs(dxd[k]));
      }
      CAPTURE(g);
      CAPTURE(f);
      CHECK(top > 0);
      CHECK(worst <= 1e-4 * top);
    }
#ifdef GNN_WITH_CUDA
  if (cuda_available()) {
    Tensor gy = nan_gpu(N * F), gm = nan_gpu(G * F), gr = nan_gpu(G * F);
    const Tensor gx = on_gpu(x), gptr = on_gpu(ptr);
    instance_norm_forward_cuda(gy.f32(), gm.f32(), gr.f32(), gx.f32(), nullptr, nullptr, nullptr, gptr.i64(), G, F,
                               1e-5f, Act::kNone, cuda_stream(0));
    check(gy.to_vector<float>(), gr.to_vector<float>());
  }
#endif
}

TEST_CASE("cuda ops: instance norm per graph, with an empty graph, matches the host") {
  GNN_SKIP_UNLESS_CUDA();
  const Tensor gp = Tensor::from_vector(std::vector<int64_t>{0, 9, 9, 40, 41, 70});  // graph 1 empty
  const Tensor x = rand({70, 40}, 11), gamma = rand({40}, 12), beta = rand({40}, 13);
  check_op("instance_norm", {x, gamma, beta},
           [gp](auto& v, auto&) { return ag::instance_norm(v[0], v[1], v[2], gp, 1e-5); });
}

TEST_CASE("instance norm with a residual and an activation: finite differences, and the composed ops' bits") {
  const Tensor gp = Tensor::from_vector(std::vector<int64_t>{0, 6, 6, 13});  // graph 1 empty
  // f64: every input's gradient by finite differences, affine or not, for the activations the recipes use
  const ag::Var x = rand_var({13, 5}, 21), res = rand_var({13, 5}, 22), gm = rand_var({5}, 23, 0.5, 1.5),
                bt = rand_var({5}, 24);
  for (Act act : {Act::kNone, Act::kGelu, Act::kRelu, Act::kElu}) {
    CAPTURE(act_name(act));
    check_grads({x, res, gm, bt}, [&] { return probe(ag::instance_norm(x, gm, bt, gp, 1e-5, res, act)); });
    check_grads({x}, [&] { return probe(ag::instance_norm(x, ag::Var(), ag::Var(), gp, 1e-5, ag::Var(), act)); });
  }
  // float, no affine parameters (as the recipes call it), blocks of channels over many configs: the
  // forward's bits and every gradient's bits of gelu(instance_norm(add(x, res)))
  const Tensor gp2 = Tensor::from_vector(std::vector<int64_t>{0, 300, 301, 700});
  const Tensor xs = rand({700, 1100}, 25), rs = rand({700, 1100}, 26), dy = rand({700, 1100}, 27);
  auto run = [&](bool fused) {
    const ag::Var a = ag::Var::param(xs.clone()), b = ag::Var::param(rs.clone());
    const ag::Var y = fused ? ag::instance_norm(a, ag::Var(), ag::Var(), gp2, 1e-5, b, Act::kGelu)
                            : ag::gelu(ag::instance_norm(ag::add(a, b), ag::Var(), ag::Var(), gp2));
    const std::vector<float> out = y.value().to_vector<float>();
    ag::backward(y, dy);
    return std::array<std::vector<float>, 3>{out, a.grad().to_vector<float>(), b.grad().to_vector<float>()};
  };
  const auto f = run(true), c = run(false);
  CHECK(f[0] == c[0]);
  CHECK(f[1] == c[1]);
  CHECK(f[2] == c[2]);
  // a residual of another shape is refused, naming it
  CHECK_THROWS_WITH_AS(ag::instance_norm(x, ag::Var(), ag::Var(), gp, 1e-5, rand_var({13, 4}, 1)),
                       doctest::Contains("residual f64[13, 4] on cpu is not x's [13, 5]"), Error);
  CHECK_THROWS_WITH_AS(ag::instance_norm(x, ag::Var(), ag::Var(), gp, 1e-5, res, Act::kLeakyRelu),
                       doctest::Contains("takes no slope"), Error);
}

// Where x already holds a gradient when the norm's backward runs (another op read x after the norm), the
// norm's last pass writes held + its dx: the bits of the two gradients added after, whether the held one
// is x's alone (added in place) or shared with another input's (a new sum), for any thread count.
TEST_CASE("instance norm: its dx added to the gradient x already holds, the bits of adding it after") {
  const Tensor gp = Tensor::from_vector(std::vector<int64_t>{0, 300, 301, 700});
  const Tensor xs = rand({700, 1100}, 41), cs = rand({700, 1100}, 42), dy = rand({700, 1100}, 43),
               dz = rand({700, 1100}, 44);
  for (bool shared : {false, true})
    for (int threads : {1, 3}) {
      CAPTURE(shared);
      CAPTURE(threads);
      const ThreadsRestored saved;
      set_num_threads(threads);
      // norm and/or other: x's gradient from the norm's output (dy), another op's (dz), or both, the other
      // op recorded after the norm so that its backward runs first
      auto grad = [&](bool norm, bool other) {
        const ag::Var a = ag::Var::param(xs.clone()), c = ag::Var::param(cs.clone());
        const ag::Var y = ag::instance_norm(a, ag::Var(), ag::Var(), gp);
        const ag::Var z = shared ? ag::add(a, c) : ag::mul(a, c);  // add's backward hands dz itself to a and c
        if (norm && other) {
          ag::backward(ag::concat_cols({y, z}), ag::concat_cols({ag::Var(dy), ag::Var(dz)}).value());
        } else {
          ag::backward(norm ? y : z, norm ? dy : dz);
        }
        return a.grad().to_vector<float>();
      };
      const std::vector<float> both = grad(true, true), n = grad(true, false), o = grad(false, true);
      std::vector<float> sum(n.size());
      for (size_t i = 0; i < n.size(); ++i) sum[i] = o[i] + n[i];
      CHECK(both == sum);
    }
  // f64, by finite differences: x read by the norm and then by a product with itself
  const Tensor gp1 = Tensor::from_vector(std::vector<int64_t>{0, 6, 6, 13});
  const ag::Var x = rand_var({13, 5}, 45);
  check_grads({x}, [&] {
    return probe(ag::add(ag::instance_norm(x, ag::Var(), ag::Var(), gp1), ag::mul(x, x)));
  });
}

TEST_CASE("instance norm with a dropout after its activation: finite differences, and the composed ops' bits") {
  // f64: a fixed mask is a constant map, so finite differences check every gradient with the dropout on,
  // per element and shared by the configs (x's 12 columns as 3 configs of 4)
  const Tensor gp = Tensor::from_vector(std::vector<int64_t>{0, 6, 6, 13});
  const ag::Var x = rand_var({13, 12}, 41), res = rand_var({13, 12}, 42);
  for (bool shared : {false, true}) {
    CAPTURE(shared);
    const ag::FusedDropout d{0.3, 977, shared};
    check_grads({x, res},
                [&] { return probe(ag::instance_norm(x, ag::Var(), ag::Var(), gp, 1e-5, res, Act::kGelu, d, 3)); });
    check_grads(
        {x}, [&] { return probe(ag::instance_norm(x, ag::Var(), ag::Var(), gp, 1e-5, ag::Var(), Act::kNone, d, 3)); });
  }
  // float: the bits of dropout (or dropout_configs) after the norm, value and gradients, over blocks of
  // channels, with and without a residual and an activation, on 1 and 3 threads
  const Tensor gp2 = Tensor::from_vector(std::vector<int64_t>{0, 300, 301, 700});
  const int64_t C = 5, D = 220;  // 1100 columns
  const Tensor xs = rand({700, C * D}, 45), rs = rand({700, C * D}, 46), dy = rand({700, C * D}, 47);
  const testing::ThreadsRestored saved;
  for (int threads : {1, 3})
    for (bool shared : {true, false})
      for (Act act : {Act::kGelu, Act::kNone})
        for (bool with_res : {false, true}) {
          CAPTURE(threads);
          CAPTURE(shared);
          CAPTURE(act_name(act));
          CAPTURE(with_res);
          set_num_threads(threads);
          auto run = [&](bool fused) {
            const ag::Var a = ag::Var::param(xs.clone()), b = ag::Var::param(rs.clone());
            const ag::Var r = with_res ? b : ag::Var();
            Rng rng(123);
            ag::Var y;
            if (fused) {
              y = ag::instance_norm(a, ag::Var(), ag::Var(), gp2, 1e-5, r, act, {0.2, Rng(rng).next(), shared}, C);
            } else {
              y = ag::instance_norm(a, ag::Var(), ag::Var(), gp2, 1e-5, r, act);
              y = shared ? ag::dropout_configs(y, 0.2, rng, true, C) : ag::dropout(y, 0.2, rng, true);
            }
            const std::vector<float> out = y.value().to_vector<float>();
            ag::backward(y, dy);
            std::vector<std::vector<float>> o{out, a.grad().to_vector<float>()};
            if (with_res) o.push_back(b.grad().to_vector<float>());
            ag::clear_tape();
            return o;
          };
          const auto f = run(true), c = run(false);
          for (size_t i = 0; i < f.size(); ++i) CHECK(std::memcmp(f[i].data(), c[i].data(), f[i].size() * 4) == 0);
        }
  // a graph too large for a task's kept block (over 8,192 rows: the forward sums x + res through y, the
  // backward into a buffer of its trip's rows), with the dropout
  {
    const Tensor gp3 = Tensor::from_vector(std::vector<int64_t>{0, 9000});
    const Tensor xb = rand({9000, 4 * 16}, 48), rb = rand({9000, 4 * 16}, 49), dyb = rand({9000, 4 * 16}, 50);
    auto run = [&](bool fused) {
      const ag::Var a = ag::Var::param(xb.clone()), b = ag::Var::param(rb.clone());
      Rng rng(321);
      ag::Var y;
      if (fused) {
        y = ag::instance_norm(a, ag::Var(), ag::Var(), gp3, 1e-5, b, Act::kGelu, {0.3, Rng(rng).next(), true}, 4);
      } else {
        y = ag::dropout_configs(ag::instance_norm(a, ag::Var(), ag::Var(), gp3, 1e-5, b, Act::kGelu), 0.3, rng, true,
                                4);
      }
      const std::vector<float> out = y.value().to_vector<float>();
      ag::backward(y, dyb);
      std::vector<std::vector<float>> o{out, a.grad().to_vector<float>(), b.grad().to_vector<float>()};
      ag::clear_tape();
      return o;
    };
    for (int threads : {1, 3}) {
      CAPTURE(threads);
      set_num_threads(threads);
      const auto f = run(true), c = run(false);
      for (size_t i = 0; i < f.size(); ++i) CHECK(std::memcmp(f[i].data(), c[i].data(), f[i].size() * 4) == 0);
    }
  }
  CHECK_THROWS_WITH_AS(ag::instance_norm(x, ag::Var(), ag::Var(), gp, 1e-5, ag::Var(), Act::kGelu, {0.3, 1, true}, 5),
                       doctest::Contains("12 columns are not 5 configs side by side"), Error);
  CHECK_THROWS_WITH_AS(ag::instance_norm(x, ag::Var(), ag::Var(), gp, 1e-5, ag::Var(), Act::kGelu, {1.0, 1, false}),
                       doctest::Contains("dropout p must lie in [0, 1)"), Error);
}

TEST_CASE("cuda ops: instance norm with a residual and GELU matches the host") {
  GNN_SKIP_UNLESS_CUDA();
  const Tensor gp = Tensor::from_vector(std::vector<int64_t>{0, 9, 9, 40, 41, 70});  // graph 1 empty
  const Tensor x = rand({70, 40}, 31), res = rand({70, 40}, 32), gamma = rand({40}, 33), beta = rand({40}, 34);
  check_op("instance_norm + residual + gelu", {x, res, gamma, beta},
           [gp](auto& v, auto&) { return ag::instance_norm(v[0], v[2], v[3], gp, 1e-5, v[1], Act::kGelu); });
  check_op("instance_norm + gelu", {x}, [gp](auto& v, auto&) {
    return ag::instance_norm(v[0], ag::Var(), ag::Var(), gp, 1e-5, ag::Var(), Act::kGelu);
  });
  for (bool shared : {false, true})  // a dropout after it: the same mask on the GPU (40 columns as 4 configs)
    check_op(
        shared ? "instance_norm + gelu + dropout_configs" : "instance_norm + gelu + dropout", {x, res},
        [gp, shared](auto& v, auto&) {
          return ag::instance_norm(v[0], ag::Var(), ag::Var(), gp, 1e-5, v[1], Act::kGelu, {0.25, 4242, shared}, 4);
        });
}

TEST_CASE("instance norm over a tensor too large to stay in cache: prefetched, streamed, the reference's bits") {
  // 4.3M floats ([2100, 2064]: three graphs, blocks of 320 channels and a last of 144, their sums and dz
  // kept, y and dx streamed in every case) and 4.6M ([9000, 512]: one graph whose 64-channel blocks are too
  // large to keep, so only the cases without a residual stream y, and those without an activation or a
  // dropout dx), the kernels' large-tensor path (instance_norm_streams) and, with y and dx 4 floats off a
  // 64-byte boundary, the usual stores: each the float reference's bits, with a residual, GELU, affine
  // parameters, a dropout (a node's configs sharing a mask) or a held gradient (dx its own array, or held
  // itself), and the forward in place (y over x, or over res)
  struct Aligned {  // n floats, 64-byte aligned, then shifted by `off` floats
    std::vector<float> buf;
    float* p;
    Aligned(const std::vector<float>& v, int64_t off) : buf(v.size() + 32) {
      auto a = reinterpret_cast<uintptr_t>(buf.data());
      p = reinterpret_cast<float*>((a + 63) / 64 * 64) + off;
      std::copy(v.begin(), v.end(), p);
    }
    std::vector<float> vec(size_t n) const { return {p, p + n}; }
  };
  const testing::ThreadsRestored saved;
  for (const auto& [gp, F] : {std::pair<std::vector<int64_t>, int64_t>{{0, 1500, 1501, 2100}, 2064},
                              {{0, 9000}, 512}}) {
    const int64_t G = int64_t(gp.size()) - 1, N = gp.back();
    const size_t n = size_t(N * F);
    CAPTURE(F);
    const auto xs = random_values<float>(n, 15, -3.0f, 3.0f), dy = random_values<float>(n, 18),
               rv = random_values<float>(n, 19, -3.0f, 3.0f), hv = random_values<float>(n, 20);
    const auto gm = random_values<float>(size_t(F), 16, 0.5f, 1.5f), bt = random_values<float>(size_t(F), 17);
    struct Case {
      bool affine, res, gelu, drop;
      int held;  // 0 none, 1 its own array, 2 dx itself
    };
    for (const Case c : {Case{false, false, false, false, 0}, Case{false, false, false, false, 1},
                         Case{false, false, false, false, 2}, Case{true, true, true, false, 0},
                         Case{false, true, false, false, 0},
                         Case{false, true, true, true, 0}, Case{false, false, false, true, 0}}) {
      CAPTURE(c.affine);
      CAPTURE(c.res);
      CAPTURE(c.gelu);
      CAPTURE(c.drop);
      CAPTURE(c.held);
      const float* res = c.res ? rv.data() : nullptr;
      const float* g = c.affine ? gm.data() : nullptr;
      const float* b = c.affine ? bt.data() : nullptr;
      const Act act = c.gelu ? Act::kGelu : Act::kNone;
      const RowsDropout<float> drop{c.drop ? dropout_mask<float>(0.2, 977) : DropoutMask<float>{}, c.drop ? 8 : 0};
      std::vector<float> yr(n), mr(size_t(G * F)), rr(size_t(G * F)), dxr = c.held == 2 ? hv : std::vector<float>(n);
      instance_norm_forward_ref<float>(yr.data(), mr.data(), rr.data(), xs.data(), res, g, b, gp.data(), G, F, 1e-5f,
                                       act, drop);
      std::vector<float> dgr(static_cast<size_t>(F)), dbr(static_cast<size_t>(F));
      instance_norm_backward_ref<float>(dxr.data(), dgr.data(), dbr.data(), dy.data(), xs.data(), res, mr.data(),
                                        rr.data(), g, b, gp.data(), G, F, act, drop, c.held ? hv.data() : nullptr);
      for (const int64_t off : {0, 4})
        for (const int threads : {1, 2}) {
          CAPTURE(off);
          CAPTURE(threads);
          set_num_threads(threads);
          Aligned y(std::vector<float>(n, NAN), off), dx(c.held == 2 ? hv : std::vector<float>(n, NAN), off);
          CHECK(instance_norm_streams(y.p, N, F) == (off == 0));
          std::vector<float> m(size_t(G * F), NAN), r(size_t(G * F), NAN), dg(size_t(F), NAN), db(size_t(F), NAN);
          instance_norm_forward_cpu(y.p, m.data(), r.data(), xs.data(), res, g, b, gp.data(), G, F, 1e-5f, act, drop);
          const float* held = c.held == 1 ? hv.data() : c.held == 2 ? dx.p : nullptr;
          instance_norm_backward_cpu(dx.p, dg.data(), db.data(), dy.data(), xs.data(), res, m.data(), r.data(), g, b,
                                     gp.data(), G, F, act, drop, held);
          CHECK(y.vec(n) == yr);
          CHECK(m == mr);
          CHECK(r == rr);
          CHECK(dx.vec(n) == dxr);
          // in place: y over x, or over res
          Aligned io(c.res ? rv : xs, off);
          instance_norm_forward_cpu(io.p, m.data(), r.data(), c.res ? xs.data() : io.p, c.res ? io.p : nullptr, g, b,
                                    gp.data(), G, F, 1e-5f, act, drop);
          CHECK(io.vec(n) == yr);
          for (int64_t f = 0; f < F; f += 97) {
            CHECK(dg[size_t(f)] == doctest::Approx(dgr[size_t(f)]).epsilon(1e-4));
            CHECK(db[size_t(f)] == doctest::Approx(dbr[size_t(f)]).epsilon(1e-4));
          }
        }
    }
  }
}
