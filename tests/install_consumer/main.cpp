// Writes an npz with the installed library, reads it back, builds a graph: exit 0 when all agree.
#include <cstdio>

#include "io/npz.h"
#include "runtime/graph.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const gnn::Tensor ei = gnn::Tensor::from_vector<int64_t>({1, 0, 2, 1}, gnn::Shape{2, 2});
  gnn::save_npz(argv[1], {{"edge_index", ei}}, /*compress=*/true);
  const gnn::Tensor back = gnn::NpzReader(argv[1]).load("edge_index");
  const gnn::Graph g = gnn::Graph::from_edge_index(back, 3, gnn::EdgeColumns::kDstSrc);
  std::printf("consumer: %lld nodes, %lld edges\n", (long long)g.num_nodes, (long long)g.num_edges);
  return g.num_edges == 2 && g.in_degree(2) == 1 ? 0 : 1;
}
