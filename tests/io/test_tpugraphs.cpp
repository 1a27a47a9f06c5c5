#include <filesystem>
#include <fstream>

#include "io/npz.h"
#include "io/synth.h"
#include "io/tpugraphs.h"
#include "testing.h"

using namespace gnn;
namespace fs = std::filesystem;

namespace {

using Arrays = std::vector<std::pair<std::string, Tensor>>;

Tensor& array(Arrays& a, const std::string& key) {
  for (auto& kv : a)
    if (kv.first == key) return kv.second;
  FAIL("no array " << key);
  throw;
}

void drop(Arrays& a, const std::string& key) {
  a.erase(std::remove_if(a.begin(), a.end(), [&](const auto& kv) { return kv.first == key; }), a.end());
}

std::string load_error(const Arrays& a, const std::string& path, LoadOptions o = {}) {
  save_npz(path, a);
  try {
    (void)load_tpugraph(path, o);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace

TEST_CASE("tpugraphs: every schema violation names the file, the array and the problem") {
  testing::TempDir tmp;
  const std::string path = tmp.file("g.npz");
  const Arrays layout = synth::make_graph(true, 60, 8, 3, true, /*configurable_share=*/0.15),
               tile = synth::make_graph(false, 12, 8, 3);
  CHECK(load_error(layout, path).empty());
  CHECK(load_error(tile, path).empty());
  struct Case {
    bool layout;
    std::function<void(Arrays&)> mutate;
    std::string want;
  };
  const std::vector<Case> cases = {
      {true, [](Arrays& a) { drop(a, "config_runtime"); }, "missing array 'config_runtime'"},
      {false, [](Arrays& a) { drop(a, "config_runtime_normalizers"); }, "missing array 'config_runtime_normalizers'"},
      {false, [](Arrays& a) { drop(a, "config_feat"); }, "not a TpuGraphs file"},
      {true, [](Arrays& a) { array(a, "node_feat") = array(a, "node_feat").astype(DType::I32); },
       "array 'node_feat': dtype '<i4' is not a float type"},
      {true, [](Arrays& a) { array(a, "edge_index") = array(a, "edge_index").astype(DType::F32); },
       "array 'edge_index': dtype '<f4' is not an integer type"},
      {true, [](Arrays& a) { array(a, "node_opcode") = array(a, "node_opcode").slice(0, 5); },
       "array 'node_opcode': shape (5,) does not match the node count"},
      {true,
       [](Arrays& a) {
         array(a, "node_feat") = Tensor::zeros({array(a, "node_feat").size(0), 139}, DType::F32);
       },
       "does not match the 140 node features"},
      {true, [](Arrays& a) { array(a, "config_runtime") = array(a, "config_runtime").slice(0, 7); },
       "array 'config_runtime': shape (7,) does not match the configs"},
      {false,
       [](Arrays& a) { array(a, "config_runtime_normalizers") = array(a, "config_runtime_normalizers").slice(0, 2); },
       "does not match the configs of config_feat"},
      {true,
       [](Arrays& a) {
         array(a, "node_config_feat") = array(a, "node_config_feat").reshape({8, -1, 9});
       },
       "array 'node_config_feat': shape"},
      {true, [](Arrays& a) { array(a, "edge_index").i64()[5] = 100000; }, "array 'edge_index': edge 2 ("},
      {true, [](Arrays& a) { array(a, "edge_index").i64()[0] = -1; }, "has a node id outside"},
      {true, [](Arrays& a) { array(a, "node_config_ids").i64()[1] = array(a, "node_config_ids").i64()[0]; },
       "is listed twice"},
      {true, [](Arrays& a) { array(a, "node_config_ids").i64()[0] = 1 << 20; }, "array 'node_config_ids': entry 0"},
      {true, [](Arrays& a) { array(a, "node_config_feat").f32()[3] = 6; }, "not a layout dimension in {-1, 0, ..., 5}"},
      {true, [](Arrays& a) { array(a, "node_config_feat").f32()[3] = 0.5f; }, "is 0.5, not a layout dimension"},
      {true, [](Arrays& a) { array(a, "config_runtime").i64()[4] = 0; }, "config 4 has runtime 0 (must be > 0)"},
      {false, [](Arrays& a) { array(a, "config_runtime_normalizers").i64()[1] = -3; }, "config 1 has -3 (must be > 0)"},
      {true, [](Arrays& a) { array(a, "node_feat").f32()[141] = NAN; }, "array 'node_feat': element 141 is nan"},
      {false, [](Arrays& a) { array(a, "config_feat").f32()[2] = INFINITY; }, "array 'config_feat': element 2 is inf"},
      {true,
       [](Arrays& a) {
         array(a, "node_opcode") = array(a, "node_opcode").astype(DType::I32);
         array(a, "node_opcode").i32()[0] = 300;
       },
       "node 0 has opcode 300"},
      {true, [](Arrays& a) { array(a, "node_splits").i64()[1] = 1 << 20; }, "array 'node_splits': entry 1"},
      // One past the HLO opcode ids: it would index past the models' 121-row embedding tables.
      {false,
       [](Arrays& a) {
         array(a, "node_opcode") = array(a, "node_opcode").astype(DType::I32);
         array(a, "node_opcode").i32()[3] = 121;
       },
       "array 'node_opcode': node 3 has opcode 121, outside the HLO opcode ids [0, 121)"},
      {false,
       [](Arrays& a) {
         array(a, "node_feat") = Tensor::zeros({0, 140}, DType::F32),
                  array(a, "node_opcode") = Tensor::zeros({0}, DType::U8);
         array(a, "edge_index") = Tensor::zeros({0, 2}, DType::I64);
       },
       "array 'node_feat': shape (0, 140) has no nodes"},
      {true,
       [](Arrays& a) {
         array(a, "node_feat") = Tensor::zeros({0, 140}, DType::F32),
                  array(a, "node_opcode") = Tensor::zeros({0}, DType::U8);
         array(a, "edge_index") = Tensor::zeros({0, 2}, DType::I64),
                  array(a, "node_config_ids") = Tensor::zeros({0}, DType::I64);
         array(a, "node_config_feat") = Tensor::zeros({8, 0, 18}, DType::F32);
         array(a, "node_splits") = Tensor::zeros({1, 0}, DType::I64);
       },
       "has no nodes"},
      // No configs: nothing to rank (predict would write a row naming none).
      {false,
       [](Arrays& a) {
         for (const char* k : {"config_feat", "config_runtime", "config_runtime_normalizers"})
           array(a, k) = array(a, k).slice(0, 0);
       },
       "array 'config_feat': 0 configs; a graph to rank lists at least one"},
      {true,
       [](Arrays& a) {
         for (const char* k : {"node_config_feat", "config_runtime"}) array(a, k) = array(a, k).slice(0, 0);
       },
       "array 'node_config_feat': 0 configs"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.want);
    Arrays a = c.layout ? layout : tile;
    for (auto& kv : a) kv.second = kv.second.clone();
    c.mutate(a);
    const std::string err = load_error(a, path);
    CHECK(err.find(path + ": ") == 0);
    CHECK(err.find(c.want) != std::string::npos);
  }
}

TEST_CASE("tpugraphs: dtype variants of real files load, normalised") {
  testing::TempDir tmp;
  Arrays a = synth::make_graph(true, 40, 5, 9);
  array(a, "node_opcode") = array(a, "node_opcode").astype(DType::I64);
  array(a, "edge_index") = array(a, "edge_index").astype(DType::I32);
  array(a, "config_runtime") = array(a, "config_runtime").astype(DType::F32);
  save_npz(tmp.file("v.npz"), a);
  const TpuGraph g = load_tpugraph(tmp.file("v.npz"));
  CHECK(g.node_opcode.dtype() == DType::I32);
  CHECK(g.edge_index.dtype() == DType::I64);
  CHECK(g.config_runtime.dtype() == DType::F64);
  CHECK(g.layout);
  CHECK(g.stem == "v");
  // Test files: no runtimes needed, placeholder zeros read as "none".
  array(a, "config_runtime") = Tensor::zeros({5}, DType::I64);
  save_npz(tmp.file("t.npz"), a);
  CHECK_FALSE(load_tpugraph(tmp.file("t.npz"), {.require_runtimes = false}).has_runtimes());
  CHECK_THROWS_WITH_AS(load_tpugraph(tmp.file("t.npz")), doctest::Contains("has runtime 0"), Error);
}

TEST_CASE("tpugraphs: the real files load and validate, and targets follow the schema") {
  const std::string dir = testing::shared_data("tpugraphs");
  if (!fs::exists(dir)) return testing::skip("../shared/data is absent");
  int n = 0;
  for (const auto& f : fs::recursive_directory_iterator(dir)) {
    if (f.path().extension() != ".npz") continue;
    CAPTURE(f.path().string());
    const TpuGraph g = load_tpugraph(f.path().string());
    CHECK(g.num_configs() > 0);
    if (!g.layout)
      CHECK(g.target(0) == doctest::Approx(g.config_runtime.f64()[0] / g.config_runtime_normalizers.f64()[0]));
    ++n;
  }
  CHECK(n == 16);
  const TpuGraph l = load_tpugraph(testing::shared_data("tpugraphs/layout/xla/module_tuning_data_layout.npz"));
  CHECK(l.num_configurable() == 62);
  CHECK(gather_config_feat(l, {5, 0}).shape() == Shape{2, 62, 18});
  CHECK(gather_runtimes(l, {3}).f64()[0] == l.config_runtime.f64()[3]);
  CHECK_THROWS_WITH_AS(gather_config_feat(l, {112}), doctest::Contains("config 112 out of range [0, 112)"), Error);
}

TEST_CASE("dataset walk: the official tree, a collection folder, a split folder, bad files") {
  testing::TempDir tmp;
  const std::string root = tmp.file("data");
  synth::DatasetOptions o;
  o.graphs = 2, o.nodes = 40, o.configs = 6, o.collection = "tile";
  synth::write_dataset(root, o);
  o.collection = "layout";
  synth::write_dataset(root, o);
  const auto all = walk_dataset(root);
  CHECK(all.size() == 12);
  CHECK(all.front().id() == "tile:xla:synth_train_0000");
  CHECK(all.back().id() == "layout:xla:default:synth_test_0001");
  CHECK(walk_dataset(root + "/npz").size() == 12);
  CHECK(walk_dataset(root + "/npz/tile/xla").size() == 6);
  const auto valid = walk_dataset(root + "/npz/layout/xla/default/valid");
  REQUIRE(valid.size() == 2);
  CHECK(valid[0].split == "valid");
  CHECK(valid[0].collection.str() == "layout:xla:default");
  CHECK(walk_dataset(root, {.splits = {"train"}}).size() == 4);
  CHECK_THROWS_WITH_AS(walk_dataset(tmp.file("")), doctest::Contains("not a TpuGraphs tree"), Error);

  // A bad file stops the walk with its name; --skip-bad leaves it out.
  std::ofstream(root + "/npz/tile/xla/train/broken.npz") << "not a zip";
  CHECK_THROWS_WITH_AS(walk_dataset(root), doctest::Contains("train/broken.npz: not a ZIP archive"), Error);
  CHECK(walk_dataset(root, {.skip_bad = true}).size() == 12);
}

TEST_CASE("eval_indices: the official files") {
  const std::string path = testing::shared_data("tpugraphs/eval_indices/xla_default.json");
  if (!fs::exists(path)) return testing::skip("../shared/data is absent");
  const auto idx = load_eval_indices(path);
  CHECK(idx.size() == 7);
  CHECK(idx.at("bert_pretraining.4x4.fp16").size() == 1000);
  CHECK(idx.at("bert_pretraining.4x4.fp16")[0] == 10817);
}

TEST_CASE("eval_indices: malformed files name the file and the problem") {
  testing::TempDir tmp;
  std::ofstream(tmp.file("bad.json")) << R"({"g": [1, -2]})";
  CHECK_THROWS_WITH_AS(load_eval_indices(tmp.file("bad.json")), doctest::Contains("'g' holds something other"), Error);
  std::ofstream(tmp.file("bad2.json")) << R"({"g": [1, 2)";
  CHECK_THROWS_WITH_AS(load_eval_indices(tmp.file("bad2.json")), doctest::Contains("bad2.json: bad JSON"), Error);
  // a graph named twice: refused (merging the two lists would score configs neither reader of JSON takes)
  std::ofstream(tmp.file("twice.json")) << R"({"g": [0, 1, 2], "h": [1], "g": [5, 6]})";
  CHECK_THROWS_WITH_AS(load_eval_indices(tmp.file("twice.json")), doctest::Contains("twice.json: 'g' is listed twice"),
                       Error);
  // a key of thousands of bytes is cut in the error (it was echoed whole)
  std::ofstream(tmp.file("long.json")) << "{\"" << std::string(5000, 'k') << "\": \"x\"}";
  const std::string cut_key = std::string(120, 'k') + "... (5000 bytes)' is not a list of config indices";
  CHECK_THROWS_WITH_AS(load_eval_indices(tmp.file("long.json")), doctest::Contains(cut_key.c_str()), Error);
}

TEST_CASE("graph store: loads lazily and keeps to its memory budget") {
  testing::TempDir tmp;
  std::vector<std::string> paths;
  for (int i = 0; i < 3; ++i) {
    paths.push_back(tmp.file("g" + std::to_string(i) + ".npz"));
    save_npz(paths.back(), synth::make_graph(true, 300, 20, uint64_t(i)));
  }
  const uint64_t one = load_tpugraph(paths[0]).bytes();
  GraphStore store(one * 2 + one / 2);  // room for two graphs
  auto a = store.get(paths[0]);
  CHECK(store.get(paths[0]) == a);  // cached
  store.get(paths[1]);
  store.get(paths[2]);  // evicts paths[0], the least recently used
  CHECK(store.resident_graphs() == 2);
  CHECK(store.resident_bytes() <= one * 2 + one / 2);
  CHECK(store.loads() == 3);
  store.get(paths[0]);
  CHECK(store.loads() == 4);
  GraphStore tiny(1);  // smaller than any graph: still serves each, keeping only the latest
  CHECK(tiny.get(paths[1])->num_nodes() > 0);
  tiny.get(paths[2]);
  CHECK(tiny.resident_graphs() == 1);
}
