// The CPU's mixed-precision GEMM (kernels/gemm_bf16.cpp, GemmPrecision::kBf16): op(A) and op(B) rounded to
// bfloat16, products summed in f32. Checked against the double product of the rounded inputs (so the only
// error left is the f32 summation's), on every layout the f32 driver takes: transposed or not, [A | a2],
// a bias, alpha and beta, edge tiles, odd K, narrow N and split K; the same bits for any thread count; a C
// split between two matrices (gemm_split_bf16_on) with the bits of two products; the process-wide setting
// routes gemm_cpu through it; and a CPU without AVX512-BF16 refuses it by name.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gemm_check.h"
#include "kernels/gemm.h"
#include "runtime/parallel.h"
#include "testing.h"

namespace gnn {
namespace {

// bfloat16 nearest, ties to even, denormals to zero: what VCVTNEPS2BF16 gives for finite inputs.
double bf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7f800000u) == 0) return std::signbit(v) ? -0.0 : 0.0;
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

struct Case {
  bool ta, tb, cat, bias;
  int64_t M, N, K;
  float alpha, beta;
};

// The kernels this CPU runs (AVX512-BF16's, and AMX's where it has AMX).
std::vector<Bf16Kernel> kernels() {
  std::vector<Bf16Kernel> ks;
  for (Bf16Kernel k : {Bf16Kernel::kAvx512Bf16, Bf16Kernel::kAmx})
    if (gemm_bf16_kernel_supported(k)) ks.push_back(k);
  if (!gemm_bf16_kernel_supported(Bf16Kernel::kAmx))
    MESSAGE("this CPU has no AMX (or may not use it): its kernel untested");
  return ks;
}

void check_case(Bf16Kernel kernel, const Case& c) {
  CAPTURE(gemm_bf16_kernel_name(kernel));
  CAPTURE(c.ta);
  CAPTURE(c.tb);
  CAPTURE(c.cat);
  CAPTURE(c.bias);
  CAPTURE(c.M);
  CAPTURE(c.N);
  CAPTURE(c.K);
  CAPTURE(c.alpha);
  CAPTURE(c.beta);
  const int64_t M = c.M, N = c.N, K = c.K, pad = 3;
  // op(A) [M, K]: stored [M, K] or [K, M]; with cat, its split (columns of [A | a2], or rows of op(A) when
  // transposed) at k1
  const int64_t split = c.ta ? M : K, k1 = c.cat ? split / 3 + 1 : split;
  const int64_t rows_s = c.ta ? K : M;  // stored rows
  const int64_t lda = k1 + pad, lda2 = split - k1 + pad, ldb = (c.tb ? K : N) + pad, ldc = N + pad;
  const auto A = testing::random_values<float>(size_t(rows_s * lda), 11),
             A2 = testing::random_values<float>(size_t(rows_s * lda2), 12),
             B = testing::random_values<float>(size_t((c.tb ? N : K) * ldb), 13),
             bias = testing::random_values<float>(size_t(N), 14);
  std::vector<float> C =
      c.beta == 0 ? std::vector<float>(size_t(M * ldc), NAN) : testing::random_values<float>(size_t(M * ldc), 15);
  const std::vector<float> C0 = C;
  auto a_at = [&](int64_t i, int64_t p) {  // op(A)[i, p], rounded
    const int64_t s = c.ta ? p : i, t = c.ta ? i : p;
    return bf16(t < k1 ? A[size_t(s * lda + t)] : A2[size_t(s * lda2 + t - k1)]);
  };
  gemm_cpu_bf16_on(kernel, c.ta, c.tb, M, N, K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc, true,
                   c.bias ? bias.data() : nullptr, c.cat ? GemmCat{A2.data(), lda2, k1} : GemmCat{});
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = N; j < ldc; ++j) REQUIRE(std::memcmp(&C[size_t(i * ldc + j)], &C0[size_t(i * ldc + j)], 4) == 0);
    for (int64_t j = 0; j < N; ++j) {
      double want = 0, mag = 0;
      for (int64_t p = 0; p < K; ++p) {
        const double t = a_at(i, p) * bf16(c.tb ? B[size_t(j * ldb + p)] : B[size_t(p * ldb + j)]);
        want += t, mag += std::fabs(t);
      }
      want *= c.alpha, mag *= std::fabs(c.alpha);
      if (c.beta != 0)
        want += double(c.beta) * C0[size_t(i * ldc + j)], mag += std::fabs(c.beta * C0[size_t(i * ldc + j)]);
      if (c.bias) want += bias[size_t(j)], mag += std::fabs(bias[size_t(j)]);
      // f32 sums of exact products: at most about K + 3 roundings of 2^-24 of the running magnitude
      const double got = C[size_t(i * ldc + j)], tol = (double(K) + 4) * 0x1p-24 * mag + 1e-30;
      if (!(std::fabs(got - want) <= tol)) {
        CHECK_MESSAGE(false, "first bad element (" << i << ", " << j << "): got " << got << ", want " << want
                                                   << ", tolerance " << tol);
        return;
      }
    }
  }
}

}  // namespace

