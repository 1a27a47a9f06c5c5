// Dense GEMM (kernels/gemm.h): each CPU micro-kernel and cuBLAS against the double reference, every
// transpose, alpha and beta, empty dimensions, and the same bits for any thread count.
#include <cmath>

#include "device_buffers.h"
#include "gemm_check.h"
#include "kernels/gemm.h"
#include "kernels/gemm_blocked.h"
#include "runtime/cuda.h"
#include "runtime/parallel.h"
#include "testing.h"

using namespace gnn;
using testing::on_gpu;

namespace {

// One ISA on op(A) op(B) against the double reference (tests/kernels/gemm_check.h).
void check_case(GemmIsa isa, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                int64_t pad = 0) {
  testing::check_gemm_case(
      gemm_isa_name(isa), [isa](auto... args) { gemm_cpu_isa(isa, args...); }, ta, tb, M, N, K, alpha, beta, pad);
}

}  // namespace

TEST_CASE("gemm: hand-worked 2x2") {
  const float A[] = {1, 2, 3, 4}, B[] = {5, 6, 7, 8};
  float C[] = {NAN, NAN, NAN, NAN};
  gemm_cpu(false, false, 2, 2, 2, 1.0f, A, 2, B, 2, 0.0f, C, 2);
  CHECK(std::vector<float>(C, C + 4) == std::vector<float>{19, 22, 43, 50});
  gemm_cpu(true, false, 2, 2, 2, 2.0f, A, 2, B, 2, 1.0f, C, 2);  // C += 2 A^T B
  CHECK(std::vector<float>(C, C + 4) == std::vector<float>{19 + 2 * 26, 22 + 2 * 30, 43 + 2 * 38, 50 + 2 * 44});
}

// Edges around the micro-tiles (4x16, 6x16, 12x32, and the narrow ones of run_shaped) and the K block
// (256), transposes, alpha, beta, many row blocks, and a long K that is split into chunks.
void check_isa(GemmIsa isa) {
  for (auto [M, N, K] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 1, 1},
                                                                           {5, 7, 3},
                                                                           {6, 16, 8},
                                                                           {13, 33, 17},
                                                                           {97, 64, 128},
                                                                           {12, 32, 257},
                                                                           {200, 129, 300},
                                                                           {64, 257, 33}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) check_case(isa, ta, tb, M, N, K, 1.0f, 0.0f);
    check_case(isa, false, false, M, N, K, -0.5f, 0.75f);
    check_case(isa, true, true, M, N, K, 2.0f, 1.0f, /*pad=*/3);
  }
  check_case(isa, false, false, 3000, 128, 128, 1.0f, 0.0f);  // many row blocks across threads
  check_case(isa, true, false, 70, 33, 9000, 1.0f, 0.0f);  // a long K: split into chunks
  check_case(isa, true, true, 256, 20, 5000, 0.5f, 2.0f, 2);
  check_case(isa, true, false, 100, 40, 7000, 1.5f, -1.0f, 3);  // split K, A read in place, a partial panel packed
  check_case(isa, true, false, 500, 40, 4500, 1.0f, 1.0f);  // split K with more than 4 row blocks (K >= 8 M)
}

TEST_CASE("gemm: the portable kernel matches the double reference") { check_isa(GemmIsa::kGeneric); }

TEST_CASE("gemm: the AVX2 kernel matches the double reference") {
  if (!gemm_isa_supported(GemmIsa::kAvx2)) return testing::skip("this CPU has no AVX2 + FMA");
  check_isa(GemmIsa::kAvx2);
}

TEST_CASE("gemm: the AVX-512 kernel matches the double reference") {
  if (!gemm_isa_supported(GemmIsa::kAvx512)) return testing::skip("this CPU has no AVX-512F");
  check_isa(GemmIsa::kAvx512);
}

TEST_CASE("gemm: empty dimensions") {
  float C[4] = {NAN, NAN, NAN, NAN};
  gemm_cpu(false, false, 2, 2, 0, 1.0f, nullptr, 0, nullptr, 2, 0.0f, C, 2);  // K = 0, beta = 0: zeros
  CHECK(std::vector<float>(C, C + 4) == std::vector<float>(4, 0.0f));
  C[0] = 3;
  gemm_cpu(false, false, 2, 2, 0, 1.0f, nullptr, 0, nullptr, 2, 2.0f, C, 2);  // K = 0: C = beta C
  CHECK(C[0] == 6);
  gemm_cpu(false, false, 0, 5, 5, 1.0f, nullptr, 5, nullptr, 5, 0.0f, nullptr, 5);  // nothing to do
}

