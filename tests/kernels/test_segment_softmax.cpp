// Segment softmax and the GAT edge scores it normalises (kernels/segment_softmax.h): the reference by
// hand and against finite differences, the CPU kernels against it (bit for bit at the head counts
// tested, unrolled and not; the softmax's forward against a scalar model with its one reciprocal),
// the CUDA kernels against it on the standard graph cases (hubs included), and the autograd ops on the
// GPU against the host.
#include <cmath>
#include <cstring>

#include "autograd/device_check.h"
#include "device_buffers.h"
#include "graph_cases.h"
#include "kernels/segment_softmax.h"
#include "runtime/cuda.h"
#include "testing.h"

using namespace gnn;
using namespace gnn::testing;  // the helpers of testing.h, device_buffers.h and graph_cases.h

TEST_CASE("segment softmax: hand-worked, reference, finite differences") {
  const int32_t indptr[] = {0, 0, 2, 3};  // an empty segment, two edges, one edge
  const float x[] = {0.0f, std::log(3.0f), 5.0f};
  float y[3] = {NAN, NAN, NAN};
  segment_softmax_forward_cpu(y, x, indptr, 3, 1);
  CHECK(y[0] == doctest::Approx(0.25));
  CHECK(y[1] == doctest::Approx(0.75));
  CHECK(y[2] == 1.0f);

  for (const auto& c : standard_graph_cases(2)) {
    CAPTURE(c.name);
    const int64_t E = c.graph.num_edges, S = c.graph.num_nodes;
    for (int64_t H : {1, 4, 9}) {
      CAPTURE(H);
      const auto xs = random_values<float>(static_cast<size_t>(E * H), 1, -3.0f, 3.0f);
      const auto dy = random_values<float>(static_cast<size_t>(E * H), 2);
      std::vector<double> yd(static_cast<size_t>(E * H)), dxd(static_cast<size_t>(E * H));
      segment_softmax_forward_ref<double>(yd.data(), to_double(xs).data(), c.graph.csr_indptr.i32(), S, H);
      segment_softmax_backward_ref<double>(dxd.data(), yd.data(), to_double(dy).data(), c.graph.csr_indptr.i32(), S, H);
      std::vector<float> ys(static_cast<size_t>(E * H), NAN), dx(static_cast<size_t>(E * H), NAN);
      segment_softmax_forward_cpu(ys.data(), xs.data(), c.graph.csr_indptr.i32(), S, H);
      segment_softmax_backward_cpu(dx.data(), ys.data(), dy.data(), c.graph.csr_indptr.i32(), S, H);
      GNN_CHECK_CLOSE(ys, yd);
      GNN_CHECK_CLOSE(dx, dxd);
    }
  }
  const Graph g = random_graph(5, 12, 4);
  auto xd = random_values<double>(24, 5);
  const auto gout = random_values<double>(24, 6);
  std::vector<double> yd(24), dxd(24);
  segment_softmax_forward_ref<double>(yd.data(), xd.data(), g.csr_indptr.i32(), 5, 2);
  segment_softmax_backward_ref<double>(dxd.data(), yd.data(), gout.data(), g.csr_indptr.i32(), 5, 2);
  check_gradient(xd, dxd, [&] {
    std::vector<double> y(24);
    segment_softmax_forward_ref<double>(y.data(), xd.data(), g.csr_indptr.i32(), 5, 2);
    return dot(y, gout);
  });
}

TEST_CASE("segment softmax and GAT scores: the CPU's bits at the head counts tested") {
  // The kernels unroll H = 1, 2 and 4 and read any other H at run time (past 16 with the scratch on the
  // heap), in the same order: the scores and the softmax's backward must have the float reference's
  // bits, the softmax's forward the reference's but for its one reciprocal (exp(x - max) times 1 / sum
  // instead of over the sum).
  auto bits = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  for (const Graph& gr : {random_graph(300, 2500, 41, true), random_graph(130, 400, 42)}) {
    const CsrView v = csr_view(gr);
    const int64_t N = gr.num_nodes, E = gr.num_edges;
    const int32_t* indptr = gr.csr_indptr.i32();
    for (int64_t H : {1, 2, 3, 4, 5, 8, 9, 17}) {
      CAPTURE(N);
      CAPTURE(H);
      const auto as = random_values<float>(size_t(N * H), 1), ad = random_values<float>(size_t(N * H), 2);
      const auto ds = random_values<float>(size_t(E * H), 3);
      std::vector<float> s(size_t(E * H), NAN), s_ref(s), das(size_t(N * H), NAN), dad(das), das_ref(das),
          dad_ref(das);
      gat_scores_forward_cpu(s.data(), as.data(), ad.data(), v, H, 0.2f);
      gat_scores_forward_ref<float>(s_ref.data(), as.data(), ad.data(), v, H, 0.2f);
      gat_scores_backward_cpu(das.data(), dad.data(), ds.data(), as.data(), ad.data(), v, H, 0.2f);
      gat_scores_backward_ref<float>(das_ref.data(), dad_ref.data(), ds.data(), as.data(), ad.data(), v, H, 0.2f);
      CHECK(bits(s, s_ref));
      CHECK(bits(das, das_ref));
      CHECK(bits(dad, dad_ref));
      std::vector<float> y(size_t(E * H), NAN), y_want(size_t(E * H)), dx(y), dx_ref(y);
      segment_softmax_forward_cpu(y.data(), s.data(), indptr, N, H);
      for (int64_t r = 0; r < N; ++r)
        for (int64_t h = 0; h < H; ++h) {
          const int32_t b = indptr[r], e = indptr[r + 1];
          if (b == e) continue;
          float m = s[size_t(b * H + h)], sum = 0.0f;
          for (int32_t p = b + 1; p < e; ++p) m = std::max(m, s[size_t(p * H + h)]);
          for (int32_t p = b; p < e; ++p) sum += (y_want[size_t(p * H + h)] = vm::exp(s[size_t(p * H + h)] - m));
          const float inv = 1.0f / sum;
          for (int32_t p = b; p < e; ++p) y_want[size_t(p * H + h)] *= inv;
        }
      CHECK(bits(y, y_want));
      segment_softmax_backward_cpu(dx.data(), y.data(), ds.data(), indptr, N, H);
      segment_softmax_backward_ref<float>(dx_ref.data(), y.data(), ds.data(), indptr, N, H);
      CHECK(bits(dx, dx_ref));
    }
  }
}