TEST_CASE("gemm bf16: the double product of the rounded inputs, on every layout") {
  if (!gemm_bf16_supported()) return testing::skip("this CPU has no AVX512-BF16");
  for (Bf16Kernel kernel : kernels()) {
    const auto check_case = [kernel](const Case& c) { gnn::check_case(kernel, c); };
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool cat : {false, true})
          for (auto [M, N, K] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
                   {1, 1, 1}, {12, 32, 2}, {13, 33, 7}, {100, 70, 300}, {97, 16, 257}, {30, 5, 513}})
            for (auto [alpha, beta] : std::vector<std::pair<float, float>>{{1.0f, 0.0f}, {0.5f, 1.0f}, {-2.0f, 0.25f}})
              check_case({ta, tb, cat, false, M, N, K, alpha, beta});
    // a bias (alpha 1, beta 0 or 1), and long K cut into chunks (split K) with and without [A | a2]
    for (bool ta : {false, true})
      for (float beta : {0.0f, 1.0f}) check_case({ta, false, ta, true, 50, 40, 70, 1.0f, beta});
    for (bool cat : {false, true}) {
      check_case({true, false, cat, false, 40, 24, 9000, 1.0f, 0.0f});
      check_case({false, false, cat, true, 16, 48, 5001, 1.0f, 1.0f});
    }
    // AMX's edges: rows past whole 32-row blocks, K past whole tiles of 32, [A | a2] split inside a tile
    for (bool ta : {false, true})
      for (auto [M, N, K] :
           std::vector<std::tuple<int64_t, int64_t, int64_t>>{{33, 17, 33}, {200, 130, 600}, {64, 32, 64}})
        check_case({ta, !ta, true, false, M, N, K, 1.0f, 0.0f});
  }
}

TEST_CASE("gemm bf16: bitwise identical for any thread count") {
  if (!gemm_bf16_supported()) return testing::skip("this CPU has no AVX512-BF16");
  for (Bf16Kernel kernel : kernels())
    for (auto [ta, M, N, K] : std::vector<std::tuple<bool, int64_t, int64_t, int64_t>>{{false, 1000, 96, 300},
                                                                                       {false, 1000, 96, 600},
                                                                                       {true, 256, 128, 10000},
                                                                                       {true, 512, 256, 5000},
                                                                                       {false, 700, 16, 129}}) {
      CAPTURE(gemm_bf16_kernel_name(kernel));
      CAPTURE(ta);
      CAPTURE(M);
      const auto A = testing::random_values<float>(size_t(M * K), 4),
                 B = testing::random_values<float>(size_t(K * N), 5);
      std::vector<float> C1(size_t(M * N)), C2(size_t(M * N));
      const testing::ThreadsRestored saved;
      set_num_threads(1);
      gemm_cpu_bf16_on(kernel, ta, false, M, N, K, 1.0f, A.data(), ta ? M : K, B.data(), N, 0.0f, C1.data(), N);
      set_num_threads(std::max(3, saved.count));
      gemm_cpu_bf16_on(kernel, ta, false, M, N, K, 1.0f, A.data(), ta ? M : K, B.data(), N, 0.0f, C2.data(), N);
      CHECK(std::memcmp(C1.data(), C2.data(), C1.size() * 4) == 0);
    }
}