TEST_CASE("gemm: the packing scratch is 64-byte aligned at every size, grown or not") {
  // An AMX tile's 64-byte rows and the packers' vectors each take one cache line only on a 64-byte
  // boundary; new[]'s 16 bytes made the bf16 product on [53040, 512] x [512, 256] twice as slow.
  for (int64_t n : {1, 17, 4096, 100000, 3000000, 5})
    for (auto slot : {gemm_detail::kPackA, gemm_detail::kPackB, gemm_detail::kPackAT, gemm_detail::kPartials}) {
      CHECK(reinterpret_cast<uintptr_t>(gemm_detail::scratch<float>(slot, n)) % 64 == 0);
      CHECK(reinterpret_cast<uintptr_t>(gemm_detail::scratch<uint32_t>(slot, n)) % 64 == 0);
    }
}

TEST_CASE("gemm: bitwise identical for any thread count") {
  // row blocks shared out, and a weight gradient's shape (transposed A, long K cut into chunks)
  for (auto [ta, M, N, K] : std::vector<std::tuple<bool, int64_t, int64_t, int64_t>>{
           {false, 1000, 96, 300}, {true, 256, 128, 10000}, {true, 512, 256, 5000}}) {
    CAPTURE(ta);
    const auto A = testing::random_values<float>(static_cast<size_t>(M * K), 4),
               B = testing::random_values<float>(static_cast<size_t>(K * N), 5);
    std::vector<float> C1(static_cast<size_t>(M * N)), C2(static_cast<size_t>(M * N));
    const testing::ThreadsRestored saved;
    set_num_threads(1);
    gemm_cpu(ta, false, M, N, K, 1.0f, A.data(), ta ? M : K, B.data(), N, 0.0f, C1.data(), N);
    set_num_threads(std::max(3, saved.count));
    gemm_cpu(ta, false, M, N, K, 1.0f, A.data(), ta ? M : K, B.data(), N, 0.0f, C2.data(), N);
    CHECK(C1 == C2);
  }
}

TEST_CASE("gemm: row-major and transposed A, read in place or packed, give the same bits") {
  // A [M, K] is multiplied directly (no packing of full panels); the same matrix stored transposed is
  // read in place by full panels too, a partial last panel packed (M = 97 and 13 leave one on every
  // ISA's panel height). All sum the same products in the same order.
  for (GemmIsa isa : {GemmIsa::kGeneric, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (!gemm_isa_supported(isa)) continue;
    CAPTURE(gemm_isa_name(isa));
    for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1000, 128, 256}, {97, 33, 300}, {13, 7, 5}}) {
      const auto A = testing::random_values<float>(static_cast<size_t>(M * K), 7),
                 B = testing::random_values<float>(static_cast<size_t>(K * N), 8);
      std::vector<float> At(A.size()), c1(static_cast<size_t>(M * N)), c2(static_cast<size_t>(M * N));
      for (int64_t i = 0; i < M; ++i)
        for (int64_t p = 0; p < K; ++p) At[size_t(p * M + i)] = A[size_t(i * K + p)];
      gemm_cpu_isa(isa, false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, c1.data(), N);
      gemm_cpu_isa(isa, true, false, M, N, K, 1.0f, At.data(), M, B.data(), N, 0.0f, c2.data(), N);
      CHECK(c1 == c2);
    }
  }
}

