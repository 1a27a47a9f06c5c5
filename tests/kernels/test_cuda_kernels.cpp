// The CUDA kernels against the double references, on the standard graph cases, outputs pre-filled
// with NaN so an unwritten element fails; for SpMM also two GPU runs giving the same bits. Without a GPU (or in a
// build without CUDA) every case skips with the reason.
#include <cmath>
#include <cstring>
#include <random>

#include "gemm_check.h"
#include "graph_cases.h"
#include "kernels/activation.h"
#include "kernels/optim.h"
#include "kernels/gemm.h"
#include "kernels/embedding.h"
#include "kernels/instance_norm.h"
#include "kernels/layer_norm.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/pooling.h"
#include "kernels/rowwise.h"
#include "kernels/sage.h"
#include "kernels/segment_softmax.h"
#include "kernels/spmm.h"
#include "runtime/cuda.h"
#include "testing.h"

using namespace gnn;

#ifdef GNN_WITH_CUDA
namespace {

template <class T>
Tensor on_gpu(const std::vector<T>& v) {
  return Tensor::from_vector(v).to(Device::cuda(0));
}
Tensor nan_gpu(int64_t n) { return Tensor::full({n}, NAN, DType::F32, Device::cuda(0)); }

// A many-tensor entry list (kernels/optim.h) copied to the device as bytes.
template <class E>
Tensor list_on_gpu(std::vector<E>& list) {
  plan_chunks(list.data(), int64_t(list.size()));
  std::vector<uint8_t> bytes(list.size() * sizeof(E));
  std::memcpy(bytes.data(), list.data(), bytes.size());
  return on_gpu(bytes);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace
#endif

TEST_CASE("cuda spmm: forward and both backwards match the double reference on the standard cases") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  for (const auto& c : testing::standard_graph_cases(3)) {
    CAPTURE(c.name);
    const Graph dg = c.graph.to(Device::cuda(0));
    const CsrView hv = testing::csr_view(c.graph), dv = ag::csr_view(dg);
    const int64_t N = c.graph.num_nodes, E = c.graph.num_edges;
    // A row's float sum of d products carries rounding of about sqrt(d) ulps of its partial sums: the
    // hub rows (10^4 entries) need a wider absolute tolerance than the default 1e-5.
    int64_t max_deg = 0;
    for (int64_t r = 0; r < N; ++r) max_deg = std::max<int64_t>(max_deg, hv.indptr[r + 1] - hv.indptr[r]);
    const double atol = 1e-5 * std::max(1.0, std::sqrt(double(max_deg)) / 10);
    // 2048 = 16 configs x 128: the config-batched width, walked in chunks by each row's group
    for (int64_t F : {1, 3, 8, 33, 64, 128, 257, 2048}) {
      if (F == 2048 && c.name != "power_law_1000" && c.name != "random_65" && c.name != "hub_10k") continue;
      CAPTURE(F);
      const int64_t ld = F + (F % 2);  // odd F: a row stride wider than F, which takes the scalar path
      const auto x = testing::random_values<float>(size_t(N * ld), 1);
      const auto w = testing::random_values<float>(size_t(E), 2, 0.5f, 2.0f);
      const auto dy = testing::random_values<float>(size_t(N * ld), 3);
      const auto dx0 = testing::random_values<float>(size_t(N * ld), 4);
      const std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), dyd(dy.begin(), dy.end());
      const Tensor gx = on_gpu(x), gw = on_gpu(w), gdy = on_gpu(dy);
      for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
        for (bool weighted : {false, true}) {
          CAPTURE(reduce_name(op));
          CAPTURE(weighted);
          const double* wpd = weighted ? wd.data() : nullptr;
          const float* gwp = weighted ? gw.f32() : nullptr;
          std::vector<double> yd(size_t(N * ld), 0), dxd(size_t(N * ld), 0), dwd(size_t(E), 0);
          std::vector<int32_t> argd(size_t(N * F), -7);
          spmm_forward_ref<double>(yd.data(), argd.data(), xd.data(), wpd, hv, F, ld, ld, op);
          spmm_backward_x_ref<double>(dxd.data(), dyd.data(), argd.data(), wpd, hv, F, ld, ld, op);
          spmm_backward_w_ref<double>(dwd.data(), dyd.data(), xd.data(), argd.data(), hv, F, ld, ld, op);

          std::vector<float> first_y, first_dx, first_dw;
          for (int run = 0; run < 2; ++run) {
            Tensor y = nan_gpu(N * ld), dx = nan_gpu(N * ld), dw = nan_gpu(E), dxa = on_gpu(dx0);
            Tensor arg = Tensor::full({N * F}, -7, DType::I32, Device::cuda(0));
            spmm_forward_cuda(y.f32(), arg.i32(), gx.f32(), gwp, dv, F, ld, ld, op, s);
            spmm_backward_x_cuda(dx.f32(), gdy.f32(), arg.i32(), gwp, dv, F, ld, ld, op, false, s);
            spmm_backward_x_cuda(dxa.f32(), gdy.f32(), arg.i32(), gwp, dv, F, ld, ld, op, true, s);
            spmm_backward_w_cuda(dw.f32(), gdy.f32(), gx.f32(), arg.i32(), dv, F, ld, ld, op, s);
            auto yh = y.to_vector<float>(), dxh = dx.to_vector<float>(), dxah = dxa.to_vector<float>();
            const auto dwh = dw.to_vector<float>();
            for (int64_t r = 0; r < N; ++r)
              for (int64_t f = F; f < ld; ++f) {  // padding columns are not outputs: they keep their NaN / value
                CHECK(std::isnan(yh[size_t(r * ld + f)]));
                CHECK(dxah[size_t(r * ld + f)] == dx0[size_t(r * ld + f)]);
                yh[size_t(r * ld + f)] = dxh[size_t(r * ld + f)] = 0, dxah[size_t(r * ld + f)] = dx0[size_t(r * ld + f)];
              }
            GNN_CHECK_CLOSE(yh, yd, atol);
            if (op == Reduce::kMax) CHECK(arg.to_vector<int32_t>() == argd);  // the first maximum, as the reference
            GNN_CHECK_CLOSE(dxh, dxd, atol);
            std::vector<double> acc(dxd);
            for (size_t i = 0; i < acc.size(); ++i) acc[i] += dx0[i];
            GNN_CHECK_CLOSE(dxah, acc, atol);
            GNN_CHECK_CLOSE(dwh, dwd, 1e-4, 1e-4);
            if (run == 0) {
              first_y = yh, first_dx = dxh, first_dw = dwh;
            } else {  // deterministic: no atomics, fixed reduction orders
              CHECK(same_bits(yh, first_y));
              CHECK(same_bits(dxh, first_dx));
              CHECK(same_bits(dwh, first_dw));
            }
          }
        }
      }
    }
  }
