// Gather / scatter SpMM (kernels/spmm.h): a hand-worked graph, the CPU kernels against the double
// reference on the standard graph cases and on any thread count, every head in one call against one
// call per head, its backward against finite differences, the CUDA kernels against the reference (two
// runs, the same bits), and the autograd op on the GPU against the host (per-head weights, bipartite
// graphs).
#include <cmath>
#include <cstring>

#include "autograd/device_check.h"
#include "device_buffers.h"
#include "graph_cases.h"
#include "kernels/gather_rows.h"
#include "kernels/spmm.h"
#include "runtime/cuda.h"
#include "runtime/parallel.h"
#include "testing.h"

using namespace gnn;
using namespace gnn::testing;  // the helpers of testing.h, device_buffers.h and graph_cases.h

TEST_CASE("spmm: hand-worked 4-node graph (an isolated node and a self-loop)") {
  // edges 0->1, 2->1, 1->2, 2->2 (self-loop); node 3 has no edges. F = 2.
  const int64_t src[] = {0, 2, 1, 2}, dst[] = {1, 1, 2, 2};
  const Graph g = Graph::from_edges(src, dst, 4, 4);
  const CsrView v = csr_view(g);
  const std::vector<float> x = {1, -1, 2, 5, 3, 0, 9, 9};  // rows: node 0..3
  std::vector<float> y(8, NAN);
  std::vector<int32_t> arg(8, 7);
  spmm_forward_cpu(y.data(), nullptr, x.data(), nullptr, v, 2, 2, 2, Reduce::kSum);
  CHECK(y == std::vector<float>{0, 0, 4, -1, 5, 5, 0, 0});
  spmm_forward_cpu(y.data(), nullptr, x.data(), nullptr, v, 2, 2, 2, Reduce::kMean);
  CHECK(y == std::vector<float>{0, 0, 2, -0.5f, 2.5f, 2.5f, 0, 0});
  spmm_forward_cpu(y.data(), arg.data(), x.data(), nullptr, v, 2, 2, 2, Reduce::kMax);
  CHECK(y == std::vector<float>{0, 0, 3, 0, 3, 5, 0, 0});
  CHECK(arg == std::vector<int32_t>{-1, -1, 1, 1, 3, 2, -1, -1});  // CSR positions of the winners
  const std::vector<float> w = {2, 1, 1, -1};
  spmm_forward_cpu(y.data(), nullptr, x.data(), w.data(), v, 2, 2, 2, Reduce::kSum);
  CHECK(y == std::vector<float>{0, 0, 5, -2, -1, 5, 0, 0});
}

TEST_CASE("spmm: fast CPU matches the double reference on the standard cases") {
  for (const auto& c : standard_graph_cases(3)) {
    CAPTURE(c.name);
    const CsrView v = csr_view(c.graph);
    const int64_t N = c.graph.num_nodes, E = c.graph.num_edges;
    for (int64_t F : {1, 3, 8, 33, 64, 128, 257}) {
      if (c.name == "hub_10k" && F > 33) continue;  // keeps the suite fast; the hub's size is in its edges
      CAPTURE(F);
      const int64_t ld = F + (F % 2);  // a row stride wider than F, as for a slice of a wider tensor
      const auto x = random_values<float>(static_cast<size_t>(N * ld), 1);
      const auto w = random_values<float>(static_cast<size_t>(E), 2, 0.5f, 2.0f);
      const auto dy = random_values<float>(static_cast<size_t>(N * ld), 3);
      const std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), dyd(dy.begin(), dy.end());
      for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
        for (bool weighted : {false, true}) {
          CAPTURE(reduce_name(op));
          CAPTURE(weighted);
          std::vector<float> y(static_cast<size_t>(N * ld), NAN), dx(static_cast<size_t>(N * ld), NAN),
              dw(static_cast<size_t>(E), NAN);
          std::vector<double> yd(static_cast<size_t>(N * ld), 0), dxd(static_cast<size_t>(N * ld), 0),
              dwd(static_cast<size_t>(E), 0);
          std::vector<int32_t> arg(static_cast<size_t>(N * F), -7), argd(static_cast<size_t>(N * F), -7);
          const float* wp = weighted ? w.data() : nullptr;
          const double* wpd = weighted ? wd.data() : nullptr;
          spmm_forward_ref<double>(yd.data(), argd.data(), xd.data(), wpd, v, F, ld, ld, op);
          spmm_forward_cpu(y.data(), arg.data(), x.data(), wp, v, F, ld, ld, op);
          for (int64_t r = 0; r < N; ++r)
            for (int64_t f = F; f < ld; ++f) y[size_t(r * ld + f)] = 0;  // padding columns are not outputs
          GNN_CHECK_CLOSE(y, yd);
          if (op == Reduce::kMax) CHECK(arg == argd);  // data movement: exact
          spmm_backward_x_ref<double>(dxd.data(), dyd.data(), argd.data(), wpd, v, F, ld, ld, op);
          spmm_backward_x_cpu(dx.data(), dy.data(), arg.data(), wp, v, F, ld, ld, op);
          for (int64_t r = 0; r < N; ++r)
            for (int64_t f = F; f < ld; ++f) dx[size_t(r * ld + f)] = 0;
          GNN_CHECK_CLOSE(dx, dxd);
          spmm_backward_w_ref<double>(dwd.data(), dyd.data(), xd.data(), argd.data(), v, F, ld, ld, op);
          spmm_backward_w_cpu(dw.data(), dy.data(), x.data(), arg.data(), v, F, ld, ld, op);
          GNN_CHECK_CLOSE(dw, dwd, 1e-4, 1e-4);
        }
      }
    }
  }
}

