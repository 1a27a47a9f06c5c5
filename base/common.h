// What every layer may use (base/, below runtime and kernels): the Stream and BlasHandle types (usable
// without the CUDA toolkit), kWithCuda, the CPU clone attribute and small integer helpers. Kernels take raw
// pointers and sizes; they never allocate.
#pragma once
#include <cstddef>
#include <cstdint>

struct CUstream_st;  // cudaStream_t is CUstream_st*; declaring it keeps this header toolkit-free.

namespace gnn {

using Stream = CUstream_st*;

// A cuBLAS handle and the device workspace its calls run in, for one device. runtime creates and owns
// them (runtime/cuda.h: cuda_blas); the kernels that call cuBLAS take them as an argument, so no kernel
// keeps a handle or allocates. Opaque pointers keep this header free of cuBLAS's.
struct BlasHandle {
  void* handle = nullptr;  // cublasHandle_t
  void* workspace = nullptr;  // bound with cublasSetWorkspace before every call
  size_t workspace_bytes = 0;
};

#ifdef GNN_WITH_CUDA
inline constexpr bool kWithCuda = true;
#else
inline constexpr bool kWithCuda = false;
#endif

// Hot CPU kernels are compiled three times, for AVX-512 (x86-64-v4), AVX2 with FMA (x86-64-v3) and the
// x86-64 baseline, and
// the loader picks one by the CPU's flags (GCC clones the OpenMP-outlined loop bodies too). The library
// itself is built for the baseline so it runs anywhere. Building spmm_cpu.cpp whole with -mavx2 took
// spmm-mean (N = 10k / 100k, F = 128) from 0.31 to 0.25 ms and 7.7 to 6.5 ms on the 2-core EPYC dev
// machine; the AVX-512 clone took GELU over 8M values from 9.4 to 5.4 ms on the AVX-512 EPYC (the
// AVX2 clone spilled its 16 registers in vmath's erf). That machine's timings drift by up to 40%
// between runs, so compare only side by side. The project compiles C++ with -ffp-contract=off
// (CMakeLists.txt), so no clone contracts a * b + c on its own: every clone rounds alike and a result
// has the same bits on any x86-64 CPU. Where a fused multiply-add is wanted (kernels/vmath.h's
// polynomials) it is written as std::fma, rounded once on every ISA: one instruction in the two vector
// clones, glibc's correctly rounded fmaf in the baseline's: the same bits, but a scalar call per
// multiply-add, several times slower. The baseline clone runs on CPUs short of any part of x86-64-v3
// (AVX2, FMA, BMI1/2, LZCNT, MOVBE, F16C), such as QEMU's default qemu64 model.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GNN_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define GNN_CPU_CLONES
#endif

// Forces a call to be inlined: used on the lambdas a GNN_CPU_CLONES function calls per element, which
// must become part of each clone's body to be compiled for its ISA.
#if defined(__GNUC__)
#define GNN_INLINE __attribute__((always_inline))
#else
#define GNN_INLINE
#endif

// Scalar definitions shared by host and device code (activation formulas): __host__ __device__ under nvcc.
#ifdef __CUDACC__
#define GNN_HD __host__ __device__
#else
#define GNN_HD
#endif

// A max over terms in order (SpMM's and pooling's, with the term that gave it): a later term v replaces the
// running max m where greater, and where v is NaN and m is not, so a NaN anywhere gives NaN (torch's amax),
// held at the first NaN's term; of equal terms the first stays.
template <class T>
GNN_HD GNN_INLINE inline bool max_takes(T v, T m) {
  return v > m || (v != v && m == m);
}
// The same rule merging a partial max pv of terms whose first maximal one is pa (-1: no terms) into m of
// term a: the sequential max's result whatever the split (equal values, or two NaNs: the earlier term).
template <class T>
GNN_HD GNN_INLINE inline bool max_merge_takes(T pv, int32_t pa, T m, int32_t a) {
  return pa >= 0 && (a < 0 || max_takes(pv, m) || ((pv == m || (pv != pv && m != m)) && pa < a));
}

template <class T>
constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

template <class T>
constexpr T round_up(T a, T b) {
  return ceil_div(a, b) * b;
}

}  // namespace gnn
