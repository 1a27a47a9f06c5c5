// What the case files of the kernel registry share (bench/registry.h): the graph and the inputs a case
// sets up, and one factory per case, which bench/registry.cpp lists in its table.
#pragma once
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

Tensor random_tensor(int64_t rows, int64_t cols, uint64_t seed);  // uniform in [-1, 1], on the host
inline Device device_of(const KernelShape& s) { return s.cuda ? Device::cuda(0) : Device::cpu(); }
// The row ranges of the N nodes split into graphs of S (the last one shorter): a batch's graph_ptr.
std::shared_ptr<std::vector<int64_t>> graph_ranges(int64_t N, int64_t S);

// The least traffic and the flops of a layer pass, shared by the CPU case and the GPU one.
void sage_traffic(KernelCase& k, int64_t N, int64_t E, int64_t F, int64_t O, int64_t C, bool bwd);
void gat_traffic(KernelCase& k, int64_t N, int64_t E, int64_t F, int64_t H, int64_t D, bool bwd);

KernelCase gemm_case(const KernelShape& s);  // registry_gemm.cpp
KernelCase spmm_case(Reduce op, const KernelShape& s);  // registry_spmm.cpp
KernelCase sage_case(bool fused, const KernelShape& s);  // registry_sage.cpp
KernelCase gpu_layer_case(bool gat, bool fused, const KernelShape& s);  // registry_sage.cpp
KernelCase gat_case(const KernelShape& s);  // registry_gat.cpp
KernelCase softmax_case(const KernelShape& s);  // registry_gat.cpp
KernelCase attention_case(const KernelShape& s);  // registry_attention.cpp
KernelCase instance_norm_case(const KernelShape& s);  // registry_norms.cpp
KernelCase layer_norm_case(const KernelShape& s);  // registry_norms.cpp
KernelCase rowwise_case(RowOp op, const KernelShape& s);  // registry_norms.cpp
KernelCase pool_case(Reduce op, const KernelShape& s, bool logsumexp = false);  // registry_norms.cpp
KernelCase embedding_case(const KernelShape& s);  // registry_norms.cpp

}  // namespace gnn::cli