TEST_CASE("spmm: the forward with a base writes base + the aggregate, the bits of adding after") {
  const Graph gr = random_graph(300, 1500, 19, true);
  const CsrView v = csr_view(gr);
  const int64_t N = 300;
  for (int64_t F : {5, 700}) {
    CAPTURE(F);
    const int64_t ld = F + 3;
    const auto x = random_values<float>(size_t(N * ld), 1);
    const auto w = random_values<float>(size_t(gr.num_edges), 2, 0.5f, 2.0f);
    const auto base = random_values<float>(size_t(N * ld), 3);
    for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
      CAPTURE(reduce_name(op));
      std::vector<float> alone(size_t(N * ld), 0.0f), plus(size_t(N * ld), NAN), ref_alone(alone), ref(plus);
      std::vector<int32_t> arg(size_t(N * F)), arg_plus(size_t(N * F));
      spmm_forward_cpu(alone.data(), arg.data(), x.data(), w.data(), v, F, ld, ld, op);
      spmm_forward_cpu(plus.data(), arg_plus.data(), x.data(), w.data(), v, F, ld, ld, op, base.data());
      spmm_forward_ref<float>(ref_alone.data(), arg.data(), x.data(), w.data(), v, F, ld, ld, op);
      spmm_forward_ref<float>(ref.data(), arg.data(), x.data(), w.data(), v, F, ld, ld, op, base.data());
      bool same = true, same_ref = true;
      for (int64_t r = 0; r < N; ++r)
        for (int64_t f = 0; f < ld; ++f) {
          const size_t i = size_t(r * ld + f);
          if (f >= F) {  // padding columns are not outputs
            same = same && std::isnan(plus[i]) && std::isnan(ref[i]);
            continue;
          }
          same = same && plus[i] == base[i] + alone[i];
          same_ref = same_ref && ref[i] == base[i] + ref_alone[i];
        }
      CHECK(same);
      CHECK(same_ref);
      CHECK(arg_plus == arg);
    }
  }
  std::vector<float> y(size_t(N * 5)), x(size_t(N * 5));  // y is formed before base is read: never both
  CHECK_THROWS_WITH(spmm_forward_cpu(y.data(), nullptr, x.data(), nullptr, v, 5, 5, 5, Reduce::kSum, y.data()),
                    doctest::Contains("base must not be y"));
}

