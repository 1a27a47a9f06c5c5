#include <algorithm>
#include <cmath>

#include "runtime/cuda.h"
#include "runtime/graph.h"
#include "runtime/tensor.h"
#include "testing.h"

using namespace gnn;

TEST_CASE("tensor: creation, shape and dtype") {
  Tensor t = Tensor::zeros({3, 4}, DType::F32);
  CHECK(t.defined());
  CHECK(t.dim() == 2);
  CHECK(t.size(0) == 3);
  CHECK(t.size(-1) == 4);
  CHECK(t.numel() == 12);
  CHECK(t.nbytes() == 48);
  CHECK(t.desc() == "f32[3, 4] on cpu");
  for (float v : t.to_vector<float>()) CHECK(v == 0.0f);
  CHECK(reinterpret_cast<uintptr_t>(t.data()) % 64 == 0);

  Tensor f = Tensor::full({5}, 2.5, DType::F64);
  for (double v : f.to_vector<double>()) CHECK(v == 2.5);
  Tensor i = Tensor::full({2, 2}, -7, DType::I64);
  for (int64_t v : i.to_vector<int64_t>()) CHECK(v == -7);
  Tensor b = Tensor::full({3}, 1, DType::Bool);
  CHECK(b.b8()[2] == true);
  CHECK(Tensor::full({1}, 200, DType::U8).item() == 200);

  Tensor scalar = Tensor::full({}, 3.0, DType::F32);  // 0-d holds one element
  CHECK(scalar.dim() == 0);
  CHECK(scalar.numel() == 1);
  CHECK(scalar.item() == 3.0);

  Tensor empty = Tensor::empty({0, 7}, DType::I32);
  CHECK(empty.numel() == 0);
  CHECK(empty.to_vector<int32_t>().empty());

  CHECK(Tensor::empty({1, 1, 1, 1, 1, 1}, DType::F32).dim() == 6);
  CHECK_FALSE(Tensor().defined());
}

TEST_CASE("tensor: from_vector round trip for every dtype") {
  CHECK(Tensor::from_vector<float>({1.5f, -2.f}).to_vector<float>() == std::vector<float>{1.5f, -2.f});
  CHECK(Tensor::from_vector<double>({1e300}).to_vector<double>() == std::vector<double>{1e300});
  CHECK(Tensor::from_vector<int32_t>({-1, 2, 3}, Shape{3}).to_vector<int32_t>() == std::vector<int32_t>{-1, 2, 3});
  CHECK(Tensor::from_vector<int64_t>({int64_t(1) << 40}).to_vector<int64_t>()[0] == int64_t(1) << 40);
  CHECK(Tensor::from_vector<uint8_t>({255, 0}).to_vector<uint8_t>() == std::vector<uint8_t>{255, 0});
  Tensor b = Tensor::from_vector<bool>({true, false, true});
  CHECK(b.dtype() == DType::Bool);
  CHECK(b.b8()[0] == true);
  CHECK(b.b8()[1] == false);
}

TEST_CASE("tensor: views share storage, copies do not") {
  Tensor t = Tensor::from_vector<int32_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, Shape{4, 3});
  Tensor rows = t.slice(1, 3);
  CHECK(rows.shape() == Shape{2, 3});
  CHECK(rows.shares_storage_with(t));
  CHECK(rows.to_vector<int32_t>() == std::vector<int32_t>{3, 4, 5, 6, 7, 8});
  rows.i32()[0] = 42;  // writes through to the base
  CHECK(t.i32()[3] == 42);

  Tensor flat = t.reshape({-1});
  CHECK(flat.shape() == Shape{12});
  CHECK(flat.shares_storage_with(t));
  CHECK(t.reshape({2, -1, 3}).shape() == Shape{2, 2, 3});
  CHECK(t.slice(4, 4).numel() == 0);

  CHECK(t.on(Device::cpu()).shares_storage_with(t));  // already there: no copy
  CHECK_FALSE(t.to(Device::cpu()).shares_storage_with(t));
  Tensor c = t.clone();
  CHECK_FALSE(c.shares_storage_with(t));
  c.i32()[0] = -1;
  CHECK(t.i32()[0] == 0);

  Tensor dst = Tensor::zeros({12}, DType::I32);
  dst.copy_from(t);
  CHECK(dst.i32()[11] == 11);
}