#endif
}

TEST_CASE("cuda gemm: cuBLAS FP32 matches the double reference for every transpose, alpha and beta") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  set_gemm_tf32(false);
  // The device run copies the host buffers over, multiplies, and copies C back.
  const testing::GemmRun on_device = [](bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                                        int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    const auto upload = [](const float* p, int64_t n) { return on_gpu(std::vector<float>(p, p + n)); };
    Tensor gA = upload(A, (ta ? K : M) * lda), gB = upload(B, (tb ? N : K) * ldb), gC = upload(C, M * ldc);
    gemm_cuda(ta, tb, M, N, K, alpha, gA.f32(), lda, gB.f32(), ldb, beta, gC.f32(), ldc, cuda_stream(0));
    const auto got = gC.to_vector<float>();
    std::copy(got.begin(), got.end(), C);
  };
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {7, 13, 5}, {257, 129, 65}, {1000, 64, 300}})
        for (float beta : {0.0f, 0.5f}) testing::check_gemm_case("cublas", on_device, ta, tb, M, N, K, 1.5f, beta, 3);
#endif
}

TEST_CASE("cuda segment softmax and GAT scores match the double reference, hubs included") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  for (const auto& c : testing::standard_graph_cases(5)) {
    CAPTURE(c.name);
    const Graph dg = c.graph.to(Device::cuda(0));
    const CsrView hv = testing::csr_view(c.graph), dv = ag::csr_view(dg);
    const int64_t N = c.graph.num_nodes, E = c.graph.num_edges;
    // 1, 4, 8, 32: the grouped kernels (8 or 32 lanes per row); 3: one warp per (row, head)
    for (int64_t H : {1, 3, 4, 8, 32}) {
      CAPTURE(H);
      const auto x = testing::random_values<float>(size_t(E * H), 1, -3.0f, 3.0f);
      const auto dy = testing::random_values<float>(size_t(E * H), 2);
      const auto as = testing::random_values<float>(size_t(N * H), 3), ad = testing::random_values<float>(size_t(N * H), 4);
      const std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end()), asd(as.begin(), as.end()),
          add(ad.begin(), ad.end());
      std::vector<double> yd(size_t(E * H)), dxd(size_t(E * H)), sd(size_t(E * H)), dasd(size_t(N * H)), dadd(size_t(N * H));
      segment_softmax_forward_ref<double>(yd.data(), xd.data(), hv.indptr, N, H);
      segment_softmax_backward_ref<double>(dxd.data(), yd.data(), dyd.data(), hv.indptr, N, H);
      gat_scores_forward_ref<double>(sd.data(), asd.data(), add.data(), hv, H, 0.2);
      gat_scores_backward_ref<double>(dasd.data(), dadd.data(), dyd.data(), asd.data(), add.data(), hv, H, 0.2);
      const Tensor gx = on_gpu(x), gdy = on_gpu(dy), gas = on_gpu(as), gad = on_gpu(ad);
      Tensor y = nan_gpu(E * H), dx = nan_gpu(E * H), sc = nan_gpu(E * H), das = nan_gpu(N * H), dad = nan_gpu(N * H);
      segment_softmax_forward_cuda(y.f32(), gx.f32(), dv.indptr, N, H, s);
      // the backward reads the reference's y (as float) so the two compare the same function
      const Tensor gy = on_gpu(std::vector<float>(yd.begin(), yd.end()));
      segment_softmax_backward_cuda(dx.f32(), gy.f32(), gdy.f32(), dv.indptr, N, H, s);
      gat_scores_forward_cuda(sc.f32(), gas.f32(), gad.f32(), dv, H, 0.2f, s);
      gat_scores_backward_cuda(das.f32(), dad.f32(), gdy.f32(), gas.f32(), gad.f32(), dv, H, 0.2f, s);
      GNN_CHECK_CLOSE(y.to_vector<float>(), yd);
      GNN_CHECK_CLOSE(dx.to_vector<float>(), dxd);
      GNN_CHECK_CLOSE(sc.to_vector<float>(), sd);
      GNN_CHECK_CLOSE(das.to_vector<float>(), dasd, 1e-4, 1e-4);
      GNN_CHECK_CLOSE(dad.to_vector<float>(), dadd, 1e-4, 1e-4);
    }
  }
