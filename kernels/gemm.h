// Dense GEMM, row-major: C = alpha * op(A) * op(B) + beta * C
//   op(A): [M, K], stored as A [M, K] (lda >= K) or, with trans_a, as A [K, M] (lda >= M)
//   op(B): [K, N], stored as B [K, N] (ldb >= N) or, with trans_b, as B [N, K] (ldb >= K)
//   C [M, N] (ldc >= N). With beta == 0, C is written without being read (it may hold NaN).
// Every C element is summed over k in the same order whatever the thread count: results are
// bitwise identical for any number of threads.
#pragma once
#include "base/common.h"

namespace gnn {

template <class T>
void gemm_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
              int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      T acc = 0;
      for (int64_t p = 0; p < K; ++p)
        acc += (trans_a ? A[p * lda + i] : A[i * lda + p]) * (trans_b ? B[j * ldb + p] : B[p * ldb + j]);
      C[i * ldc + j] = beta == T(0) ? alpha * acc : alpha * acc + beta * C[i * ldc + j];
    }
  }
}

// The fast CPU version: packing, a register-blocked micro-kernel (AVX-512, AVX2+FMA, or portable
// vectors, chosen from the CPU's flags; GNN_GEMM_ISA=avx512|avx2|generic overrides), OpenMP over
// row blocks.
void gemm_cpu(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// C = op(A) op(B) + bias (bias [N], added to every row): the product's bits and then the addition's,
// in one pass over C (the addition in the micro-kernel's store of the last k block), where a separate
// add_bias read and wrote C again.
template <class T>
void gemm_bias_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
                   int64_t ldb, const T* bias, T* C, int64_t ldc) {
  gemm_ref<T>(trans_a, trans_b, M, N, K, T(1), A, lda, B, ldb, T(0), C, ldc);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] += bias[j];
}
void gemm_bias_cpu(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                   const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc);

// C = op([A1 | A2]) B (+ bias, which may be null), the two parts side by side as GemmCat below: without
// trans_a, op(A) = [A1 | A2] [M, K] with k1 columns from A1; with it, op(A) = [A1 | A2]^T [M, K] with k1
// rows from A1 (each part stored [K, *]). The concatenation's bits (a layer over [aggregate | root]).
template <class T>
void gemm_cat_ref(bool trans_a, int64_t M, int64_t N, int64_t K, const T* A1, int64_t lda1, const T* A2, int64_t lda2,
                  int64_t k1, const T* B, int64_t ldb, const T* bias, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      T acc = 0;
      for (int64_t p = 0; p < K; ++p) {
        const int64_t s = trans_a ? p : i, t = trans_a ? i : p;  // the stored element (s, t)
        acc += (t < k1 ? A1[s * lda1 + t] : A2[s * lda2 + t - k1]) * B[p * ldb + j];
      }
      C[i * ldc + j] = bias ? acc + bias[j] : acc;
    }
}
void gemm_cat_cpu(bool trans_a, int64_t M, int64_t N, int64_t K, const float* A1, int64_t lda1, const float* A2,
                  int64_t lda2, int64_t k1, const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc);

// C = op(A) op(B) [M, N] written as two matrices side by side, [C1 | C2]: columns j < n1 into C1 (row stride
// ldc1), the rest into C2 (ldc2) at column j - n1. A layer over [a | b] gets its two input gradients,
// d[a | b] = dy W^T, each part straight into its own tensor, and with bf16 products from one product that
// reads dy once (gemm_split_cpu, below). The bits of the two products over op(B)'s column ranges, [0, n1)
// and [n1, N), which is what runs where one product would not give them (gemm_split_one_product), in f32
// and on a GPU. R2 (optional, [M, N - n1], row stride ldr2, not overlapping C2) is added to the second part's
// values after its product, as add_to would: a layer whose output adds its root input b (y = [a | b] W + b) gets b's
// whole gradient, dy W_b^T + dy, in the product's store.
template <class T>
void gemm_split_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
                    int64_t ldb, T* C1, int64_t ldc1, T* C2, int64_t ldc2, int64_t n1, const T* R2 = nullptr,
                    int64_t ldr2 = 0) {
  gemm_ref(trans_a, trans_b, M, n1, K, T(1), A, lda, B, ldb, T(0), C1, ldc1);
  gemm_ref(trans_a, trans_b, M, N - n1, K, T(1), A, lda, trans_b ? B + n1 * ldb : B + n1, ldb, T(0), C2, ldc2);
  if (R2)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N - n1; ++j) C2[i * ldc2 + j] = C2[i * ldc2 + j] + R2[i * ldr2 + j];
}

