// SGEMM dispatch: the widest micro-kernel this CPU runs (or the one GNN_GEMM_ISA names), and a
// portable one on GCC vector extensions for CPUs with neither AVX2 nor AVX-512.
#include <atomic>
#include <cstdlib>
#include <cstring>
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "base/error.h"
#include "kernels/gemm.h"
#include "kernels/gemm_blocked.h"

namespace gnn {

void gemm_avx2(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
               float*, int64_t, bool, const float*, GemmCat);
void gemm_avx512(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
                 float*, int64_t, bool, const float*, GemmCat);
void gemm_bf16_avx512(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
                      float*, int64_t, bool, const float*, GemmCat, GemmOut);
void gemm_bf16_amx(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
                   float*, int64_t, bool, const float*, GemmCat, GemmOut);

namespace {

struct Generic {  // 4 floats: SSE on x86-64, NEON elsewhere, through the compiler's vector extension
  typedef float T __attribute__((vector_size(16)));
  static constexpr int W = 4;
  static T zero() { return T{0, 0, 0, 0}; }
  static T set1(float x) { return T{x, x, x, x}; }
  static T load(const float* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static T bcast(const float* p) { return set1(*p); }
  static T fma(T a, T b, T c) { return a * b + c; }
  static T mul(T a, T b) { return a * b; }
  static void store(float* p, T v) { std::memcpy(p, &v, sizeof v); }
};

GemmIsa detect() {
  if (const char* forced = std::getenv("GNN_GEMM_ISA"); forced && *forced) {  // (empty: unset, as GNN_SYNC)
    for (GemmIsa isa : {GemmIsa::kGeneric, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
      if (std::strcmp(forced, gemm_isa_name(isa)) == 0) {
        GNN_CHECK(gemm_isa_supported(isa), "GNN_GEMM_ISA=", forced, ": this CPU cannot run it");
        return isa;
      }
    }
    GNN_FAIL("GNN_GEMM_ISA=", forced, ": unknown (avx512, avx2, generic)");
  }
  if (gemm_isa_supported(GemmIsa::kAvx512)) return GemmIsa::kAvx512;
  if (gemm_isa_supported(GemmIsa::kAvx2)) return GemmIsa::kAvx2;
  return GemmIsa::kGeneric;
}

}  // namespace

const char* gemm_isa_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return "avx512";
    case GemmIsa::kAvx2:
      return "avx2";
    default:
      return "generic";
  }
}

bool gemm_isa_supported(GemmIsa isa) {
#if defined(__x86_64__)
  if (isa == GemmIsa::kAvx512) return __builtin_cpu_supports("avx512f");
  if (isa == GemmIsa::kAvx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  if (isa != GemmIsa::kGeneric) return false;
#endif
  return true;
}

GemmIsa gemm_isa() {
  static const GemmIsa isa = detect();
  return isa;
}

namespace {
std::atomic<int64_t> g_gemm_flops{0}, g_gemm_cuda_flops{0};
}

int64_t gemm_cpu_flops() { return g_gemm_flops.load(std::memory_order_relaxed); }
int64_t gemm_cuda_flops() { return g_gemm_cuda_flops.load(std::memory_order_relaxed); }
void count_gemm_cuda_flops(int64_t flops) { g_gemm_cuda_flops.fetch_add(flops, std::memory_order_relaxed); }

namespace {
// C[i, j] = C[i, j] + R[i, j], row by row over the threads: an addend the product's store did not take.
void add_rows(float* C, int64_t ldc, const float* R, int64_t ldr, int64_t M, int64_t N) {
#pragma omp parallel for schedule(static) if (M * N > 32768)
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = C[i * ldc + j] + R[i * ldr + j];
}

// What every CPU kernel checks of its arguments, and the product's FLOPs counted.
void check_and_count(bool ta, int64_t M, int64_t N, int64_t K, float alpha, float beta, const float* bias,
                     GemmCat cat) {
  GNN_CHECK(!bias || (alpha == 1.0f && (beta == 0.0f || beta == 1.0f)),
            "gemm: a bias needs alpha 1 and beta 0 or 1, got ", alpha, " and ", beta);
  const int64_t split = ta ? M : K;  // the stored columns [A | a2] make
  GNN_CHECK(!cat.a2 || (cat.k1 >= 0 && cat.k1 <= split && cat.lda2 >= split - cat.k1), "gemm: the two parts of A (",
            cat.k1, " columns and the rest, row stride ", cat.lda2, ") do not make ", split, " columns");
  g_gemm_flops.fetch_add(2 * M * N * K, std::memory_order_relaxed);
}
}  // namespace

void gemm_cpu_isa(GemmIsa isa, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel,
                  const float* bias, GemmCat cat) {
  GNN_CHECK(gemm_isa_supported(isa), "gemm: this CPU cannot run the ", gemm_isa_name(isa), " kernel");
  check_and_count(ta, M, N, K, alpha, beta, bias, cat);
  switch (isa) {
#if defined(__x86_64__)
    case GemmIsa::kAvx512:
      return gemm_avx512(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias, cat);
    case GemmIsa::kAvx2:
      return gemm_avx2(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias, cat);
#endif
    default:
      return gemm_detail::run_shaped<Generic, 4, 4>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel,
                                                    bias, gemm_detail::Cat{cat.a2, cat.lda2, cat.k1});
  }
}

bool gemm_bf16_supported() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

namespace {
std::atomic<GemmPrecision> g_precision{GemmPrecision::kF32};
}

void set_gemm_cpu_precision(GemmPrecision p) {
  GNN_CHECK(p == GemmPrecision::kF32 || gemm_bf16_supported(),
            "matmul precision bf16: this CPU has no AVX512-BF16 (bf16 products need it); use f32");
  if (p == GemmPrecision::kBf16) gemm_bf16_kernel();  // GNN_BF16_KERNEL checked here, before any product
  g_precision.store(p, std::memory_order_relaxed);
}
GemmPrecision gemm_cpu_precision() { return g_precision.load(std::memory_order_relaxed); }
const char* gemm_precision_name(GemmPrecision p) { return p == GemmPrecision::kBf16 ? "bf16" : "f32"; }

namespace {
// AMX's tile data is off until the process asks Linux for it (arch_prctl ARCH_REQ_XCOMP_PERM, feature 18,
// XTILEDATA); asked once, on first use. A kernel or hypervisor that refuses leaves the AVX-512 kernel.
bool amx_usable() {
#if defined(__linux__) && defined(__x86_64__)
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    const bool bf16 = (d >> 22) & 1u, tile = (d >> 24) & 1u;  // CPUID.(7,0):EDX AMX-BF16, AMX-TILE
    return bf16 && tile && gemm_bf16_supported() && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  }();
  return ok;
#else
  return false;
#endif
}

Bf16Kernel detect_bf16() {
  if (const char* forced = std::getenv("GNN_BF16_KERNEL")) {
    for (Bf16Kernel k : {Bf16Kernel::kAvx512Bf16, Bf16Kernel::kAmx}) {
      if (std::strcmp(forced, gemm_bf16_kernel_name(k)) == 0) {
        GNN_CHECK(gemm_bf16_kernel_supported(k), "GNN_BF16_KERNEL=", forced, ": this CPU cannot run it");
        return k;
      }
    }
    GNN_FAIL("GNN_BF16_KERNEL=", forced, ": unknown (amx, avx512bf16)");
  }
  return amx_usable() ? Bf16Kernel::kAmx : Bf16Kernel::kAvx512Bf16;
}
}  // namespace