// gemm_beta_adds_after's promise, on which matmul's backward writes into a held gradient: with alpha 1 and
// beta 1 every driver (each f32 ISA, each bf16 kernel; B as stored and transposed, as dA = dy W^T reads it)
// writes C + the finished product, rounded once, where K fits one k block; full and edge tiles.
TEST_CASE("gemm: beta 1 within one k block gives the bits of the product and then the addition") {
  CHECK(gemm_beta_adds_after(1000, 128, 256));
  CHECK(!gemm_beta_adds_after(1000, 128, 257));  // a second k block would add its sums into C
  CHECK(!gemm_beta_adds_after(16, 16, 0));
  for (auto [M, N, K] :
       {std::tuple<int64_t, int64_t, int64_t>{1000, 128, 16}, {97, 33, 256}, {13, 7, 1}, {300, 50, 129}}) {
    CAPTURE(M);
    CAPTURE(K);
    REQUIRE(gemm_beta_adds_after(M, N, K));
    const auto A = testing::random_values<float>(size_t(M * K), 21);
    const auto B = testing::random_values<float>(size_t(K * N), 22);
    const auto C0 = testing::random_values<float>(size_t(M * N), 23);
    for (bool tb : {false, true}) {
      CAPTURE(tb);
      auto check = [&](const char* name, auto&& gemm) {
        CAPTURE(name);
        std::vector<float> product(C0.size()), held = C0;
        gemm(product.data(), 0.0f);
        gemm(held.data(), 1.0f);
        std::vector<float> after(C0.size());
        for (size_t i = 0; i < after.size(); ++i) after[i] = C0[i] + product[i];
        CHECK(held == after);
      };
      for (GemmIsa isa : {GemmIsa::kGeneric, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
        if (!gemm_isa_supported(isa)) continue;
        check(gemm_isa_name(isa), [&](float* c, float beta) {
          gemm_cpu_isa(isa, false, tb, M, N, K, 1.0f, A.data(), K, B.data(), tb ? K : N, beta, c, N);
        });
      }
      for (Bf16Kernel k : {Bf16Kernel::kAvx512Bf16, Bf16Kernel::kAmx}) {
        if (!gemm_bf16_kernel_supported(k)) continue;
        check(gemm_bf16_kernel_name(k), [&](float* c, float beta) {
          gemm_cpu_bf16_on(k, false, tb, M, N, K, 1.0f, A.data(), K, B.data(), tb ? K : N, beta, c, N);
        });
      }
    }
  }
}

TEST_CASE("gemm: a bias added in the store gives the bits of the product and then the addition") {
  // Every path the store takes: full and edge tiles, one and several K blocks (the bias only onto the
  // last), A read in place (row-major and transposed) and packed, a long K split into chunks, beta 0 and 1, K = 0,
  // and one thread against several.
  for (GemmIsa isa : {GemmIsa::kGeneric, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (!gemm_isa_supported(isa)) continue;
    CAPTURE(gemm_isa_name(isa));
    for (auto [ta, M, N, K, beta] :
         std::vector<std::tuple<bool, int64_t, int64_t, int64_t, float>>{{false, 1, 1, 1, 0.0f},
                                                                         {false, 13, 33, 17, 0.0f},
                                                                         {false, 1000, 128, 512, 0.0f},
                                                                         {true, 97, 40, 300, 1.0f},
                                                                         {false, 200, 129, 600, 1.0f},
                                                                         {true, 70, 33, 9000, 0.0f},
                                                                         {false, 5, 7, 0, 1.0f}}) {
      CAPTURE(ta);
      CAPTURE(M);
      CAPTURE(N);
      CAPTURE(K);
      const auto A = testing::random_values<float>(static_cast<size_t>(M * K), 11),
                 B = testing::random_values<float>(static_cast<size_t>(K * N), 12),
                 bias = testing::random_values<float>(static_cast<size_t>(N), 13),
                 C0 = testing::random_values<float>(static_cast<size_t>(M * N), 14);
      std::vector<float> want = C0, got = C0, got1 = C0;
      gemm_cpu_isa(isa, ta, false, M, N, K, 1.0f, A.data(), ta ? M : K, B.data(), N, beta, want.data(), N);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) want[size_t(i * N + j)] += bias[size_t(j)];
      gemm_cpu_isa(isa, ta, false, M, N, K, 1.0f, A.data(), ta ? M : K, B.data(), N, beta, got.data(), N, true,
                   bias.data());
      CHECK(got == want);
      const testing::ThreadsRestored saved;
      set_num_threads(1);
      gemm_cpu_isa(isa, ta, false, M, N, K, 1.0f, A.data(), ta ? M : K, B.data(), N, beta, got1.data(), N, true,
                   bias.data());
      CHECK(got1 == want);
    }
  }
  // gemm_bias_cpu (alpha 1, beta 0, C never read) against the reference's product and addition
  const int64_t M = 300, N = 70, K = 260;
  const auto A = testing::random_values<float>(static_cast<size_t>(M * K), 15),
             B = testing::random_values<float>(static_cast<size_t>(K * N), 16),
             bias = testing::random_values<float>(static_cast<size_t>(N), 17);
  std::vector<float> got(static_cast<size_t>(M * N), NAN), want(static_cast<size_t>(M * N));
  gemm_bias_cpu(false, false, M, N, K, A.data(), K, B.data(), N, bias.data(), got.data(), N);
  gemm_cpu(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, want.data(), N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) want[size_t(i * N + j)] += bias[size_t(j)];
  CHECK(got == want);
  std::vector<double> Ad(A.begin(), A.end()), Bd(B.begin(), B.end()), bd(bias.begin(), bias.end()), Cd(got.size());
  gemm_bias_ref<double>(false, false, M, N, K, Ad.data(), K, Bd.data(), N, bd.data(), Cd.data(), N);
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - Cd[i]));
  CHECK(worst < 1e-4);
  float C[1];
  CHECK_THROWS_WITH_AS(
      gemm_cpu_isa(gemm_isa(), false, false, 1, 1, 1, 2.0f, A.data(), 1, B.data(), 1, 0.0f, C, 1, true, bias.data()),
      doctest::Contains("a bias needs alpha 1"), gnn::Error);
}