// C = [A1 | A2] B + bias + R (R [M, N], row stride ldr, not overlapping C; bias optional): gemm_cat's values, and then
// R added to each (the bits of gemm_cat and add_to). A layer whose output adds its input (GELU(norm(SAGE(x) + x)), the
// 6th place's) then forms the sum in the product's store instead of a pass of its own, so the norm reads
// one input where it read two. Where the product cannot take it in its store (gemm_adds_in_store), the
// addition is a pass over C after the product; the same bits either way.
template <class T>
void gemm_cat_add_ref(int64_t M, int64_t N, int64_t K, const T* A1, int64_t lda1, const T* A2, int64_t lda2, int64_t k1,
                      const T* B, int64_t ldb, const T* bias, const T* R, int64_t ldr, T* C, int64_t ldc) {
  gemm_cat_ref<T>(false, M, N, K, A1, lda1, A2, lda2, k1, B, ldb, bias, C, ldc);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = C[i * ldc + j] + R[i * ldr + j];
}
void gemm_cat_add_cpu(int64_t M, int64_t N, int64_t K, const float* A1, int64_t lda1, const float* A2, int64_t lda2,
                      int64_t k1, const float* B, int64_t ldb, const float* bias, const float* R, int64_t ldr, float* C,
                      int64_t ldc);
// Whether an addend to C rides in the product's store here (the process's precision, bf16 products whose
// driver does not cut K) rather than a pass of its own after it: what a layer asks before choosing to add
// its residual in the product (the f32 kernels do not take one).
bool gemm_adds_in_store(int64_t M, int64_t N, int64_t K);
// Whether gemm_cpu with alpha 1 and beta 1 writes each value as C's old one plus the finished product,
// rounded once (every driver's store adds beta C after the k loop; here K fits one k block and no split-K
// chunks cut it): the bits of the product and then add_into. A backward may then write a gradient into
// the one its input holds (ag::grad_sum) from the product's store.
bool gemm_beta_adds_after(int64_t M, int64_t N, int64_t K);

// The same on the calling thread only, for fused kernels that already run one block per thread.
void gemm_cpu_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Floating-point operations (2 M N K) of every CPU GEMM since the process started: what gnn train
// --profile divides by the measured GEMM peak for a step's floor.
int64_t gemm_cpu_flops();
// The same for the GPU's GEMMs (gemm_cuda counts each call as it queues it).
int64_t gemm_cuda_flops();
void count_gemm_cuda_flops(int64_t flops);

enum class GemmIsa { kGeneric, kAvx2, kAvx512 };
GemmIsa gemm_isa();  // what gemm_cpu uses here
bool gemm_isa_supported(GemmIsa isa);  // whether this CPU can run it
const char* gemm_isa_name(GemmIsa isa);
// A stored as two row-major matrices side by side, [A | a2]: stored columns 0..k1-1 are A's (row stride
// lda), the rest a2's (row stride lda2), as if concatenated. Without trans_a they are op(A)'s first k1
// columns of K; with it, op(A)'s first k1 rows of M. Without a2, A alone.
struct GemmCat {
  const float* a2 = nullptr;
  int64_t lda2 = 0, k1 = 0;
};
// Where a bf16 driver's C goes (kernels/gemm_bf16.cpp): C's N columns stored as two row-major matrices side by
// side, [C | c2], columns j < n1 in C (row stride ldc), the rest in c2 (row stride ldc2) at column j - n1
// (without c2, C alone); and what is added to the finished values, after the bias: r [M, n1 or N] (row stride
// ldr) to C's, r2 to c2's (each optional). (gemm_split_cpu, gemm_cat_add_cpu.)
struct GemmOut {
  float* c2 = nullptr;
  int64_t ldc2 = 0, n1 = 0;
  const float* r = nullptr;
  int64_t ldr = 0;
  const float* r2 = nullptr;
  int64_t ldr2 = 0;
};
// One ISA explicitly (tests, benchmarks); the ISA must be supported. bias: null, or N values added to every
// finished row (alpha must be 1, beta 0 or 1). cat: A is [A | cat.a2], each value summed as from the
// concatenation, the same bits, without building it.
void gemm_cpu_isa(GemmIsa isa, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel = true,
                  const float* bias = nullptr, GemmCat cat = {});

