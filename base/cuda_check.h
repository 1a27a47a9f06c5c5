// Error checks for code that includes the CUDA runtime (.cu files and runtime/cuda.cpp only).
// GNN_SYNC=1 in the environment synchronises after every launch, so an asynchronous fault is
// reported by the launch that caused it.
#pragma once
#include <cuda_runtime.h>

#include "base/error.h"

namespace gnn {
bool cuda_sync_after_launch();  // reads GNN_SYNC once
}

#define GNN_CUDA_CHECK(expr)                                                                                          \
  do {                                                                                                                \
    const cudaError_t gnn_err_ = (expr);                                                                              \
    GNN_CHECK(gnn_err_ == cudaSuccess, "CUDA error ", cudaGetErrorName(gnn_err_), " (", cudaGetErrorString(gnn_err_), \
              ") in ", #expr);                                                                                        \
  } while (0)

// After every kernel launch: the launch error, and with GNN_SYNC=1 the kernel's own error.
#define GNN_CUDA_LAUNCH_CHECK(name)                                                                            \
  do {                                                                                                         \
    GNN_CUDA_CHECK(cudaGetLastError());                                                                        \
    if (::gnn::cuda_sync_after_launch()) {                                                                     \
      const cudaError_t gnn_err_ = cudaDeviceSynchronize();                                                    \
      GNN_CHECK(gnn_err_ == cudaSuccess, "CUDA error ", cudaGetErrorName(gnn_err_), " in kernel ", name, " (", \
                cudaGetErrorString(gnn_err_), ")");                                                            \
    }                                                                                                          \
  } while (0)
