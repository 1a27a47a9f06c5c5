// What the case files of the kernel registry share (bench/registry.h): the graph and the inputs a case
// sets up, and each family file's list of its cases. A new case is an entry in its family's list; a new
// family is a file and one line of GNN_BENCH_FAMILIES (bench/registry.cpp).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "bench/registry.h"
#include "kernels/rowwise.h"
#include "kernels/spmm.h"
#include "runtime/graph.h"
#include "runtime/tensor.h"

namespace gnn::cli {

// The graph on the kernel's device and the raw CSR / CSC view the kernels take.
struct GraphData {
  Graph g;
  CsrView v;
  explicit GraphData(const KernelShape& s);
};

// --save-graph: g's edge_index ([E, 2] rows [dst, src] in CSR order, as TpuGraphs writes [consumer,
// producer]) and num_nodes, kept in s.graph_arrays when --save-graph is given, for peer scripts.
void save_graph(const KernelShape& s, const Graph& g);
Tensor random_tensor(int64_t rows, int64_t cols, uint64_t seed);  // uniform in [-1, 1], on the host
inline Device device_of(const KernelShape& s) { return s.cuda ? Device::cuda(0) : Device::cpu(); }
// The row ranges of the N nodes split into graphs of S (the last one shorter): a batch's graph_ptr.
std::shared_ptr<std::vector<int64_t>> graph_ranges(int64_t N, int64_t S);

// The least traffic and the flops of a layer pass, shared by the CPU case and the GPU one.
void sage_traffic(KernelCase& k, int64_t N, int64_t E, int64_t F, int64_t O, int64_t C, bool bwd);
void gat_traffic(KernelCase& k, int64_t N, int64_t E, int64_t F, int64_t H, int64_t D, bool bwd);

// One case of the table: its name, whether it has a --device cuda version, whether it takes --configs
// C > 1 (the layers marked false take one config per row), how it sets itself up, and what it reads
// besides its rows (none: neither edges nor graphs). The registry asks `reads` once a process.
struct KernelEntry {
  const char* name;
  bool cuda;
  bool configs;
  std::function<KernelCase(const KernelShape&)> make;
  std::function<KernelReads()> reads = nullptr;
};
inline const std::function<KernelReads()> kSplitsGraphs = [] { return KernelReads{.graph_nodes = true}; };
// The list with every entry marked as running on edges.
inline std::vector<KernelEntry> on_edges(std::vector<KernelEntry> v) {
  for (KernelEntry& e : v) e.reads = [] { return KernelReads{.edges = true}; };
  return v;
}

KernelCase gpu_layer_case(bool gat, bool fused, const KernelShape& s);  // registry_sage.cpp, gat-layer's GPU half

// Each family file's cases, in the order `gnn bench kernel` lists them.
std::vector<KernelEntry> gemm_kernels();  // registry_gemm.cpp
std::vector<KernelEntry> spmm_kernels();  // registry_spmm.cpp
std::vector<KernelEntry> gat_kernels();  // registry_gat.cpp
std::vector<KernelEntry> sage_kernels();  // registry_sage.cpp
std::vector<KernelEntry> attention_kernels();  // registry_attention.cpp
std::vector<KernelEntry> norms_kernels();  // registry_norms.cpp
std::vector<KernelEntry> ops_kernels();  // registry_ops.cpp: every op case of bench/op_cases.h as op:NAME

}  // namespace gnn::cli
