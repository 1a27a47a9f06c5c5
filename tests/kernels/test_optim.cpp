// The many-tensor optimiser passes (kernels/optim.h) on the host against the per-tensor references:
// tensors on both sides of a chunk border and empty ones, f32 and f64, any thread count; and on the GPU
// against the host passes.
#include <cmath>
#include <cstring>

#include "device_buffers.h"
#include "kernels/graph_cases.h"
#include "kernels/optim.h"
#include "runtime/cuda.h"
#include "runtime/parallel.h"
#include "testing.h"

using namespace gnn;
using namespace gnn::testing;  // the helpers of testing.h, device_buffers.h and graph_cases.h

namespace {

// A many-tensor entry list copied to the device as bytes.
template <class E>
Tensor list_on_gpu(std::vector<E>& list) {
  plan_chunks(list.data(), int64_t(list.size()));
  std::vector<uint8_t> bytes(list.size() * sizeof(E));
  std::memcpy(bytes.data(), list.data(), bytes.size());
  return on_gpu(bytes);
}

// Sizes around the chunk border, an empty tensor between two others, and one of several chunks.
const std::vector<int64_t> kSizes = {0, 1, kMultiChunk - 1, kMultiChunk, 0, kMultiChunk + 1, 3, 3 * kMultiChunk + 17};

template <class T>
std::vector<std::vector<T>> values_per_size(uint32_t seed) {
  std::vector<std::vector<T>> out;
  for (size_t k = 0; k < kSizes.size(); ++k) out.push_back(random_values<T>(size_t(kSizes[k]), seed + uint32_t(k)));
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
        const AdamStep s{1e-2,      0.9, 0.999, 1e-8, 1e-3 * double(k), 1 - std::pow(0.9, tk), 1 - std::pow(0.999, tk),
                         k % 2 == 1};
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

TEST_CASE("cuda many-tensor Adam, SGD, sums of squares and scaling match the host passes") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  // sizes on both sides of the chunk border, empty tensors between others, one of several chunks
  const std::vector<int64_t> sizes = {0, 1, kMultiChunk - 1, kMultiChunk, 0, kMultiChunk + 1, 3, 3 * kMultiChunk + 17};
  const int64_t K = int64_t(sizes.size());
  std::vector<std::vector<float>> w, g;
  std::vector<std::vector<double>> m, v;
  std::vector<Tensor> gw, gg, gm, gv;
  for (int64_t k = 0; k < K; ++k) {
    w.push_back(random_values<float>(size_t(sizes[k]), 10 + uint32_t(k)));
    g.push_back(random_values<float>(size_t(sizes[k]), 30 + uint32_t(k)));
    m.emplace_back(size_t(sizes[k]), 0.0), v.emplace_back(size_t(sizes[k]), 0.0);
    gw.push_back(on_gpu(w[k])), gg.push_back(on_gpu(g[k])), gm.push_back(on_gpu(m[k])), gv.push_back(on_gpu(v[k]));
  }
  for (int t = 1; t <= 3; ++t) {  // Adam on even tensors, AdamW on odd ones, each with its own step count
    std::vector<AdamTensor<float>> list, host;
    for (int64_t k = 0; k < K; ++k) {
      const int tk = t + int(k);
      const AdamStep st{1e-2,      0.9, 0.999, 1e-8, 1e-3 * double(k), 1 - std::pow(0.9, tk), 1 - std::pow(0.999, tk),
                        k % 2 == 1};
      list.push_back({gw[k].f32(), gg[k].f32(), gm[k].f64(), gv[k].f64(), sizes[k], -1, st});
      host.push_back({w[k].data(), g[k].data(), m[k].data(), v[k].data(), sizes[k], -1, st});
    }
    const Tensor dl = list_on_gpu(list);
    adam_multi_cuda(static_cast<const AdamTensor<float>*>(dl.data()), K, plan_chunks(list.data(), K), s);
    adam_multi_cpu(host.data(), K, plan_chunks(host.data(), K));
  }
  for (int64_t k = 0; k < K; ++k) {
    CAPTURE(k);
    GNN_CHECK_CLOSE(gw[k].to_vector<float>(), w[k], 1e-6, 1e-6);
    GNN_CHECK_CLOSE(gm[k].to_vector<double>(), m[k], 1e-12, 1e-9);
    GNN_CHECK_CLOSE(gv[k].to_vector<double>(), v[k], 1e-12, 1e-9);
  }
  for (int t = 1; t <= 2; ++t) {  // SGD, momentum buffers on even tensors only
    std::vector<SgdTensor<float>> list, host;
    for (int64_t k = 0; k < K; ++k) {
      const SgdStep st{0.1, 0.9, 1e-4, t == 1};
      list.push_back({gw[k].f32(), gg[k].f32(), k % 2 ? nullptr : gm[k].f64(), sizes[k], -1, st});
      host.push_back({w[k].data(), g[k].data(), k % 2 ? nullptr : m[k].data(), sizes[k], -1, st});
    }
    const Tensor dl = list_on_gpu(list);
    sgd_multi_cuda(static_cast<const SgdTensor<float>*>(dl.data()), K, plan_chunks(list.data(), K), s);
    sgd_multi_cpu(host.data(), K, plan_chunks(host.data(), K));
  }
  for (int64_t k = 0; k < K; ++k) {
    CAPTURE(k);
    GNN_CHECK_CLOSE(gw[k].to_vector<float>(), w[k], 1e-6, 1e-6);
    GNN_CHECK_CLOSE(gm[k].to_vector<double>(), m[k], 1e-12, 1e-9);
  }
  {  // per-chunk sums of squares (NaN-filled), twice for the same bits; then scaling, odd tensors in place
    std::vector<SumSquaresTensor<float>> list, host;
    for (int64_t k = 0; k < K; ++k)
      list.push_back({gg[k].f32(), sizes[k], -1}), host.push_back({g[k].data(), sizes[k], -1});
    const int64_t chunks = plan_chunks(host.data(), K);
    const Tensor dl = list_on_gpu(list);
    std::vector<double> want(static_cast<size_t>(chunks));
    sum_squares_multi_cpu(want.data(), host.data(), K, chunks);
    std::vector<std::vector<double>> runs;
    for (int r = 0; r < 2; ++r) {
      Tensor part = Tensor::full({chunks}, NAN, DType::F64, Device::cuda(0));
      sum_squares_multi_cuda(part.f64(), static_cast<const SumSquaresTensor<float>*>(dl.data()), K, chunks, s);
      runs.push_back(part.to_vector<double>());
    }
    GNN_CHECK_CLOSE(runs[0], want, 1e-13, 1e-12);
    CHECK(runs[0] == runs[1]);
    std::vector<ScaleTensor<float>> scale;
    std::vector<Tensor> out;
    for (int64_t k = 0; k < K; ++k) {
      out.push_back(k % 2 ? gg[k] : nan_gpu(sizes[k]));
      scale.push_back({out.back().f32(), gg[k].f32(), sizes[k], -1});
    }
    const Tensor sl = list_on_gpu(scale);
    scale_multi_cuda(static_cast<const ScaleTensor<float>*>(sl.data()), K, plan_chunks(scale.data(), K), -0.3, s);
    for (int64_t k = 0; k < K; ++k) {
      std::vector<float> want_k(g[k].size());
      for (size_t i = 0; i < want_k.size(); ++i) want_k[i] = float(double(g[k][i]) * -0.3);
      CHECK(out[k].to_vector<float>() == want_k);  // one double product rounded to float: exact
    }
  }
#endif
}