const char* gemm_bf16_kernel_name(Bf16Kernel k) { return k == Bf16Kernel::kAmx ? "amx" : "avx512bf16"; }

// (parallel: split_k's chunks run with parallel false, and their partials are read straight back)
bool gemm_amx_streams_c(int64_t M, int64_t N, int64_t K, float beta, const float* C, int64_t ldc, bool parallel) {
  return parallel && K <= gemm_detail::kKCAmx && beta == 0.0f && M * N >= kGemmStreamFloats &&
         reinterpret_cast<uintptr_t>(C) % 64 == 0 && ldc % 16 == 0;
}

bool gemm_bf16_kernel_supported(Bf16Kernel k) { return k == Bf16Kernel::kAmx ? amx_usable() : gemm_bf16_supported(); }

Bf16Kernel gemm_bf16_kernel() {
  static const Bf16Kernel k = detect_bf16();
  return k;
}

const char* gemm_kernel_name() {
  return gemm_cpu_precision() == GemmPrecision::kBf16 ? gemm_bf16_kernel_name(gemm_bf16_kernel())
                                                      : gemm_isa_name(gemm_isa());
}

void gemm_cpu_bf16_on(Bf16Kernel k, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                      int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel,
                      const float* bias, GemmCat cat, const float* R, int64_t ldr) {
  GNN_CHECK(gemm_bf16_kernel_supported(k), "gemm: this CPU cannot run the ", gemm_bf16_kernel_name(k), " bf16 kernel");
  GNN_CHECK(!R || ldr >= N, "gemm: the addend's row stride ", ldr, " is below its ", N, " columns");
  // (alpha 1, as for a bias: alpha C + R could otherwise become one multiply-add in the store, where the
  // product and then add round twice)
  GNN_CHECK(!R || alpha == 1.0f, "gemm: an addend needs alpha 1, got ", alpha);
  // K = 0 or alpha = 0 is C = beta C (+ bias), no product: the f32 driver's, the same values. The drivers
  // take no addend through split_k's chunks: it is added after those.
  const bool no_product = M == 0 || N == 0 || K == 0 || alpha == 0.0f;
  if (no_product || (R && parallel && gemm_detail::wants_split_k(M, N, K))) {
    if (no_product) gemm_cpu_isa(gemm_isa(), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias, cat);
    else gemm_cpu_bf16_on(k, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias, cat);
    if (R) add_rows(C, ldc, R, ldr, M, N);
    return;
  }
  check_and_count(ta, M, N, K, alpha, beta, bias, cat);
#if defined(__x86_64__)
  const GemmOut out{.r = R, .ldr = ldr};
  if (k == Bf16Kernel::kAmx)
    return gemm_bf16_amx(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias, cat, out);
  gemm_bf16_avx512(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias, cat, out);
#endif
}

