// The many-tensor optimiser passes (kernels/optim.h) on the host against the per-tensor references:
// tensors on both sides of a chunk border and empty ones, f32 and f64, any thread count.
#include <cmath>

#include "kernels/graph_cases.h"
#include "kernels/optim.h"
#include "runtime/parallel.h"
#include "testing.h"

using namespace gnn;

namespace {

// Sizes around the chunk border, an empty tensor between two others, and one of several chunks.
const std::vector<int64_t> kSizes = {0, 1, kMultiChunk - 1, kMultiChunk, 0, kMultiChunk + 1, 3, 3 * kMultiChunk + 17};

template <class T>
std::vector<std::vector<T>> values_per_size(uint32_t seed) {
  std::vector<std::vector<T>> out;
  for (size_t k = 0; k < kSizes.size(); ++k) out.push_back(testing::random_values<T>(size_t(kSizes[k]), seed + uint32_t(k)));
  return out;
}

template <class T>
void check_passes() {
  const int64_t K = int64_t(kSizes.size());
  const auto g = values_per_size<T>(100);
  // Adam: three steps, each tensor with its own step count and weight decay, AdamW on odd tensors
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    set_num_threads(threads);
    auto w_ref = values_per_size<T>(200), w = w_ref;
    std::vector<std::vector<double>> m_ref, v_ref;
    for (int64_t n : kSizes) m_ref.emplace_back(size_t(n), 0.0), v_ref.emplace_back(size_t(n), 0.0);
    auto m = m_ref, v = v_ref;
    for (int t = 1; t <= 3; ++t) {
      std::vector<AdamTensor<T>> list;
      for (int64_t k = 0; k < K; ++k) {
        const int tk = t + int(k);
        const AdamStep s{1e-2, 0.9, 0.999, 1e-8, 1e-3 * double(k), 1 - std::pow(0.9, tk), 1 - std::pow(0.999, tk), k % 2 == 1};
        adam_update_ref(w_ref[k].data(), g[k].data(), m_ref[k].data(), v_ref[k].data(), kSizes[k], s);
        list.push_back({w[k].data(), g[k].data(), m[k].data(), v[k].data(), kSizes[k], -1, s});
      }
      adam_multi_cpu(list.data(), K, plan_chunks(list.data(), K));
    }
    CHECK(w == w_ref);  // the same function per element: the same bits
    CHECK(m == m_ref);
    CHECK(v == v_ref);
  }
  // SGD with a momentum buffer on even tensors only, two steps
  {
    auto w_ref = values_per_size<T>(300), w = w_ref;
    std::vector<std::vector<double>> b_ref;
    for (int64_t n : kSizes) b_ref.emplace_back(size_t(n), 0.0);
    auto b = b_ref;
    for (int t = 1; t <= 2; ++t) {
      std::vector<SgdTensor<T>> list;
      for (int64_t k = 0; k < K; ++k) {
        const SgdStep s{0.1, 0.9, 1e-4, t == 1};
        double* br = k % 2 == 0 ? b_ref[k].data() : nullptr;
        sgd_update_ref(w_ref[k].data(), g[k].data(), br, kSizes[k], s);
        list.push_back({w[k].data(), g[k].data(), k % 2 == 0 ? b[k].data() : nullptr, kSizes[k], -1, s});
      }
      sgd_multi_cpu(list.data(), K, plan_chunks(list.data(), K));
    }
    CHECK(w == w_ref);
    CHECK(b == b_ref);
  }
  // Sums of squares per chunk add up to the whole; scaling into new buffers and in place
  {
    std::vector<SumSquaresTensor<T>> list;
    double want = 0;
    for (int64_t k = 0; k < K; ++k) {
      list.push_back({g[k].data(), kSizes[k], -1});
      for (T x : g[k]) want += double(x) * double(x);
    }
    const int64_t chunks = plan_chunks(list.data(), K);
    CHECK(chunks == 1 + 1 + 1 + 2 + 1 + 4);
    std::vector<double> partial(size_t(chunks), NAN);
    sum_squares_multi_cpu(partial.data(), list.data(), K, chunks);
    double got = 0;
    for (double x : partial) got += x;
    CHECK(got == doctest::Approx(want).epsilon(1e-13));
    for (int64_t c = 0; c < chunks; ++c) {  // every chunk belongs to a non-empty tensor that covers it
      const int64_t k = chunk_owner(list.data(), K, c);
      int64_t b = 0, e = 0;
      chunk_range(list[size_t(k)], c, b, e);
      CHECK(kSizes[k] > 0);
      CHECK((0 <= b && b < e && e <= kSizes[k]));
    }
  }
  {
    auto x = values_per_size<T>(400);
    std::vector<std::vector<T>> y;
    std::vector<ScaleTensor<T>> list;
    for (int64_t k = 0; k < K; ++k) {
      y.emplace_back(size_t(kSizes[k]), T(NAN));
      // odd tensors in place
      list.push_back({k % 2 ? x[k].data() : y[k].data(), x[k].data(), kSizes[k], -1});
    }
    const auto x0 = x;
    scale_multi_cpu(list.data(), K, plan_chunks(list.data(), K), -0.3);
    for (int64_t k = 0; k < K; ++k)
      for (size_t i = 0; i < x0[k].size(); ++i) REQUIRE((k % 2 ? x[k] : y[k])[i] == T(double(x0[k][i]) * -0.3));
  }
}

}  // namespace

TEST_CASE("multi-tensor Adam, SGD, sums of squares and scaling equal the per-tensor references") {
  const int before = num_threads();
  SUBCASE("f32") { check_passes<float>(); }
  SUBCASE("f64") { check_passes<double>(); }
  set_num_threads(before);
}

TEST_CASE("plan_chunks of an empty list and of empty tensors only is zero chunks") {
  std::vector<AdamTensor<float>> none;
  CHECK(plan_chunks(none.data(), 0) == 0);
  std::vector<ScaleTensor<float>> empty(3, ScaleTensor<float>{nullptr, nullptr, 0, -1});
  CHECK(plan_chunks(empty.data(), 3) == 0);
  scale_multi_cpu(empty.data(), 3, 0, 2.0);  // nothing to do, nothing touched
}