TEST_CASE("spmm: the CPU sum, mean and max, forward and backward, have the float reference's bits at any "
          "width and alignment") {
  // The kernels form blocks of 64, 16 and 4 columns in registers and the last F % 4 in the output itself
  // (gather_rows.h): every width to 70 and some past 64 + 16k (each of the dispatch's branches), rows
  // starting off a 64-byte boundary (one float in, as a NumPy array may), and the sums, 0 plus the terms
  // in edge order, must have the float reference's bits (the forward's mean: the sum times 1 / degree);
  // the max, on values with many ties, the reference's bits and edges (the first of equal terms). Nothing
  // outside the outputs is written: the row stride's padding column and the float before y stay NaN.
  const Graph gr = random_graph(200, 1400, 23, true);
  const CsrView v = csr_view(gr);
  const int64_t N = 200;
  auto bits = [](float a) {
    uint32_t u;
    std::memcpy(&u, &a, 4);
    return u;
  };
  std::vector<int64_t> widths;
  for (int64_t F = 1; F <= 70; ++F) widths.push_back(F);
  for (int64_t F : {96, 100, 113, 127, 128, 129, 160, 200}) widths.push_back(F);
  for (int64_t F : widths) {
    for (int64_t ld : {F, F + 1}) {
      CAPTURE(F);
      CAPTURE(ld);
      std::vector<float> xs = random_values<float>(size_t(N * ld + 1), 4);
      const auto w = random_values<float>(size_t(gr.num_edges), 5, 0.5f, 2.0f);
      std::vector<float> ys(size_t(N * ld + 1)), ref(size_t(N * ld));
      const float* x = xs.data() + 1;  // off the allocation's alignment
      float* y = ys.data() + 1;
      // run(kernel) on y filled with NaN; true when y's outputs have want(r, f)'s bits and the rest is NaN
      auto matches = [&](auto&& kernel, auto&& want) {
        std::fill(ys.begin(), ys.end(), NAN);
        kernel();
        bool ok = std::isnan(ys[0]);
        for (int64_t r = 0; r < N; ++r)
          for (int64_t f = 0; f < ld; ++f)
            ok = ok && (f < F ? bits(y[r * ld + f]) == bits(want(r, f)) : std::isnan(y[r * ld + f]));
        return ok;
      };
      auto ref_at = [&](int64_t r, int64_t f) { return ref[size_t(r * ld + f)]; };
      for (const float* wp : {static_cast<const float*>(nullptr), w.data()}) {
        CAPTURE(wp != nullptr);
        spmm_forward_ref<float>(ref.data(), nullptr, x, wp, v, F, ld, ld, Reduce::kSum);
        CHECK(matches([&] { spmm_forward_cpu(y, nullptr, x, wp, v, F, ld, ld, Reduce::kSum); }, ref_at));
        CHECK(matches([&] { spmm_forward_cpu(y, nullptr, x, wp, v, F, ld, ld, Reduce::kMean); },
                      [&](int64_t r, int64_t f) {
                        const int32_t deg = v.indptr[r + 1] - v.indptr[r];
                        return deg ? ref_at(r, f) * (1.0f / float(deg)) : ref_at(r, f);
                      }));
        std::vector<float> xq(xs);  // x in steps of 1/4: many ties, so the first equal term must win
        for (float& a : xq) a = std::round(a * 4.0f) / 4.0f;
        std::vector<int32_t> arg(size_t(N * F)), arg_ref(size_t(N * F));
        spmm_forward_ref<float>(ref.data(), arg_ref.data(), xq.data() + 1, wp, v, F, ld, ld, Reduce::kMax);
        CHECK(matches([&] { spmm_forward_cpu(y, arg.data(), xq.data() + 1, wp, v, F, ld, ld, Reduce::kMax); },
                      ref_at));
        CHECK(arg == arg_ref);
        for (Reduce op : {Reduce::kSum, Reduce::kMean}) {  // the backward: x's rows as dy, y's as dx
          CAPTURE(reduce_name(op));
          spmm_backward_x_ref<float>(ref.data(), x, nullptr, wp, v, F, ld, ld, op);
          CHECK(matches([&] { spmm_backward_x_cpu(y, x, nullptr, wp, v, F, ld, ld, op); }, ref_at));
        }
      }
    }
  }
  // A row whose terms are all -0 sums to +0, as the reference's and torch's do (23 columns: 16 in a
  // vector, 4 in a 4-lane one, 3 in the row).
  const int64_t src[] = {0, 0}, dst[] = {1, 1};
  const Graph g2 = Graph::from_edges(src, dst, 2, 2);
  const CsrView v2 = csr_view(g2);
  const std::vector<float> x2(2 * 23, -0.0f);
  std::vector<float> y2(2 * 23, NAN);
  for (Reduce op : {Reduce::kSum, Reduce::kMean}) {
    spmm_forward_cpu(y2.data(), nullptr, x2.data(), nullptr, v2, 23, 23, 23, op);
    CHECK(!std::signbit(y2[23]));
    CHECK(!std::signbit(y2[45]));
    spmm_backward_x_cpu(y2.data(), x2.data(), nullptr, nullptr, v2, 23, 23, 23, op);
    CHECK(!std::signbit(y2[0]));
    CHECK(!std::signbit(y2[22]));
  }
  // The max is NaN where a term is NaN (first or not), and takes +inf over any finite term, at every width's
  // register and tail columns (23 = 16 + 4 + 3: each kind of column).
  std::vector<float> x3(2 * 23);
  for (int64_t f = 0; f < 23; ++f) x3[size_t(f)] = f % 2 ? NAN : 1.0f, x3[size_t(23 + f)] = f % 3 ? INFINITY : NAN;
  const int64_t src3[] = {0, 1}, dst3[] = {0, 0};
  const Graph g3 = Graph::from_edges(src3, dst3, 2, 2);
  const CsrView v3 = csr_view(g3);
  std::vector<float> y3(2 * 23, -1.0f), y3_ref(2 * 23);
  std::vector<int32_t> a3(2 * 23), a3_ref(2 * 23);
  spmm_forward_cpu(y3.data(), a3.data(), x3.data(), nullptr, v3, 23, 23, 23, Reduce::kMax);
  spmm_forward_ref<float>(y3_ref.data(), a3_ref.data(), x3.data(), nullptr, v3, 23, 23, 23, Reduce::kMax);
  CHECK(a3 == a3_ref);
  for (size_t i = 0; i < y3.size(); ++i) CHECK(bits(y3[i]) == bits(y3_ref[i]));
  CHECK(std::isnan(y3[1]));  // NaN first: kept
  CHECK(std::isnan(y3[6]));  // 1 then NaN: NaN, from edge 1
  CHECK(a3[6] == 1);
  CHECK(y3[2] == INFINITY);  // 1 then +inf: +inf, from edge 1
  CHECK(a3[2] == 1);
  CHECK(a3[3 + 23] == -1);  // node 1 has no edges
  // The max's backward passes a gradient only to the edge that won: an infinite or NaN dy reaches that
  // source alone (a product by the mask, 0 * inf, gave the other sources NaN), as the reference's.
  std::vector<float> dy3(2 * 23, 0.0f), dx3(2 * 23), dx3_ref(2 * 23), dw3(2), dw3_ref(2);
  for (int64_t f = 0; f < 23; ++f) dy3[size_t(f)] = f % 4 == 0 ? INFINITY : (f % 4 == 1 ? -INFINITY : NAN);
  spmm_backward_x_cpu(dx3.data(), dy3.data(), a3.data(), nullptr, v3, 23, 23, 23, Reduce::kMax);
  spmm_backward_x_ref<float>(dx3_ref.data(), dy3.data(), a3.data(), nullptr, v3, 23, 23, 23, Reduce::kMax);
  for (size_t i = 0; i < dx3.size(); ++i) CHECK(bits(dx3[i]) == bits(dx3_ref[i]));
  CHECK(dx3[2] == 0.0f);  // column 2: edge 1 (source 1) won, source 0 gets nothing
  // The edge weights' gradient the same: dy finite where edge 1 won and +inf where edge 0 did, so edge
  // 1's is finite (the mask's product gave it NaN) and edge 0's +inf.
  const std::vector<float> x3f(2 * 23, 1.0f);
  std::vector<float> dyw(2 * 23, 0.0f);
  for (int64_t f = 0; f < 23; ++f) dyw[size_t(f)] = a3[size_t(f)] == 1 ? 0.5f : INFINITY;
  spmm_backward_w_cpu(dw3.data(), dyw.data(), x3f.data(), a3.data(), v3, 23, 23, 23, Reduce::kMax);
  spmm_backward_w_ref<float>(dw3_ref.data(), dyw.data(), x3f.data(), a3.data(), v3, 23, 23, 23, Reduce::kMax);
  for (size_t i = 0; i < dw3.size(); ++i) CHECK(bits(dw3[i]) == bits(dw3_ref[i]));
  CHECK(std::isfinite(dw3[1]));
  CHECK(dw3[0] == INFINITY);
}

