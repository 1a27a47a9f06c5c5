// Dropout (kernels/dropout.h): the GPU draws the host's mask bit for bit, and the autograd op on the
// GPU matches the host. (The mask's statistics and the gradient's routing on the host:
// tests/autograd/test_autograd.cpp.)
#include <tuple>
#include <vector>

#include "autograd/device_check.h"
#include "device_buffers.h"
#include "graph_cases.h"
#include "kernels/dropout.h"
#include "runtime/cuda.h"
#include "runtime/rng.h"
#include "testing.h"

using namespace gnn;
using namespace gnn::testing;  // the helpers of testing.h, device_buffers.h and graph_cases.h

TEST_CASE("dropout's scale is 1 over the keep probability its threshold gives: E[y] = x for any p") {
  // The mask keeps an element when the top 24 bits of its hash are >= threshold, so with probability
  // 1 - threshold / 2^24 (the hash is a bijection of 32 bits). 1 / (1 - p) as the scale made E[y] up to
  // 2^-24 / (1 - p) too large: 1.3% at p = 0.999999, 60x at p = 1 - 1e-9.
  for (double p : {0.1, 0.2, 0.3, 0.5, 0.9, 0.999, 0.999999, 1 - 1e-9, 1e-9}) {
    CAPTURE(p);
    const DropoutMask<double> m = dropout_mask<double>(p, 5);
    const double keep = 1 - double(m.threshold) / double(1u << 24);
    CHECK(m.scale * keep == doctest::Approx(1.0).epsilon(1e-15));
    CHECK(std::fabs(keep - (1 - p)) <= 1.0 / double(1u << 24));
    const DropoutMask<float> f = dropout_mask<float>(p, 5);
    CHECK(f.threshold == m.threshold);
    CHECK(double(f.scale) * keep == doctest::Approx(1.0).epsilon(1e-7));
  }
  CHECK(dropout_mask<float>(1e-9, 5).scale == 1.0f);  // (a threshold of 0: nothing dropped, nothing scaled)
  CHECK(dropout_mask<float>(0.5, 5).scale == 2.0f);
}

TEST_CASE("cuda dropout draws the host's mask, bit for bit") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  for (auto [R, F] : kElementShapes) {
    CAPTURE(R);
    CAPTURE(F);
    const int64_t n = R * F;
    const auto x = random_values<float>(size_t(n), 1, -3.0f, 3.0f);
    const Tensor gx = on_gpu(x);
    std::vector<float> dropped(static_cast<size_t>(n));
    dropout_apply_ref<float>(dropped.data(), x.data(), n, 0x1234abcdull, uint32_t(0.3 * (1 << 24)), 1.0f / 0.7f);
    Tensor dr = nan_gpu(n);
    dropout_apply_cuda(dr.f32(), gx.f32(), n, 0x1234abcdull, uint32_t(0.3 * (1 << 24)), 1.0f / 0.7f, s);
    CHECK(same_bits(dr.to_vector<float>(), dropped));
  }
#endif
}

// The host's float versions (AVX2 / AVX-512 clones over the threads, kernels/dropout_cpu.cpp) against the
// references: the same bits, over sizes below and above the threads' grain, odd widths included,
// and F wider than dropout_configs_apply_cpu's 512-value pieces.
TEST_CASE("the host's cloned dropout draws the references' masks, bit for bit") {
  const uint32_t threshold = uint32_t(0.3 * (1 << 24));
  const float scale = 1.0f / 0.7f;
  for (int64_t n : {int64_t(1), int64_t(37), int64_t(1000), kDropoutGrain + 13, 5 * kDropoutGrain + 1}) {
    CAPTURE(n);
    const auto x = random_values<float>(size_t(n), 2, -3.0f, 3.0f);
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    dropout_apply_ref<float>(want.data(), x.data(), n, 0x5eedull, threshold, scale);
    dropout_apply_cpu(got.data(), x.data(), n, 0x5eedull, threshold, scale);
    CHECK(same_bits(got, want));
  }
  for (auto [R, C, F] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {37, 3, 5}, {300, 64, 17}, {9, 4, 1300},
                         {2000, 64, 128}}) {
    CAPTURE(R);
    CAPTURE(C);
    CAPTURE(F);
    const int64_t n = R * C * F;
    const auto x = random_values<float>(size_t(n), 3, -3.0f, 3.0f);
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    dropout_configs_apply_ref<float>(want.data(), x.data(), R, C, F, 0xabcull, threshold, scale);
    dropout_configs_apply_cpu(got.data(), x.data(), R, C, F, 0xabcull, threshold, scale);
    CHECK(same_bits(got, want));
  }
}

// dropout_run hashes a 32-bit counter within one 2^32 block of indices and falls back to each index's own
// hash across a block's end: both must make dropout_drops' decisions, also past 2^32 (where the index's
// high word enters the hash), which no tensor in the other tests reaches.
TEST_CASE("dropout_run decides as dropout_drops within, across and past 2^32 blocks of indices") {
  const uint32_t key = dropout_key(0x9e3779b97f4a7c15ull), threshold = uint32_t(0.4 * (1 << 24));
  const float scale = 1.0f / 0.6f;
  const int64_t n = 40;
  const auto x = random_values<float>(size_t(n), 7, -2.0f, 2.0f);
  for (int64_t i0 : {int64_t(0), (int64_t(1) << 32) - 7, (int64_t(1) << 32) + 3, 3 * (int64_t(1) << 32) + 5,
                     5 * (int64_t(1) << 32) - 20}) {
    CAPTURE(i0);
    std::vector<float> got(static_cast<size_t>(n));
    dropout_run(got.data(), x.data(), n, i0, key, threshold, scale);
    int dropped = 0;
    for (int64_t t = 0; t < n; ++t) {
      const float want = x[size_t(t)] * (dropout_drops(key, i0 + t, threshold) ? 0.0f : scale);
      CHECK(got[size_t(t)] == want);
      dropped += got[size_t(t)] == 0.0f;
    }
    CHECK(dropped > 0);  // p = 0.4 over 40 values: some dropped, some kept
    CHECK(dropped < n);
  }
}