#endif
}

TEST_CASE("cuda activations, pooling and embedding match their references") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  const int64_t n = 100003;
  const auto x = testing::random_values<float>(size_t(n), 1, -4.0f, 4.0f), dy = testing::random_values<float>(size_t(n), 2);
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
  // pooling: graphs of 0, 1, 5000 (wider than any block) and 37 nodes; F = 1, 33, 130
  const std::vector<int64_t> ptr = {0, 0, 1, 5001, 5038};
  const int64_t N = ptr.back(), G = int64_t(ptr.size()) - 1;
  const Tensor gptr = on_gpu(ptr);
  for (int64_t F : {1, 33, 130}) {
    const auto px = testing::random_values<float>(size_t(N * F), 3), pdy = testing::random_values<float>(size_t(G * F), 4);
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
      pool_backward_cuda(dx.f32(), gpdy.f32(), arg.i32(), gptr.i64(), N, G, F, op, s);
      GNN_CHECK_CLOSE(y.to_vector<float>(), yd);
      if (op == Reduce::kMax) CHECK(arg.to_vector<int32_t>() == argd);
      GNN_CHECK_CLOSE(dx.to_vector<float>(), dxd);
    }
  }
  // embedding rows
  const auto table = testing::random_values<float>(size_t(50 * 33), 5);
  std::vector<int32_t> idx(1000);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t((i * 7919) % 50);
  std::vector<float> want(idx.size() * 33);
  embedding_forward_ref<float>(want.data(), table.data(), idx.data(), int64_t(idx.size()), 33);
  Tensor emb = nan_gpu(int64_t(want.size()));
  embedding_forward_cuda(emb.f32(), on_gpu(table).f32(), on_gpu(idx).i32(), int64_t(idx.size()), 33, s);
  CHECK(emb.to_vector<float>() == want);  // a gather: exact
#endif
}