TEST_CASE("gemm: narrow and short products take their own tiles with the wide tile's bits") {
  // A product N <= one vector wide, or of M <= 16 rows, takes a tile of one vector's width or of 8 rows
  // (gemm_detail::run_shaped). Each is checked against the same values inside a wider (N = 3 W) or
  // taller (M = 40) product, which takes the wide tile: the shapes of a squeeze-and-excitation gate
  // (x W1 at 128 -> W, dh = dz W2^T, dW1 = x^T dh over a long K, dW2 = h^T dz with M = 16), beta 0 and 1
  // (an accumulated gradient), a bias, 1 thread and several.
  for (GemmIsa isa : {GemmIsa::kGeneric, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (!gemm_isa_supported(isa)) continue;
    CAPTURE(gemm_isa_name(isa));
    const int64_t W = isa == GemmIsa::kAvx512 ? 16 : isa == GemmIsa::kAvx2 ? 8 : 4;
    for (auto [ta, tb, M, N, K, beta, with_bias] :
         std::vector<std::tuple<bool, bool, int64_t, int64_t, int64_t, float, bool>>{
             {false, false, 1000, W, 128, 0.0f, false},  // squeeze: x W1
             {false, true, 1000, W, 128, 0.0f, false},  // dh = dz W2^T
             {false, false, 997, W - 1, 300, 1.0f, true},  // narrower than a vector, two K blocks, a bias
             {true, false, 128, W, 5000, 0.0f, false},  // dW1 = x^T dh: split K
             {true, false, 16, 128, 5000, 0.0f, false},  // dW2 = h^T dz: 16 rows, split K
             {true, false, 16, 128, 300, 1.0f, false},  // 16 rows, accumulated
             {false, false, 13, 40, 64, 0.0f, true},  // 13 rows: one 8-row tile and an edge
             {false, true, 5, W, 20, 1.0f, false}}) {  // few rows and narrow: the narrow tile wins
      CAPTURE(ta);
      CAPTURE(tb);
      CAPTURE(M);
      CAPTURE(N);
      CAPTURE(K);
      // the wide product: N2 = 3W columns (the first N the narrow one's) and M2 = 40 rows (the first M)
      const int64_t M2 = std::max<int64_t>(M, 40), N2 = std::max<int64_t>(N, 3 * W);
      const auto A2 = testing::random_values<float>(static_cast<size_t>(M2 * K), 31),
                 B2 = testing::random_values<float>(static_cast<size_t>(K * N2), 32),
                 bias = testing::random_values<float>(static_cast<size_t>(N2), 33),
                 C0 = testing::random_values<float>(static_cast<size_t>(M2 * N2), 34);
      // op(A) [M, K] as the first M rows of op(A2): stored [M2, K] (lda K) or [K, M2] (lda M2)
      const int64_t lda = ta ? M2 : K, ldb = tb ? K : N2;  // op(B) [K, N] as the first N columns of op(B2)
      std::vector<float> wide = C0;
      gemm_cpu_isa(isa, ta, tb, M2, N2, K, 1.0f, A2.data(), lda, B2.data(), ldb, beta, wide.data(), N2, true,
                   with_bias ? bias.data() : nullptr);
      for (int threads : {num_threads(), 1}) {
        const testing::ThreadsRestored saved;
        set_num_threads(threads);
        std::vector<float> got = C0;  // C [M, N] with row stride N2, inside C0
        gemm_cpu_isa(isa, ta, tb, M, N, K, 1.0f, A2.data(), lda, B2.data(), ldb, beta, got.data(), N2, true,
                     with_bias ? bias.data() : nullptr);
        // the wide product's bits inside [M, N] (-0 against +0 counts), C0 untouched outside it
        std::vector<float> want = C0;
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) want[size_t(i * N2 + j)] = wide[size_t(i * N2 + j)];
        CHECK(testing::same_bits(got, want));
      }
    }
  }
}

