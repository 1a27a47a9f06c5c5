// The CUDA kernels against the double references, on the standard graph cases, outputs pre-filled
// with NaN so an unwritten element fails; and two GPU runs giving the same bits. Without a GPU (or in a
// build without CUDA) every case skips with the reason.
#include <cmath>
#include <cstring>
#include <random>

#include "graph_cases.h"
#include "kernels/gemm.h"
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
            GNN_CHECK_CLOSE(yh, yd);
            if (op == Reduce::kMax) CHECK(arg.to_vector<int32_t>() == argd);  // the first maximum, as the reference
            GNN_CHECK_CLOSE(dxh, dxd);
            std::vector<double> acc(dxd);
            for (size_t i = 0; i < acc.size(); ++i) acc[i] += dx0[i];
            GNN_CHECK_CLOSE(dxah, acc);
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
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {7, 13, 5}, {257, 129, 65}, {1000, 64, 300}}) {
        for (float beta : {0.0f, 0.5f}) {
          CAPTURE(ta);
          CAPTURE(tb);
          CAPTURE(M);
          CAPTURE(N);
          CAPTURE(K);
          CAPTURE(beta);
          const int64_t pad = 3, lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
          const auto A = testing::random_values<float>(size_t((ta ? K : M) * lda), 1);
          const auto B = testing::random_values<float>(size_t((tb ? N : K) * ldb), 2);
          const auto C0 = testing::random_values<float>(size_t(M * ldc), 3);
          std::vector<double> Ad(A.begin(), A.end()), Bd(B.begin(), B.end()), Cd(C0.begin(), C0.end());
          gemm_ref<double>(ta, tb, M, N, K, 1.5, Ad.data(), lda, Bd.data(), ldb, beta, Cd.data(), ldc);
          Tensor gA = on_gpu(A), gB = on_gpu(B), gC = beta == 0 ? nan_gpu(M * ldc) : on_gpu(C0);
          gemm_cuda(ta, tb, M, N, K, 1.5f, gA.f32(), lda, gB.f32(), ldb, beta, gC.f32(), ldc, cuda_stream(0));
          auto got = gC.to_vector<float>();
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = N; j < ldc; ++j) {  // padding is not written: it keeps its NaN or value
              float& g = got[size_t(i * ldc + j)];
              CHECK((beta == 0 ? std::isnan(g) : g == C0[size_t(i * ldc + j)]));
              g = float(Cd[size_t(i * ldc + j)]);
            }
          GNN_CHECK_CLOSE(got, Cd, 1e-5 + 3e-6 * double(K), 1e-4);
        }
      }
#endif
}
