// Segment softmax, GAT scores, graph pooling, row-wise softmax / log-softmax / l2-normalise, layer norm.
#include <cmath>

#include "graph_cases.h"
#include "kernels/embedding.h"
#include "kernels/instance_norm.h"
#include "kernels/layer_norm.h"
#include "kernels/pooling.h"
#include "kernels/rowwise.h"
#include "kernels/segment_softmax.h"
#include "runtime/parallel.h"
#include "testing.h"

using namespace gnn;
using testing::check_gradient;
using testing::csr_view;
using testing::dot;

namespace {
std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }
}  // namespace

TEST_CASE("segment softmax: hand-worked, reference, finite differences") {
  const int32_t indptr[] = {0, 0, 2, 3};  // an empty segment, two edges, one edge
  const float x[] = {0.0f, std::log(3.0f), 5.0f};
  float y[3] = {NAN, NAN, NAN};
  segment_softmax_forward_cpu(y, x, indptr, 3, 1);
  CHECK(y[0] == doctest::Approx(0.25));
  CHECK(y[1] == doctest::Approx(0.75));
  CHECK(y[2] == 1.0f);

  for (const auto& c : testing::standard_graph_cases(2)) {
    CAPTURE(c.name);
    const int64_t E = c.graph.num_edges, S = c.graph.num_nodes;
    for (int64_t H : {1, 4, 9}) {
      CAPTURE(H);
      const auto xs = testing::random_values<float>(static_cast<size_t>(E * H), 1, -3.0f, 3.0f);
      const auto dy = testing::random_values<float>(static_cast<size_t>(E * H), 2);
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
  const Graph g = testing::random_graph(5, 12, 4);
  auto xd = testing::random_values<double>(24, 5);
  const auto gout = testing::random_values<double>(24, 6);
  std::vector<double> yd(24), dxd(24);
  segment_softmax_forward_ref<double>(yd.data(), xd.data(), g.csr_indptr.i32(), 5, 2);
  segment_softmax_backward_ref<double>(dxd.data(), yd.data(), gout.data(), g.csr_indptr.i32(), 5, 2);
  check_gradient(xd, dxd, [&] {
    std::vector<double> y(24);
    segment_softmax_forward_ref<double>(y.data(), xd.data(), g.csr_indptr.i32(), 5, 2);
    return dot(y, gout);
  });
}

TEST_CASE("GAT scores: reference, finite differences, thread-count determinism") {
  for (const auto& c : testing::standard_graph_cases(4)) {
    CAPTURE(c.name);
    const CsrView v = csr_view(c.graph);
    const int64_t N = c.graph.num_nodes, E = c.graph.num_edges, H = 3;
    const auto as = testing::random_values<float>(static_cast<size_t>(N * H), 1), ad = testing::random_values<float>(static_cast<size_t>(N * H), 2);
    const auto ds = testing::random_values<float>(static_cast<size_t>(E * H), 3);
    std::vector<double> sd(static_cast<size_t>(E * H)), dasd(static_cast<size_t>(N * H)), dadd(static_cast<size_t>(N * H));
    gat_scores_forward_ref<double>(sd.data(), to_double(as).data(), to_double(ad).data(), v, H, 0.2);
    gat_scores_backward_ref<double>(dasd.data(), dadd.data(), to_double(ds).data(), to_double(as).data(),
                                    to_double(ad).data(), v, H, 0.2);
    std::vector<float> s(static_cast<size_t>(E * H), NAN), das(static_cast<size_t>(N * H), NAN), dad(static_cast<size_t>(N * H), NAN);
    gat_scores_forward_cpu(s.data(), as.data(), ad.data(), v, H, 0.2f);
    gat_scores_backward_cpu(das.data(), dad.data(), ds.data(), as.data(), ad.data(), v, H, 0.2f);
    GNN_CHECK_CLOSE(s, sd);
    GNN_CHECK_CLOSE(das, dasd, 1e-4, 1e-4);
    GNN_CHECK_CLOSE(dad, dadd, 1e-4, 1e-4);
  }
  const Graph g = testing::random_graph(6, 14, 7);
  const CsrView v = csr_view(g);
  auto as = testing::random_values<double>(12, 1), ad = testing::random_values<double>(12, 2);
  const auto gout = testing::random_values<double>(28, 3);
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

TEST_CASE("pooling: hand-worked, reference, finite differences") {
  const int64_t ptr[] = {0, 2, 2, 3};  // graphs of 2, 0 and 1 nodes
  const float x[] = {1, 5, 3, 2, 7, 7};  // 3 nodes x 2 features
  float y[6];
  int32_t arg[6];
  pool_forward_cpu(y, nullptr, x, ptr, 3, 2, Reduce::kSum);
  CHECK(std::vector<float>(y, y + 6) == std::vector<float>{4, 7, 0, 0, 7, 7});
  pool_forward_cpu(y, arg, x, ptr, 3, 2, Reduce::kMax);
  CHECK(std::vector<float>(y, y + 6) == std::vector<float>{3, 5, 0, 0, 7, 7});
  CHECK(std::vector<int32_t>(arg, arg + 6) == std::vector<int32_t>{1, 0, -1, -1, 2, 2});

  const std::vector<int64_t> gp = {0, 0, 1, 9, 40, 41, 300};
  const int64_t G = 6, N = 300;
  for (int64_t F : {1, 3, 33, 128}) {
    const auto xs = testing::random_values<float>(static_cast<size_t>(N * F), 1);
    const auto dy = testing::random_values<float>(static_cast<size_t>(G * F), 2);
    for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
      CAPTURE(F);
      CAPTURE(reduce_name(op));
      std::vector<double> yd(static_cast<size_t>(G * F)), dxd(static_cast<size_t>(N * F));
      std::vector<int32_t> argd(static_cast<size_t>(G * F)), args(static_cast<size_t>(G * F), 77);
      pool_forward_ref<double>(yd.data(), argd.data(), to_double(xs).data(), gp.data(), G, F, op);
      pool_backward_ref<double>(dxd.data(), to_double(dy).data(), argd.data(), gp.data(), G, F, op);
      std::vector<float> ys(static_cast<size_t>(G * F), NAN), dx(static_cast<size_t>(N * F), NAN);
      pool_forward_cpu(ys.data(), args.data(), xs.data(), gp.data(), G, F, op);
      pool_backward_cpu(dx.data(), dy.data(), args.data(), gp.data(), G, F, op);
      GNN_CHECK_CLOSE(ys, yd);
      GNN_CHECK_CLOSE(dx, dxd);
      if (op == Reduce::kMax) CHECK(args == argd);
    }
  }
  auto xd = testing::random_values<double>(static_cast<size_t>(N * 2), 3);
  const auto gout = testing::random_values<double>(static_cast<size_t>(G * 2), 4);
  for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax}) {
    std::vector<double> y(static_cast<size_t>(G * 2)), dx(static_cast<size_t>(N * 2));
    std::vector<int32_t> a(static_cast<size_t>(G * 2));
    pool_forward_ref<double>(y.data(), a.data(), xd.data(), gp.data(), G, 2, op);
    pool_backward_ref<double>(dx.data(), gout.data(), a.data(), gp.data(), G, 2, op);
    check_gradient(xd, dx, [&] {
      std::vector<double> yy(static_cast<size_t>(G * 2));
      std::vector<int32_t> aa(static_cast<size_t>(G * 2));
      pool_forward_ref<double>(yy.data(), aa.data(), xd.data(), gp.data(), G, 2, op);
      return dot(yy, gout);
    });
  }
}