// [A1 | A2] (R rows, K1 + K2 stored columns, row strides K1 + pad and K2 + 2 pad) through one ISA,
// against the built concatenation through the same ISA: bits, with and without a bias, 1, 4 and the
// default number of threads.
void check_cat(GemmIsa isa, bool ta, int64_t R, int64_t K1, int64_t K2, int64_t N, int64_t pad = 0) {
  CAPTURE(ta);
  CAPTURE(R);
  CAPTURE(K1);
  CAPTURE(K2);
  CAPTURE(pad);
  const int64_t W = K1 + K2, l1 = K1 + pad, l2 = K2 + 2 * pad;  // the concatenation [R, W]
  const auto A1 = testing::random_values<float>(static_cast<size_t>(R * l1), 21),
             A2 = testing::random_values<float>(static_cast<size_t>(R * l2 + 1), 22);  // never empty: a2 is set
  std::vector<float> cat(static_cast<size_t>(R * W));
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t t = 0; t < K1; ++t) cat[size_t(r * W + t)] = A1[size_t(r * l1 + t)];
    for (int64_t t = 0; t < K2; ++t) cat[size_t(r * W + K1 + t)] = A2[size_t(r * l2 + t)];
  }
  const int64_t M = ta ? W : R, K = ta ? R : W;  // op(A) [M, K]: [R, W] without trans_a, [W, R] with it
  const auto B = testing::random_values<float>(static_cast<size_t>(K * N), 23),
             bias = testing::random_values<float>(static_cast<size_t>(N), 24);
  for (const float* bp : {static_cast<const float*>(nullptr), bias.data()}) {
    std::vector<float> want(static_cast<size_t>(M * N)), got(want.size(), NAN), got1(want.size(), NAN),
        got4(want.size(), NAN);
    gemm_cpu_isa(isa, ta, false, M, N, K, 1.0f, cat.data(), W, B.data(), N, 0.0f, want.data(), N, true, bp);
    {  // the concatenation's product itself against the double reference
      std::vector<double> c64(cat.begin(), cat.end()), b64(B.begin(), B.end()), ref(want.size());
      gemm_ref<double>(ta, false, M, N, K, 1.0, c64.data(), W, b64.data(), N, 0.0, ref.data(), N);
      double worst = 0;
      for (size_t i = 0; i < ref.size(); ++i)
        worst = std::max(worst, std::fabs(double(want[i]) - ref[i] - (bp ? double(bp[i % size_t(N)]) : 0.0)));
      CHECK(worst < 1e-3);
    }
    gemm_cpu_isa(isa, ta, false, M, N, K, 1.0f, A1.data(), l1, B.data(), N, 0.0f, got.data(), N, true, bp,
                 GemmCat{A2.data(), l2, K1});
    CHECK(got == want);
    const testing::ThreadsRestored saved;
    set_num_threads(1);
    gemm_cpu_isa(isa, ta, false, M, N, K, 1.0f, A1.data(), l1, B.data(), N, 0.0f, got1.data(), N, true, bp,
                 GemmCat{A2.data(), l2, K1});
    CHECK(got1 == want);
    set_num_threads(4);
    gemm_cpu_isa(isa, ta, false, M, N, K, 1.0f, A1.data(), l1, B.data(), N, 0.0f, got4.data(), N, true, bp,
                 GemmCat{A2.data(), l2, K1});
    CHECK(got4 == want);
  }
}

