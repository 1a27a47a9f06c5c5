// gnn planetoid: loading, bad files, determinism across thread counts, and the published GCN accuracy
// on the real Cora split (../shared/data, skipped with a reason where it is absent).
#include <doctest/doctest.h>

#include <filesystem>

#include "apps/planetoid.h"
#include "io/npz.h"
#include "runtime/parallel.h"
#include "testing.h"

namespace gnn {
namespace {

// A tiny Planetoid-format file: 6 nodes in two triangles, class = triangle, features = one-hot of the class.
std::vector<std::pair<std::string, Tensor>> tiny_arrays() {
  return {{"x_indptr", Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6})},
          {"x_indices", Tensor::from_vector<int32_t>({0, 0, 0, 1, 1, 1})},
          {"x_data", Tensor::from_vector<float>({1, 1, 1, 1, 1, 1})},
          {"x_shape", Tensor::from_vector<int64_t>({6, 2})},
          {"edge_index", Tensor::from_vector<int32_t>({0, 1, 1, 2, 2, 0, 3, 4, 4, 5, 5, 3}, Shape{6, 2})},
          {"labels", Tensor::from_vector<int32_t>({0, 0, 0, 1, 1, 1})},
          {"idx_train", Tensor::from_vector<int32_t>({0, 3})},
          {"idx_val", Tensor::from_vector<int32_t>({1, 4})},
          {"idx_test", Tensor::from_vector<int32_t>({2, 5})}};
}

