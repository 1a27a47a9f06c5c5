// cuBLAS, cuSPARSE and NCCL are opened on first use (runtime/cuda_libs.cpp says why); this asks
// whether one can be, without failing.
#pragma once
#include <string>

namespace gnn {

enum class CudaLibrary { kCublas, kCusparse, kNccl };

// "" when the library is loaded (opening it now if it was not), else the loader's reason. Only in a
// build against the real CUDA toolkit: the emulator's libraries are linked in.
std::string cuda_library_error(CudaLibrary which);

}  // namespace gnn
