// Archives written by numpy and Python's zipfile (tests/data/make_fixtures.py): every variant the
// reader must take. Each array holds value(i) at C-order flat index i.
#include <cmath>
#include <cstring>
#include <fstream>

#include "io/npz.h"
#include "testing.h"

using namespace gnn;

namespace {

double element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32:
      return t.f32()[i];
    case DType::F64:
      return t.f64()[i];
    case DType::I32:
      return t.i32()[i];
    case DType::I64:
      return double(t.i64()[i]);
    case DType::U8:
      return t.u8()[i];
    case DType::Bool:
      return t.b8()[i];
  }
  return NAN;
}

// The fixture formula; `code` is the numpy type code after the key's "a_" ("f4", "u8", ...).
double expected(const std::string& code, int64_t i) {
  switch (code[0]) {
    case 'b':
      return i % 3 == 0;
    case 'u':
      return code == "u8" && i == 1 ? 9223372036854775807.0 : double(i % 250);
    case 'i':
      return double(i % 13 - 6);
    default:
      return double(i - 3) * 0.25;
  }
}

std::string code_of(const std::string& key) { return key.substr(key.rfind('_') + 1); }

DType loads_as(const std::string& code) {
  if (code == "b1") return DType::Bool;
  if (code == "u1") return DType::U8;
  if (code == "i1" || code == "i2" || code == "u2" || code == "i4") return DType::I32;
  if (code == "u4" || code == "i8" || code == "u8") return DType::I64;
  return code == "f8" ? DType::F64 : DType::F32;
}

void check_arrays(const std::map<std::string, Tensor>& arrays) {
  for (const auto& [key, t] : arrays) {
    CAPTURE(key);
    const std::string code = key == "scalar_f8" ? "f8" : code_of(key);
    CHECK(t.dtype() == loads_as(code));
    if (key.rfind("a_", 0) == 0) CHECK(t.shape() == Shape{2, 3});
    if (key == "scalar_f8") CHECK(t.dim() == 0);
    if (key == "empty_f4") CHECK(t.shape() == Shape{0, 5});
    if (key == "cube_i4") CHECK(t.shape() == Shape{2, 3, 4});
    if (key == "six_dims_f4") CHECK(t.shape() == Shape{1, 2, 1, 3, 1, 2});
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (code == "u8" && i == 1) {
        CHECK(t.i64()[1] == INT64_MAX);  // exact, not through double
        continue;
      }
      CHECK(element(t, i) == expected(code, i));
    }
  }
}

}  // namespace

TEST_CASE("npz fixtures: every variant numpy and zipfile write") {
  for (const char* name :
       {"stored.npz", "deflated.npz", "bigendian.npz", "zip64.npz", "comment.npz", "descriptor.npz"}) {
    CAPTURE(name);
    const NpzReader npz(testing::fixture(name));
    CHECK(npz.keys().size() == 16);
    const auto all = npz.load_all();
    CHECK(all.size() == 16);
    check_arrays(all);
  }
}

TEST_CASE("npz fixtures: fortran order, methods and headers are reported") {
  const NpzReader f(testing::fixture("fortran.npz"));
  CHECK(f.info("a_f4").header.fortran_order);
  check_arrays(f.load_all());
  CHECK(NpzReader(testing::fixture("deflated.npz")).info("a_i8").entry.method == uint16_t(ZipMethod::kDeflated));
  const NpzArrayInfo s = NpzReader(testing::fixture("stored.npz")).info("a_i2");
  CHECK(s.entry.method == uint16_t(ZipMethod::kStored));
  CHECK(s.header.descr == "<i2");
  CHECK(s.header.shape == std::vector<int64_t>{2, 3});
  CHECK(NpzReader(testing::fixture("bigendian.npz")).info("a_f8").header.byte_swap);
}

TEST_CASE("npy fixtures: versions 1, 2 and 3") {
  for (const char* name : {"v2.npy", "v3.npy"}) {
    CAPTURE(name);
    const Tensor t = load_npy(testing::fixture(name));
    CHECK(t.shape() == Shape{3, 4});
    for (int64_t i = 0; i < 12; ++i) CHECK(t.f32()[i] == float(i - 3) * 0.25f);
  }
  CHECK(load_npy(testing::fixture("plain.npy")).to_vector<int64_t>() == std::vector<int64_t>{-6, -5, -4, -3, -2});
}