TEST_CASE("planetoid: a tiny two-class file loads symmetric, trains to 100%, and bad files name the array") {
  testing::TempDir dir;
  save_npz(dir.file("tiny.npz"), tiny_arrays());
  const PlanetoidData d = load_planetoid(dir.file("tiny.npz"));
  CHECK(d.graph.num_edges == 12);
  CHECK(d.classes == 2);
  for (const char* model : {"gcn", "gat", "sage"}) {
    CAPTURE(model);
    const PlanetoidResult r = train_planetoid(d, {.model = model, .epochs = 50, .dropout = 0});
    CHECK(r.test_acc == 1.0);
  }
  auto broken = [&](const std::string& key, Tensor t) {
    auto a = tiny_arrays();
    for (auto& [k, v] : a)
      if (k == key) v = t;
    save_npz(dir.file("bad.npz"), a);
    return dir.file("bad.npz");
  };
  CHECK_THROWS_WITH_AS(load_planetoid(broken("idx_test", Tensor::from_vector<int32_t>({2, 6}))),
                       doctest::Contains("'idx_test' lists node 6"), Error);
  CHECK_THROWS_WITH_AS(load_planetoid(broken("x_data", Tensor::from_vector<float>({1, 1, NAN, 1, 1, 1}))),
                       doctest::Contains("x_data holds a non-finite value in row 2"), Error);
  // A row is summed and normalised in double: 1e39 (past float32) alone in its row is 1 once normalised
  // (it was stored as inf), and a row whose normalised values do not fit float32 is refused.
  CHECK(load_planetoid(broken("x_data", Tensor::from_vector<double>({1, 1, 1e39, 1, 1, 1}))).x.f32()[4] == 1.0f);
  {
    auto a = tiny_arrays();
    a[0].second = Tensor::from_vector<int64_t>({0, 1, 2, 4, 5, 6, 7});  // row 2: columns 0 and 1
    a[1].second = Tensor::from_vector<int32_t>({0, 0, 0, 1, 1, 1, 1});
    for (const auto& [values, want] :
         {std::pair{std::vector<double>{1, 1, 1e308, 1e308, 1, 1, 1}, "x_data's row 2 sums past the range of a double"},
          std::pair{std::vector<double>{1, 1, 1e39, -1e39, 1, 1, 1},
                    "x_data's row 2 does not fit float32 (its values sum to 0, so they are kept as they are)"}}) {
      a[2].second = Tensor::from_vector<double>(values);
      save_npz(dir.file("wide.npz"), a);
      CHECK_THROWS_WITH_AS(load_planetoid(dir.file("wide.npz")), doctest::Contains(want), Error);
    }
  }
  // A row pointer past the end and back down: named before any row is read (row 1 read past x_indices before)
  CHECK_THROWS_WITH_AS(
      load_planetoid(broken("x_indptr", Tensor::from_vector<int64_t>({0, 1, int64_t(1) << 40, 3, 4, 5, 6}))),
      doctest::Contains("x_indptr decreases at row 2 (1099511627776 then 3)"), Error);
  CHECK_THROWS_WITH_AS(load_planetoid(broken("edge_index", Tensor::from_vector<int32_t>({0, 9}, Shape{1, 2}))),
                       doctest::Contains("edge_index row 0"), Error);
  CHECK_THROWS_WITH_AS(load_planetoid(broken("labels", Tensor::from_vector<int32_t>({0, 0, -1, 1, 1, 1}))),
                       doctest::Contains("'idx_test' lists node 2, which has no label"), Error);
  CHECK_THROWS_WITH_AS(load_planetoid(broken("labels", Tensor::from_vector<int32_t>({0, 1}))),
                       doctest::Contains("'labels' has 2 entries for 6 nodes"), Error);
  // Class ids with a gap (99 would make 100 classes), one class, a node listed twice or in two splits.
  CHECK_THROWS_WITH_AS(load_planetoid(broken("labels", Tensor::from_vector<int32_t>({0, 0, 0, 3, 3, 3}))),
                       doctest::Contains("'labels' runs to class 3 but no node has class 1"), Error);
  CHECK_THROWS_WITH_AS(load_planetoid(broken("labels", Tensor::from_vector<int32_t>({0, 0, 0, 0, 0, 0}))),
                       doctest::Contains("'labels' hold 1 class: there is nothing to classify"), Error);
  CHECK_THROWS_WITH_AS(load_planetoid(broken("idx_train", Tensor::from_vector<int32_t>({0, 3, 0}))),
                       doctest::Contains("'idx_train' lists node 0 twice"), Error);
  CHECK_THROWS_WITH_AS(load_planetoid(broken("idx_val", Tensor::from_vector<int32_t>({1, 3}))),
                       doctest::Contains("node 3 is in both 'idx_train' and 'idx_val'"), Error);
  // A shape whose dense matrix no int64 byte count holds (one that merely exceeds memory is named the same
  // way, with the allocator's message: not run here, as the sanitizers' allocator aborts on such a size).
  CHECK_THROWS_WITH_AS(load_planetoid(broken("x_shape", Tensor::from_vector<int64_t>({6, int64_t(1) << 62}))),
                       doctest::Contains("'x_shape' [6, 4611686018427387904] overflows a dense float matrix"), Error);
  const auto r = testing::run_gnn("planetoid --data " + dir.file("tiny.npz") + " --model mlp");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--model must be gcn, gat or sage") != std::string::npos);
  const auto bad_dev = testing::run_gnn("planetoid --data " + dir.file("tiny.npz") + " --device tpu");
  CHECK(bad_dev.exit_code == 2);
  CHECK(bad_dev.err.find("--device must be cpu or cuda") != std::string::npos);
  for (const std::string model : {"gcn", "sage"})  // GAT's flags are not ignored by the other models
    for (const std::string flag : {"--heads 4", "--value-dropout 0.1"}) {
      CAPTURE(model + " " + flag);
      const auto r = testing::run_gnn("planetoid --data " + dir.file("tiny.npz") + " --model " + model + " " + flag);
      CHECK(r.exit_code == 2);
      CHECK(r.err.find(flag.substr(0, flag.find(' ')) + " is a GAT flag; --model " + model) != std::string::npos);
    }
  if (!cuda_available()) {
    const auto no_gpu = testing::run_gnn("planetoid --data " + dir.file("tiny.npz") + " --device cuda");
    CHECK(no_gpu.exit_code == 2);
    CHECK(no_gpu.err.find("--device cuda is not usable here") != std::string::npos);
  }
}