TEST_CASE("gemm bf16: a large C streamed to memory has the bits of one stored through the cache") {
  // AMX streams a C of kGemmStreamFloats and up written once (K within one block of 512, beta 0), 64-byte
  // aligned with rows a multiple of 16 floats apart: C with rows 272 floats apart streams, with rows 275
  // apart it takes the cached stores (gemm_amx_streams_c, which the kernel asks, says so). Full panels
  // of 32 columns and the 8-column edge, rows past whole blocks, alpha or a bias; the padding past N is
  // left alone.
  if (!gemm_bf16_supported()) return testing::skip("this CPU has no AVX512-BF16");
  // K past the other drivers' block of 256, within AMX's one
  const int64_t N = 264, K = 400, M = kGemmStreamFloats / N + 114;  // the last row block 65 rows, its last tile 1
  const int64_t ld_streamed = 272, ld_cached = 275;
  const auto A = testing::random_values<float>(size_t(M * K), 21), B = testing::random_values<float>(size_t(K * N), 22),
             bias = testing::random_values<float>(size_t(N), 23);
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  auto aligned = [M](int64_t ld) {  // aligned_alloc's size a multiple of its alignment
    return std::unique_ptr<float, Free>(
        static_cast<float*>(std::aligned_alloc(64, (size_t(M * ld) * 4 + 63) / 64 * 64)));
  };
  for (Bf16Kernel kernel : kernels())
    for (bool with_bias : {false, true}) {
      CAPTURE(gemm_bf16_kernel_name(kernel));
      CAPTURE(with_bias);
      auto streamed = aligned(ld_streamed), cached = aligned(ld_cached);
      REQUIRE((streamed && cached));
      CHECK(gemm_amx_streams_c(M, N, K, 0.0f, streamed.get(), ld_streamed, true));
      CHECK_FALSE(gemm_amx_streams_c(M, N, K, 0.0f, cached.get(), ld_cached, true));
      CHECK_FALSE(gemm_amx_streams_c(M, N, 513, 0.0f, streamed.get(), ld_streamed, true));  // two K blocks
      std::fill(streamed.get(), streamed.get() + M * ld_streamed, -7.0f);
      std::fill(cached.get(), cached.get() + M * ld_cached, -7.0f);
      for (auto [c, ldc] : {std::pair{streamed.get(), ld_streamed}, std::pair{cached.get(), ld_cached}})
        gemm_cpu_bf16_on(kernel, false, false, M, N, K, with_bias ? 1.0f : 1.5f, A.data(), K, B.data(), N, 0.0f, c, ldc,
                         true, with_bias ? bias.data() : nullptr);
      int64_t differ = 0, pad_written = 0;
      for (int64_t i = 0; i < M; ++i) {
        differ += std::memcmp(streamed.get() + i * ld_streamed, cached.get() + i * ld_cached, size_t(N) * 4) != 0;
        for (int64_t j = N; j < ld_streamed; ++j) pad_written += streamed.get()[i * ld_streamed + j] != -7.0f;
      }
      CHECK(differ == 0);
      CHECK(pad_written == 0);
    }
}