TEST_CASE("cuda many-tensor Adam, SGD, sums of squares and scaling match the host passes") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  // sizes on both sides of the chunk border, empty tensors between others, one of several chunks
  const std::vector<int64_t> sizes = {0, 1, kMultiChunk - 1, kMultiChunk, 0, kMultiChunk + 1, 3, 3 * kMultiChunk + 17};
  const int64_t K = int64_t(sizes.size());
  std::vector<std::vector<float>> w, g;
  std::vector<std::vector<double>> m, v;
  std::vector<Tensor> gw, gg, gm, gv;
  for (int64_t k = 0; k < K; ++k) {
    w.push_back(testing::random_values<float>(size_t(sizes[k]), 10 + uint32_t(k)));
    g.push_back(testing::random_values<float>(size_t(sizes[k]), 30 + uint32_t(k)));
    m.emplace_back(size_t(sizes[k]), 0.0), v.emplace_back(size_t(sizes[k]), 0.0);
    gw.push_back(on_gpu(w[k])), gg.push_back(on_gpu(g[k])), gm.push_back(on_gpu(m[k])), gv.push_back(on_gpu(v[k]));
  }
  for (int t = 1; t <= 3; ++t) {  // Adam on even tensors, AdamW on odd ones, each with its own step count
    std::vector<AdamTensor<float>> list, host;
    for (int64_t k = 0; k < K; ++k) {
      const int tk = t + int(k);
      const AdamStep st{1e-2, 0.9, 0.999, 1e-8, 1e-3 * double(k), 1 - std::pow(0.9, tk), 1 - std::pow(0.999, tk), k % 2 == 1};
      list.push_back({gw[k].f32(), gg[k].f32(), gm[k].f64(), gv[k].f64(), sizes[k], -1, st});
      host.push_back({w[k].data(), g[k].data(), m[k].data(), v[k].data(), sizes[k], -1, st});
    }
    const Tensor dl = list_on_gpu(list);
    adam_multi_cuda(static_cast<const AdamTensor<float>*>(dl.data()), K, plan_chunks(list.data(), K), s);
    adam_multi_cpu(host.data(), K, plan_chunks(host.data(), K));
  }
  for (int64_t k = 0; k < K; ++k) {
    CAPTURE(k);
    GNN_CHECK_CLOSE(gw[k].to_vector<float>(), w[k], 1e-6, 1e-6);
    GNN_CHECK_CLOSE(gm[k].to_vector<double>(), m[k], 1e-12, 1e-9);
    GNN_CHECK_CLOSE(gv[k].to_vector<double>(), v[k], 1e-12, 1e-9);
  }
  for (int t = 1; t <= 2; ++t) {  // SGD, momentum buffers on even tensors only
    std::vector<SgdTensor<float>> list, host;
    for (int64_t k = 0; k < K; ++k) {
      const SgdStep st{0.1, 0.9, 1e-4, t == 1};
      list.push_back({gw[k].f32(), gg[k].f32(), k % 2 ? nullptr : gm[k].f64(), sizes[k], -1, st});
      host.push_back({w[k].data(), g[k].data(), k % 2 ? nullptr : m[k].data(), sizes[k], -1, st});
    }
    const Tensor dl = list_on_gpu(list);
    sgd_multi_cuda(static_cast<const SgdTensor<float>*>(dl.data()), K, plan_chunks(list.data(), K), s);
    sgd_multi_cpu(host.data(), K, plan_chunks(host.data(), K));
  }
  for (int64_t k = 0; k < K; ++k) {
    CAPTURE(k);
    GNN_CHECK_CLOSE(gw[k].to_vector<float>(), w[k], 1e-6, 1e-6);
    GNN_CHECK_CLOSE(gm[k].to_vector<double>(), m[k], 1e-12, 1e-9);
  }
  {  // per-chunk sums of squares (NaN-filled), twice for the same bits; then scaling, odd tensors in place
    std::vector<SumSquaresTensor<float>> list, host;
    for (int64_t k = 0; k < K; ++k) list.push_back({gg[k].f32(), sizes[k], -1}), host.push_back({g[k].data(), sizes[k], -1});
    const int64_t chunks = plan_chunks(host.data(), K);
    const Tensor dl = list_on_gpu(list);
    std::vector<double> want(static_cast<size_t>(chunks));
    sum_squares_multi_cpu(want.data(), host.data(), K, chunks);
    std::vector<std::vector<double>> runs;
    for (int r = 0; r < 2; ++r) {
      Tensor part = Tensor::full({chunks}, NAN, DType::F64, Device::cuda(0));
      sum_squares_multi_cuda(part.f64(), static_cast<const SumSquaresTensor<float>*>(dl.data()), K, chunks, s);
      runs.push_back(part.to_vector<double>());
    }
    GNN_CHECK_CLOSE(runs[0], want, 1e-13, 1e-12);
    CHECK(runs[0] == runs[1]);
    std::vector<ScaleTensor<float>> scale;
    std::vector<Tensor> out;
    for (int64_t k = 0; k < K; ++k) {
      out.push_back(k % 2 ? gg[k] : nan_gpu(sizes[k]));
      scale.push_back({out.back().f32(), gg[k].f32(), sizes[k], -1});
    }
    const Tensor sl = list_on_gpu(scale);
    scale_multi_cuda(static_cast<const ScaleTensor<float>*>(sl.data()), K, plan_chunks(scale.data(), K), -0.3, s);
    for (int64_t k = 0; k < K; ++k) {
      std::vector<float> want_k(g[k].size());
      for (size_t i = 0; i < want_k.size(); ++i) want_k[i] = float(double(g[k][i]) * -0.3);
      CHECK(out[k].to_vector<float>() == want_k);  // one double product rounded to float: exact
    }
  }
