// Random graphs with TpuGraphs-like degrees for benchmarks: E edges over N nodes (mean in-degree
// E / N, about 2 in real programs), destinations skewed so a few nodes are hubs (a parameter or a
// broadcast feeding thousands of consumers), sources mostly near their destination as in HLO's
// topological order. Deterministic for a seed.
#pragma once
#include <cstdint>

#include "runtime/graph.h"

namespace gnn {

Graph tpugraphs_like_graph(int64_t nodes, int64_t edges, uint64_t seed);

}  // namespace gnn