TEST_CASE("gemm bf16: C split into two matrices has the bits of two products over its column ranges") {
  // gemm_split_bf16_on writes [C1 | C2] from one product where gemm_split_one_product says so (n1 a multiple
  // of 32, over 16 columns after it, K not cut) and runs two otherwise; either way each part is the product
  // over op(B)'s columns [0, n1) or [n1, N) to the bit, for any thread count, and the padding past each
  // part's columns is left alone. The first case is a layer's d[a | b] = dy W^T; the last two are large
  // enough that AMX streams a part (64-byte aligned rows a multiple of 16 floats apart): both parts, then
  // only the first (the second's rows 257 floats apart).
  if (!gemm_bf16_supported()) return testing::skip("this CPU has no AVX512-BF16");
  struct Split {
    bool ta, tb;
    int64_t M, N, K, n1;
    bool one;  // one product
    int64_t pad1, pad2;  // each part's row stride past its columns
  };
  const int64_t big_m = kGemmStreamFloats / 256 + 70;
  for (Bf16Kernel kernel : kernels())
    for (const Split& c : std::vector<Split>{{false, true, 1000, 512, 256, 256, true, 5, 3},
                                             {false, false, 300, 100, 70, 64, true, 5, 3},  // a partial last panel
                                             {true, true, 200, 96, 600, 32, true, 5, 3},  // K past one block
                                             {false, true, 100, 80, 40, 48, false, 5, 3},  // n1 not a whole panel
                                             {false, false, 50, 40, 20, 32, false, 5, 3},  // 8 columns after n1
                                             {true, false, 256, 128, 10000, 64, false, 5, 3},  // split K
                                             {false, true, big_m, 512, 256, 256, true, 0, 0},
                                             {false, true, big_m, 512, 256, 256, true, 0, 1}}) {
      CAPTURE(gemm_bf16_kernel_name(kernel));
      CAPTURE(c.ta);
      CAPTURE(c.tb);
      CAPTURE(c.M);
      CAPTURE(c.N);
      CAPTURE(c.K);
      CAPTURE(c.n1);
      CAPTURE(c.pad2);
      CHECK(gemm_split_one_product(c.M, c.N, c.K, c.n1) == c.one);
      const int64_t n2 = c.N - c.n1, ld1 = c.n1 + c.pad1, ld2 = n2 + c.pad2;
      const auto A = testing::random_values<float>(size_t(c.M * c.K), 31),
                 B = testing::random_values<float>(size_t(c.K * c.N), 32);
      const int64_t lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N;
      struct Free {
        void operator()(float* p) const { std::free(p); }
      };
      auto buffer = [&](int64_t ld) {
        std::unique_ptr<float, Free> p(
            static_cast<float*>(std::aligned_alloc(64, (size_t(c.M * ld) * 4 + 63) / 64 * 64)));
        std::fill(p.get(), p.get() + c.M * ld, -7.0f);
        return p;
      };
      auto c1 = buffer(ld1), c2 = buffer(ld2), t1 = buffer(ld1), t2 = buffer(ld2), w1 = buffer(ld1), w2 = buffer(ld2);
      if (c.M == big_m) {
        CHECK(gemm_amx_streams_c(c.M, c.n1, c.K, 0.0f, c1.get(), ld1, true));
        CHECK(gemm_amx_streams_c(c.M, n2, c.K, 0.0f, c2.get(), ld2, true) == (c.pad2 == 0));
      }
      const testing::ThreadsRestored saved;
      set_num_threads(1);
      gemm_split_bf16_on(kernel, c.ta, c.tb, c.M, c.N, c.K, A.data(), lda, B.data(), ldb, c1.get(), ld1, c2.get(), ld2,
                         c.n1);
      set_num_threads(std::max(3, saved.count));
      gemm_split_bf16_on(kernel, c.ta, c.tb, c.M, c.N, c.K, A.data(), lda, B.data(), ldb, t1.get(), ld1, t2.get(), ld2,
                         c.n1);
      gemm_cpu_bf16_on(kernel, c.ta, c.tb, c.M, c.n1, c.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, w1.get(), ld1);
      gemm_cpu_bf16_on(kernel, c.ta, c.tb, c.M, n2, c.K, 1.0f, A.data(), lda,
                       c.tb ? B.data() + c.n1 * ldb : B.data() + c.n1, ldb, 0.0f, w2.get(), ld2);
      for (const auto* part : {&c1, &t1})  // the padding too: -7 in both
        CHECK(std::memcmp(part->get(), w1.get(), size_t(c.M * ld1) * 4) == 0);
      for (const auto* part : {&c2, &t2}) CHECK(std::memcmp(part->get(), w2.get(), size_t(c.M * ld2) * 4) == 0);
    }
  const std::vector<float> A = testing::random_values<float>(64 * 40, 33),
                           B = testing::random_values<float>(40 * 96, 34);
  std::vector<float> c1(64 * 64), c2(64 * 32);
  CHECK_THROWS_WITH(gemm_split_bf16_on(kernels().front(), false, false, 64, 96, 40, A.data(), 40, B.data(), 96,
                                       c1.data(), 64, c2.data(), 32, 97),
                    doctest::Contains("C split at column 97 of 96"));
}