TEST_CASE("npz: loading some keys reads only those members") {
  // Corrupt one member's data: loading the other keys still works, loading it fails on its CRC.
  testing::TempDir tmp;
  auto bytes = testing::read_bytes(testing::fixture("stored.npz"));
  const NpzReader clean(testing::fixture("stored.npz"));
  const ZipEntry e = clean.info("a_f8").entry;
  bytes[e.data_offset + e.compressed_size - 1] ^= 0x40;
  testing::write_bytes(tmp.file("one_bad.npz"), bytes);
  const NpzReader npz(tmp.file("one_bad.npz"));
  CHECK(npz.load_keys({"a_f4", "cube_i4"}).size() == 2);
  CHECK_THROWS_WITH_AS(npz.load("a_f8"), doctest::Contains("member 'a_f8.npy': CRC-32 mismatch"), Error);
  CHECK_THROWS_WITH_AS(npz.load_keys({"a_f4", "a_f8"}), doctest::Contains("a_f8.npy"), Error);
}

TEST_CASE("npz writer: round trip, stored and deflated, and numpy reads it back bit-exactly") {
  testing::TempDir tmp;
  std::vector<std::pair<std::string, Tensor>> arrays;
  std::vector<float> big(100000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = float(i % 977) * 0.5f - 3.0f;
  arrays.emplace_back("node_feat", Tensor::from_vector(big, Shape{1000, 100}));
  arrays.emplace_back("edge_index", Tensor::from_vector<int64_t>({1, 0, 2, 1, int64_t(1) << 40, 7}, Shape{3, 2}));
  arrays.emplace_back("ids", Tensor::from_vector<int32_t>({-5, 5}));
  arrays.emplace_back("mask", Tensor::from_vector<bool>({true, false, true}));
  arrays.emplace_back("op", Tensor::from_vector<uint8_t>({0, 120, 255}));
  arrays.emplace_back("scalar", Tensor::from_vector<double>({3.25}, Shape{}));
  arrays.emplace_back("empty", Tensor::empty({0, 3}, DType::F32));
  for (bool compress : {false, true}) {
    CAPTURE(compress);
    const std::string path = tmp.file(compress ? "c.npz" : "s.npz");
    save_npz(path, arrays, compress);
    const NpzReader npz(path);
    CHECK(npz.keys().size() == arrays.size());
    const auto back = npz.load_all();
    for (const auto& [key, t] : arrays) {
      CAPTURE(key);
      const Tensor& b = back.at(key);
      CHECK(b.shape() == t.shape());
      CHECK(b.dtype() == t.dtype());
      CHECK(testing::same_bytes(b, t));
    }
    CHECK(npz.info("node_feat").entry.method == uint16_t(compress ? ZipMethod::kDeflated : ZipMethod::kStored));
    if (compress)
      CHECK(npz.info("node_feat").entry.compressed_size < npz.info("node_feat").entry.uncompressed_size / 2);
  }
  // The same content twice gives the same bytes (fixed timestamps): generated datasets are reproducible.
  save_npz(tmp.file("again.npz"), arrays, true);
  CHECK(testing::read_bytes(tmp.file("again.npz")) == testing::read_bytes(tmp.file("c.npz")));

  const std::string py = testing::python_with_numpy();
  if (py.empty()) return testing::skip("numpy not installed: the numpy read-back half of this test did not run");
  const std::string script = tmp.file("check.py");
  std::ofstream(script) << R"(import sys, numpy as np
for path in sys.argv[1:]:
    z = np.load(path)
    assert sorted(z.files) == sorted(['node_feat','edge_index','ids','mask','op','scalar','empty']), z.files
    nf = z['node_feat']
    assert nf.dtype == np.float32 and nf.shape == (1000, 100)
    want = (np.arange(100000) % 977).astype(np.float32) * np.float32(0.5) - np.float32(3.0)
    assert np.array_equal(nf.ravel(), want)
    assert z['edge_index'].dtype == np.int64 and z['edge_index'][2, 0] == 1 << 40
    assert z['ids'].dtype == np.int32 and list(z['ids']) == [-5, 5]
    assert z['mask'].dtype == np.bool_ and list(z['mask']) == [True, False, True]
    assert z['op'].dtype == np.uint8 and list(z['op']) == [0, 120, 255]
    assert z['scalar'].shape == () and z['scalar'] == 3.25
    assert z['empty'].shape == (0, 3)
print('numpy ok')
)";
  const std::string cmd = py + " " + script + " " + tmp.file("s.npz") + " " + tmp.file("c.npz");
  CHECK(std::system(cmd.c_str()) == 0);
}
