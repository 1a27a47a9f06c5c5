// Embedding lookups (kernels/embedding.h): the gather exact, the scatter-add backward against the
// double reference and the same bits on any thread count, on the CPU and on the GPU.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "device_buffers.h"
#include "graph_cases.h"
#include "kernels/embedding.h"
#include "runtime/cuda.h"
#include "runtime/parallel.h"
#include "testing.h"

using namespace gnn;
using namespace gnn::testing;  // the helpers of testing.h, device_buffers.h and graph_cases.h

TEST_CASE("embedding: gather and a deterministic scatter-add backward") {
  const int64_t K = 121, F = 33, n = 5000;  // the opcode embedding's size
  const auto table = random_values<float>(static_cast<size_t>(K * F), 1);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::mt19937 rng(3);
  for (auto& i : idx) i = rng() % 4 == 0 ? 63 : int32_t(rng() % K);  // one popular row, some unused
  const auto dy = random_values<float>(static_cast<size_t>(n * F), 2);
  std::vector<float> y(static_cast<size_t>(n * F), NAN);
  embedding_forward_cpu(y.data(), table.data(), idx.data(), n, F);
  std::vector<double> yd(static_cast<size_t>(n * F)), dtd(static_cast<size_t>(K * F));
  embedding_forward_ref<double>(yd.data(), to_double(table).data(), idx.data(), n, F);
  CHECK(testing::compare(y, yd, 0, 0).index < 0);  // data movement: exact
  embedding_backward_ref<double>(dtd.data(), to_double(dy).data(), idx.data(), n, K, F);
  std::vector<float> out[2];
  const testing::ThreadsRestored saved;
  for (int run = 0; run < 2; ++run) {
    set_num_threads(run == 0 ? 1 : std::max(2, saved.count));
    std::vector<float> dt(static_cast<size_t>(K * F), NAN);
    embedding_backward_cpu(dt.data(), dy.data(), idx.data(), n, K, F);
    GNN_CHECK_CLOSE(dt, dtd, 1e-4, 1e-4);
    out[run] = dt;
  }
  CHECK(out[0] == out[1]);
}

// One row with most of the uses (as the constant row tgraph's first layer gathers for the nodes that are
// not configurable), rows of one chunk and rows of none. The backward spreads the chunks over the threads;
// each chunk must still be summed in use order and a row's chunks added in order (the GPU's order), which
// this checks bit for bit against that sum written out.
TEST_CASE("embedding: one row with most uses sums its chunks in order on any thread count") {
  const int64_t K = 10, F = 4, n = 170 * 64 * 18 + 5;  // not a multiple of the chunk
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::mt19937 rng(5);
  for (auto& i : idx) i = rng() % 32 == 0 ? int32_t(rng() % 7) : 7;
  for (int64_t i = 0; i < n; i += 5000) idx[size_t(i)] = 8;  // 40 uses: one chunk; row 9 none
  const auto dy = random_values<float>(static_cast<size_t>(n * F), 6);
  std::vector<float> want(static_cast<size_t>(K * F), 0.0f);
  for (int64_t k = 0; k < K; ++k) {
    std::vector<int64_t> uses;
    for (int64_t i = 0; i < n; ++i)
      if (idx[size_t(i)] == k) uses.push_back(i);
    for (size_t c = 0; c < uses.size(); c += size_t(kEmbedChunk)) {
      float part[F] = {};
      for (size_t u = c; u < std::min(uses.size(), c + size_t(kEmbedChunk)); ++u)
        for (int64_t f = 0; f < F; ++f) part[f] += dy[size_t(uses[u] * F + f)];
      for (int64_t f = 0; f < F; ++f) want[size_t(k * F + f)] += part[f];
    }
  }
  const testing::ThreadsRestored saved;
  for (int threads : {1, std::max(2, saved.count)}) {
    set_num_threads(threads);
    std::vector<float> dt(static_cast<size_t>(K * F), NAN);
    embedding_backward_cpu(dt.data(), dy.data(), idx.data(), n, K, F);
    CHECK_MESSAGE(dt == want, threads, " threads");
  }
}