TEST_CASE("tensor: errors name what was received") {
  Tensor t = Tensor::zeros({3, 4}, DType::F32);
  CHECK_THROWS_WITH_AS(t.i64(), doctest::Contains("expected a i64 tensor, got f32[3, 4] on cpu"), Error);
  CHECK_THROWS_WITH_AS(t.size(2), doctest::Contains("dim 2 out of range"), Error);
  CHECK_THROWS_WITH_AS(t.slice(2, 5), doctest::Contains("slice [2, 5) out of range"), Error);
  CHECK_THROWS_WITH_AS(t.reshape({5, -1}), doctest::Contains("cannot reshape f32[3, 4] on cpu to [5, -1]"), Error);
  CHECK_THROWS_WITH_AS(t.reshape({-1, -1}), doctest::Contains("at most one dim may be -1"), Error);
  CHECK_THROWS_WITH_AS(t.reshape({5}), doctest::Contains("12 vs 5 elements"), Error);
  CHECK_THROWS_WITH_AS(Tensor::empty({1, 1, 1, 1, 1, 1, 1}, DType::F32), doctest::Contains("at most 6 dims"), Error);
  CHECK_THROWS_WITH_AS(Shape({2, -3}), doctest::Contains("negative dimension -3"), Error);
  CHECK_THROWS_WITH_AS(Tensor::empty({int64_t(1) << 40, int64_t(1) << 30}, DType::F32),
                       doctest::Contains("too many elements"), Error);
  Tensor other = Tensor::zeros({5}, DType::F32);
  CHECK_THROWS_WITH_AS(other.copy_from(t), doctest::Contains("does not fit"), Error);
  CHECK_THROWS_WITH_AS(Tensor::from_vector<float>({1, 2, 3}, Shape{2}), doctest::Contains("3 values for shape [2]"),
                       Error);
  CHECK_THROWS_WITH_AS(check_tensor(t, "weight", DType::F32, 3), doctest::Contains("weight must be f32 with 3 dims"),
                       Error);
  // The message carries the checking file and line.
  try {
    (void)t.i32();
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("runtime/tensor.h:") != std::string::npos);
    CHECK(e.message().find("tensor.h") == std::string::npos);
    CHECK(e.where().find("runtime/tensor.h:") == 0);
  }
}

TEST_CASE("device: parse and names") {
  CHECK(Device::parse("cpu") == Device::cpu());
  CHECK(Device::parse("cuda") == Device::cuda(0));
  CHECK(Device::parse("cuda:3") == Device::cuda(3));
  CHECK(Device::cuda(1).str() == "cuda:1");
  CHECK_THROWS_WITH_AS(Device::parse("gpu"), doctest::Contains("unknown device 'gpu'"), Error);
  CHECK_THROWS_WITH_AS(Device::parse("cuda:x"), doctest::Contains("unknown device"), Error);
}

TEST_CASE("tensor: CUDA storage without a device fails cleanly") {
  if (cuda_available()) return testing::skip("a CUDA device is present; this checks the device-less path");
  CHECK_THROWS_AS(Tensor::empty({4}, DType::F32, Device::cuda(0)), Error);
}

TEST_CASE("tensor: CUDA round trip, fill and views") {
  GNN_SKIP_UNLESS_CUDA();
  Tensor h = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{3, 2});
  Tensor d = h.to(Device::cuda(0));
  CHECK(d.is_cuda());
  CHECK(d.to_vector<float>() == h.to_vector<float>());
  CHECK(d.slice(1, 2).to_vector<float>() == std::vector<float>{3, 4});
  Tensor z = Tensor::full({1000003}, -1.5, DType::F32, Device::cuda(0));
  const auto v = z.to_vector<float>();
  CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == -1.5f; }));
  Tensor i = Tensor::full({17}, 9, DType::I64, Device::cuda(0));
  CHECK(i.to_vector<int64_t>()[16] == 9);
  CHECK(Tensor::full({3}, 1, DType::U8, Device::cuda(0)).to_vector<uint8_t>()[2] == 1);
}

TEST_CASE("tensor: uploads are queued through pinned staging and land intact, sources reusable at once") {
  GNN_SKIP_UNLESS_CUDA();
  // Many uploads of different sizes (one above the 64 MiB staging limit), each source overwritten right
  // after its copy returns, then a device-side copy of each: what lands must be what was there at the call.
  std::vector<Tensor> dev, copies;
  std::vector<std::vector<float>> want;
  for (int64_t n : {int64_t(1), int64_t(3), int64_t(1000), int64_t(1) << 20, int64_t(17) << 20, int64_t(12345)}) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(i % 1021) + 0.25f * float(n % 7);
    Tensor h = Tensor::from_vector(v);
    dev.push_back(h.to(Device::cuda(0)));
    h.fill_(-9.0);  // the source changes as soon as the upload returns
    copies.push_back(dev.back().clone());  // queued after the upload on the same stream
    want.push_back(std::move(v));
  }
  for (size_t i = 0; i < dev.size(); ++i) {
    CAPTURE(i);
    CHECK(dev[i].to_vector<float>() == want[i]);
    CHECK(copies[i].to_vector<float>() == want[i]);
  }
  cuda_synchronize(0);
  const MemoryStats pinned = cuda_pinned_stats();
  CHECK(pinned.current_bytes == 0);  // every staging block is back in the pool once its copy is done
  CHECK(pinned.cached_bytes > 0);
}