// RowsDropout, the mask the fused norm and cross-config attention apply to [N, C*D] rows: per element it is
// dropout_apply_ref's mask, with configs the one dropout_configs_apply_ref draws; first() is index() at a
// config's first column, and apply_row (runs of consecutive indices) gives apply's bits from any column on.
TEST_CASE("RowsDropout draws dropout's and dropout_configs' masks, by index, first and apply_row") {
  const int64_t N = 5, C = 3, D = 7, F = C * D;
  const uint64_t seed = 0x5eedull;
  const float p = 0.3f;
  const auto x = random_values<float>(size_t(N * F), 11, -2.0f, 2.0f);
  const DropoutMask<float> mask = dropout_mask<float>(p, seed);
  for (int64_t configs : {int64_t(0), C}) {
    CAPTURE(configs);
    const RowsDropout<float> drop{mask, configs};
    std::vector<float> want(size_t(N * F));
    if (configs == 0) dropout_apply_ref(want.data(), x.data(), N * F, seed, mask.threshold, mask.scale);
    else dropout_configs_apply_ref(want.data(), x.data(), N, C, D, seed, mask.threshold, mask.scale);
    std::vector<float> by_apply(size_t(N * F)), by_row(x);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t col = 0; col < F; ++col)
        by_apply[size_t(n * F + col)] = drop.apply(x[size_t(n * F + col)], n, col, F);
      for (int64_t c = 0; c < C; ++c) CHECK(drop.first(n, c, C, D) == drop.index(n, c * D, F));
      // from column 2 on (a first part that starts inside a config), then columns 0 and 1 on their own
      drop.apply_row(by_row.data() + n * F + 2, by_row.data() + n * F + 2, n, 2, F - 2, F);
      drop.apply_row(by_row.data() + n * F, by_row.data() + n * F, n, 0, 2, F);
    }
    CHECK(same_bits(by_apply, want));
    CHECK(same_bits(by_row, want));
  }
  const RowsDropout<float> off{};
  CHECK(off.apply(1.5f, 2, 3, F) == 1.5f);
}

TEST_CASE("cuda ops: dropout matches the host, value and gradient") {
  GNN_SKIP_UNLESS_CUDA();
  const Tensor a = rand({37, 24}, 1);
  check_op("dropout", {a}, [](auto& v, auto&) {
    Rng r(5);  // the same draw on both devices: the same mask
    return ag::dropout(v[0], 0.3, r, true);
  });
}

// dropout_configs(x, p, Rng(s), true, C) on node-major rows [R, C*F] is x times the mask dropout draws over
// [R, F] for the same draw, repeated for each config (the composition the 6th place recipes ran before,
// join_configs of that mask): the same bits, value and gradient.
void check_dropout_configs(Device dev) {
  for (int64_t C : {1, 2, 3}) {
    for (auto [R, F] : {std::pair<int64_t, int64_t>{37, 5}, {1, 1}, {300, 17}}) {
      CAPTURE(C);
      CAPTURE(R);
      CAPTURE(F);
      const Tensor xs = rand({R, C * F}, uint64_t(C + R)), dy = rand({R, C * F}, 9);
      ag::Var x1 = ag::Var::param(xs.to(dev)), x2 = ag::Var::param(xs.to(dev));
      Rng r1(11), r2(11);
      const ag::Var fused = ag::dropout_configs(x1, 0.3, r1, true, C);
      ag::backward(fused, dy.to(dev));
      const ag::Var mask = ag::dropout(ag::Var(Tensor::full(Shape{R, F}, 1.0, DType::F32, dev)), 0.3, r2, true);
      const ag::Var composed =
          ag::mul(x2, ag::join_configs(mask, ag::Var(Tensor::empty(Shape{R, 0}, DType::F32, dev)), C));
      ag::backward(composed, dy.to(dev));
      CHECK(same_bits(fused.value().to_vector<float>(), composed.value().to_vector<float>()));
      CHECK(same_bits(x1.grad().to_vector<float>(), x2.grad().to_vector<float>()));
    }
  }
  Rng r(1);
  CHECK_THROWS_WITH_AS(ag::dropout_configs(ag::Var(rand({4, 6}, 1).to(dev)), 0.3, r, true, 4),
                       doctest::Contains("is not rows of 4 configs"), Error);
}

TEST_CASE("dropout_configs is dropout's mask over [R, F] repeated for each config, the same bits") {
  check_dropout_configs(Device::cpu());
}

TEST_CASE("cuda ops: dropout_configs on the GPU is the repeated mask too, the same bits") {
  GNN_SKIP_UNLESS_CUDA();
  check_dropout_configs(Device::cuda(0));
}
