#include <algorithm>
#include <random>
#include <tuple>

#include "runtime/graph.h"
#include "testing.h"

using namespace gnn;

namespace {

std::vector<int32_t> vec(const Tensor& t) { return t.to_vector<int32_t>(); }

// The naive reference: for each destination, its (source, edge id) pairs in input order.
void check_against_naive(const Graph& g, const std::vector<int64_t>& src, const std::vector<int64_t>& dst, int64_t N) {
  const auto rp = vec(g.csr_indptr), ri = vec(g.csr_indices), re = vec(g.csr_eid);
  const auto cp = vec(g.csc_indptr), ci = vec(g.csc_indices), cc = vec(g.csc_to_csr);
  REQUIRE(rp.size() == size_t(N + 1));
  REQUIRE(cp.size() == size_t(N + 1));
  CHECK(rp[0] == 0);
  CHECK(rp[N] == int32_t(src.size()));
  for (int64_t v = 0; v < N; ++v) {
    std::vector<std::pair<int32_t, int32_t>> want, got;
    for (size_t e = 0; e < src.size(); ++e)
      if (dst[e] == v) want.emplace_back(int32_t(src[e]), int32_t(e));
    for (int32_t p = rp[v]; p < rp[v + 1]; ++p) got.emplace_back(ri[p], re[p]);
    CHECK(got == want);  // same edges, same (input) order
  }
  for (int64_t u = 0; u < N; ++u) {
    std::vector<std::tuple<int32_t, int32_t>> want, got;
    for (size_t e = 0; e < src.size(); ++e)
      if (src[e] == u) want.emplace_back(int32_t(dst[e]), int32_t(e));
    for (int32_t q = cp[u]; q < cp[u + 1]; ++q) {
      const int32_t p = cc[q];  // the CSR entry of this CSC entry: same edge
      CHECK(ri[p] == u);
      got.emplace_back(ci[q], re[p]);
    }
    std::sort(want.begin(), want.end()), std::sort(got.begin(), got.end());
    CHECK(got == want);
    // CSC rows list their edges in CSR order (deterministic reductions depend on it).
    for (int32_t q = cp[u] + 1; q < cp[u + 1]; ++q) CHECK(cc[q - 1] < cc[q]);
  }
}

}  // namespace

TEST_CASE("graph: hand-worked 4-node graph with an isolated node and a self-loop") {
  // edges: 0->1, 2->1, 1->2, 2->2 (self-loop); node 3 isolated
  const std::vector<int64_t> src = {0, 2, 1, 2}, dst = {1, 1, 2, 2};
  const Graph g = Graph::from_edges(src.data(), dst.data(), 4, 4);
  CHECK(g.num_nodes == 4);
  CHECK(g.num_edges == 4);
  CHECK(vec(g.csr_indptr) == std::vector<int32_t>{0, 0, 2, 4, 4});
  CHECK(vec(g.csr_indices) == std::vector<int32_t>{0, 2, 1, 2});
  CHECK(vec(g.csr_eid) == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(vec(g.csc_indptr) == std::vector<int32_t>{0, 1, 2, 4, 4});
  CHECK(vec(g.csc_indices) == std::vector<int32_t>{1, 2, 1, 2});
  CHECK(vec(g.csc_to_csr) == std::vector<int32_t>{0, 2, 1, 3});
  CHECK(g.in_degree(3) == 0);
  CHECK(g.out_degree(2) == 2);
  check_against_naive(g, src, dst, 4);
}

TEST_CASE("graph: edge cases") {
  SUBCASE("no nodes") {
    const Graph g = Graph::from_edges(nullptr, nullptr, 0, 0);
    CHECK(vec(g.csr_indptr) == std::vector<int32_t>{0});
    CHECK(g.csr_indices.numel() == 0);
  }
  SUBCASE("nodes but no edges") {
    const Graph g = Graph::from_edges(nullptr, nullptr, 0, 5);
    CHECK(vec(g.csr_indptr) == std::vector<int32_t>(6, 0));
    CHECK(vec(g.csc_indptr) == std::vector<int32_t>(6, 0));
  }
  SUBCASE("duplicate edges are kept") {
    const std::vector<int64_t> src = {1, 1, 1}, dst = {0, 0, 0};
    const Graph g = Graph::from_edges(src.data(), dst.data(), 3, 2);
    CHECK(vec(g.csr_indptr) == std::vector<int32_t>{0, 3, 3});
    check_against_naive(g, src, dst, 2);
  }
  SUBCASE("only self-loops") {
    const std::vector<int64_t> ids = {0, 1, 2};
    const Graph g = Graph::from_edges(ids.data(), ids.data(), 3, 3);
    check_against_naive(g, ids, ids, 3);
  }
}

TEST_CASE("graph: random graphs match the naive reference") {
  for (uint32_t seed : {1u, 2u, 3u, 17u}) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    const int64_t N = 1 + int64_t(rng() % 200), E = int64_t(rng() % 1000);
    std::vector<int64_t> src(E), dst(E);
    for (int64_t e = 0; e < E; ++e) {
      src[e] = int64_t(rng() % uint32_t(N));
      dst[e] = rng() % 4 == 0 ? 0 : int64_t(rng() % uint32_t(N));  // node 0 is a hub
    }
    check_against_naive(Graph::from_edges(src.data(), dst.data(), E, N), src, dst, N);
  }
}

