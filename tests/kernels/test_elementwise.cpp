// Elementwise maps, column sums and the column plumbing (kernels/elementwise.h) on the GPU against
// their references, and the autograd ops built on them on the GPU against the host; add_to_cpu against
// the template, and column_sum_cpu against column_sum. (The host templates are the references themselves, checked
// through the ops' gradients in tests/autograd/test_autograd.cpp.)
#include <cmath>

#include "autograd/device_check.h"
#include "device_buffers.h"
#include "graph_cases.h"
#include "kernels/elementwise.h"
#include "runtime/cuda.h"
#include "testing.h"

using namespace gnn;
using namespace gnn::testing;  // the helpers of testing.h, device_buffers.h and graph_cases.h

TEST_CASE("add_to_cpu, the float add over the threads in each ISA's clone, has the template's bits") {
  // one thread's worth below the grain, the grain itself, and odd lengths above it (the threads' split)
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(1000), kElementwiseGrain, kElementwiseGrain + 3, int64_t(300001)})
    for (float sb : {1.0f, -0.5f}) {
      CAPTURE(n);
      CAPTURE(sb);
      const auto a = random_values<float>(size_t(n), 1, -3.0f, 3.0f), b = random_values<float>(size_t(n), 2);
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), std::nanf(""));
      add_to(want.data(), a.data(), b.data(), n, sb);
      add_to_cpu(got.data(), a.data(), b.data(), n, sb);
      CHECK(same_bits(got, want));
      for (size_t i : {size_t(0), size_t(n - 1)}) CHECK(got[i] == a[i] + sb * b[i]);
    }
}

TEST_CASE("column_sum_cpu, the chunks' rows summed in each ISA's clone, has the template's bits") {
  // below one chunk, a chunk with a tail, several chunks over the threads; widths with and without a tail
  for (int64_t R : {int64_t(1), kColumnChunk + 5, 9 * kColumnChunk + 1})
    for (int64_t F : {int64_t(1), int64_t(16), int64_t(131)})
      for (bool acc : {false, true}) {
        CAPTURE(R);
        CAPTURE(F);
        const auto x = random_values<float>(size_t(R * F), 3, -2.0f, 2.0f);
        std::vector<float> want = random_values<float>(size_t(F), 4), got = want;
        column_sum(want.data(), x.data(), R, F, acc);
        column_sum_cpu(got.data(), x.data(), R, F, acc);
        CHECK(same_bits(got, want));
      }
}

TEST_CASE("cuda elementwise maps, column sums and transpose match their references") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  // the row shapes of device_buffers.h (column sums over 1, a few and 256 slices)
  for (auto [R, F] : kRowShapes) {
    CAPTURE(R);
    CAPTURE(F);
    const int64_t n = R * F;
    const auto a = random_values<float>(size_t(n), 1, -3.0f, 3.0f), b = random_values<float>(size_t(n), 2);
    const auto row = random_values<float>(size_t(F), 3);
    const Tensor ga = on_gpu(a), gb = on_gpu(b), grow = on_gpu(row);
    std::vector<double> sum(static_cast<size_t>(n)), prod(static_cast<size_t>(n)), bias(static_cast<size_t>(n)),
        cols(static_cast<size_t>(F), 0.0), tr(static_cast<size_t>(n));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t f = 0; f < F; ++f) {
        const size_t i = size_t(r * F + f);
        sum[i] = double(a[i]) - 0.5 * double(b[i]), prod[i] = double(a[i]) * double(b[i]);
        bias[i] = double(a[i]) + double(row[size_t(f)]), cols[size_t(f)] += double(a[i]);
        tr[size_t(f * R + r)] = a[i];
      }
    Tensor y1 = nan_gpu(n), y2 = nan_gpu(n), y3 = nan_gpu(n), y4 = nan_gpu(n), c = nan_gpu(F);
    add_cuda(y1.f32(), ga.f32(), gb.f32(), n, -0.5f, s);
    mul_cuda(y2.f32(), ga.f32(), gb.f32(), n, s);
    add_row_cuda(y3.f32(), ga.f32(), grow.f32(), R, F, s);
    transpose_cuda(y4.f32(), ga.f32(), R, F, s);
    const int64_t nws = column_sum_workspace_cuda(R, F);
    CHECK((nws == 0) == (R <= 64));
    Tensor ws = nan_gpu(std::max<int64_t>(nws, 1));
    float* wsp = nws ? ws.f32() : nullptr;
    column_sum_cuda(c.f32(), ga.f32(), R, F, false, wsp, s);
    GNN_CHECK_CLOSE(y1.to_vector<float>(), sum);
    GNN_CHECK_CLOSE(y2.to_vector<float>(), prod);
    GNN_CHECK_CLOSE(y3.to_vector<float>(), bias);
    GNN_CHECK_CLOSE(y4.to_vector<float>(), tr);
    GNN_CHECK_CLOSE(c.to_vector<float>(), cols, 1e-4, 1e-4);
    const std::vector<float> c1 = c.to_vector<float>();
    column_sum_cuda(c.f32(), ga.f32(), R, F, true, wsp, s);  // accumulate: twice the sum, and the same bits as before
    std::vector<double> twice(cols);
    for (double& v : twice) v *= 2;
    GNN_CHECK_CLOSE(c.to_vector<float>(), twice, 1e-4, 1e-4);
    column_sum_cuda(c.f32(), ga.f32(), R, F, false, wsp, s);
    CHECK(same_bits(c.to_vector<float>(), c1));
  }