TEST_CASE("gemm bf16: an addend in the product's store has the bits of the product and then add") {
  // gemm_cpu_bf16_on(..., R, ldr) adds R after alpha, beta C and the bias, in the last k block's store: the
  // bits of the same product without R and then C + R, for any thread count. The cases: a layer over
  // [aggregate | root] with a bias (one AMX k block, two of AVX512-BF16's), a partial last panel and edge
  // rows, one vector of columns, transposed A over several k blocks with beta 1, a serial call, a shape
  // split-K takes (the addend then added after the chunks), and a C large enough that AMX streams it.
  if (!gemm_bf16_supported()) return testing::skip("this CPU has no AVX512-BF16");
  struct Add {
    bool ta, tb, cat, bias;
    int64_t M, N, K;
    float beta;
    bool parallel;
  };
  const int64_t big_m = kGemmStreamFloats / 256 + 70;
  for (Bf16Kernel kernel : kernels())
    for (const Add& c : std::vector<Add>{{false, false, true, true, 1000, 256, 512, 0.0f, true},
                                         {false, true, false, true, 301, 100, 70, 0.0f, true},
                                         {false, false, false, false, 200, 12, 40, 0.0f, true},
                                         {true, false, true, true, 150, 64, 600, 1.0f, true},
                                         {false, false, false, true, 100, 64, 300, 0.0f, false},
                                         {true, false, false, false, 256, 128, 10000, 0.0f, true},
                                         {false, false, true, false, big_m, 256, 256, 0.0f, true}}) {
      CAPTURE(gemm_bf16_kernel_name(kernel));
      CAPTURE(c.ta);
      CAPTURE(c.M);
      CAPTURE(c.N);
      CAPTURE(c.K);
      CAPTURE(c.parallel);
      // the large C with rows a multiple of 16 floats apart, 64-byte aligned, so that AMX streams it
      const bool big = c.M == big_m;
      const int64_t k1 = c.cat ? (c.ta ? c.M / 2 : c.K / 2) : 0, ldc = big ? c.N : c.N + 3, ldr = c.N + 5;
      const int64_t lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N;
      const auto A = testing::random_values<float>(size_t(c.M * c.K), 41),
                 A2 = testing::random_values<float>(size_t(c.M * c.K), 42),
                 B = testing::random_values<float>(size_t(c.K * c.N), 43),
                 R = testing::random_values<float>(size_t(c.M * ldr), 44),
                 bias = testing::random_values<float>(size_t(c.N), 45),
                 C0 = testing::random_values<float>(size_t(c.M * ldc), 46);
      // [A | a2]: without trans_a k1 columns from A (row stride lda), the rest from a2 (row stride lda);
      // with it k1 of op(A)'s rows, A and a2 each stored [K, M] with row stride M
      const GemmCat cat = c.cat ? GemmCat{A2.data(), lda, k1} : GemmCat{};
      const float* bp = c.bias ? bias.data() : nullptr;
      struct Free {
        void operator()(float* p) const { std::free(p); }
      };
      auto copy_of = [&](const std::vector<float>& v) {  // 64-byte aligned
        std::unique_ptr<float, Free> p(static_cast<float*>(std::aligned_alloc(64, (v.size() * 4 + 63) / 64 * 64)));
        std::copy(v.begin(), v.end(), p.get());
        return p;
      };
      auto want = copy_of(C0), one = copy_of(C0), three = copy_of(C0);
      if (big && kernel == Bf16Kernel::kAmx) CHECK(gemm_amx_streams_c(c.M, c.N, c.K, 0.0f, one.get(), ldc, true));
      gemm_cpu_bf16_on(kernel, c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb, c.beta, want.get(), ldc,
                       c.parallel, bp, cat);
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) want.get()[i * ldc + j] = want.get()[i * ldc + j] + R[size_t(i * ldr + j)];
      const testing::ThreadsRestored saved;
      set_num_threads(1);
      gemm_cpu_bf16_on(kernel, c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb, c.beta, one.get(), ldc,
                       c.parallel, bp, cat, R.data(), ldr);
      set_num_threads(std::max(3, saved.count));
      gemm_cpu_bf16_on(kernel, c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb, c.beta, three.get(), ldc,
                       c.parallel, bp, cat, R.data(), ldr);
      CHECK(std::memcmp(one.get(), want.get(), C0.size() * 4) == 0);  // the padding untouched too
      CHECK(std::memcmp(three.get(), want.get(), C0.size() * 4) == 0);
    }
  std::vector<float> A(64 * 40), B(40 * 96), C(64 * 96), R(64 * 96);
  CHECK_THROWS_WITH(gemm_cpu_bf16_on(kernels().front(), false, false, 64, 96, 40, 1.0f, A.data(), 40, B.data(), 96,
                                     0.0f, C.data(), 96, true, nullptr, {}, R.data(), 95),
                    doctest::Contains("addend's row stride 95 is below its 96 columns"));
  CHECK_THROWS_WITH(gemm_cpu_bf16_on(kernels().front(), false, false, 64, 96, 40, 0.5f, A.data(), 40, B.data(), 96,
                                     0.0f, C.data(), 96, true, nullptr, {}, R.data(), 96),
                    doctest::Contains("an addend needs alpha 1, got 0.5"));
  std::vector<float> c2(64 * 32);
  CHECK_THROWS_WITH(gemm_split_bf16_on(kernels().front(), false, false, 64, 96, 40, A.data(), 40, B.data(), 96,
                                       C.data(), 64, c2.data(), 32, 64, R.data(), 31),
                    doctest::Contains("addend's row stride 31 is below its 32 columns"));
}