TEST_CASE("planetoid: GCN, GAT and SAGE on the GPU follow the host's loss curve on the tiny file") {
  GNN_SKIP_UNLESS_CUDA();
  testing::TempDir dir;
  save_npz(dir.file("tiny.npz"), tiny_arrays());
  const PlanetoidData d = load_planetoid(dir.file("tiny.npz"));
  for (const char* model : {"gcn", "gat", "sage"}) {
    CAPTURE(model);
    std::vector<double> host, gpu;
    const PlanetoidResult rh =
        train_planetoid(d, {.model = model, .epochs = 50}, [&](const PlanetoidEpoch& e) { host.push_back(e.loss); });
    const PlanetoidResult rg = train_planetoid(d, {.model = model, .epochs = 50, .device = Device::cuda(0)},
                                               [&](const PlanetoidEpoch& e) { gpu.push_back(e.loss); });
    REQUIRE(host.size() == gpu.size());
    for (size_t i = 0; i < host.size(); ++i) CHECK(gpu[i] == doctest::Approx(host[i]).epsilon(1e-3));
    CHECK(std::abs(rg.test_acc - rh.test_acc) <= 0.1);
  }
}

TEST_CASE("planetoid: the same seed gives the same run on 1 and 2 threads (GAT, Cora)") {
  const std::string path = testing::shared_data("planetoid/cora_planetoid.npz");
  if (!std::filesystem::exists(path)) return testing::skip("no " + path + " (../shared/data is not beside this clone)");
  const PlanetoidData d = load_planetoid(path);
  std::vector<std::vector<double>> losses(2);
  const testing::ThreadsRestored keep;
  for (int t : {1, 2}) {
    set_num_threads(t);
    train_planetoid(d, {.model = "gat", .epochs = 5, .seed = 3},
                    [&](const PlanetoidEpoch& e) { losses[size_t(t - 1)].push_back(e.loss); });
  }
  CHECK(losses[0] == losses[1]);
}

TEST_CASE("planetoid: GCN on the real Cora split reaches the published accuracy band") {
  const std::string path = testing::shared_data("planetoid/cora_planetoid.npz");
  if (!std::filesystem::exists(path)) return testing::skip("no " + path + " (../shared/data is not beside this clone)");
  const auto r = testing::run_gnn("planetoid --data " + path + " --model gcn --seed 1 --json");
  REQUIRE(r.exit_code == 0);
  const auto line = r.out.substr(r.out.rfind('{'));
  const double acc = std::stod(line.substr(line.find("\"test_accuracy\": ") + 17));
  MESSAGE("Cora GCN seed 1 test accuracy " << acc << " (published 0.815)");
  // One seed's spread is about +-1 point around the mean (the 10-seed figures are in the closing note);
  // a broken layer, loss or optimiser lands far below 0.78.
  CHECK(acc >= 0.78);
}

TEST_CASE("planetoid: GAT-paper early stopping stops on its own and reports a jointly best epoch (GCN, Cora)") {
  const std::string path = testing::shared_data("planetoid/cora_planetoid.npz");
  if (!std::filesystem::exists(path)) return testing::skip("no " + path + " (../shared/data is not beside this clone)");
  const PlanetoidData d = load_planetoid(path);
  const PlanetoidResult r = train_planetoid(d, {.model = "gcn", .epochs = 3000, .seed = 1, .patience = 20});
  MESSAGE("stopped after " << r.epochs_run << " epochs, best at " << r.best_epoch << ", test " << r.test_acc);
  CHECK(r.epochs_run < 3000);
  CHECK(r.epochs_run - r.best_epoch >= 20);  // no progress of either kind for the last 20 epochs
  CHECK(r.test_acc >= 0.75);
}

}  // namespace
}  // namespace gnn