TEST_CASE("graph: a hub with 10k in-edges") {
  const int64_t N = 10001, E = 10000;
  std::vector<int64_t> src(E), dst(E, 0);
  for (int64_t e = 0; e < E; ++e) src[e] = e + 1;
  const Graph g = Graph::from_edges(src.data(), dst.data(), E, N);
  CHECK(g.in_degree(0) == E);
  CHECK(g.out_degree(5) == 1);
  check_against_naive(g, src, dst, N);
}

TEST_CASE("graph: edge_index in both column orders, and bad ids") {
  // TpuGraphs row [u, v]: u consumes v, so the message flows v -> u.
  const Tensor ei = Tensor::from_vector<int64_t>({1, 0, 2, 1, 2, 0}, Shape{3, 2});
  const Graph g = Graph::from_edge_index(ei, 3, EdgeColumns::kDstSrc);
  CHECK(vec(g.csr_indptr) == std::vector<int32_t>{0, 0, 1, 3});  // node 2 receives from 1 and 0
  CHECK(vec(g.csr_indices) == std::vector<int32_t>{0, 1, 0});
  const Graph h = Graph::from_edge_index(ei, 3, EdgeColumns::kSrcDst);
  CHECK(vec(h.csr_indptr) == std::vector<int32_t>{0, 2, 3, 3});
  const Tensor ei32 = Tensor::from_vector<int32_t>({1, 0, 2, 1, 2, 0}, Shape{3, 2});
  CHECK(vec(Graph::from_edge_index(ei32, 3, EdgeColumns::kDstSrc).csr_indices) == vec(g.csr_indices));

  const Tensor bad = Tensor::from_vector<int64_t>({1, 0, 5, 1}, Shape{2, 2});
  CHECK_THROWS_WITH_AS(Graph::from_edge_index(bad, 3, EdgeColumns::kDstSrc, "edge_index of g.npz"),
                       doctest::Contains("edge_index of g.npz: edge 1 (1 -> 5) has a node id outside [0, 3)"), Error);
  const Tensor neg = Tensor::from_vector<int64_t>({-1, 0}, Shape{1, 2});
  CHECK_THROWS_AS(Graph::from_edge_index(neg, 3, EdgeColumns::kSrcDst), Error);
  const Tensor wrong = Tensor::from_vector<float>({1, 0}, Shape{1, 2});
  CHECK_THROWS_WITH_AS(Graph::from_edge_index(wrong, 3, EdgeColumns::kSrcDst),
                       doctest::Contains("must be i32 or i64 with shape [E, 2]"), Error);
  CHECK_THROWS_WITH_AS(Graph::from_edges(nullptr, nullptr, 0, int64_t(1) << 33),
                       doctest::Contains("nodes does not fit"), Error);
}

TEST_CASE("graph: copy to the device and back") {
  GNN_SKIP_UNLESS_CUDA();
  const std::vector<int64_t> src = {0, 2, 1, 2}, dst = {1, 1, 2, 2};
  const Graph g = Graph::from_edges(src.data(), dst.data(), 4, 4);
  const Graph d = g.to(Device::cuda(0));
  CHECK(d.device().is_cuda());
  CHECK(vec(d.csc_to_csr) == vec(g.csc_to_csr));
}