TEST_CASE("row-wise softmax, log-softmax, l2-normalise: reference and finite differences") {
  const float x[] = {0, std::log(3.0f), 3, 4};
  float y[4];
  rowwise_forward_cpu(y, x, 2, 2, RowOp::kSoftmax, 0);
  CHECK(y[0] == doctest::Approx(0.25));
  rowwise_forward_cpu(y, x, 2, 2, RowOp::kL2Normalize, 1e-12f);
  CHECK(y[2] == doctest::Approx(0.6));
  CHECK(y[3] == doctest::Approx(0.8));
  for (RowOp op : {RowOp::kSoftmax, RowOp::kLogSoftmax, RowOp::kL2Normalize}) {
    for (int64_t F : {1, 3, 8, 33, 257}) {
      CAPTURE(int(op));
      CAPTURE(F);
      const int64_t R = 50;
      const auto xs = testing::random_values<float>(static_cast<size_t>(R * F), 1, -3.0f, 3.0f);
      const auto dy = testing::random_values<float>(static_cast<size_t>(R * F), 2);
      std::vector<double> yd(static_cast<size_t>(R * F)), dxd(static_cast<size_t>(R * F));
      rowwise_forward_ref<double>(yd.data(), to_double(xs).data(), R, F, op, 1e-12);
      rowwise_backward_ref<double>(dxd.data(), yd.data(), to_double(dy).data(), to_double(xs).data(), R, F, op, 1e-12);
      std::vector<float> ys(static_cast<size_t>(R * F), NAN), dx(static_cast<size_t>(R * F), NAN);
      rowwise_forward_cpu(ys.data(), xs.data(), R, F, op, 1e-12f);
      rowwise_backward_cpu(dx.data(), ys.data(), dy.data(), xs.data(), R, F, op, 1e-12f);
      GNN_CHECK_CLOSE(ys, yd);
      GNN_CHECK_CLOSE(dx, dxd);
    }
    auto xd = testing::random_values<double>(12, 3);
    const auto gout = testing::random_values<double>(12, 4);
    std::vector<double> y2(12), dx2(12);
    rowwise_forward_ref<double>(y2.data(), xd.data(), 3, 4, op, 1e-12);
    rowwise_backward_ref<double>(dx2.data(), y2.data(), gout.data(), xd.data(), 3, 4, op, 1e-12);
    check_gradient(xd, dx2, [&] {
      std::vector<double> yy(12);
      rowwise_forward_ref<double>(yy.data(), xd.data(), 3, 4, op, 1e-12);
      return dot(yy, gout);
    });
  }
}