TEST_CASE("gemm bf16: a split C's second part takes an addend, in one product or two") {
  // d[a | b] = dy W^T with dy added to b's part (a layer whose output adds its root): gemm_split_bf16_on's
  // R2 gives the bits of the split without it and then C2 + R2, in one product and where two run (n1 not a
  // whole panel; split K), for any thread count; the last case, SAGE-6th's shape at a third of its rows,
  // large enough that AMX streams both parts (64-byte aligned rows 256 floats apart).
  if (!gemm_bf16_supported()) return testing::skip("this CPU has no AVX512-BF16");
  struct Split {
    bool ta, tb;
    int64_t M, N, K, n1;
    bool one;
  };
  const int64_t big_m = kGemmStreamFloats / 256 + 70;
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  auto filled = [](int64_t n) {  // 64-byte aligned, -7 everywhere
    std::unique_ptr<float, Free> p(static_cast<float*>(std::aligned_alloc(64, (size_t(n) * 4 + 63) / 64 * 64)));
    std::fill(p.get(), p.get() + n, -7.0f);
    return p;
  };
  for (Bf16Kernel kernel : kernels())
    for (const Split& c : std::vector<Split>{{false, true, 1000, 512, 256, 256, true},
                                             {false, true, 100, 80, 40, 48, false},
                                             {true, false, 256, 128, 10000, 64, false},
                                             {false, true, big_m, 512, 256, 256, true}}) {
      CAPTURE(gemm_bf16_kernel_name(kernel));
      CAPTURE(c.M);
      CAPTURE(c.n1);
      CHECK(gemm_split_one_product(c.M, c.N, c.K, c.n1) == c.one);
      const bool big = c.M == big_m;
      const int64_t n2 = c.N - c.n1, ld1 = big ? c.n1 : c.n1 + 2, ld2 = big ? n2 : n2 + 3, ldr = n2 + 1;
      const int64_t lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N;
      const auto A = testing::random_values<float>(size_t(c.M * c.K), 51),
                 B = testing::random_values<float>(size_t(c.K * c.N), 52),
                 R = testing::random_values<float>(size_t(c.M * ldr), 53);
      auto w1 = filled(c.M * ld1), w2 = filled(c.M * ld2), c1 = filled(c.M * ld1), c2 = filled(c.M * ld2),
           t1 = filled(c.M * ld1), t2 = filled(c.M * ld2);
      if (big && kernel == Bf16Kernel::kAmx) CHECK(gemm_amx_streams_c(c.M, n2, c.K, 0.0f, c2.get(), ld2, true));
      gemm_split_bf16_on(kernel, c.ta, c.tb, c.M, c.N, c.K, A.data(), lda, B.data(), ldb, w1.get(), ld1, w2.get(), ld2,
                         c.n1);
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < n2; ++j) w2.get()[i * ld2 + j] = w2.get()[i * ld2 + j] + R[size_t(i * ldr + j)];
      const testing::ThreadsRestored saved;
      set_num_threads(1);
      gemm_split_bf16_on(kernel, c.ta, c.tb, c.M, c.N, c.K, A.data(), lda, B.data(), ldb, c1.get(), ld1, c2.get(), ld2,
                         c.n1, R.data(), ldr);
      set_num_threads(std::max(3, saved.count));
      gemm_split_bf16_on(kernel, c.ta, c.tb, c.M, c.N, c.K, A.data(), lda, B.data(), ldb, t1.get(), ld1, t2.get(), ld2,
                         c.n1, R.data(), ldr);
      CHECK(std::memcmp(c1.get(), w1.get(), size_t(c.M * ld1) * 4) == 0);
      CHECK(std::memcmp(t1.get(), w1.get(), size_t(c.M * ld1) * 4) == 0);
      CHECK(std::memcmp(c2.get(), w2.get(), size_t(c.M * ld2) * 4) == 0);
      CHECK(std::memcmp(t2.get(), w2.get(), size_t(c.M * ld2) * 4) == 0);
    }
}