#endif
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
      const auto x = testing::random_values<float>(size_t(N * F), 1, -2.0f, 3.0f);
      const auto dy = testing::random_values<float>(size_t(N * F), 2);
      const auto gamma = testing::random_values<float>(size_t(F), 3, 0.5f, 1.5f), beta = testing::random_values<float>(size_t(F), 4);
      const std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end()), gd(gamma.begin(), gamma.end()),
          bd(beta.begin(), beta.end());
      std::vector<double> yd(size_t(N * F)), md(size_t(G * F)), rd(size_t(G * F)), dxd(size_t(N * F)), dgd(static_cast<size_t>(F)),
          dbd(static_cast<size_t>(F));
      instance_norm_forward_ref<double>(yd.data(), md.data(), rd.data(), xd.data(), affine ? gd.data() : nullptr,
                                        affine ? bd.data() : nullptr, ptr.data(), G, F, 1e-5);
      instance_norm_backward_ref<double>(dxd.data(), dgd.data(), dbd.data(), dyd.data(), xd.data(), md.data(), rd.data(),
                                         affine ? gd.data() : nullptr, ptr.data(), G, F);
      const Tensor gx = on_gpu(x), gdy = on_gpu(dy), gg = on_gpu(gamma), gb = on_gpu(beta);
      Tensor y = nan_gpu(N * F), mean = nan_gpu(G * F), rstd = nan_gpu(G * F), dx = nan_gpu(N * F), dg = nan_gpu(F),
             db = nan_gpu(F), ws = nan_gpu(2 * G * F);
      const float* gp = affine ? gg.f32() : nullptr;
      instance_norm_forward_cuda(y.f32(), mean.f32(), rstd.f32(), gx.f32(), gp, affine ? gb.f32() : nullptr, gptr.i64(),
                                 G, F, 1e-5f, s);
      instance_norm_backward_cuda(dx.f32(), dg.f32(), db.f32(), gdy.f32(), gx.f32(), mean.f32(), rstd.f32(), gp,
                                  gptr.i64(), G, F, ws.f32(), s);
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