// Mixed precision on the CPU (kernels/gemm_bf16.cpp): with kBf16, gemm_cpu, gemm_bias_cpu, gemm_cat_cpu,
// gemm_split_cpu and gemm_cpu_serial round op(A) and op(B) to bfloat16 (nearest, ties to even) and sum the
// exact products in f32 (AVX512-BF16's VDPBF16PS, twice the f32 kernel's multiply-adds per instruction, or
// AMX's tiles; denormal inputs read as zero), as torch's bf16 autocast and
// set_float32_matmul_precision("medium") do. kF32 (the default) is the f32 kernels.
// The process-wide setting is gnn train's --matmul-precision; setting kBf16 where the CPU lacks AVX512-BF16 is
// an error. Results are the same bits for any thread count, as in f32.
enum class GemmPrecision { kF32, kBf16 };
bool gemm_bf16_supported();  // this CPU has AVX512-BF16 (and AVX512-BW/VL)
void set_gemm_cpu_precision(GemmPrecision p);
GemmPrecision gemm_cpu_precision();
const char* gemm_precision_name(GemmPrecision p);  // "f32" | "bf16"
// The bf16 products have two kernels: VDPBF16PS on AVX-512 registers, and AMX's tile multiply (TDPBF16PS,
// 16 x 16 f32 tiles; on CPUs with AMX-BF16 whose kernel grants the process the tile registers). Both round
// the inputs alike and sum in f32, but a tile sums each dot product in its own order and rounding, so the
// two differ in the last bits; each is the same for any thread count. gemm_cpu_bf16 takes AMX where it
// can, or the kernel GNN_BF16_KERNEL names (avx512bf16 | amx).
enum class Bf16Kernel { kAvx512Bf16, kAmx };
bool gemm_bf16_kernel_supported(Bf16Kernel k);
Bf16Kernel gemm_bf16_kernel();  // the one gemm_cpu_bf16 uses; needs gemm_bf16_supported()
const char* gemm_bf16_kernel_name(Bf16Kernel k);  // "avx512bf16" | "amx"
const char* gemm_kernel_name();  // the CPU products' kernel now: the ISA's name in f32, the bf16 kernel's in bf16
// One bf16 kernel explicitly (tests, benchmarks), with gemm_cpu_isa's arguments; it must be supported.
// R (optional, [M, N], row stride ldr; alpha 1; not overlapping C, which earlier k blocks write): added to
// C's values after the bias, in the product's store where the driver takes it (not through split_k's
// chunks), else by a pass after the product; the same bits.
void gemm_cpu_bf16_on(Bf16Kernel k, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                      bool parallel = true, const float* bias = nullptr, GemmCat cat = {}, const float* R = nullptr,
                      int64_t ldr = 0);
// Whether the AMX kernel writes this C with streaming stores (not fetching its lines first): a C of
// kGemmStreamFloats and up that one pass writes (K within one AMX KC block of 512, beta 0), 64-byte aligned with
// rows a multiple of 16 floats apart, on the calling threads' product (not split-K's partials). Full
// 32-column panels only; the edge is stored as usual. Same bits either way.
inline constexpr int64_t kGemmStreamFloats = int64_t(4) << 20;  // 16 MiB
bool gemm_amx_streams_c(int64_t M, int64_t N, int64_t K, float beta, const float* C, int64_t ldc, bool parallel);
// gemm_split_ref's product on the CPU (the process's precision), and on one bf16 kernel explicitly. With bf16
// products it is one product where gemm_split_one_product says so (the bf16 drivers write each 32-column
// panel of C into its part: n1 a multiple of 32 with over 16 columns after it, and K not cut by split_k),
// else two; in f32 always two.
void gemm_split_cpu(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                    const float* B, int64_t ldb, float* C1, int64_t ldc1, float* C2, int64_t ldc2, int64_t n1,
                    const float* R2 = nullptr, int64_t ldr2 = 0);
void gemm_split_bf16_on(Bf16Kernel k, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                        int64_t lda, const float* B, int64_t ldb, float* C1, int64_t ldc1, float* C2, int64_t ldc2,
                        int64_t n1, const float* R2 = nullptr, int64_t ldr2 = 0);
bool gemm_split_one_product(int64_t M, int64_t N, int64_t K, int64_t n1);
// The bf16 kernel explicitly (tests, benchmarks), with gemm_cpu_isa's arguments; needs gemm_bf16_supported().
void gemm_cpu_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel = true,
                   const float* bias = nullptr, GemmCat cat = {});

// cuBLAS SGEMM on `stream` through `blas` (runtime's handle for the stream's device; the row-major product is the
// column-major one with A and B swapped). FP32 by default; with TF32 on (set_gemm_tf32, or GNN_TF32=1 in the
// environment) the tensor cores round the inputs to 10 mantissa bits. Results are the same bits for the same shapes on
// the same GPU.
void gemm_cuda(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const BlasHandle& blas, Stream stream);
void set_gemm_tf32(bool on);
bool gemm_tf32();

}  // namespace gnn