TEST_CASE("spmm: the weights' gradient sums in 16 lanes, then in order: the scalar model's bits") {
  // dot_row (spmm_cpu.cpp): lane j sums the products of columns j, j + 16, ... in order, the lanes fold
  // 16 -> 8 -> 4 -> 2 -> 1, then the last F % 16 products follow in order. Rebuilt here in scalars, so
  // the kernel's vectors must give exactly these bits; below 16 columns it is the reference's own order.
  const Graph gr = random_graph(120, 700, 29, true);
  const CsrView v = csr_view(gr);
  const int64_t N = 120, E = gr.num_edges;
  auto bits = [](float a) {
    uint32_t u;
    std::memcpy(&u, &a, 4);
    return u;
  };
  for (int64_t F : {1, 7, 15, 16, 17, 31, 33, 64, 100}) {
    CAPTURE(F);
    const int64_t ld = F + 3;
    const auto x = random_values<float>(size_t(N * ld), 11), dy = random_values<float>(size_t(N * ld), 12);
    for (Reduce op : {Reduce::kSum, Reduce::kMean}) {
      CAPTURE(reduce_name(op));
      std::vector<float> dw(size_t(E), NAN), ref(static_cast<size_t>(E));
      spmm_backward_w_cpu(dw.data(), dy.data(), x.data(), nullptr, v, F, ld, ld, op);
      spmm_backward_w_ref<float>(ref.data(), dy.data(), x.data(), nullptr, v, F, ld, ld, op);
      bool same = true, same_ref = true;
      for (int64_t r = 0; r < N; ++r)
        for (int32_t p = v.indptr[r]; p < v.indptr[r + 1]; ++p) {
          const float* a = dy.data() + r * ld;
          const float* b = x.data() + int64_t(v.indices[p]) * ld;
          const int64_t F16 = F - F % 16;
          float t[16] = {}, want = 0.0f;
          if (F16 > 0) {
            for (int64_t j = 0; j < 16; ++j) {
              t[j] = 0.0f + a[j] * b[j];
              for (int64_t f = 16 + j; f < F16; f += 16) t[j] += a[f] * b[f];
            }
            for (int half = 8; half >= 1; half /= 2)
              for (int j = 0; j < half; ++j) t[j] += t[j + half];
            want = t[0];
          }
          for (int64_t f = F16; f < F; ++f) want += a[f] * b[f];
          if (op == Reduce::kMean) want /= float(v.indptr[r + 1] - v.indptr[r]);
          same = same && bits(dw[size_t(p)]) == bits(want);
          same_ref = same_ref && bits(dw[size_t(p)]) == bits(ref[size_t(p)]);
        }
      CHECK(same);
      if (F < 16) CHECK(same_ref);
    }
  }
}