TEST_CASE("GAT scores: reference, finite differences, thread-count determinism") {
  for (const auto& c : standard_graph_cases(4)) {
    CAPTURE(c.name);
    const CsrView v = csr_view(c.graph);
    const int64_t N = c.graph.num_nodes, E = c.graph.num_edges, H = 3;
    const auto as = random_values<float>(static_cast<size_t>(N * H), 1),
               ad = random_values<float>(static_cast<size_t>(N * H), 2);
    const auto ds = random_values<float>(static_cast<size_t>(E * H), 3);
    std::vector<double> sd(static_cast<size_t>(E * H)), dasd(static_cast<size_t>(N * H)),
        dadd(static_cast<size_t>(N * H));
    gat_scores_forward_ref<double>(sd.data(), to_double(as).data(), to_double(ad).data(), v, H, 0.2);
    gat_scores_backward_ref<double>(dasd.data(), dadd.data(), to_double(ds).data(), to_double(as).data(),
                                    to_double(ad).data(), v, H, 0.2);
    std::vector<float> s(static_cast<size_t>(E * H), NAN), das(static_cast<size_t>(N * H), NAN),
        dad(static_cast<size_t>(N * H), NAN);
    gat_scores_forward_cpu(s.data(), as.data(), ad.data(), v, H, 0.2f);
    gat_scores_backward_cpu(das.data(), dad.data(), ds.data(), as.data(), ad.data(), v, H, 0.2f);
    GNN_CHECK_CLOSE(s, sd);
    GNN_CHECK_CLOSE(das, dasd, 1e-4, 1e-4);
    GNN_CHECK_CLOSE(dad, dadd, 1e-4, 1e-4);
  }
  const Graph g = random_graph(6, 14, 7);
  const CsrView v = csr_view(g);
  auto as = random_values<double>(12, 1), ad = random_values<double>(12, 2);
  const auto gout = random_values<double>(28, 3);
  std::vector<double> das(12), dad(12);
  gat_scores_backward_ref<double>(das.data(), dad.data(), gout.data(), as.data(), ad.data(), v, 2, 0.2);
  auto loss = [&] {
    std::vector<double> s(28);
    gat_scores_forward_ref<double>(s.data(), as.data(), ad.data(), v, 2, 0.2);
    return dot(s, gout);
  };
  check_gradient(as, das, loss);
  check_gradient(ad, dad, loss);
}

TEST_CASE("cuda segment softmax and GAT scores match the double reference, hubs included") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  for (const auto& c : standard_graph_cases(5)) {
    CAPTURE(c.name);
    const Graph dg = c.graph.to(Device::cuda(0));
    const CsrView hv = csr_view(c.graph), dv = ag::csr_view(dg);
    const int64_t N = c.graph.num_nodes, E = c.graph.num_edges;
    // 1, 4, 8, 32: the grouped kernels (8 or 32 lanes per row); 3: one warp per (row, head)
    for (int64_t H : {1, 3, 4, 8, 32}) {
      CAPTURE(H);
      const auto x = random_values<float>(size_t(E * H), 1, -3.0f, 3.0f);
      const auto dy = random_values<float>(size_t(E * H), 2);
      const auto as = random_values<float>(size_t(N * H), 3), ad = random_values<float>(size_t(N * H), 4);
      const std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end()), asd(as.begin(), as.end()),
          add(ad.begin(), ad.end());
      std::vector<double> yd(size_t(E * H)), dxd(size_t(E * H)), sd(size_t(E * H)), dasd(size_t(N * H)),
          dadd(size_t(N * H));
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

TEST_CASE("cuda ops: GAT scores and the segment softmax match the host") {
  GNN_SKIP_UNLESS_CUDA();
  const Graph g = random_graph(300, 2400, 31, true);
  const int64_t H = 4;
  const Tensor as = rand({300, H}, 32), ad = rand({300, H}, 33);
  check_op(
      "gat_scores", {as, ad}, [](auto& v, const Graph& g) { return ag::gat_scores(g, v[0], v[1], 0.2); }, g);
  check_op(
      "segment_softmax", {rand({2400, H}, 34)}, [](auto& v, const Graph& g) { return ag::segment_softmax(g, v[0]); },
      g);
}