TEST_CASE("layer norm: reference, finite differences, thread-count determinism") {
  const int64_t R = 1000, F = 37;
  const auto xs = testing::random_values<float>(static_cast<size_t>(R * F), 1, -2.0f, 2.0f);
  const auto gm = testing::random_values<float>(static_cast<size_t>(F), 2, 0.5f, 1.5f), bt = testing::random_values<float>(static_cast<size_t>(F), 3);
  const auto dy = testing::random_values<float>(static_cast<size_t>(R * F), 4);
  std::vector<double> yd(static_cast<size_t>(R * F)), md(static_cast<size_t>(R)), rd(static_cast<size_t>(R)), dxd(static_cast<size_t>(R * F)), dgd(static_cast<size_t>(F)), dbd(static_cast<size_t>(F));
  layer_norm_forward_ref<double>(yd.data(), md.data(), rd.data(), to_double(xs).data(), to_double(gm).data(),
                                 to_double(bt).data(), R, F, 1e-5);
  layer_norm_backward_ref<double>(dxd.data(), dgd.data(), dbd.data(), to_double(dy).data(), to_double(xs).data(),
                                  md.data(), rd.data(), to_double(gm).data(), R, F);
  std::vector<float> out[2];
  const int saved = num_threads();
  for (int run = 0; run < 2; ++run) {
    set_num_threads(run == 0 ? 1 : std::max(2, saved));
    std::vector<float> y(static_cast<size_t>(R * F), NAN), m(static_cast<size_t>(R), NAN), r(static_cast<size_t>(R), NAN), dx(static_cast<size_t>(R * F), NAN),
        dg(static_cast<size_t>(F), NAN), db(static_cast<size_t>(F), NAN);
    layer_norm_forward_cpu(y.data(), m.data(), r.data(), xs.data(), gm.data(), bt.data(), R, F, 1e-5f);
    layer_norm_backward_cpu(dx.data(), dg.data(), db.data(), dy.data(), xs.data(), m.data(), r.data(), gm.data(), R, F);
    GNN_CHECK_CLOSE(y, yd);
    GNN_CHECK_CLOSE(dx, dxd, 1e-4, 1e-4);
    GNN_CHECK_CLOSE(dg, dgd, 1e-3, 1e-3);
    GNN_CHECK_CLOSE(db, dbd, 1e-3, 1e-3);
    out[run] = dx;
    out[run].insert(out[run].end(), dg.begin(), dg.end());
  }
  set_num_threads(saved);
  CHECK(out[0] == out[1]);
  auto xd = testing::random_values<double>(15, 5);
  auto gd = testing::random_values<double>(5, 6, 0.5, 1.5), bd = testing::random_values<double>(5, 7);
  const auto gout = testing::random_values<double>(15, 8);
  std::vector<double> y(15), m(3), r(3), dx(15), dg(5), db(5);
  layer_norm_forward_ref<double>(y.data(), m.data(), r.data(), xd.data(), gd.data(), bd.data(), 3, 5, 1e-5);
  layer_norm_backward_ref<double>(dx.data(), dg.data(), db.data(), gout.data(), xd.data(), m.data(), r.data(), gd.data(), 3, 5);
  auto loss = [&] {
    std::vector<double> yy(15), mm(3), rr(3);
    layer_norm_forward_ref<double>(yy.data(), mm.data(), rr.data(), xd.data(), gd.data(), bd.data(), 3, 5, 1e-5);
    return dot(yy, gout);
  };
  check_gradient(xd, dx, loss);
  check_gradient(gd, dg, loss);
  check_gradient(bd, db, loss);
}