TEST_CASE("embedding_renorm: torch's max_norm, the listed rows above it scaled, the others untouched") {
  const int64_t K = 6, F = 4;
  std::vector<float> table = {3, 4, 0, 0,          // norm 5: scaled by 1 / (5 + 1e-7)
                              0.5f, 0.5f, 0.5f, -0.5f,  // norm 1 exactly: not above max_norm, untouched
                              0.1f, 0, 0, 0,       // below
                              -8, 0, 6, 0,         // norm 10, not listed: untouched
                              0, 0, 0, 0,          // zero
                              1, 1, 1, 1};         // norm 2
  REQUIRE(table.size() == size_t(K * F));
  const std::vector<float> before = table;
  const std::vector<int32_t> rows = {0, 1, 2, 4, 5};
  embedding_renorm_ref(table.data(), rows.data(), int64_t(rows.size()), F, 1.0);
  // torch.nn.Embedding(max_norm=1) gives rows 0 and 5 these bits (torch 2.15): 3 * float(1 / (5 + 1e-7))
  // is 0.6f, one ulp above 0.6 rounded from f64
  const std::vector<float> row0 = {0.6f, 0.8f, 0, 0};
  for (int64_t f = 0; f < F; ++f) {
    CHECK(table[size_t(f)] == row0[size_t(f)]);
    CHECK(table[size_t(5 * F + f)] == 0.4999999701976776f);
  }
  for (int64_t k : {1, 2, 3, 4})
    for (int64_t f = 0; f < F; ++f) CHECK(table[size_t(k * F + f)] == before[size_t(k * F + f)]);
  // The float kernel against the double one; max_norm other than 1.
  const auto big = random_values<float>(size_t(121 * 33), 4);  // uniform rows, norms about 3.3
  std::vector<int32_t> some;
  for (int32_t k = 0; k < 121; k += 2) some.push_back(k);
  std::vector<float> f32 = big;
  std::vector<double> f64 = to_double(big);
  embedding_renorm_ref(f32.data(), some.data(), int64_t(some.size()), 33, 0.5);
  embedding_renorm_ref(f64.data(), some.data(), int64_t(some.size()), 33, 0.5);
  GNN_CHECK_CLOSE(f32, f64, 1e-6, 1e-7);
  CHECK(f32 != big);
  for (int32_t k : some) {
    double ss = 0;
    for (int64_t f = 0; f < 33; ++f) ss += double(f32[size_t(k * 33 + f)]) * f32[size_t(k * 33 + f)];
    CHECK(std::sqrt(ss) <= 0.5 + 1e-6);
  }
}

TEST_CASE("cuda embedding: the gather is exact, the ordered backward matches the reference and the CPU's bits") {
  GNN_SKIP_UNLESS_CUDA();
#ifdef GNN_WITH_CUDA
  const Stream s = cuda_stream(0);
  // embedding rows
  {
    const auto table = random_values<float>(size_t(50 * 33), 5);
    std::vector<int32_t> idx(1000);
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t((i * 7919) % 50);
    std::vector<float> want(idx.size() * 33);
    embedding_forward_ref<float>(want.data(), table.data(), idx.data(), int64_t(idx.size()), 33);
    Tensor emb = nan_gpu(int64_t(want.size()));
    embedding_forward_cuda(emb.f32(), on_gpu(table).f32(), on_gpu(idx).i32(), int64_t(idx.size()), 33, s);
    CHECK(emb.to_vector<float>() == want);  // a gather: exact
  }
  // embedding backward: repeated and unused rows, summed in index order (the CPU kernel's bits); then a
  // hub row with most of the uses (over a hundred chunks) next to rows of one chunk and of two
  for (int pattern : {0, 1}) {
    CAPTURE(pattern);
    const int64_t K = 50, Fe = 33, ne = pattern == 0 ? 1000 : 9000;
    std::vector<int32_t> idx(static_cast<size_t>(ne));
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = int32_t((i * 7919) % 47);  // rows 47..49 unused
    if (pattern == 1)
      for (size_t i = 0; i < idx.size(); ++i) idx[i] = i < 64 ? 5 : i % 5 == 0 ? int32_t(i % 47) : 3;
    const auto edy = random_values<float>(size_t(ne * Fe), 9);
    const std::vector<double> edyd(edy.begin(), edy.end());
    std::vector<double> dtd(static_cast<size_t>(K * Fe));
    embedding_backward_ref<double>(dtd.data(), edyd.data(), idx.data(), ne, K, Fe);
    std::vector<int64_t> ptr(static_cast<size_t>(K + 1)), uses(static_cast<size_t>(ne)),
        cptr(static_cast<size_t>(K + 1));
    const int64_t chunks = embedding_inverse(idx.data(), ne, K, ptr.data(), uses.data(), cptr.data());
    CHECK(chunks == cptr[size_t(K)]);
    if (pattern == 1) CHECK(cptr[4] - cptr[3] > 100);  // row 3's uses span many chunks
    Tensor dt = nan_gpu(K * Fe), ws = nan_gpu(chunks * Fe);
    embedding_backward_cuda(dt.f32(), on_gpu(edy).f32(), on_gpu(ptr).i64(), on_gpu(uses).i64(), on_gpu(cptr).i64(),
                            chunks, K, Fe, ws.f32(), s);
    GNN_CHECK_CLOSE(dt.to_vector<float>(), dtd, 1e-4, 1e-4);
    std::vector<float> cpu(static_cast<size_t>(K * Fe));
    embedding_backward_cpu(cpu.data(), edy.data(), idx.data(), ne, K, Fe);
    CHECK(same_bits(dt.to_vector<float>(), cpu));
  }
  // max_norm's renormalisation: the host's bits, the unlisted rows untouched
  {
    const auto table = random_values<float>(size_t(121 * 33), 6);
    std::vector<int32_t> rows;
    for (int32_t k = 1; k < 121; k += 3) rows.push_back(k);
    std::vector<float> host = table;
    embedding_renorm_ref(host.data(), rows.data(), int64_t(rows.size()), 33, 1.0);
    Tensor dev = on_gpu(table);
    embedding_renorm_cuda(dev.f32(), on_gpu(rows).i32(), int64_t(rows.size()), 33, 1.0, s);
    CHECK(same_bits(dev.to_vector<float>(), host));
    CHECK(host != table);
  }
#endif
}