TEST_CASE("spmm: every head in one call has the bits of one CPU call per head") {
  // spmm_heads_*_cpu walk each row's heads in turn (weights [E, H]); each head must be spmm_*_cpu on its
  // columns with its weight column, bit for bit, on a square graph with isolated nodes and on a
  // bipartite one with sources and targets of no edge; the backward with a base into another buffer and
  // in place; and the heads' reference (double) close to it
  std::vector<int64_t> src, dst;
  for (int64_t e = 0; e < 2000; ++e) src.push_back((e * 7919) % 280), dst.push_back((e * 104729) % 90);
  const Graph bip = Graph::from_bipartite_edges(src.data(), dst.data(), int64_t(src.size()), 300, 100);
  for (const Graph& gr : {random_graph(150, 900, 31, true), bip}) {
    const CsrView v = csr_view(gr);
    const int64_t N = gr.num_nodes, S = gr.num_sources(), E = gr.num_edges;
    for (auto [H, Fh] : {std::pair<int64_t, int64_t>{2, 16}, {3, 5}, {8, 1}, {4, 20}, {2, 33}}) {
      CAPTURE(N);
      CAPTURE(H);
      CAPTURE(Fh);
      const int64_t W = H * Fh;
      const auto x = random_values<float>(size_t(S * W), 13), dy = random_values<float>(size_t(N * W), 14);
      const auto w = random_values<float>(size_t(E * H), 15, 0.5f, 2.0f);
      const auto base = random_values<float>(size_t(S * W), 16);
      std::vector<float> wt(size_t(E * H));  // [H, E]: one column a head, as the per-head calls take it
      for (int64_t p = 0; p < E; ++p)
        for (int64_t h = 0; h < H; ++h) wt[size_t(h * E + p)] = w[size_t(p * H + h)];
      for (Reduce op : {Reduce::kSum, Reduce::kMean}) {
        CAPTURE(reduce_name(op));
        std::vector<float> y(size_t(N * W), NAN), y1(y), dx(size_t(S * W), NAN), dx1(dx), dw(size_t(E * H), NAN),
            dw1(dw), dw_col(static_cast<size_t>(E));
        std::vector<float> dxb(dx), dxb1(dx), dxi(base), dxi1(base);
        spmm_heads_forward_cpu(y.data(), x.data(), w.data(), v, H, Fh, op);
        spmm_heads_backward_x_cpu(dx.data(), dy.data(), w.data(), v, H, Fh, op);
        spmm_heads_backward_x_cpu(dxb.data(), dy.data(), w.data(), v, H, Fh, op, base.data());
        spmm_heads_backward_x_cpu(dxi.data(), dy.data(), w.data(), v, H, Fh, op, dxi.data());
        spmm_heads_backward_w_cpu(dw.data(), dy.data(), x.data(), v, H, Fh, op);
        for (int64_t h = 0; h < H; ++h) {
          const float* wh = wt.data() + h * E;
          spmm_forward_cpu(y1.data() + h * Fh, nullptr, x.data() + h * Fh, wh, v, Fh, W, W, op);
          spmm_backward_x_cpu(dx1.data() + h * Fh, dy.data() + h * Fh, nullptr, wh, v, Fh, W, W, op);
          spmm_backward_x_cpu(dxb1.data() + h * Fh, dy.data() + h * Fh, nullptr, wh, v, Fh, W, W, op,
                              base.data() + h * Fh);
          spmm_backward_x_cpu(dxi1.data() + h * Fh, dy.data() + h * Fh, nullptr, wh, v, Fh, W, W, op,
                              dxi1.data() + h * Fh);
          spmm_backward_w_cpu(dw_col.data(), dy.data() + h * Fh, x.data() + h * Fh, nullptr, v, Fh, W, W, op);
          for (int64_t p = 0; p < E; ++p) dw1[size_t(p * H + h)] = dw_col[size_t(p)];
        }
        auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
          return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
        };
        CHECK(same_bits(y, y1));
        CHECK(same_bits(dx, dx1));
        CHECK(same_bits(dxb, dxb1));
        CHECK(same_bits(dxi, dxi1));
        CHECK(same_bits(dw, dw1));
        const std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end()), wd(w.begin(), w.end()),
            based(base.begin(), base.end());
        std::vector<double> yd(y.size()), dxd(dx.size()), dxbd(dx.size()), dwd(dw.size());
        spmm_heads_forward_ref<double>(yd.data(), xd.data(), wd.data(), v, H, Fh, op);
        spmm_heads_backward_x_ref<double>(dxd.data(), dyd.data(), wd.data(), v, H, Fh, op);
        spmm_heads_backward_x_ref<double>(dxbd.data(), dyd.data(), wd.data(), v, H, Fh, op, based.data());
        spmm_heads_backward_w_ref<double>(dwd.data(), dyd.data(), xd.data(), v, H, Fh, op);
        GNN_CHECK_CLOSE(y, yd);
        GNN_CHECK_CLOSE(dx, dxd);
        GNN_CHECK_CLOSE(dxb, dxbd);
        GNN_CHECK_CLOSE(dw, dwd, 1e-4, 1e-4);
      }
    }
  }
  std::vector<float> buf(8);
  CHECK_THROWS_WITH(
      spmm_heads_forward_cpu(buf.data(), buf.data(), buf.data(), csr_view(bip), 2, 1, Reduce::kMax),
      doctest::Contains("sum or mean, not max"));
}

TEST_CASE("spmm: the max's row has the reference's bits at each vector width") {
  // The kernel runs the width its CPU has (max_lanes(): 16, 8 or 4 lanes); a machine runs one of them,
  // so each is called here directly, on values with ties, NaN, +-0 and +-inf, weighted and not.
  const Graph gr = random_graph(60, 500, 29, true);
  const CsrView v = csr_view(gr);
  const float specials[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1.0f, -1.0f, 0.5f, 2.0f, 0.25f};
  auto bits = [](float a) {
    uint32_t u;
    std::memcpy(&u, &a, 4);
    return u;
  };
  for (int64_t F : {1, 4, 7, 8, 12, 15, 16, 20, 33, 44, 64, 70, 127, 129}) {
    const int64_t ld = F + 1;
    std::vector<float> x(size_t(60 * ld)), w(size_t(gr.num_edges));
    for (size_t i = 0; i < x.size(); ++i) x[i] = specials[(i * 7 + size_t(F)) % 10];
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f + float(i % 3);
    for (const float* wp : {static_cast<const float*>(nullptr), static_cast<const float*>(w.data())}) {
      std::vector<float> ref(size_t(60 * F));
      std::vector<int32_t> arg_ref(size_t(60 * F));
      spmm_forward_ref<float>(ref.data(), arg_ref.data(), x.data(), wp, v, F, ld, F, Reduce::kMax);
      for (int lanes : {4, 8, 16}) {
        CAPTURE(F);
        CAPTURE(lanes);
        std::vector<float> y(size_t(60 * F), 7.0f);
        std::vector<int32_t> arg(size_t(60 * F), 7);
        bool ok = true;
        for (int64_t r = 0; r < 60; ++r) {
          const int32_t b = v.indptr[r], e = v.indptr[r + 1];
          if (b == e) continue;
          gather_max_row(y.data() + r * F, arg.data() + r * F, x.data(), wp, v.indices, b, e, ld, F, lanes);
          for (int64_t f = 0; f < F; ++f)
            ok = ok && bits(y[size_t(r * F + f)]) == bits(ref[size_t(r * F + f)]) &&
                 arg[size_t(r * F + f)] == arg_ref[size_t(r * F + f)];
        }
        CHECK(ok);
      }
    }
  }
}

