// The kernel registry (bench/registry.h): the table of cases, the checks every case shares, and the
// graph and inputs the cases set up. The cases themselves: bench/registry_<family>.cpp.
#include "bench/registry.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "bench/registry_cases.h"
#include "io/npz.h"
#include "runtime/cuda.h"
#include "runtime/random_graph.h"

namespace gnn::cli {

GraphData::GraphData(const KernelShape& s) : g(tpugraphs_like_graph(s.nodes, s.edges, s.seed)) {
  if (!s.save_graph.empty()) {  // rows [dst, src] in CSR order, as TpuGraphs writes [consumer, producer]
    Tensor ei = Tensor::empty({g.num_edges, 2}, DType::I64);
    for (int64_t v = 0; v < g.num_nodes; ++v)
      for (int32_t p = g.csr_indptr.i32()[v]; p < g.csr_indptr.i32()[v + 1]; ++p)
        ei.i64()[2 * p] = v, ei.i64()[2 * p + 1] = g.csr_indices.i32()[p];
    save_npz(s.save_graph, {{"edge_index", ei}, {"num_nodes", Tensor::from_vector<int64_t>({g.num_nodes})}});
  }
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

// The cases, in the order `gnn bench kernel`'s error and gnn_bench list them.
struct Entry {
  const char* name;
  bool cuda;  // has a --device cuda version
  bool configs;  // takes --configs C > 1 (the layers marked false take one config per row)
  KernelCase (*make)(const KernelShape&);
};

const Entry kCases[] = {
    {"gemm", true, true, gemm_case},
    {"spmm-sum", true, true, [](const KernelShape& s) { return spmm_case(Reduce::kSum, s); }},
    {"spmm-mean", true, true, [](const KernelShape& s) { return spmm_case(Reduce::kMean, s); }},
    {"spmm-max", true, true, [](const KernelShape& s) { return spmm_case(Reduce::kMax, s); }},
    {"segment-softmax", false, true, softmax_case},
    {"gat-layer", true, false,
     [](const KernelShape& s) { return s.cuda ? gpu_layer_case(true, false, s) : gat_case(s); }},
    {"sage-layer", true, true,
     [](const KernelShape& s) { return s.cuda ? gpu_layer_case(false, false, s) : sage_case(false, s); }},
    {"sage-layer-fused", true, false,
     [](const KernelShape& s) { return s.cuda ? gpu_layer_case(false, true, s) : sage_case(true, s); }},
    {"graph-attention", true, false, attention_case},
    {"instance-norm", false, true, instance_norm_case},
    {"layer-norm", true, true, layer_norm_case},
    {"rowwise-softmax", true, true, [](const KernelShape& s) { return rowwise_case(RowOp::kSoftmax, s); }},
    {"rowwise-log-softmax", true, true, [](const KernelShape& s) { return rowwise_case(RowOp::kLogSoftmax, s); }},
    {"rowwise-l2-normalize", true, true, [](const KernelShape& s) { return rowwise_case(RowOp::kL2Normalize, s); }},
    {"pool-sum", true, true, [](const KernelShape& s) { return pool_case(Reduce::kSum, s); }},
    {"pool-mean", true, true, [](const KernelShape& s) { return pool_case(Reduce::kMean, s); }},
    {"pool-max", true, true, [](const KernelShape& s) { return pool_case(Reduce::kMax, s); }},
    {"pool-logsumexp", true, true, [](const KernelShape& s) { return pool_case(Reduce::kSum, s, true); }},
    {"embedding", true, true, embedding_case},
};

std::string joined(bool cuda_only) {
  std::string all;
  for (const Entry& e : kCases)
    if (e.cuda || !cuda_only) all += (all.empty() ? "" : ", ") + std::string(e.name);
  return all;
}

const Entry& find_case(const std::string& name) {
  for (const Entry& e : kCases)
    if (name == e.name) return e;
  throw KernelUsageError("gnn bench kernel: unknown kernel '" + name + "' (available: " + joined(false) + ")");
}

}  // namespace

std::vector<std::string> bench_kernel_names() {
  std::vector<std::string> names;
  for (const Entry& e : kCases) names.push_back(e.name);
  return names;
}

bool bench_kernel_takes_configs(const std::string& name) { return find_case(name).configs; }

KernelCase make_kernel_case(const std::string& name, const KernelShape& s) {
  const Entry& e = find_case(name);
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
  return e.make(s);
}

}  // namespace gnn::cli
