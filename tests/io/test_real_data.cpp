// The real files in ../shared/data (never committed here): every archive loads with CRCs checked,
// and the sums match what numpy computed for the same arrays.
#include <filesystem>

#include "io/npz.h"
#include "testing.h"

using namespace gnn;
namespace fs = std::filesystem;

namespace {

double sum(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::F32:
        s += t.f32()[i];
        break;
      case DType::F64:
        s += t.f64()[i];
        break;
      case DType::I32:
        s += t.i32()[i];
        break;
      case DType::I64:
        s += double(t.i64()[i]);
        break;
      case DType::U8:
        s += t.u8()[i];
        break;
      case DType::Bool:
        s += t.b8()[i];
        break;
    }
  }
  return s;
}

}  // namespace

TEST_CASE("real data: every TpuGraphs and Planetoid archive in ../shared/data loads") {
  const std::string root = testing::shared_data("");
  if (!fs::exists(root)) return testing::skip("../shared/data is absent (" + root + ")");
  int files = 0;
  for (const auto& f : fs::recursive_directory_iterator(root)) {
    if (f.path().extension() != ".npz") continue;
    CAPTURE(f.path().string());
    const NpzReader npz(f.path().string());
    const auto all = npz.load_all();
    CHECK(all.size() == npz.keys().size());
    if (npz.contains("node_feat")) {
      CHECK(all.at("node_feat").size(1) == 140);
      CHECK(all.at("edge_index").size(1) == 2);
      CHECK(all.at("node_opcode").size(0) == all.at("node_feat").size(0));
    }
    ++files;
  }
  CHECK(files >= 18);  // 15 tile kernels, 1 layout program, Cora, CiteSeer
}

TEST_CASE("real data: values agree with numpy") {
  const std::string layout = testing::shared_data("tpugraphs/layout/xla/module_tuning_data_layout.npz");
  if (!fs::exists(layout)) return testing::skip("../shared/data is absent");
  struct Want {
    const char* file;
    const char* key;
    const char* descr;
    std::vector<int64_t> shape;
    double sum;
  };
  // np.load(f)[k].astype(np.float64).sum(), dtype and shape, from numpy 2.x on the same files.
  const std::vector<Want> wants = {
      {"tpugraphs/layout/xla/module_tuning_data_layout.npz", "node_feat", "<f4", {3163, 140}, 30551286504.0},
      {"tpugraphs/layout/xla/module_tuning_data_layout.npz", "node_config_feat", "<f4", {112, 62, 18}, 6887.0},
      {"tpugraphs/layout/xla/module_tuning_data_layout.npz", "config_runtime", "<i8", {112}, 102261628516.0},
      {"tpugraphs/layout/xla/module_tuning_data_layout.npz", "node_splits", "<i8", {1, 8}, 6003.0},
      {"tpugraphs/layout/xla/module_tuning_data_layout.npz", "node_opcode", "|u1", {3163}, 139867.0},
      {"tpugraphs/tile/xla/fusion.181.npz", "config_runtime", "<i8", {5}, 26302.0},
      {"tpugraphs/tile/xla/fusion.181.npz", "node_feat", "<f4", {7, 140}, 557412.0},
      {"tpugraphs/tile/xla/copy.25.npz", "config_feat", "<f4", {11, 24}, 902.0},
      {"planetoid/cora_planetoid.npz", "x_indices", "<i4", {49216}, 39016843.0},
      {"planetoid/cora_planetoid.npz", "edge_index", "<i4", {5278, 2}, 13820218.0},
      {"planetoid/cora_planetoid.npz", "idx_test", "<i4", {1000}, 2207500.0},
  };
  for (const Want& w : wants) {
    CAPTURE(w.file);
    CAPTURE(w.key);
    const NpzReader npz(testing::shared_data(w.file));
    const NpzArrayInfo info = npz.info(w.key);
    CHECK(info.header.descr == w.descr);
    CHECK(info.header.shape == w.shape);
    CHECK(sum(npz.load(w.key)) == doctest::Approx(w.sum).epsilon(1e-12));
  }
}