TEST_CASE("cuda elementwise maps, column sums, transpose and row-wise softmax match their references") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  // R x F with R wider than a block's 8 warps of rows and F not a multiple of 32; F = 1 and a 1-row case;
  // column sums over one slice (R <= 64), a few and the most slices (256, with a short last one)
  for (auto [R, F] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {7, 3}, {64, 5}, {65, 40}, {1000, 33}, {3, 1000}, {20000, 7}, {100003, 32}}) {
    CAPTURE(R);
    CAPTURE(F);
    const int64_t n = R * F;
    const auto a = testing::random_values<float>(size_t(n), 1, -3.0f, 3.0f), b = testing::random_values<float>(size_t(n), 2);
    const auto row = testing::random_values<float>(size_t(F), 3), dy = testing::random_values<float>(size_t(n), 4);
    const Tensor ga = on_gpu(a), gb = on_gpu(b), grow = on_gpu(row), gdy = on_gpu(dy);
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

TEST_CASE("cuda layer norm, ordered embedding backward and the column plumbing match their references") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  for (auto [R, F] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 3}, {1000, 33}, {3, 1000}, {30000, 20}}) {
    CAPTURE(R);
    CAPTURE(F);
    const int64_t n = R * F;
    const auto x = testing::random_values<float>(size_t(n), 1, -3.0f, 3.0f), dy = testing::random_values<float>(size_t(n), 2);
    const auto gamma = testing::random_values<float>(size_t(F), 3), beta = testing::random_values<float>(size_t(F), 4);
    const std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end()), gd(gamma.begin(), gamma.end()),
        bd(beta.begin(), beta.end());
    std::vector<double> yd(static_cast<size_t>(n)), md(static_cast<size_t>(R)), rd(static_cast<size_t>(R)), dxd(static_cast<size_t>(n)), dgd(static_cast<size_t>(F)), dbd(static_cast<size_t>(F));
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
    for (int64_t i = 0; i < n; ++i) masked[size_t(i)] = keep[size_t(i / F)] ? dyd[size_t(i)] : 0.0, scaled[size_t(i)] = -2.5 * xd[size_t(i)];
    Tensor mk = nan_gpu(n), sc = nan_gpu(n);
    mask_rows_cuda(mk.f32(), gdy.f32(), on_gpu(keep).data_as<uint8_t>(), R, F, s);
    scale_cuda(sc.f32(), gx.f32(), -2.5f, n, s);
    GNN_CHECK_CLOSE(mk.to_vector<float>(), masked);
    // dropout: the GPU draws the host's mask, bit for bit
    std::vector<float> dropped(static_cast<size_t>(n));
    dropout_apply<float>(dropped.data(), x.data(), n, 0x1234abcdull, uint32_t(0.3 * (1 << 24)), 1.0f / 0.7f);
    Tensor dr = nan_gpu(n);
    dropout_apply_cuda(dr.f32(), gx.f32(), n, 0x1234abcdull, uint32_t(0.3 * (1 << 24)), 1.0f / 0.7f, s);
    CHECK(same_bits(dr.to_vector<float>(), dropped));
    GNN_CHECK_CLOSE(sc.to_vector<float>(), scaled);
  }
  // heads: x [R, H*D]; head_dot, its backward, block_sum (the head mean) and head_broadcast
  const int64_t R = 517, H = 3, D = 19, W = H * D;
  const auto x = testing::random_values<float>(size_t(R * W), 5), a = testing::random_values<float>(size_t(W), 6);
  const auto g = testing::random_values<float>(size_t(R * H), 7), gm = testing::random_values<float>(size_t(R * D), 8);
  std::vector<double> dot(size_t(R * H), 0.0), mean(size_t(R * D), 0.0);
  std::vector<double> dxd(static_cast<size_t>(R * W)), prod(static_cast<size_t>(R * W)), bcast(static_cast<size_t>(R * W));
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
  // embedding backward: repeated and unused rows, summed in index order (the CPU kernel's bits); then a
  // hub row with most of the uses (over a hundred chunks) next to rows of one chunk and of two
  for (int pattern : {0, 1}) {
    CAPTURE(pattern);
    const int64_t K = 50, Fe = 33, ne = pattern == 0 ? 1000 : 9000;
    std::vector<int32_t> idx(static_cast<size_t>(ne));
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t((i * 7919) % 47);  // rows 47..49 unused
    if (pattern == 1)
      for (size_t i = 0; i < idx.size(); ++i) idx[i] = i < 64 ? 5 : i % 5 == 0 ? int32_t(i % 47) : 3;
    const auto edy = testing::random_values<float>(size_t(ne * Fe), 9);
    const std::vector<double> edyd(edy.begin(), edy.end());
    std::vector<double> dtd(static_cast<size_t>(K * Fe));
    embedding_backward_ref<double>(dtd.data(), edyd.data(), idx.data(), ne, K, Fe);
    std::vector<int64_t> ptr(static_cast<size_t>(K + 1)), uses(static_cast<size_t>(ne)), cptr(static_cast<size_t>(K + 1));
    const int64_t chunks = embedding_inverse(idx.data(), ne, K, ptr.data(), uses.data(), cptr.data());
    CHECK(chunks == cptr[size_t(K)]);
    if (pattern == 1) CHECK(cptr[4] - cptr[3] > 100);  // row 3's uses span many chunks
    Tensor dt = nan_gpu(K * Fe), ws = nan_gpu(chunks * Fe);
    embedding_backward_cuda(dt.f32(), on_gpu(edy).f32(), on_gpu(ptr).i64(), on_gpu(uses).i64(), on_gpu(cptr).i64(),
                            chunks, K, Fe, ws.f32(), s);
    GNN_CHECK_CLOSE(dt.to_vector<float>(), dtd, 1e-4, 1e-4);
    std::vector<float> cpu(static_cast<size_t>(K * Fe));
    embedding_backward_cpu(cpu.data(), edy.data(), idx.data(), ne, K, Fe);
    CHECK(same_bits(dt.to_vector<float>(), cpu));
  }