TEST_CASE("graph instance norm: reference, finite differences, empty graphs") {
  const std::vector<int64_t> gp = {0, 3, 3, 10, 11};  // graphs of 3, 0, 7 and 1 nodes
  const int64_t G = 4, N = 11, F = 5;
  const auto xs = testing::random_values<float>(static_cast<size_t>(N * F), 1, -2.0f, 2.0f);
  const auto gm = testing::random_values<float>(static_cast<size_t>(F), 2, 0.5f, 1.5f), bt = testing::random_values<float>(static_cast<size_t>(F), 3);
  const auto dy = testing::random_values<float>(static_cast<size_t>(N * F), 4);
  std::vector<double> yd(static_cast<size_t>(N * F)), md(static_cast<size_t>(G * F)), rd(static_cast<size_t>(G * F)), dxd(static_cast<size_t>(N * F)), dgd(static_cast<size_t>(F)),
      dbd(static_cast<size_t>(F));
  instance_norm_forward_ref<double>(yd.data(), md.data(), rd.data(), to_double(xs).data(), to_double(gm).data(),
                                    to_double(bt).data(), gp.data(), G, F, 1e-5);
  instance_norm_backward_ref<double>(dxd.data(), dgd.data(), dbd.data(), to_double(dy).data(), to_double(xs).data(),
                                     md.data(), rd.data(), to_double(gm).data(), gp.data(), G, F);
  std::vector<float> y(static_cast<size_t>(N * F), NAN), m(static_cast<size_t>(G * F), NAN), r(static_cast<size_t>(G * F), NAN), dx(static_cast<size_t>(N * F), NAN),
      dg(static_cast<size_t>(F), NAN), db(static_cast<size_t>(F), NAN);
  instance_norm_forward_cpu(y.data(), m.data(), r.data(), xs.data(), gm.data(), bt.data(), gp.data(), G, F, 1e-5f);
  instance_norm_backward_cpu(dx.data(), dg.data(), db.data(), dy.data(), xs.data(), m.data(), r.data(), gm.data(),
                             gp.data(), G, F);
  GNN_CHECK_CLOSE(y, yd);
  GNN_CHECK_CLOSE(dx, dxd, 1e-4, 1e-4);
  GNN_CHECK_CLOSE(dg, dgd);
  GNN_CHECK_CLOSE(db, dbd);
  CHECK(y[10 * F] == doctest::Approx(bt[0]));  // a one-node graph normalises to beta
  auto xd = to_double(xs), gd = to_double(gm), bd = to_double(bt);
  const auto gout = to_double(dy);
  auto loss = [&] {
    std::vector<double> yy(static_cast<size_t>(N * F)), mm(static_cast<size_t>(G * F)), rr(static_cast<size_t>(G * F));
    instance_norm_forward_ref<double>(yy.data(), mm.data(), rr.data(), xd.data(), gd.data(), bd.data(), gp.data(), G, F,
                                      1e-5);
    return dot(yy, gout);
  };
  check_gradient(xd, dxd, loss);
  check_gradient(gd, dgd, loss);
  check_gradient(bd, dbd, loss);
}