void gemm_cpu_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                   const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel, const float* bias,
                   GemmCat cat) {
  GNN_CHECK(gemm_bf16_supported(), "gemm: this CPU cannot run the bf16 kernel (no AVX512-BF16)");
  gemm_cpu_bf16_on(gemm_bf16_kernel(), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias, cat);
}

namespace {
// Every product of the process goes through here: the precision setting, then the ISA.
void gemm_dispatch(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                   const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel,
                   const float* bias = nullptr, GemmCat cat = {}) {
  if (gemm_cpu_precision() == GemmPrecision::kBf16)
    return gemm_cpu_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias, cat);
  gemm_cpu_isa(gemm_isa(), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel, bias, cat);
}
}  // namespace

void gemm_cpu(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_dispatch(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, /*parallel=*/true);
}

void gemm_cat_cpu(bool ta, int64_t M, int64_t N, int64_t K, const float* A1, int64_t lda1, const float* A2,
                  int64_t lda2, int64_t k1, const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc) {
  gemm_dispatch(ta, false, M, N, K, 1.0f, A1, lda1, B, ldb, 0.0f, C, ldc, /*parallel=*/true, bias,
                GemmCat{A2, lda2, k1});
}

void gemm_cat_add_cpu(int64_t M, int64_t N, int64_t K, const float* A1, int64_t lda1, const float* A2, int64_t lda2,
                      int64_t k1, const float* B, int64_t ldb, const float* bias, const float* R, int64_t ldr, float* C,
                      int64_t ldc) {
  GNN_CHECK(R, "gemm_cat_add: the addend R is null");
  GNN_CHECK(ldr >= N, "gemm_cat_add: the addend's row stride ", ldr, " is below its ", N, " columns");
  if (gemm_cpu_precision() == GemmPrecision::kBf16) {
    GNN_CHECK(gemm_bf16_supported(), "gemm: this CPU cannot run the bf16 kernel (no AVX512-BF16)");
    return gemm_cpu_bf16_on(gemm_bf16_kernel(), false, false, M, N, K, 1.0f, A1, lda1, B, ldb, 0.0f, C, ldc, true, bias,
                            GemmCat{A2, lda2, k1}, R, ldr);
  }
  gemm_cat_cpu(false, M, N, K, A1, lda1, A2, lda2, k1, B, ldb, bias, C, ldc);
  add_rows(C, ldc, R, ldr, M, N);
}