#endif
}

TEST_CASE("cuda elementwise: sum, mask_rows, scale, the head ops and copy_block match their references") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  for (auto [R, F] : kElementShapes) {
    CAPTURE(R);
    CAPTURE(F);
    const int64_t n = R * F;
    const auto x = random_values<float>(size_t(n), 1, -3.0f, 3.0f), dy = random_values<float>(size_t(n), 2);
    const std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end());
    const Tensor gx = on_gpu(x), gdy = on_gpu(dy);
    // sum: one fixed order
    Tensor total = nan_gpu(1);
    sum_cuda(total.f32(), gx.f32(), n, s);
    double want = 0;
    for (double v : xd) want += v;
    GNN_CHECK_CLOSE(total.to_vector<float>(), std::vector<double>{want}, 1e-4, 1e-3);
    // mask_rows and scale
    std::vector<uint8_t> keep(static_cast<size_t>(R));
    for (size_t i = 0; i < keep.size(); ++i) keep[i] = uint8_t(i % 3 == 0);
    std::vector<double> masked(static_cast<size_t>(n)), scaled(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      masked[size_t(i)] = keep[size_t(i / F)] ? dyd[size_t(i)] : 0.0, scaled[size_t(i)] = -2.5 * xd[size_t(i)];
    Tensor mk = nan_gpu(n), sc = nan_gpu(n);
    mask_rows_cuda(mk.f32(), gdy.f32(), on_gpu(keep).data_as<uint8_t>(), R, F, s);
    scale_cuda(sc.f32(), gx.f32(), -2.5f, n, s);
    GNN_CHECK_CLOSE(mk.to_vector<float>(), masked);
    GNN_CHECK_CLOSE(sc.to_vector<float>(), scaled);
  }
  // heads: x [R, H*D]; head_dot, its backward, block_sum (the head mean) and head_broadcast
  const int64_t R = 517, H = 3, D = 19, W = H * D;
  const auto x = random_values<float>(size_t(R * W), 5), a = random_values<float>(size_t(W), 6);
  const auto g = random_values<float>(size_t(R * H), 7), gm = random_values<float>(size_t(R * D), 8);
  std::vector<double> dot(size_t(R * H), 0.0), mean(size_t(R * D), 0.0);
  std::vector<double> dxd(static_cast<size_t>(R * W)), prod(static_cast<size_t>(R * W)),
      bcast(static_cast<size_t>(R * W));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        const size_t i = size_t(r * W + h * D + d);
        dot[size_t(r * H + h)] += double(x[i]) * double(a[size_t(h * D + d)]);
        dxd[i] = double(g[size_t(r * H + h)]) * double(a[size_t(h * D + d)]);
        prod[i] = double(g[size_t(r * H + h)]) * double(x[i]);
        mean[size_t(r * D + d)] += double(x[i]) / double(H);
        bcast[i] = double(gm[size_t(r * D + d)]) / double(H);
      }
  const Tensor gx = on_gpu(x), ga = on_gpu(a), gg = on_gpu(g), ggm = on_gpu(gm);
  Tensor y = nan_gpu(R * H), dx = nan_gpu(R * W), p = nan_gpu(R * W), hm = nan_gpu(R * D), hb = nan_gpu(R * W);
  head_dot_cuda(y.f32(), gx.f32(), ga.f32(), R, H, D, s);
  head_dot_backward_cuda(dx.f32(), p.f32(), gg.f32(), gx.f32(), ga.f32(), R, H, D, s);
  block_sum_cuda(hm.f32(), gx.f32(), R, D, H, W, D, 1.0f / float(H), s);
  head_broadcast_cuda(hb.f32(), ggm.f32(), R, H, D, 1.0f / float(H), s);
  GNN_CHECK_CLOSE(y.to_vector<float>(), dot, 1e-4, 1e-4);
  GNN_CHECK_CLOSE(dx.to_vector<float>(), dxd);
  GNN_CHECK_CLOSE(p.to_vector<float>(), prod);
  GNN_CHECK_CLOSE(hm.to_vector<float>(), mean);
  GNN_CHECK_CLOSE(hb.to_vector<float>(), bcast);
  // copy_block: columns [5, 5 + 11) of x into columns [2, 13) of a NaN-filled [R, 20]; the rest stays NaN
  Tensor blk = nan_gpu(R * 20);
  copy_block_cuda(blk.f32(), 20, 2, gx.f32(), W, 5, R, 11, s);
  const std::vector<float> bv = blk.to_vector<float>();
  bool ok = true;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < 20; ++c) {
      const float v = bv[size_t(r * 20 + c)];
      ok = ok && (c >= 2 && c < 13 ? v == x[size_t(r * W + 5 + c - 2)] : std::isnan(v));
    }
  CHECK(ok);
