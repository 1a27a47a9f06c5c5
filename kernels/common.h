// What every kernel header needs: the Stream type (usable without the CUDA toolkit), kWithCuda, and
// small integer helpers. Kernels take raw pointers and sizes; they never allocate.
#pragma once
#include <cstddef>
#include <cstdint>

struct CUstream_st;  // cudaStream_t is CUstream_st*; declaring it keeps this header toolkit-free.

namespace gnn {

using Stream = CUstream_st*;

#ifdef GNN_WITH_CUDA
inline constexpr bool kWithCuda = true;
#else
inline constexpr bool kWithCuda = false;
#endif

template <class T>
constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }

template <class T>
constexpr T round_up(T a, T b) { return ceil_div(a, b) * b; }

}  // namespace gnn