#endif
}

TEST_CASE("cuda fused sage: forward (training and inference) and backward match the double reference") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  for (const auto& c : testing::standard_graph_cases(5)) {
    CAPTURE(c.name);
    const Graph dg = c.graph.to(Device::cuda(0));
    const CsrView hv = testing::csr_view(c.graph), dv = ag::csr_view(dg);
    const int64_t N = c.graph.num_nodes;
    for (auto [F, O] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 8}, {33, 17}, {128, 64}}) {
      for (Act act : {Act::kNone, Act::kRelu, Act::kGelu}) {
        for (bool bias : {false, true}) {
          CAPTURE(F);
          CAPTURE(O);
          CAPTURE(act_name(act));
          CAPTURE(bias);
          const auto x = testing::random_values<float>(size_t(N * F), 1);
          const auto W = testing::random_values<float>(size_t(2 * F * O), 2, -0.5f, 0.5f);
          const auto b = testing::random_values<float>(size_t(O), 3);
          const auto dy = testing::random_values<float>(size_t(N * O), 4);
          const std::vector<double> xd(x.begin(), x.end()), Wd(W.begin(), W.end()), bd(b.begin(), b.end()),
              dyd(dy.begin(), dy.end());
          std::vector<double> yd(size_t(N * O)), zd(size_t(N * O)), dxd(size_t(N * F)), dWd(size_t(2 * F * O)),
              dbd(static_cast<size_t>(O));
          sage_forward_ref<double>(yd.data(), zd.data(), xd.data(), hv, Wd.data(), bias ? bd.data() : nullptr, F, O,
                                   act, 0.01);
          sage_backward_ref<double>(dxd.data(), dWd.data(), bias ? dbd.data() : nullptr, dyd.data(), zd.data(),
                                    xd.data(), hv, Wd.data(), F, O, act, 0.01);
          const Tensor gx = on_gpu(x), gW = on_gpu(W), gb = on_gpu(b), gdy = on_gpu(dy);
          const float* bp = bias ? gb.f32() : nullptr;
          Tensor y = nan_gpu(N * O), z = nan_gpu(N * O), h = nan_gpu(N * 2 * F), dx = nan_gpu(N * F),
                 dW = nan_gpu(2 * F * O), db = nan_gpu(O), ws = nan_gpu(sage_backward_workspace_cuda(N, F, O));
          sage_forward_cuda(y.f32(), z.f32(), h.f32(), nullptr, gx.f32(), dv, gW.f32(), bp, F, O, act, 0.01f, s);
          sage_backward_cuda(dx.f32(), dW.f32(), bias ? db.f32() : nullptr, gdy.f32(), z.f32(), h.f32(), dv, gW.f32(),
                             F, O, act, 0.01f, ws.f32(), s);
          const std::vector<float> yv = y.to_vector<float>();
          GNN_CHECK_CLOSE(yv, yd, 1e-4, 1e-4);
          GNN_CHECK_CLOSE(z.to_vector<float>(), zd, 1e-4, 1e-4);
          GNN_CHECK_CLOSE(dx.to_vector<float>(), dxd, 1e-4, 1e-4);
          GNN_CHECK_CLOSE(dW.to_vector<float>(), dWd, 1e-3, 1e-3);  // sums over all N rows
          if (bias) GNN_CHECK_CLOSE(db.to_vector<float>(), dbd, 1e-3, 1e-3);
          // inference: no z or h, the same y bits
          Tensor y_only = nan_gpu(N * O), scratch = nan_gpu(N * 2 * F);
          sage_forward_cuda(y_only.f32(), nullptr, nullptr, scratch.f32(), gx.f32(), dv, gW.f32(), bp, F, O, act, 0.01f,
                            s);
          CHECK(same_bits(y_only.to_vector<float>(), yv));
        }
      }
    }
  }
#endif
}