TEST_CASE("gemm: [A1 | A2] B + bias + R, in f32, through the bf16 setting, and its reference") {
  // gemm_cat_add_cpu is gemm_cat_cpu and then C + R in either precision (in f32 a pass after the product,
  // which gemm_adds_in_store says); gemm_cat_add_ref is gemm_cat_ref's and then the addition; gemm_split_cpu's
  // R2 in f32 likewise.
  const int64_t M = 130, N = 96, K = 50, k1 = 20;
  const auto A1 = testing::random_values<float>(size_t(M * k1), 61),
             A2 = testing::random_values<float>(size_t(M * (K - k1)), 62),
             B = testing::random_values<float>(size_t(K * N), 63), R = testing::random_values<float>(size_t(M * N), 64),
             bias = testing::random_values<float>(size_t(N), 65);
  auto check_route = [&] {
    std::vector<float> c(size_t(M * N)), w(c.size());
    gemm_cat_add_cpu(M, N, K, A1.data(), k1, A2.data(), K - k1, k1, B.data(), N, bias.data(), R.data(), N, c.data(), N);
    gemm_cat_cpu(false, M, N, K, A1.data(), k1, A2.data(), K - k1, k1, B.data(), N, bias.data(), w.data(), N);
    for (size_t i = 0; i < w.size(); ++i) w[i] = w[i] + R[i];
    CHECK(std::memcmp(c.data(), w.data(), c.size() * 4) == 0);
  };
  CHECK_FALSE(gemm_adds_in_store(M, N, K));  // f32: no addend in the store
  {
    std::vector<float> c(size_t(M * N));
    CHECK_THROWS_WITH(gemm_cat_add_cpu(M, N, K, A1.data(), k1, A2.data(), K - k1, k1, B.data(), N, bias.data(), nullptr,
                                       N, c.data(), N),
                      doctest::Contains("gemm_cat_add: the addend R is null"));
  }
  check_route();
  {
    std::vector<double> a1(A1.begin(), A1.end()), a2(A2.begin(), A2.end()), b(B.begin(), B.end()),
        r(R.begin(), R.end()), bi(bias.begin(), bias.end()), c(size_t(M * N)), w(c.size());
    gemm_cat_add_ref(M, N, K, a1.data(), k1, a2.data(), K - k1, k1, b.data(), N, bi.data(), r.data(), N, c.data(), N);
    for (int64_t i = 0; i < M; ++i)  // written out: [A1 | A2] B, then the bias, then R
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < K; ++p)
          acc += (p < k1 ? a1[size_t(i * k1 + p)] : a2[size_t(i * (K - k1) + p - k1)]) * b[size_t(p * N + j)];
        w[size_t(i * N + j)] = (acc + bi[size_t(j)]) + r[size_t(i * N + j)];
      }
    CHECK(c == w);
  }
  {
    const int64_t n1 = 64;
    const auto A = testing::random_values<float>(size_t(M * K), 66);
    std::vector<float> c1(size_t(M * n1)), c2(size_t(M * (N - n1))), w1 = c1, w2 = c2;
    gemm_split_cpu(false, false, M, N, K, A.data(), K, B.data(), N, c1.data(), n1, c2.data(), N - n1, n1, R.data(), N);
    gemm_split_cpu(false, false, M, N, K, A.data(), K, B.data(), N, w1.data(), n1, w2.data(), N - n1, n1);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N - n1; ++j) w2[size_t(i * (N - n1) + j)] += R[size_t(i * N + j)];
    CHECK(std::memcmp(c1.data(), w1.data(), c1.size() * 4) == 0);
    CHECK(std::memcmp(c2.data(), w2.data(), c2.size() * 4) == 0);
  }
  if (!gemm_bf16_supported()) return testing::skip("this CPU has no AVX512-BF16: the bf16 setting untested");
  const testing::PrecisionRestored precision_back(GemmPrecision::kBf16);
  CHECK(gemm_adds_in_store(M, N, K));
  check_route();
  {  // split K: the addend added after the chunks
    const int64_t m = 128, n = 128, k = 10000, h = 4000;
    CHECK_FALSE(gemm_adds_in_store(m, n, k));
    const auto a1 = testing::random_values<float>(size_t(m * h), 67),
               a2 = testing::random_values<float>(size_t(m * (k - h)), 68),
               b = testing::random_values<float>(size_t(k * n), 69),
               r = testing::random_values<float>(size_t(m * n), 70);
    std::vector<float> c(size_t(m * n)), w(c.size());
    gemm_cat_add_cpu(m, n, k, a1.data(), h, a2.data(), k - h, h, b.data(), n, nullptr, r.data(), n, c.data(), n);
    gemm_cat_cpu(false, m, n, k, a1.data(), h, a2.data(), k - h, h, b.data(), n, nullptr, w.data(), n);
    for (size_t i = 0; i < w.size(); ++i) w[i] = w[i] + r[i];
    CHECK(std::memcmp(c.data(), w.data(), c.size() * 4) == 0);
  }
}