TEST_CASE("tensor: to_packed moves several host tensors in one transfer, each aligned, values intact") {
  const Tensor a = Tensor::from_vector<float>({1.5f, -2, 3}, Shape{3, 1});
  const Tensor b = Tensor::from_vector<int32_t>({7, 8, 9, 10, 11});
  const Tensor empty = Tensor::empty({0, 4}, DType::F32);
  const Tensor c = Tensor::from_vector<int64_t>({int64_t(1) << 40, -5});
  SUBCASE("to the host: plain copies") {
    const std::vector<Tensor> out = Tensor::to_packed({a, Tensor(), b}, Device::cpu());
    REQUIRE(out.size() == 3);
    CHECK_FALSE(out[1].defined());
    CHECK_FALSE(out[0].shares_storage_with(a));
    CHECK(out[0].to_vector<float>() == a.to_vector<float>());
    CHECK(out[2].to_vector<int32_t>() == b.to_vector<int32_t>());
  }
  SUBCASE("to a GPU: one allocation, 256-byte aligned views") {
    GNN_SKIP_UNLESS_CUDA();
    const int64_t waits = cuda_host_waits();
    std::vector<Tensor> in = {a, Tensor(), b, empty, c};
    std::vector<Tensor> out = Tensor::to_packed(in, Device::cuda(0));
    CHECK(cuda_host_waits() == waits);  // queued: the host did not wait
    REQUIRE(out.size() == in.size());
    CHECK_FALSE(out[1].defined());
    for (size_t i : {size_t(0), size_t(2), size_t(3), size_t(4)}) {
      CAPTURE(i);
      CHECK(out[i].is_cuda());
      CHECK(out[i].shape() == in[i].shape());
      CHECK(out[i].dtype() == in[i].dtype());
      CHECK(out[i].shares_storage_with(out[0]));
      CHECK(reinterpret_cast<uintptr_t>(out[i].data()) % 256 == 0);
    }
    in[0].fill_(-1.0);  // the sources may change once the call returns
    CHECK(out[0].to_vector<float>() == std::vector<float>{1.5f, -2, 3});
    CHECK(out[2].to_vector<int32_t>() == std::vector<int32_t>{7, 8, 9, 10, 11});
    CHECK(out[3].numel() == 0);
    CHECK(out[4].to_vector<int64_t>() == c.to_vector<int64_t>());
    // a graph moves its six arrays the same way
    const Graph g = Graph::from_edges(std::vector<int64_t>{0, 1, 2}.data(), std::vector<int64_t>{1, 2, 0}.data(), 3, 3);
    const Graph d = g.to(Device::cuda(0));
    CHECK(d.csc_to_csr.shares_storage_with(d.csr_indptr));
    CHECK(d.csr_indices.to_vector<int32_t>() == g.csr_indices.to_vector<int32_t>());
    CHECK(d.csc_to_csr.to_vector<int32_t>() == g.csc_to_csr.to_vector<int32_t>());
  }
}