namespace {
// Row 0 gathers 5,000 sources (wider than a CUDA block), row 1 300, the other rows none; F = 37, weighted
// or not; NaNs put by nan_terms. The expected max and argmax (CSR position) of each row and column.
struct NanSpmm {
  int64_t N = 5300, F = 37;
  Graph graph;
  std::vector<float> x = random_values<float>(size_t(5300 * 37), 31), w = random_values<float>(5300, 32, 0.5f, 2.0f);
  NanSpmm() {
    std::vector<int64_t> src(5300), dst(5300);
    for (int64_t i = 0; i < 5300; ++i) src[size_t(i)] = i, dst[size_t(i)] = i < 5000 ? 0 : 1;
    graph = Graph::from_edges(src.data(), dst.data(), 5300, N);
    const CsrView v = csr_view(graph);
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t f = 0; f < F; ++f)
        for (int64_t i : nan_terms(f, v.indptr[r + 1] - v.indptr[r], r))
          x[size_t(v.indices[v.indptr[r] + i] * F + f)] = NAN;
  }
  void check(const std::vector<float>& y, const std::vector<int32_t>& arg, bool weighted) const {
    const CsrView v = csr_view(graph);
    bool ok = true;
    for (int64_t r = 0; r < N; ++r)
      for (int64_t f = 0; f < F; ++f) {
        const int32_t b = v.indptr[r];
        const AmaxFirst m = amax_first(v.indptr[r + 1] - b, [&](int64_t i) {
          return (weighted ? w[size_t(b + i)] : 1.0f) * x[size_t(v.indices[b + i] * F + f)];
        });
        const float got = y[size_t(r * F + f)];
        ok = ok && std::isnan(got) == std::isnan(m.value) && (std::isnan(got) || got == m.value) &&
             arg[size_t(r * F + f)] == (m.arg < 0 ? -1 : int32_t(b + m.arg));
      }
    CHECK(ok);
  }
};
}  // namespace

TEST_CASE("spmm: a NaN term makes the max NaN wherever it comes, as torch's amax, at the first NaN's edge") {
  // The max kept a NaN only where it came first (v > max is false for NaN): one later in a row vanished.
  const NanSpmm c;
  const CsrView v = csr_view(c.graph);
  for (bool weighted : {false, true}) {
    CAPTURE(weighted);
    const float* wp = weighted ? c.w.data() : nullptr;
    std::vector<float> y(size_t(c.N * c.F), 7.0f);
    std::vector<int32_t> arg(size_t(c.N * c.F), 7);
    spmm_forward_ref<float>(y.data(), arg.data(), c.x.data(), wp, v, c.F, c.F, c.F, Reduce::kMax);
    c.check(y, arg, weighted);
    std::fill(y.begin(), y.end(), 7.0f), std::fill(arg.begin(), arg.end(), 7);  // (each call writes its own)
    spmm_forward_cpu(y.data(), arg.data(), c.x.data(), wp, v, c.F, c.F, c.F, Reduce::kMax);
    c.check(y, arg, weighted);
    for (int lanes : {4, 8, 16}) {  // each width, whatever this CPU's is
      CAPTURE(lanes);
      std::fill(y.begin(), y.begin() + 2 * c.F, 7.0f), std::fill(arg.begin(), arg.begin() + 2 * c.F, 7);
      for (int64_t r = 0; r < 2; ++r)
        gather_max_row(y.data() + r * c.F, arg.data() + r * c.F, c.x.data(), wp, v.indices, v.indptr[r],
                       v.indptr[r + 1], c.F, c.F, lanes);
      c.check(y, arg, weighted);
    }
  }
}

TEST_CASE("cuda spmm: a NaN term makes the max NaN wherever it comes, at the first NaN's edge") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  const NanSpmm c;
  const Graph dg = c.graph.to(Device::cuda(0));
  const Tensor gx = on_gpu(c.x), gw = on_gpu(c.w);
  for (bool weighted : {false, true}) {
    CAPTURE(weighted);
    Tensor y = nan_gpu(c.N * c.F), arg = Tensor::full({c.N * c.F}, 7, DType::I32, Device::cuda(0));
    spmm_forward_cuda(y.f32(), arg.i32(), gx.f32(), weighted ? gw.f32() : nullptr, csr_view(dg), c.F, c.F, c.F,
                      Reduce::kMax, nullptr, s);
    c.check(y.to_vector<float>(), arg.to_vector<int32_t>(), weighted);
  }
#endif
}

TEST_CASE("spmm: the CPU backward, writing or adding, has the float reference's bits over blocks of columns") {
  // F past the kernel's 512-column blocks, with a wider row stride; with a base: dx = base + the sum,
  // in place (base == dx) or into another buffer
  const Graph gr = random_graph(300, 1500, 17, true);
  const CsrView v = csr_view(gr);
  const int64_t N = 300;
  for (int64_t F : {5, 512, 1100}) {
    CAPTURE(F);
    const int64_t ld = F + 3;
    const auto dy = random_values<float>(size_t(N * ld), 1);
    const auto w = random_values<float>(size_t(gr.num_edges), 2, 0.5f, 2.0f);
    const auto x = random_values<float>(size_t(N * ld), 3);
    const auto start = random_values<float>(size_t(N * ld), 4);
    for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
      CAPTURE(reduce_name(op));
      std::vector<float> y(size_t(N * ld));
      std::vector<int32_t> arg(size_t(N * F));
      spmm_forward_cpu(y.data(), arg.data(), x.data(), w.data(), v, F, ld, ld, op);
      for (const char* mode : {"write", "in place", "apart"}) {
        CAPTURE(mode);
        const bool add = mode[0] != 'w', apart = mode[0] == 'a';
        std::vector<float> ref = start, cpu = start;
        if (apart) std::fill(cpu.begin(), cpu.end(), std::nanf(""));  // padding columns: compared below too
        const float* base = !add ? nullptr : apart ? start.data() : cpu.data();
        spmm_backward_x_ref<float>(ref.data(), dy.data(), arg.data(), w.data(), v, F, ld, ld, op,
                                   add ? ref.data() : nullptr);
        spmm_backward_x_cpu(cpu.data(), dy.data(), arg.data(), w.data(), v, F, ld, ld, op, base);
        if (apart)  // the padding columns are not outputs
          for (int64_t r = 0; r < N; ++r)
            for (int64_t f = F; f < ld; ++f) {
              CHECK(std::isnan(cpu[size_t(r * ld + f)]));
              cpu[size_t(r * ld + f)] = start[size_t(r * ld + f)];
            }
        CHECK(cpu == ref);
        if (add) {  // the sum formed first, then added
          std::vector<float> sum(size_t(N * ld), 0.0f);
          spmm_backward_x_ref<float>(sum.data(), dy.data(), arg.data(), w.data(), v, F, ld, ld, op);
          bool same = true;
          for (int64_t r = 0; r < N; ++r)
            for (int64_t f = 0; f < F; ++f)
              same = same && ref[size_t(r * ld + f)] == start[size_t(r * ld + f)] + sum[size_t(r * ld + f)];
          CHECK(same);
        }
      }
    }
  }
}

