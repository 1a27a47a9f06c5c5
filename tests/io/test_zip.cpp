#include <cstring>
#include <filesystem>

#include "io/npz.h"
#include "io/zip.h"
#include "testing.h"

using namespace gnn;

namespace {
std::string read_member(const ZipReader& z, const std::string& name) {
  const ZipEntry* e = z.find(name);
  REQUIRE(e != nullptr);
  auto in = z.open_member(*e);
  std::string s(in->total(), '\0');
  in->read(s.data(), s.size());
  in->finish();
  return s;
}
}  // namespace

TEST_CASE("zip: writer and reader agree on raw members of any size") {
  testing::TempDir tmp;
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = char((i * 2654435761u) >> 13);  // poorly compressible
  {
    ZipWriter w(tmp.file("a.zip"));
    w.begin_member("empty.bin", ZipMethod::kDeflated);
    w.end_member();
    w.begin_member("text.txt", ZipMethod::kStored);
    w.write("hello ", 6);
    w.write("world", 5);
    w.end_member();
    w.begin_member("big.bin", ZipMethod::kDeflated, 1);
    w.write(big.data(), big.size());
    w.end_member();
    w.close();
  }
  const ZipReader z = ZipReader::open(tmp.file("a.zip"));
  CHECK(z.entries().size() == 3);
  CHECK(read_member(z, "empty.bin").empty());
  CHECK(read_member(z, "text.txt") == "hello world");
  CHECK(read_member(z, "big.bin") == big);
  CHECK(z.find("nope") == nullptr);
}

TEST_CASE("zip writer: nothing appears until close, and an abandoned writer leaves nothing") {
  testing::TempDir tmp;
  const std::string path = tmp.file("model.npz");
  {
    NpzWriter w(path);
    w.add("x", Tensor::zeros({4}, DType::F32));
    CHECK_FALSE(std::filesystem::exists(path));
  }  // destroyed without close(): as if the process died mid-write
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK(std::distance(std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()),
                      std::filesystem::directory_iterator{}) == 0);
  save_npz(path, {{"x", Tensor::zeros({4}, DType::F32)}});
  // Overwriting keeps the old file whole until the new one is complete.
  {
    NpzWriter w(path);
    w.add("y", Tensor::zeros({8}, DType::F32));
    CHECK(NpzReader(path).keys() == std::vector<std::string>{"x"});
    w.close();
  }
  CHECK(NpzReader(path).keys() == std::vector<std::string>{"y"});

  ZipWriter w(tmp.file("misuse.zip"));
  CHECK_THROWS_WITH_AS(w.write("a", 1), doctest::Contains("write outside a member"), Error);
  w.begin_member("a", ZipMethod::kStored);
  CHECK_THROWS_WITH_AS(w.begin_member("b", ZipMethod::kStored), doctest::Contains("before the previous member ended"),
                       Error);
  CHECK_THROWS_WITH_AS(w.close(), doctest::Contains("while member 'a' is open"), Error);
}

TEST_CASE("zip: members over 4 GiB (set GNN_TEST_LARGE=1: writes and reads 4.3 GB)") {
  if (!std::getenv("GNN_TEST_LARGE"))
    return testing::skip("GNN_TEST_LARGE is not set (needs ~9 GB of disk and memory)");
  testing::TempDir tmp;
  const int64_t n = (int64_t(1) << 32) / 4 + 1000;  // just over 4 GiB of f32
  Tensor t = Tensor::empty({n}, DType::F32);
  for (int64_t i = 0; i < n; i += 4096) t.f32()[i] = float(i % 1000);
  for (bool compress : {false, true}) {
    CAPTURE(compress);
    save_npz(tmp.file("big.npz"), {{"a", Tensor::from_vector<int32_t>({1, 2})}, {"big", t}, {"z", t.slice(0, 3)}},
             compress);
    const NpzReader npz(tmp.file("big.npz"));
    CHECK(npz.info("big").entry.uncompressed_size > 0xFFFFFFFFull);
    const auto back = npz.load_all();
    CHECK(testing::same_bytes(back.at("big"), t));
    CHECK(back.at("z").numel() == 3);
  }
}
