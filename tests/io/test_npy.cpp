#include <cstring>

#include "io/npy.h"
#include "testing.h"

using namespace gnn;

namespace {

// An in-memory .npy with the given dict text (v1.0 header) and data bytes.
std::vector<uint8_t> make_npy(const std::string& dict, const std::vector<uint8_t>& data, int version = 1) {
  std::string h = dict;
  const size_t pre = version == 1 ? 10 : 12;
  h += std::string(63 - (pre + h.size()) % 64, ' ') + "\n";
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', uint8_t(version), 0};
  for (size_t b = 0; b < pre - 8; ++b) out.push_back(uint8_t(h.size() >> (8 * b)));
  out.insert(out.end(), h.begin(), h.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Tensor parse(const std::vector<uint8_t>& bytes, NpyHeader* h = nullptr) {
  auto src = std::make_shared<MemorySource>("mem.npy", bytes);
  RangeStream in(src, 0, src->size());
  return read_npy(in, h);
}

}  // namespace

TEST_CASE("npy: header text matches numpy's layout") {
  const std::string h = npy_header(DType::F32, Shape{372, 140});
  CHECK(h.size() % 64 == 0);
  CHECK(h.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  CHECK(h.find("{'descr': '<f4', 'fortran_order': False, 'shape': (372, 140), }") == 10);
  CHECK(h.back() == '\n');
  CHECK(npy_header(DType::I64, Shape{5}).find("'shape': (5,), }") != std::string::npos);
  CHECK(npy_header(DType::Bool, Shape{}).find("'descr': '|b1'") != std::string::npos);
  CHECK(npy_header(DType::U8, Shape{}).find("'shape': (), }") != std::string::npos);
}

TEST_CASE("npy: the header parser takes numpy's spellings") {
  NpyHeader h;
  parse(make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1), }", std::vector<uint8_t>(8)), &h);
  CHECK(h.shape == std::vector<int64_t>{2, 1});
  // Double quotes, key order, no trailing comma, Python 2 longs.
  parse(make_npy("{\"shape\": (2L,), \"fortran_order\": False, \"descr\": \"<i4\"}", std::vector<uint8_t>(8)), &h);
  CHECK(h.shape == std::vector<int64_t>{2});
  CHECK(h.dtype() == DType::I32);
  parse(make_npy("{'descr':'|u1','fortran_order':True,'shape':()}", {7}), &h);
  CHECK(h.shape.empty());
  parse(make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 3), }", {}, 2), &h);
  CHECK(h.version_major == 2);
  CHECK(h.numel() == 0);
}

TEST_CASE("npy: byte order and widening") {
  // >i2 [1, -2]  ->  i32
  Tensor a = parse(make_npy("{'descr': '>i2', 'fortran_order': False, 'shape': (2,), }", {0, 1, 0xFF, 0xFE}));
  CHECK(a.dtype() == DType::I32);
  CHECK(a.to_vector<int32_t>() == std::vector<int32_t>{1, -2});
  // <f2 [1.0, -2.5, 65504 (max half), 2^-24 (smallest subnormal)]  ->  f32
  Tensor h = parse(make_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }",
                            {0x00, 0x3C, 0x00, 0xC1, 0xFF, 0x7B, 0x01, 0x00}));
  CHECK(h.to_vector<float>() == std::vector<float>{1.0f, -2.5f, 65504.0f, 5.9604644775390625e-8f});
  // >u4 [4000000000]  ->  i64
  Tensor u = parse(make_npy("{'descr': '>u4', 'fortran_order': False, 'shape': (1,), }", {0xEE, 0x6B, 0x28, 0x00}));
  CHECK(u.to_vector<int64_t>() == std::vector<int64_t>{4000000000});
  // |b1 with a stray 2 normalises to true
  Tensor b = parse(make_npy("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", {0, 1, 2}));
  CHECK(b.b8()[2] == true);
  // <u8 above 2^63-1 does not fit i64
  CHECK_THROWS_WITH_AS(
      parse(make_npy("{'descr': '<u8', 'fortran_order': False, 'shape': (1,), }", {0, 0, 0, 0, 0, 0, 0, 0x80})),
      doctest::Contains("element 0 (9223372036854775808) of a u8 array does not fit i64"), Error);
}

TEST_CASE("npy: fortran order comes back in C order") {
  // shape (2, 3) in column-major: C array [[0,1,2],[3,4,5]] is stored 0,3,1,4,2,5
  std::vector<uint8_t> data;
  for (int32_t v : {0, 3, 1, 4, 2, 5})
    for (int b = 0; b < 4; ++b) data.push_back(uint8_t(v >> (8 * b)));
  Tensor t = parse(make_npy("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }", data));
  CHECK(t.to_vector<int32_t>() == std::vector<int32_t>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("npy: file round trip for every dtype, 0-d and empty") {
  testing::TempDir tmp;
  const std::vector<Tensor> cases = {
      Tensor::from_vector<float>({1.5f, -2.f, 3.f, 4.f, 5.f, 6.f}, Shape{2, 3}),
      Tensor::from_vector<double>({1e-300}, Shape{}),
      Tensor::from_vector<int32_t>({-7, 8}),
      Tensor::from_vector<int64_t>({int64_t(1) << 62}, Shape{1, 1, 1, 1, 1, 1}),
      Tensor::from_vector<uint8_t>({0, 255}),
      Tensor::from_vector<bool>({true, false}),
      Tensor::empty({0, 4}, DType::F32),
  };
  for (const Tensor& t : cases) {
    CAPTURE(t.desc());
    save_npy(tmp.file("a.npy"), t);
    const Tensor back = load_npy(tmp.file("a.npy"));
    CHECK(back.shape() == t.shape());
    CHECK(back.dtype() == t.dtype());
    CHECK(testing::same_bytes(back, t));
  }
}