TEST_CASE("graph instance norm: the blocked CPU kernel is the float reference, bit for bit, over many channels") {
  // 150 channels: two full blocks of 64 and a part; graphs of 40, 0 and 7 rows.
  const std::vector<int64_t> gp = {0, 40, 40, 47};
  const int64_t G = 3, N = 47, F = 150;
  const auto xs = testing::random_values<float>(static_cast<size_t>(N * F), 5, -3.0f, 3.0f);
  const auto gm = testing::random_values<float>(static_cast<size_t>(F), 6, 0.5f, 1.5f), bt = testing::random_values<float>(static_cast<size_t>(F), 7);
  const auto dy = testing::random_values<float>(static_cast<size_t>(N * F), 8);
  for (const bool affine : {true, false}) {
    CAPTURE(affine);
    const float* g = affine ? gm.data() : nullptr;
    const float* b = affine ? bt.data() : nullptr;
    std::vector<float> yr(static_cast<size_t>(N * F)), mr(static_cast<size_t>(G * F)), rr(static_cast<size_t>(G * F)),
        dxr(static_cast<size_t>(N * F)), dgr(static_cast<size_t>(F)), dbr(static_cast<size_t>(F));
    instance_norm_forward_ref<float>(yr.data(), mr.data(), rr.data(), xs.data(), g, b, gp.data(), G, F, 1e-5f);
    instance_norm_backward_ref<float>(dxr.data(), dgr.data(), dbr.data(), dy.data(), xs.data(), mr.data(), rr.data(), g,
                                      gp.data(), G, F);
    std::vector<float> y(static_cast<size_t>(N * F), NAN), m(static_cast<size_t>(G * F), NAN), r(static_cast<size_t>(G * F), NAN),
        dx(static_cast<size_t>(N * F), NAN), dg(static_cast<size_t>(F), NAN), db(static_cast<size_t>(F), NAN);
    instance_norm_forward_cpu(y.data(), m.data(), r.data(), xs.data(), g, b, gp.data(), G, F, 1e-5f);
    instance_norm_backward_cpu(dx.data(), dg.data(), db.data(), dy.data(), xs.data(), m.data(), r.data(), g, gp.data(), G, F);
    CHECK(y == yr);
    CHECK(m == mr);
    CHECK(r == rr);
    CHECK(dx == dxr);
    // dgamma, dbeta: per-graph partials summed in graph order (the reference sums on across graphs)
    for (int64_t f = 0; f < F; ++f) {
      CHECK(dg[size_t(f)] == doctest::Approx(dgr[size_t(f)]).epsilon(1e-5));
      CHECK(db[size_t(f)] == doctest::Approx(dbr[size_t(f)]).epsilon(1e-5));
    }
  }
}

TEST_CASE("embedding: gather and a deterministic scatter-add backward") {
  const int64_t K = 121, F = 33, n = 5000;  // the opcode embedding's size
  const auto table = testing::random_values<float>(static_cast<size_t>(K * F), 1);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::mt19937 rng(3);
  for (auto& i : idx) i = rng() % 4 == 0 ? 63 : int32_t(rng() % K);  // one popular row, some unused
  const auto dy = testing::random_values<float>(static_cast<size_t>(n * F), 2);
  std::vector<float> y(static_cast<size_t>(n * F), NAN);
  embedding_forward_cpu(y.data(), table.data(), idx.data(), n, F);
  std::vector<double> yd(static_cast<size_t>(n * F)), dtd(static_cast<size_t>(K * F));
  embedding_forward_ref<double>(yd.data(), to_double(table).data(), idx.data(), n, F);
  CHECK(testing::compare(y, yd, 0, 0).index < 0);  // data movement: exact
  embedding_backward_ref<double>(dtd.data(), to_double(dy).data(), idx.data(), n, K, F);
  std::vector<float> out[2];
  const int saved = num_threads();
  for (int run = 0; run < 2; ++run) {
    set_num_threads(run == 0 ? 1 : std::max(2, saved));
    std::vector<float> dt(static_cast<size_t>(K * F), NAN);
    embedding_backward_cpu(dt.data(), dy.data(), idx.data(), n, K, F);
    GNN_CHECK_CLOSE(dt, dtd, 1e-4, 1e-4);
    out[run] = dt;
  }
  set_num_threads(saved);
  CHECK(out[0] == out[1]);
}
