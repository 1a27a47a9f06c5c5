// The kernels and layers `gnn bench kernel NAME` and gnn_bench (bench/bench_kernels.cpp) time: each
// sets up its inputs on a random graph with TpuGraphs-like degrees and returns one timed step plus the
// bytes it must move and the flops it must do (the formulas sit beside each case, bench/registry_*.cpp).
// Each bench/registry_<family>.cpp lists its own cases; bench/registry.cpp lists the families.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace gnn::cli {

struct KernelShape {
  int64_t nodes = 10000, edges = 20000, features = 128, configs = 1;
  int64_t graph_nodes = 64;  // graph-attention: nodes per graph
  bool backward = false;
  bool cuda = false;  // run the _cuda kernels on device 0 (spmm-*, gemm)
  bool cusparse = false;  // with cuda: spmm-sum / spmm-mean through cuSPARSE instead of gnn's kernel
  bool cuda_graph = false;  // with cuda: time replays of the step captured as a CUDA graph
  uint64_t seed = 1;
  // --save-graph FILE: a case that runs on edges puts its graph's arrays (edge_index [E, 2] rows [dst, src],
  // num_nodes) in `graph_arrays`, and gnn bench kernel writes them to FILE, for peers, once every check
  // has passed (so a refused command leaves no file).
  std::string save_graph;
  std::shared_ptr<std::vector<std::pair<std::string, Tensor>>> graph_arrays =
      std::make_shared<std::vector<std::pair<std::string, Tensor>>>();
};

struct KernelCase {
  std::function<void()> step;  // one forward (and backward with --backward) pass
  double bytes = 0;  // the least a pass must move through memory
  double flops = 0;
  bool graph_safe = false;  // the step only queues device work (no host copies or syncs): --cuda-graph can capture it
};

// A name or shape no case takes (an unknown kernel, --configs on a layer that takes one config per
// row, --device cuda for a CPU-only case): `gnn bench kernel` reports it as a usage error (exit 2).
class KernelUsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::vector<std::string> bench_kernel_names();
bool bench_kernel_takes_configs(const std::string& name);  // on the CPU: x node-major [N, C*F]
// What a case reads besides its rows: the graph of --nodes / --edges (which --save-graph writes), and
// graphs of --graph-nodes that split its rows. Asked once a process (an op case makes its inputs to tell).
struct KernelReads {
  bool edges = false, graph_nodes = false;
};
KernelReads bench_kernel_reads(const std::string& name);
KernelCase make_kernel_case(const std::string& name, const KernelShape& shape);  // throws KernelUsageError

}  // namespace gnn::cli
