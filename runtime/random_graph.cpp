#include "runtime/random_graph.h"

#include <algorithm>
#include <random>
#include <vector>

namespace gnn {

Graph tpugraphs_like_graph(int64_t N, int64_t E, uint64_t seed) {
  GNN_CHECK(N > 0 || E == 0, "a graph with ", E, " edges needs nodes");
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int64_t> src(static_cast<size_t>(E)), dst(static_cast<size_t>(E));
  const int64_t hubs = std::max<int64_t>(1, N / 1000);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t d = int64_t(rng() % uint64_t(N));
    dst[size_t(e)] = d;
    // 2% of edges come from a hub, the rest from within 64 nodes of the destination.
    src[size_t(e)] =
        u(rng) < 0.02 ? int64_t(rng() % uint64_t(hubs)) : std::clamp<int64_t>(d - 1 - int64_t(rng() % 64), 0, N - 1);
  }
  return Graph::from_edges(src.data(), dst.data(), E, N, "random graph");
}

}  // namespace gnn
