// Dropout (kernels/dropout.h): the GPU draws the host's mask bit for bit, and the autograd op on the
// GPU matches the host. (The mask's statistics and the gradient's routing on the host:
// tests/autograd/test_autograd.cpp.)
#include "autograd/device_check.h"
#include "device_buffers.h"
#include "graph_cases.h"
#include "kernels/dropout.h"
#include "runtime/cuda.h"
#include "runtime/rng.h"
#include "testing.h"

using namespace gnn;
using namespace gnn::testing;  // the helpers of testing.h, device_buffers.h and graph_cases.h

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
    dropout_apply<float>(dropped.data(), x.data(), n, 0x1234abcdull, uint32_t(0.3 * (1 << 24)), 1.0f / 0.7f);
    Tensor dr = nan_gpu(n);
    dropout_apply_cuda(dr.f32(), gx.f32(), n, 0x1234abcdull, uint32_t(0.3 * (1 << 24)), 1.0f / 0.7f, s);
    CHECK(same_bits(dr.to_vector<float>(), dropped));
  }
#endif
}

TEST_CASE("cuda ops: dropout matches the host, value and gradient") {
  GNN_SKIP_UNLESS_CUDA();
  const Tensor a = rand({37, 24}, 1);
  check_op("dropout", {a}, [](auto& v, auto&) {
    Rng r(5);  // the same draw on both devices: the same mask
    return ag::dropout(v[0], 0.3, r, true);
  });
}
