// The kernel registry (bench/registry.h): the list of families, the checks every case shares, and the
// graph and inputs the cases set up. The cases themselves: bench/registry_<family>.cpp.
#include "bench/registry.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bench/registry_cases.h"
#include "runtime/cuda.h"
#include "runtime/random_graph.h"

namespace gnn::cli {

void save_graph(const KernelShape& s, const Graph& g) {
  if (s.save_graph.empty()) return;
  Tensor ei = Tensor::empty({g.num_edges, 2}, DType::I64);
  for (int64_t v = 0; v < g.num_nodes; ++v)
    for (int32_t p = g.csr_indptr.i32()[v]; p < g.csr_indptr.i32()[v + 1]; ++p)
      ei.i64()[2 * p] = v, ei.i64()[2 * p + 1] = g.csr_indices.i32()[p];
  *s.graph_arrays = {{"edge_index", ei}, {"num_nodes", Tensor::from_vector<int64_t>({g.num_nodes})}};
}

GraphData::GraphData(const KernelShape& s) : g(tpugraphs_like_graph(s.nodes, s.edges, s.seed)) {
  save_graph(s, g);
  if (s.cuda) g = g.to(Device::cuda(0));
  // the view the autograd ops build for their kernels
  v = CsrView{g.num_nodes,        g.num_sources(),     g.csr_indptr.i32(), g.csr_indices.i32(),
              g.csc_indptr.i32(), g.csc_indices.i32(), g.csc_to_csr.i32(), g.num_edges};
}

Tensor random_tensor(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor t = Tensor::empty({rows, cols}, DType::F32);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    t.f32()[i] = float(int64_t(x % 2001) - 1000) / 1000.0f;
  }
  return t;
}

std::shared_ptr<std::vector<int64_t>> graph_ranges(int64_t N, int64_t S) {
  auto ptr = std::make_shared<std::vector<int64_t>>();
  for (int64_t r = 0; r < N; r += std::max<int64_t>(1, S)) ptr->push_back(r);
  ptr->push_back(N);
  return ptr;
}

namespace {

// Every family of cases, one line each, in the order `gnn bench kernel`'s error and gnn_bench list them.
#define GNN_BENCH_FAMILIES(X) X(gemm) X(spmm) X(gat) X(sage) X(attention) X(norms) X(ops)

const std::vector<KernelEntry>& all_cases() {
  static const std::vector<KernelEntry> all = [] {
    std::vector<KernelEntry> v;
#define GNN_ADD_FAMILY(f) \
  for (const KernelEntry& e : f##_kernels()) v.push_back(e);
    GNN_BENCH_FAMILIES(GNN_ADD_FAMILY)
#undef GNN_ADD_FAMILY
    return v;
  }();
  return all;
}

std::string joined(bool cuda_only) {
  std::string all;
  for (const KernelEntry& e : all_cases())
    if (e.cuda || !cuda_only) all += (all.empty() ? "" : ", ") + std::string(e.name);
  return all;
}

const KernelEntry& find_case(const std::string& name) {
  for (const KernelEntry& e : all_cases())
    if (name == e.name) return e;
  throw KernelUsageError("gnn bench kernel: unknown kernel '" + name + "' (available: " + joined(false) + ")");
}

}  // namespace

std::vector<std::string> bench_kernel_names() {
  std::vector<std::string> names;
  for (const KernelEntry& e : all_cases()) names.push_back(e.name);
  return names;
}

bool bench_kernel_takes_configs(const std::string& name) { return find_case(name).configs; }
KernelReads bench_kernel_reads(const std::string& name) {
  static std::mutex m;
  static std::map<std::string, KernelReads> asked;
  const KernelEntry& e = find_case(name);
  const std::lock_guard<std::mutex> lock(m);
  if (auto it = asked.find(name); it != asked.end()) return it->second;
  return asked[name] = e.reads ? e.reads() : KernelReads{};
}

KernelCase make_kernel_case(const std::string& name, const KernelShape& s) {
  const KernelEntry& e = find_case(name);
  if (s.cusparse && ((name != "spmm-sum" && name != "spmm-mean") || s.backward || !s.cuda))
    throw KernelUsageError("gnn bench kernel: --spmm cusparse times spmm-sum and spmm-mean forward on --device cuda "
                           "only");
  if (s.cuda && !e.cuda)
    throw KernelUsageError("gnn bench kernel: " + name + " runs on the CPU only (--device cuda: " + joined(true) + ")");
  if (s.cuda && s.configs > 1 && (name == "sage-layer" || name == "gat-layer"))
    throw KernelUsageError("gnn bench kernel: " + name + " on --device cuda does not take --configs");
  if (s.cuda && !cuda_available())
    throw KernelUsageError("gnn bench kernel: --device cuda is not usable here: " + cuda_status());
  // Configs share a layer's weights: its GEMMs cover (N*C) x F. The fused SAGE kernel and the GAT
  // case take one config per row, so they refuse rather than time a (C*F)-wide dense layer.
  if (s.configs > 1 && !e.configs)
    throw KernelUsageError("gnn bench kernel: " + name +
                           " does not take --configs (sage-layer does: the composed "
                           "kernels on the node-major N x (C*F) layout)");
  if (!s.save_graph.empty() && !bench_kernel_reads(name).edges)
    throw KernelUsageError("gnn bench kernel: --save-graph " + s.save_graph + ": " + name +
                           " takes no edges, so there is no edge_index to write");
  return e.make(s);
}

}  // namespace gnn::cli