TEST_CASE("cuda graph: captured kernels replay on the stream, and an upload inside a capture is refused or snapshot") {
  GNN_SKIP_UNLESS_CUDA();
  const Device gpu = Device::cuda(0);
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}).to(gpu);
  Tensor y = Tensor::full({4}, 0.0, DType::F32, gpu);
  Tensor ones = Tensor::full({4}, 1.0, DType::F32, gpu);
  // two device-to-device copies (queued, no allocation): y <- ones, then ones <- x
  auto step = [&] {
    y.copy_from(ones);
    ones.copy_from(x);
  };
  step();  // eager once first
  y.fill_(0.0), ones.fill_(1.0);
  CudaGraph g(0, step);
  CHECK(y.to_vector<float>() == std::vector<float>{0, 0, 0, 0});  // capture runs nothing
  g.replay();
  CHECK(y.to_vector<float>() == std::vector<float>{1, 1, 1, 1});
  g.replay();
  CHECK(y.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  const Tensor host = Tensor::from_vector(std::vector<float>{5, 6, 7, 8});
  CHECK_THROWS_WITH_AS(CudaGraph(0, [&] { y.copy_from(host); }), doctest::Contains("inside a CUDA graph capture"),
                       Error);
  // the stream is usable after a failed capture
  y.copy_from(host);
  CHECK(y.to_vector<float>() == std::vector<float>{5, 6, 7, 8});
  // With snapshots, the capture keeps the host bytes it saw: each replay copies them, whatever the host
  // array holds by then, and an upload made inside the step (an index array) is captured too.
  std::vector<float> values{1, 1, 2, 2};
  Tensor z = Tensor::full({4}, 0.0, DType::F32, gpu);
  cuda_synchronize(0);
  const int64_t pinned_before = cuda_pinned_stats().current_bytes;  // (transfers done: blocks back in the pool)
  {
    CudaGraph snap(
        0,
        [&] {
          y.copy_from(Tensor::from_vector(values));
          z.copy_from(Tensor::from_vector(values).to(gpu));
        },
        CudaGraph::Uploads::kSnapshot);
    values.assign(4, -1.0f);  // changed after the capture: no replay sees it
    y.fill_(0.0), z.fill_(0.0);
    snap.replay();
    CHECK(y.to_vector<float>() == std::vector<float>{1, 1, 2, 2});
    CHECK(z.to_vector<float>() == std::vector<float>{1, 1, 2, 2});
    CHECK(cuda_pinned_stats().current_bytes >= pinned_before + 32);  // the graph holds its two snapshots
  }
  cuda_synchronize(0);
  CHECK(cuda_pinned_stats().current_bytes == pinned_before);  // and they go with it
  // a copy that fails inside a snapshot capture leaves the stream usable, and ordinary uploads refused again
  CHECK_THROWS_WITH_AS(CudaGraph(
                           0,
                           [&] {
                             y.copy_from(Tensor::from_vector(std::vector<float>{1, 2, 3}));
                           },
                           CudaGraph::Uploads::kSnapshot),
                       doctest::Contains("does not fit"), Error);
  CHECK_THROWS_WITH_AS(CudaGraph(0, [&] { y.copy_from(host); }), doctest::Contains("inside a CUDA graph capture"),
                       Error);
  y.copy_from(host);
  CHECK(y.to_vector<float>() == std::vector<float>{5, 6, 7, 8});
}

TEST_CASE(
    "cuda graph: a captured step allocates from the graph's own pool, whose blocks outlive the capture and go with the "
    "graph") {
  GNN_SKIP_UNLESS_CUDA();
  const Device gpu = Device::cuda(0);
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}).to(gpu);
  Tensor out;
  auto step = [&] {  // a temporary and a kept output, both allocated inside the step
    Tensor t = Tensor::empty({4}, DType::F32, gpu);
    t.copy_from(x);
    out = Tensor::empty({4}, DType::F32, gpu);
    out.copy_from(t);
  };
  step();  // eager once first
  cuda_synchronize(0);
  const MemoryStats main_before = cuda_memory_stats(0);
  const int64_t graph_before = cuda_graph_memory_stats(0).reserved_bytes;
  {
    CudaGraph g(0, step);
    // the capture's blocks are the graph's: the main pool holds what it held (the eager output, freed
    // during the capture, is held back for the graph), the graph's pool holds the temporary and out
    CHECK(cuda_memory_stats(0).current_bytes == main_before.current_bytes);
    CHECK(cuda_graph_memory_stats(0).current_bytes >= 512);  // out, live
    CHECK(cuda_graph_memory_stats(0).reserved_bytes >= graph_before + 1024);  // out and the temporary
    x.copy_from(Tensor::from_vector(std::vector<float>{5, 6, 7, 8}));
    g.replay();
    CHECK(out.to_vector<float>() == std::vector<float>{5, 6, 7, 8});
    Tensor other = Tensor::full({4}, -1.0, DType::F32, gpu);  // an eager allocation cannot take the graph's blocks
    x.copy_from(Tensor::from_vector(std::vector<float>{9, 10, 11, 12}));
    g.replay();
    CHECK(out.to_vector<float>() == std::vector<float>{9, 10, 11, 12});
    CHECK(other.to_vector<float>() == std::vector<float>{-1, -1, -1, -1});
  }
  CHECK(cuda_graph_memory_stats(0).current_bytes >= 512);  // the graph is gone, out still lives
  out = Tensor();
  CHECK(cuda_graph_memory_stats(0).reserved_bytes == graph_before);  // and with out the pool is released
}