TEST_CASE("gemm: A as two parts side by side gives the bits of their concatenation") {
  // Every ISA: the split on a K block's edge (256) and inside a block (packed), a part empty or tiny,
  // strided parts, transposed (the split along op(A)'s rows: a weight gradient [A1 | A2]^T dy) with and
  // without split K, with a part empty, and a long K cut into chunks inside either part or at the split.
  for (GemmIsa isa : {GemmIsa::kGeneric, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (!gemm_isa_supported(isa)) continue;
    CAPTURE(gemm_isa_name(isa));
    check_cat(isa, false, 1000, 256, 256, 128);
    check_cat(isa, false, 301, 100, 60, 33, 3);
    check_cat(isa, false, 97, 300, 7, 40, 1);
    check_cat(isa, false, 13, 0, 20, 17);
    check_cat(isa, false, 13, 20, 0, 17, 2);
    check_cat(isa, false, 50, 3000, 2500, 9);  // split K, a chunk across the parts
    check_cat(isa, false, 40, 1024, 4000, 9);  // split K, a chunk boundary at the split
    check_cat(isa, false, 200, 3000, 2500, 9, 1);  // split K, more than one row block
    check_cat(isa, true, 1000, 256, 256, 128);
    check_cat(isa, true, 500, 64, 64, 64, 4);
    check_cat(isa, true, 9000, 40, 30, 24);  // split K over the rows
    check_cat(isa, true, 6000, 300, 212, 40);  // split K with 512 rows of C, the split on a panel's edge
    check_cat(isa, true, 6000, 302, 210, 40);  // the same, the parts split inside a panel (302 = 2 mod 4, 6, 12)
    check_cat(isa, true, 5000, 3, 13, 40);  // 16 rows of C (the 8-row tile), a panel across the parts, split K
    check_cat(isa, true, 5000, 31, 25, 8);  // one vector wide (the narrow tile), a panel across the parts, split K
    check_cat(isa, true, 5000, 100, 400, 24);  // split K, most panels of op(A) read in place from a2
    check_cat(isa, true, 77, 5, 200, 19, 1);
    check_cat(isa, true, 300, 0, 50, 8);
    check_cat(isa, true, 300, 50, 0, 8);
  }
  float C[1];
  const float one[1] = {1.0f};
  CHECK_THROWS_WITH_AS(gemm_cpu_isa(gemm_isa(), false, false, 1, 1, 3, 1.0f, one, 1, one, 1, 0.0f, C, 1, true, nullptr,
                                    GemmCat{one, 1, 4}),
                       doctest::Contains("do not make 3 columns"), gnn::Error);
  // gemm_cat_cpu against the double reference of the same formula
  const int64_t R = 200, K1 = 70, K2 = 50, N = 30;
  const auto A1 = testing::random_values<float>(static_cast<size_t>(R * K1), 25),
             A2 = testing::random_values<float>(static_cast<size_t>(R * K2), 26),
             B = testing::random_values<float>(static_cast<size_t>((K1 + K2) * N), 27);
  std::vector<float> got(static_cast<size_t>(R * N));
  gemm_cat_cpu(false, R, N, K1 + K2, A1.data(), K1, A2.data(), K2, K1, B.data(), N, nullptr, got.data(), N);
  std::vector<double> a1(A1.begin(), A1.end()), a2(A2.begin(), A2.end()), b(B.begin(), B.end()), want(got.size());
  gemm_cat_ref<double>(false, R, N, K1 + K2, a1.data(), K1, a2.data(), K2, K1, b.data(), N, nullptr, want.data(), N);
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
  CHECK(worst < 1e-4);
}

TEST_CASE("cuda gemm: cuBLAS FP32 matches the double reference for every transpose, alpha and beta") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  set_gemm_tf32(false);
  // The device run copies the host buffers over, multiplies, and copies C back.
  const testing::GemmRun on_device = [](bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                                        int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    const auto upload = [](const float* p, int64_t n) { return on_gpu(std::vector<float>(p, p + n)); };
    Tensor gA = upload(A, (ta ? K : M) * lda), gB = upload(B, (tb ? N : K) * ldb), gC = upload(C, M * ldc);
    gemm_cuda(ta, tb, M, N, K, alpha, gA.f32(), lda, gB.f32(), ldb, beta, gC.f32(), ldc, cuda_blas(0), cuda_stream(0));
    const auto got = gC.to_vector<float>();
    std::copy(got.begin(), got.end(), C);
  };
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [M, N, K] :
           {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {7, 13, 5}, {257, 129, 65}, {1000, 64, 300}})
        for (float beta : {0.0f, 0.5f}) testing::check_gemm_case("cublas", on_device, ta, tb, M, N, K, 1.5f, beta, 3);
#endif
}