#endif
}

TEST_CASE("cuda ops: arithmetic, reductions and column plumbing match the host, value and gradient") {
  GNN_SKIP_UNLESS_CUDA();
  const Tensor a = rand({37, 24}, 1), b = rand({37, 24}, 2), bias = rand({24}, 3), s = rand({1}, 4);
  check_op("add", {a, b}, [](auto& v, auto&) { return ag::add(v[0], v[1]); });
  check_op("sub", {a, b}, [](auto& v, auto&) { return ag::sub(v[0], v[1]); });
  check_op("mul", {a, b}, [](auto& v, auto&) { return ag::mul(v[0], v[1]); });
  check_op("scale", {a}, [](auto& v, auto&) { return ag::scale(v[0], -1.5); });
  check_op("scale_by", {a, s}, [](auto& v, auto&) { return ag::scale_by(v[0], v[1]); });
  check_op("add_bias", {a, bias}, [](auto& v, auto&) { return ag::add_bias(v[0], v[1]); });
  check_op("mean", {rand({5000}, 5)}, [](auto& v, auto&) { return ag::reshape(ag::mean(v[0]), 1, 1); });
  check_op("concat_cols", {a, rand({37, 5}, 6)}, [](auto& v, auto&) { return ag::concat_cols({v[0], v[1], v[0]}); });
  check_op("concat_rows", {a, rand({5, 24}, 6)}, [](auto& v, auto&) { return ag::concat_rows({v[0], v[1], v[0]}); });
  check_op("slice_cols", {a}, [](auto& v, auto&) { return ag::slice_cols(v[0], 3, 17); });
  check_op("slice_rows", {a}, [](auto& v, auto&) { return ag::slice_rows(v[0], 3, 17); });
  check_op("head_mean", {a}, [](auto& v, auto&) { return ag::head_mean(v[0], 3); });
  check_op("head_dot", {a, rand({4, 6}, 7)}, [](auto& v, auto&) { return ag::head_dot(v[0], v[1]); });
  std::vector<int32_t> idx;
  for (int i = 0; i < 90; ++i) idx.push_back(int32_t((i * 13 + 5) % 37 % 11));  // repeats, rows never used
  const Tensor index = Tensor::from_vector(idx);
  check_op("gather_rows", {a}, [index](auto& v, auto&) { return ag::gather_rows(v[0], index); });
  check_op("reshape", {a}, [](auto& v, auto&) { return ag::reshape(ag::scale(v[0], 2.0), 37 * 3, 8); });
  check_op("join_configs", {rand({37, 7}, 8), rand({37, 4 * 5}, 9)},
           [](auto& v, auto&) { return ag::join_configs(v[0], v[1], 4); });
  // Nothing per config: x repeated for each config (config_shared_dropout broadcasts its mask so).
  check_op("join_configs, nothing per config", {rand({37, 7}, 8)}, [](auto& v, auto&) {
    return ag::join_configs(v[0], ag::Var(Tensor::empty(Shape{37, 0}, DType::F32, v[0].device())), 4);
  });
  check_op("join_configs with a base", {rand({37, 7}, 8), rand({37, 4 * 5}, 9), rand({37, 4 * 12}, 10)},
           [](auto& v, auto&) { return ag::join_configs(v[0], v[1], 4, v[2]); });
  std::vector<uint8_t> keep(37);
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = uint8_t(i % 3 != 1);
  const Tensor kt = Tensor::from_vector(keep);
  check_op("keep_grad_rows", {a}, [kt](auto& v, auto&) { return ag::scale(ag::keep_grad_rows(v[0], kt), 3.0); });
  check_op("keep_grad_rows, keep where x is", {a},
           [kt](auto& v, auto&) { return ag::scale(ag::keep_grad_rows(v[0], kt.on(v[0].device())), 3.0); });
  CHECK_THROWS_WITH_AS(ag::keep_grad_rows(ag::Var(a), kt.to(Device::cuda(0))),
                       doctest::Contains("keep must be u8 [37] on the host or on x's device (cpu)"), Error);
  check_op("to_device, there and back", {a, b}, [](auto& v, auto&) {  // the host's product, moved back
    const ag::Var host = ag::mul(ag::to_device(v[0], Device::cpu()), ag::to_device(v[1], Device::cpu()));
    return ag::to_device(host, v[0].device());
  });
}

