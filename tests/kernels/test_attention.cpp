// Graph self-attention (kernels/attention.h, autograd/op_attention.cpp), full and linear, on the GPU
// against the host: the fused kernels for heads of at most 64 columns, cuBLAS per block above that
// and with a score bias. (The host path against finite differences: tests/autograd/test_autograd.cpp.)
#include <cmath>

#include "autograd/device_check.h"
#include "testing.h"

using namespace gnn;
using testing::check_op;
using testing::rand;

TEST_CASE("cuda ops: graph self-attention, full and linear, with empty and single-node graphs, matches the host") {
  GNN_SKIP_UNLESS_CUDA();
  // graph 1 empty, graph 2 one node, graph 3 two query tiles of 32, graph 4 a short last tile (230 rows)
  const Tensor gp = Tensor::from_vector(std::vector<int64_t>{0, 5, 5, 6, 70, 300});
  // Head widths: 4 and 32 (the fused kernel's first size), 33 and 64 (its second), 72 (cuBLAS per block)
  for (auto [W, heads] : {std::pair<int64_t, int64_t>{12, 3}, {64, 2}, {66, 2}, {64, 1}, {72, 1}}) {
    CAPTURE(W);
    CAPTURE(heads);
    const Tensor q = rand({300, W}, 51), k = rand({300, W}, 52), v = rand({300, W}, 53);
    for (bool linear : {false, true}) {
      CAPTURE(linear);
      check_op("graph_attention", {q, k, v}, [gp, heads, linear](auto& x, auto&) {
        return ag::graph_attention(x[0], x[1], x[2], gp, heads, linear);
      });
    }
  }
  // A score bias (the blocks of 0, 0, 1, 64 and 230 nodes) takes the per-block path whatever the width.
  std::vector<float> bias;
  for (int64_t n : {5, 0, 1, 64, 230})
    for (int64_t i = 0; i < n * n; ++i) bias.push_back(i % 7 == 3 ? std::log(0.1f) : 0.f);
  const Tensor bt = Tensor::from_vector(bias);
  check_op("graph_attention with a bias", {rand({300, 12}, 54), rand({300, 12}, 55), rand({300, 12}, 56)},
           [gp, bt](auto& x, auto&) { return ag::graph_attention(x[0], x[1], x[2], gp, 3, false, bt); });
}