TEST_CASE("gemm: C split into two matrices, in f32 and through the precision setting") {
  // gemm_split_cpu is the two products gemm_cpu runs, in f32 and (one product there) under the bf16
  // setting; gemm_split_ref is gemm_ref's two.
  const int64_t M = 130, N = 96, K = 50, n1 = 64;
  const auto A = testing::random_values<float>(size_t(M * K), 35), B = testing::random_values<float>(size_t(N * K), 36);
  std::vector<float> c1(size_t(M * n1)), c2(size_t(M * (N - n1))), w1(c1.size()), w2(c2.size());
  gemm_split_cpu(false, true, M, N, K, A.data(), K, B.data(), K, c1.data(), n1, c2.data(), N - n1, n1);
  gemm_cpu(false, true, M, n1, K, 1.0f, A.data(), K, B.data(), K, 0.0f, w1.data(), n1);
  gemm_cpu(false, true, M, N - n1, K, 1.0f, A.data(), K, B.data() + n1 * K, K, 0.0f, w2.data(), N - n1);
  CHECK(std::memcmp(c1.data(), w1.data(), c1.size() * 4) == 0);
  CHECK(std::memcmp(c2.data(), w2.data(), c2.size() * 4) == 0);
  std::vector<double> Ad(A.begin(), A.end()), Bd(B.begin(), B.end()), r1(c1.size()), r2(c2.size()), full(size_t(M * N));
  gemm_split_ref(false, true, M, N, K, Ad.data(), K, Bd.data(), K, r1.data(), n1, r2.data(), N - n1, n1);
  gemm_ref(false, true, M, N, K, 1.0, Ad.data(), K, Bd.data(), K, 0.0, full.data(), N);
  int64_t differ = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      differ += (j < n1 ? r1[size_t(i * n1 + j)] : r2[size_t(i * (N - n1) + j - n1)]) != full[size_t(i * N + j)];
  CHECK(differ == 0);
  if (!gemm_bf16_supported()) return testing::skip("this CPU has no AVX512-BF16: the bf16 setting untested");
  {
    const testing::PrecisionRestored precision_back(GemmPrecision::kBf16);
    REQUIRE(gemm_split_one_product(M, N, K, n1));
    gemm_split_cpu(false, true, M, N, K, A.data(), K, B.data(), K, c1.data(), n1, c2.data(), N - n1, n1);
    gemm_cpu(false, true, M, n1, K, 1.0f, A.data(), K, B.data(), K, 0.0f, w1.data(), n1);
    gemm_cpu(false, true, M, N - n1, K, 1.0f, A.data(), K, B.data() + n1 * K, K, 0.0f, w2.data(), N - n1);
  }
  CHECK(std::memcmp(c1.data(), w1.data(), c1.size() * 4) == 0);
  CHECK(std::memcmp(c2.data(), w2.data(), c2.size() * 4) == 0);
}

TEST_CASE("gemm bf16: the precision setting routes every CPU product, and f32 is untouched") {
  const int64_t M = 37, N = 50, K = 90;
  const auto A = testing::random_values<float>(size_t(M * K), 6), B = testing::random_values<float>(size_t(K * N), 7),
             bias = testing::random_values<float>(size_t(N), 8);
  std::vector<float> f32(size_t(M * N)), mixed(size_t(M * N)), direct(size_t(M * N));
  REQUIRE(gemm_cpu_precision() == GemmPrecision::kF32);  // the default
  gemm_bias_cpu(false, false, M, N, K, A.data(), K, B.data(), N, bias.data(), f32.data(), N);
  std::vector<float> want(size_t(M * N));
  gemm_cpu_isa(gemm_isa(), false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, want.data(), N, true,
               bias.data());
  CHECK(std::memcmp(f32.data(), want.data(), want.size() * 4) == 0);
  if (!gemm_bf16_supported()) {
    CHECK_THROWS_WITH(set_gemm_cpu_precision(GemmPrecision::kBf16), doctest::Contains("this CPU has no AVX512-BF16"));
    return testing::skip("this CPU has no AVX512-BF16");
  }
  {
    const testing::PrecisionRestored precision_back(GemmPrecision::kBf16);
    gemm_bias_cpu(false, false, M, N, K, A.data(), K, B.data(), N, bias.data(), mixed.data(), N);
  }
  REQUIRE(gemm_cpu_precision() == GemmPrecision::kF32);
  gemm_cpu_bf16(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, direct.data(), N, true, bias.data());
  CHECK(std::memcmp(mixed.data(), direct.data(), direct.size() * 4) == 0);
  CHECK(std::memcmp(mixed.data(), f32.data(), f32.size() * 4) != 0);  // rounded inputs: other values
  CHECK(std::string(gemm_precision_name(GemmPrecision::kBf16)) == "bf16");
}

}  // namespace gnn