TEST_CASE("cuda ops: scale_by, sum and mean only queue device work: forward and backward replay as a CUDA graph") {
  GNN_SKIP_UNLESS_CUDA();
  const Device gpu = Device::cuda(0);
  Tensor x = rand({37, 24}, 51).to(gpu);
  const Tensor s = rand({1}, 52).to(gpu);
  Tensor loss, dx, ds;  // the step's outputs: a capture keeps them in the graph's pool, each replay rewrites them
  auto step = [&] {
    const ag::Var xv = ag::Var::param(x), sv = ag::Var::param(s);
    const ag::Var l = ag::add(ag::mean(ag::scale_by(xv, sv)), ag::scale(ag::sum(xv), 0.25));
    ag::backward(l);
    loss = l.value(), dx = xv.grad(), ds = sv.grad();
  };
  auto host = [](const Tensor& t) { return t.to_vector<float>(); };
  step();  // eager: the reference, and cuBLAS and the caches set up outside the capture
  const auto want_loss = host(loss), want_dx = host(dx), want_ds = host(ds);
  // A readback of s or of a partial sum inside the capture would make it fail (a host copy is not a
  // stream operation that a graph can hold).
  CudaGraph graph(0, step);
  graph.replay();
  CHECK(host(loss) == want_loss);
  CHECK(host(dx) == want_dx);
  CHECK(host(ds) == want_ds);
  x.copy_from(rand({37, 24}, 53));  // new inputs in the captured buffer: the replay follows them
  graph.replay();
  const auto got_loss = host(loss), got_ds = host(ds);
  step();
  CHECK(got_loss == host(loss));
  CHECK(got_ds == host(ds));
}