TEST_CASE("spmm: the reference backward matches central finite differences (double)") {
  const Graph g = random_graph(7, 16, 11);
  const CsrView v = csr_view(g);
  const int64_t N = 7, E = 16, F = 3;
  auto x = random_values<double>(static_cast<size_t>(N * F), 4);  // distinct values: no ties for max
  auto w = random_values<double>(static_cast<size_t>(E), 5, 0.5, 1.5);
  const auto gout = random_values<double>(static_cast<size_t>(N * F), 6);
  for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
    CAPTURE(reduce_name(op));
    auto loss = [&](const std::vector<double>& xs, const std::vector<double>& ws) {
      std::vector<double> y(static_cast<size_t>(N * F));
      std::vector<int32_t> a(static_cast<size_t>(N * F));
      spmm_forward_ref<double>(y.data(), a.data(), xs.data(), ws.data(), v, F, F, F, op);
      double l = 0;
      for (size_t i = 0; i < y.size(); ++i) l += y[i] * gout[i];
      return l;
    };
    std::vector<double> y(static_cast<size_t>(N * F)), dx(static_cast<size_t>(N * F)), dw(static_cast<size_t>(E));
    std::vector<int32_t> arg(static_cast<size_t>(N * F));
    spmm_forward_ref<double>(y.data(), arg.data(), x.data(), w.data(), v, F, F, F, op);
    spmm_backward_x_ref<double>(dx.data(), gout.data(), arg.data(), w.data(), v, F, F, F, op);
    spmm_backward_w_ref<double>(dw.data(), gout.data(), x.data(), arg.data(), v, F, F, F, op);
    check_gradient(x, dx, [&] { return loss(x, w); });
    check_gradient(w, dw, [&] { return loss(x, w); });
  }
}

TEST_CASE("spmm: forward and backward are bitwise identical for any thread count") {
  const Graph g = random_graph(5000, 20000, 9, true);
  const CsrView v = csr_view(g);
  const int64_t F = 40;
  const auto x = random_values<float>(static_cast<size_t>(5000 * F), 1);
  const auto w = random_values<float>(20000, 2), wh = random_values<float>(20000 * 2, 3);  // wh: 2 heads of 20
  const testing::ThreadsRestored saved;
  std::vector<float> out[2];
  for (int run = 0; run < 2; ++run) {
    set_num_threads(run == 0 ? 1 : std::max(2, saved.count));
    std::vector<float> y(static_cast<size_t>(5000 * F)), dx(static_cast<size_t>(5000 * F)), dw(20000);
    std::vector<float> yh(y.size()), dxh(dx.size()), dwh(wh.size());
    spmm_forward_cpu(y.data(), nullptr, x.data(), w.data(), v, F, F, F, Reduce::kMean);
    spmm_backward_x_cpu(dx.data(), x.data(), nullptr, w.data(), v, F, F, F, Reduce::kMean);
    spmm_backward_w_cpu(dw.data(), x.data(), y.data(), nullptr, v, F, F, F, Reduce::kMean);
    spmm_heads_forward_cpu(yh.data(), x.data(), wh.data(), v, 2, 20, Reduce::kSum);
    spmm_heads_backward_x_cpu(dxh.data(), x.data(), wh.data(), v, 2, 20, Reduce::kMean);
    spmm_heads_backward_w_cpu(dwh.data(), x.data(), y.data(), v, 2, 20, Reduce::kMean);
    out[run] = y;
    for (const auto* part : {&dx, &dw, &yh, &dxh, &dwh}) out[run].insert(out[run].end(), part->begin(), part->end());
  }
  CHECK(out[0] == out[1]);
}

