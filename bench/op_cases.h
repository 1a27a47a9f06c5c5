// The autograd ops as cases that the tests and `gnn bench kernel` both iterate over, as ggml's
// test-backend-ops does: a case builds its inputs at a size and applies its op to them. An op picks its
// kernel from its inputs alone (autograd/dispatch.h: the reference in f64, the CPU kernel in f32 on the
// host, the CUDA kernel on a GPU), so neither the test nor the benchmark branches on where it runs:
//   tests/autograd/test_op_cases.cpp  each case in f64 against central differences, in f32 against f64,
//                                     and on a GPU against the host (twice: the same bits)
//   gnn bench kernel op:NAME          the case at the benchmark's shape on its device, forward or
//                                     forward + backward through the autograd (`gnn bench --help`)
// A new op is one entry in op_cases.cpp: the test and the benchmark take it from there.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/var.h"
#include "runtime/graph.h"
#include "runtime/tensor.h"

namespace gnn::cli {

// The sizes a case builds at: N nodes and E edges of a TpuGraphs-like graph (runtime/random_graph.h), F
// features per config, C configs side by side in node-major rows [N, C*F], graphs of S nodes for the
// per-graph ops (graph_ptr).
struct OpSize {
  int64_t nodes = 0, edges = 0, features = 0, configs = 1, graph_nodes = 0;
  uint64_t seed = 1;
};

struct OpInputs {
  std::vector<Tensor> vars;  // the differentiable inputs, f64 on the host (the runner casts and moves them)
  Graph graph;  // the op's graph on the host, when it takes one (moved with the inputs)
  std::vector<Tensor> index;  // index arrays (graph_ptr, rows, ids), on the host where the ops take them
  int64_t configs = 1;  // what an op over the configs of a row takes
};

struct OpCase {
  const char* name;
  OpInputs (*make)(const OpSize&);
  // The op on `x` (the vars, cast and moved), `g` (the graph there) and the case's host index arrays.
  ag::Var (*apply)(const std::vector<ag::Var>& x, const Graph& g, const OpInputs& in);
};

const std::vector<OpCase>& op_cases();

// A case's inputs as leaves of `dtype` on `device` (each requires grad), and the graph there.
struct OpOperands {
  std::vector<ag::Var> vars;
  Graph graph;
};
OpOperands op_operands(const OpInputs& in, DType dtype, Device device);

}  // namespace gnn::cli