bool gemm_adds_in_store(int64_t M, int64_t N, int64_t K) {
  return gemm_cpu_precision() == GemmPrecision::kBf16 && gemm_bf16_supported() && M > 0 && N > 0 && K > 0 &&
         !gemm_detail::wants_split_k(M, N, K);
}

bool gemm_beta_adds_after(int64_t M, int64_t N, int64_t K) {
  return M > 0 && N > 0 && K > 0 && K <= gemm_detail::kKC && !gemm_detail::wants_split_k(M, N, K);
}

void gemm_bias_cpu(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                   int64_t ldb, const float* bias, float* C, int64_t ldc) {
  gemm_dispatch(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc, /*parallel=*/true, bias);
}

bool gemm_split_one_product(int64_t M, int64_t N, int64_t K, int64_t n1) {
  // Each 32-column panel of the bf16 drivers (two vectors of columns) then lies in one part, each part's
  // own product would take the same driver (over 16 columns: two vectors) and would not cut K (split_k,
  // which a narrower part wants whenever the whole shape does): every value has the two products' bits.
  constexpr int64_t kPanel = 32, kVector = 16;
  return M > 0 && K > 0 && n1 > 0 && N - n1 > kVector && n1 % kPanel == 0 && !gemm_detail::wants_split_k(M, n1, K) &&
         !gemm_detail::wants_split_k(M, N - n1, K);
}

void gemm_split_bf16_on(Bf16Kernel k, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                        const float* B, int64_t ldb, float* C1, int64_t ldc1, float* C2, int64_t ldc2, int64_t n1,
                        const float* R2, int64_t ldr2) {
  GNN_CHECK(n1 >= 0 && n1 <= N, "gemm_split: C split at column ", n1, " of ", N);
  GNN_CHECK(!R2 || ldr2 >= N - n1, "gemm_split: the addend's row stride ", ldr2, " is below its ", N - n1, " columns");
  if (!gemm_split_one_product(M, N, K, n1)) {
    gemm_cpu_bf16_on(k, ta, tb, M, n1, K, 1.0f, A, lda, B, ldb, 0.0f, C1, ldc1);
    gemm_cpu_bf16_on(k, ta, tb, M, N - n1, K, 1.0f, A, lda, tb ? B + n1 * ldb : B + n1, ldb, 0.0f, C2, ldc2, true,
                     nullptr, {}, R2, ldr2);
    return;
  }
  GNN_CHECK(C1 && C2, "gemm_split: a part of C is null");
  GNN_CHECK(gemm_bf16_kernel_supported(k), "gemm: this CPU cannot run the ", gemm_bf16_kernel_name(k), " bf16 kernel");
  check_and_count(ta, M, N, K, 1.0f, 0.0f, nullptr, {});
#if defined(__x86_64__)
  const GemmOut sc{.c2 = C2, .ldc2 = ldc2, .n1 = n1, .r2 = R2, .ldr2 = ldr2};
  if (k == Bf16Kernel::kAmx)
    return gemm_bf16_amx(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C1, ldc1, true, nullptr, {}, sc);
  gemm_bf16_avx512(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C1, ldc1, true, nullptr, {}, sc);
#endif
}

void gemm_split_cpu(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                    int64_t ldb, float* C1, int64_t ldc1, float* C2, int64_t ldc2, int64_t n1, const float* R2,
                    int64_t ldr2) {
  if (gemm_cpu_precision() == GemmPrecision::kBf16)
    return gemm_split_bf16_on(gemm_bf16_kernel(), ta, tb, M, N, K, A, lda, B, ldb, C1, ldc1, C2, ldc2, n1, R2, ldr2);
  GNN_CHECK(n1 >= 0 && n1 <= N, "gemm_split: C split at column ", n1, " of ", N);
  GNN_CHECK(!R2 || ldr2 >= N - n1, "gemm_split: the addend's row stride ", ldr2, " is below its ", N - n1, " columns");
  gemm_cpu(ta, tb, M, n1, K, 1.0f, A, lda, B, ldb, 0.0f, C1, ldc1);
  gemm_cpu(ta, tb, M, N - n1, K, 1.0f, A, lda, tb ? B + n1 * ldb : B + n1, ldb, 0.0f, C2, ldc2);
  if (R2) add_rows(C2, ldc2, R2, ldr2, M, N - n1);
}

void gemm_cpu_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                     const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_dispatch(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, /*parallel=*/false);
}

}  // namespace gnn