TEST_CASE("cuda spmm: forward and both backwards match the double reference on the standard cases") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  for (const auto& c : standard_graph_cases(3)) {
    CAPTURE(c.name);
    const Graph dg = c.graph.to(Device::cuda(0));
    const CsrView hv = csr_view(c.graph), dv = ag::csr_view(dg);
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
      const auto x = random_values<float>(size_t(N * ld), 1);
      const auto w = random_values<float>(size_t(E), 2, 0.5f, 2.0f);
      const auto dy = random_values<float>(size_t(N * ld), 3);
      const auto dx0 = random_values<float>(size_t(N * ld), 4);
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
            Tensor y = nan_gpu(N * ld), dx = nan_gpu(N * ld), dw = nan_gpu(E), dxa = on_gpu(dx0), base = on_gpu(dx0);
            Tensor dxb = nan_gpu(N * ld);  // base + the gradient into another buffer
            Tensor arg = Tensor::full({N * F}, -7, DType::I32, Device::cuda(0));
            spmm_forward_cuda(y.f32(), arg.i32(), gx.f32(), gwp, dv, F, ld, ld, op, nullptr, s);
            Tensor y_plus = nan_gpu(N * ld), arg_plus = Tensor::full({N * F}, -7, DType::I32, Device::cuda(0));
            spmm_forward_cuda(y_plus.f32(), arg_plus.i32(), gx.f32(), gwp, dv, F, ld, ld, op, base.f32(), s);
            spmm_backward_x_cuda(dx.f32(), gdy.f32(), arg.i32(), gwp, dv, F, ld, ld, op, nullptr, s);
            spmm_backward_x_cuda(dxa.f32(), gdy.f32(), arg.i32(), gwp, dv, F, ld, ld, op, dxa.f32(), s);
            spmm_backward_x_cuda(dxb.f32(), gdy.f32(), arg.i32(), gwp, dv, F, ld, ld, op, base.f32(), s);
            spmm_backward_w_cuda(dw.f32(), gdy.f32(), gx.f32(), arg.i32(), dv, F, ld, ld, op, s);
            auto yh = y.to_vector<float>(), dxh = dx.to_vector<float>(), dxah = dxa.to_vector<float>();
            auto dxbh = dxb.to_vector<float>();
            {  // the forward with a base: base + the aggregate, the bits of adding after; padding untouched
              const auto yp = y_plus.to_vector<float>();
              bool same = true;
              for (int64_t r = 0; r < N; ++r)
                for (int64_t f = 0; f < ld; ++f) {
                  const size_t i = size_t(r * ld + f);
                  same = same && (f < F ? yp[i] == dx0[i] + yh[i] : std::isnan(yp[i]));
                }
              CHECK(same);
              CHECK(arg_plus.to_vector<int32_t>() == arg.to_vector<int32_t>());
            }
            const auto dwh = dw.to_vector<float>();
            for (int64_t r = 0; r < N; ++r)
              for (int64_t f = F; f < ld; ++f) {  // padding columns are not outputs: they keep their NaN / value
                CHECK(std::isnan(yh[size_t(r * ld + f)]));
                CHECK(std::isnan(dxbh[size_t(r * ld + f)]));
                CHECK(dxah[size_t(r * ld + f)] == dx0[size_t(r * ld + f)]);
                dxbh[size_t(r * ld + f)] = dx0[size_t(r * ld + f)];
                yh[size_t(r * ld + f)] = dxh[size_t(r * ld + f)] = 0,
                                   dxah[size_t(r * ld + f)] = dx0[size_t(r * ld + f)];
              }
            GNN_CHECK_CLOSE(yh, yd, atol);
            if (op == Reduce::kMax) CHECK(arg.to_vector<int32_t>() == argd);  // the first maximum, as the reference
            GNN_CHECK_CLOSE(dxh, dxd, atol);
            std::vector<double> acc(dxd);
            for (size_t i = 0; i < acc.size(); ++i) acc[i] += dx0[i];
            GNN_CHECK_CLOSE(dxah, acc, atol);
            CHECK(same_bits(dxbh, dxah));  // into another buffer: the in-place sum's bits
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

TEST_CASE("cuda ops: spmm with per-head weights [E, H] (GAT's aggregation) matches the host on the standard graphs") {
  GNN_SKIP_UNLESS_CUDA();
  // sum and mean run every head in one launch on the GPU (4 columns a vector when a head's width allows),
  // max one launch per head; the hub's 10k entries take the split-row path
  for (const GraphCase& c : standard_graph_cases(61)) {
    CAPTURE(c.name);
    const int64_t N = c.graph.num_nodes, E = c.graph.num_edges;
    if (N == 0) continue;  // run_op keeps a graph of no nodes on the host
    for (auto [H, F] : {std::pair<int64_t, int64_t>{4, 8}, {3, 5}, {2, 1}}) {
      CAPTURE(H);
      CAPTURE(F);
      for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax})
        check_op(
            "spmm per head", {rand({N, H * F}, 62), rand({E, H}, 63)},
            [op](auto& v, const Graph& g) { return ag::spmm(g, v[0], op, v[1]); }, c.graph);
    }
  }
}

TEST_CASE("cuda ops: spmm's backward adding into the gradient x already holds matches the host") {
  GNN_SKIP_UNLESS_CUDA();
  // x x is recorded after the spmm, so its backward sets x's gradient first and the spmm's adds into it
  // in place (the kernel's accumulate on the GPU, column blocks on the host)
  const Graph g = random_graph(200, 900, 66, true);
  for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax})
    check_op(
        "spmm + x x", {rand({200, 600}, 67)},
        [op](auto& v, const Graph& gr) {
          const ag::Var s = ag::spmm(gr, v[0], op);  // recorded first (a call's arguments have no order)
          const ag::Var m = ag::mul(v[0], v[0]);
          return ag::add(s, m);
        },
        g);
}

TEST_CASE("cuda ops: spmm on a bipartite graph (config sharing's row blocks) matches the host") {
  GNN_SKIP_UNLESS_CUDA();
  std::vector<int64_t> src, dst;  // 500 sources into 120 destinations, some of each with no edge
  for (int64_t e = 0; e < 3000; ++e) src.push_back((e * 7919) % 480), dst.push_back((e * 104729) % 110);
  const Graph g = Graph::from_bipartite_edges(src.data(), dst.data(), int64_t(src.size()), 500, 120);
  for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax})
    check_op(
        "bipartite spmm", {rand({500, 48}, 64), rand({3000}, 65)},
        [op](auto& v, const Graph& g) { return ag::spmm(g, v[0], op, v[1]); }, g);
}
