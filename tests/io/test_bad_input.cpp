// Every class of broken input gives one gnn::Error naming the file, the member and the problem:
// never a crash, a hang or an unbounded allocation.
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "io/npz.h"
#include "io/tpugraphs.h"
#include "testing.h"

using namespace gnn;

namespace {

// Opens bytes as an archive and loads every array; returns the error message, or "" if it loaded.
std::string load_error(const std::vector<uint8_t>& bytes, ZipLimits limits = {}) {
  try {
    const ZipReader z(std::make_shared<MemorySource>("bad.npz", bytes), limits);
    for (const ZipEntry& e : z.entries()) {
      auto in = z.open_member(e);
      (void)read_npy(*in);
    }
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

std::vector<uint8_t> fixture_bytes(const char* name) { return testing::read_bytes(testing::fixture(name)); }

// One archive with one member holding these bytes.
std::vector<uint8_t> archive_with(const std::string& member, const std::string& content, bool compress = false) {
  testing::TempDir tmp;
  {
    ZipWriter w(tmp.file("x.npz"));
    w.begin_member(member, compress ? ZipMethod::kDeflated : ZipMethod::kStored);
    w.write(content.data(), content.size());
    w.end_member();
    w.close();
  }
  return testing::read_bytes(tmp.file("x.npz"));
}

std::string npy_bytes(const std::string& dict, size_t data_bytes) {
  std::string h = dict + std::string(63 - (10 + dict.size()) % 64, ' ') + "\n";
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out += char(h.size() & 0xFF), out += char(h.size() >> 8);
  return out + h + std::string(data_bytes, '\0');
}

size_t find(const std::vector<uint8_t>& b, const std::string& needle, size_t from = 0) {
  auto it = std::search(b.begin() + long(from), b.end(), needle.begin(), needle.end());
  REQUIRE(it != b.end());
  return size_t(it - b.begin());
}

}  // namespace

TEST_CASE("bad input: truncated archives, at every length") {
  const auto good = fixture_bytes("deflated.npz");
  for (size_t len = 0; len < good.size(); ++len) {
    const std::vector<uint8_t> cut(good.begin(), good.begin() + long(len));
    const std::string err = load_error(cut);
    CAPTURE(len);
    CHECK(err.find("bad.npz") == 0);
  }
  CHECK(load_error(good).empty());
}

TEST_CASE("bad input: signatures") {
  auto b = fixture_bytes("stored.npz");
  const size_t local2 = find(b, "PK\x03\x04", 4);
  auto x = b;
  x[local2 + 1] = 'X';
  CHECK(load_error(x).find("bad local header signature") != std::string::npos);
  x = b;
  x[find(b, "PK\x01\x02") + 1] = 'X';
  CHECK(load_error(x).find("central directory entry 0 has a bad signature") != std::string::npos);
  x = b;
  x[find(b, "PK\x05\x06") + 1] = 'X';
  CHECK(load_error(x).find("no end-of-central-directory record") != std::string::npos);
  CHECK(load_error({}).find("too short") != std::string::npos);
  const std::string text = "this is plainly not a zip archive, though it is long enough to have an end record";
  CHECK(load_error(std::vector<uint8_t>(text.begin(), text.end())).find("not a ZIP archive") != std::string::npos);
}

TEST_CASE("bad input: central and local headers that disagree") {
  const auto b = fixture_bytes("stored.npz");
  auto x = b;
  x[30] ^= 0x20;  // first byte of the first local name: 'a' -> 'A'
  CHECK(load_error(x).find("local header names it differently") != std::string::npos);
  x = b;
  x[14] ^= 0x01;  // local CRC
  CHECK(load_error(x).find("disagrees with the central directory") != std::string::npos);
  x = b;
  x[8] = 8;  // local method: deflated, central says stored
  CHECK(load_error(x).find("local header says method 8") != std::string::npos);
  x = b;
  const size_t cd = find(b, "PK\x01\x02");
  x[cd + 42] = 0xF0, x[cd + 43] = 0xFF;  // first central entry's local offset far past the end
  CHECK(load_error(x).find("lies outside the archive") != std::string::npos);
}

TEST_CASE("bad input: CRC mismatch and inflate errors") {
  auto b = fixture_bytes("stored.npz");
  const ZipReader z(std::make_shared<MemorySource>("m", b));
  const ZipEntry& e = z.entries()[3];
  b[e.data_offset + e.compressed_size - 1] ^= 0x10;
  CHECK(load_error(b).find("member '" + e.name + "': CRC-32 mismatch") != std::string::npos);

  auto d = fixture_bytes("deflated.npz");
  const ZipReader zd(std::make_shared<MemorySource>("m", d));
  const ZipEntry& f = zd.entries()[11];  // a_f8: a real deflate stream
  for (uint64_t i = 0; i < f.compressed_size; ++i) d[f.data_offset + i] = 0xFF;
  const std::string err = load_error(d);
  CHECK(err.find("member '" + f.name + "'") != std::string::npos);
  CHECK(err.find("inflate error") != std::string::npos);
}

TEST_CASE("bad input: .npy headers inside a member") {
  struct Case {
    std::string content, want;
  };
  const std::vector<Case> cases = {
      {"not npy at all, just text", "not an .npy array (bad magic)"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,3), ", 24), "expected a key"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': Nope, 'shape': (2,), }", 8), "unexpected word 'Nope'"},
      {npy_bytes("{'descr': '<f4', 'shape': (2,), }", 8), "missing key"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", 8), "unexpected key 'extra'"},
      {npy_bytes("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8), "duplicate key"},
      {npy_bytes("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", 16),
       "object arrays (pickles) are refused"},
      {npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16), "unsupported dtype '<c8'"},
      {npy_bytes("{'descr': '<U3', 'fortran_order': False, 'shape': (2,), }", 24), "unsupported dtype '<U3'"},
      {npy_bytes("{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (2,), }", 16), "unsupported dtype"},
      {npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8), "structured dtypes"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20),
       "needs 24 data bytes but 20 follow"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", 24), "unexpected character '-'"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1), }", 4), "at most 6 supported"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }", 0), "too large"},
      {std::string("\x93NUMPY\x09\x00", 8) + "xx", "unsupported .npy version 9.0"},
      {std::string("\x93NUMPY\x01\x00\xff\xff", 10), "runs past the end"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.want);
    const std::string err = load_error(archive_with("arr.npy", c.content));
    CHECK(err.find("bad.npz: member 'arr.npy'") == 0);
    CHECK(err.find(c.want) != std::string::npos);
  }
}

TEST_CASE("bad input: two members of one name, or two members for one array, are refused") {
  // numpy reads the last of two same-named members, a front-to-back search the first: refused outright.
  testing::TempDir tmp;
  auto one_byte_members = [&](const std::string& file, std::initializer_list<const char*> names) {
    ZipWriter w(tmp.file(file));
    for (const char* name : names) {
      w.begin_member(name, ZipMethod::kStored);
      w.write("x", 1);
      w.end_member();
    }
    w.close();
    return tmp.file(file);
  };
  auto two = testing::read_bytes(one_byte_members("two.npz", {"a.npy", "b.npy"}));
  for (size_t at = 0;
       (at = size_t(std::search(two.begin() + long(at), two.end(), "b.npy", "b.npy" + 5) - two.begin())) < two.size();)
    two[at] = 'a';  // rename b.npy to a.npy in its local header and its central entry
  CHECK(load_error(two).find("bad.npz: member 'a.npy' appears twice (central directory entries 0 and 1)") == 0);
  CHECK_THROWS_WITH_AS(NpzReader(one_byte_members("both.npz", {"a.npy", "a"})),
                       doctest::Contains("two members are array 'a'"), Error);
  // The writer refuses to make such an archive.
  ZipWriter w(tmp.file("w.npz"));
  w.begin_member("a.npy", ZipMethod::kStored);
  w.end_member();
  CHECK_THROWS_WITH_AS(w.begin_member("a.npy", ZipMethod::kStored), doctest::Contains("member 'a.npy' written twice"),
                       Error);
}

TEST_CASE("bad input: a control byte in a member's name is shown as \\xNN, and the message goes on past it") {
  // A NUL in a name ends a C string: the message printed through what() stopped there, reason and all.
  const std::string bytes = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 16);
  const std::string message = load_error(archive_with(std::string("ab\0c\x1b[2Jd.npy", 13), bytes.substr(0, 20)));
  CHECK(message.find("bad.npz: member 'ab\\x00c\\x1b[2Jd.npy': .npy header") == 0);
  CHECK(message.find("runs past the end") != std::string::npos);
  CHECK(printable(std::string("a\n\t\x7f\xc3\xa9", 6)) == "a\\x0a\\x09\\x7f\xc3\xa9");  // UTF-8 stays
}

TEST_CASE("bad input: missing members name what the archive has") {
  const NpzReader npz(testing::fixture("stored.npz"));
  CHECK_THROWS_WITH_AS(npz.load("node_feat"), doctest::Contains("no array 'node_feat' (has: a_b1, a_u1"), Error);
  CHECK_THROWS_WITH_AS(NpzReader("/nonexistent/dir/x.npz"), doctest::Contains("/nonexistent/dir/x.npz: cannot open"),
                       Error);
  CHECK_THROWS_WITH_AS(NpzReader("/tmp"), doctest::Contains("/tmp: not a regular file"), Error);
}

TEST_CASE("bad input: a FIFO or a device where a file is read is refused without waiting for a writer") {
  // (Opened for reading, a FIFO blocks until someone writes: the reader must not open it that way.)
  testing::TempDir tmp;
  REQUIRE(::mkfifo(tmp.file("x.npz").c_str(), 0644) == 0);
  CHECK_THROWS_WITH_AS(NpzReader(tmp.file("x.npz")), doctest::Contains("x.npz: not a regular file (a FIFO)"), Error);
  CHECK_THROWS_WITH_AS(load_tpugraph(tmp.file("x.npz")), doctest::Contains("not a regular file (a FIFO)"), Error);
  CHECK_THROWS_WITH_AS(load_eval_indices(tmp.file("x.npz")), doctest::Contains("not a regular file (a FIFO)"), Error);
  CHECK_THROWS_WITH_AS(NpzReader("/dev/null"), doctest::Contains("/dev/null: not a regular file (a character device)"),
                       Error);
}

TEST_CASE("bad input: zip bombs are refused before anything is allocated") {
  // 256 MiB of zeros deflates to about 256 KiB.
  const std::string zeros(size_t(256) << 20, '\0');
  const std::string content = npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (268435456,), }", 0) + zeros;
  const auto bomb = archive_with("bomb.npy", content, /*compress=*/true);
  CHECK(bomb.size() < (size_t(2) << 20));
  ZipLimits small;
  small.max_member_bytes = size_t(64) << 20;
  CHECK(load_error(bomb, small).find("exceeds the limit of 67108864 bytes") != std::string::npos);
  CHECK(load_error(bomb).empty());  // under the default limit it is just a large array

  // A directory that claims far more than deflate can produce from the compressed bytes.
  auto lie = archive_with("x.npy", npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }", 4), true);
  const size_t cd = find(lie, "PK\x01\x02");
  lie[cd + 24] = 0xFF, lie[cd + 25] = 0xFF, lie[cd + 26] = 0xFF, lie[cd + 27] = 0x7F;
  const size_t local_usize = 30 + 5 + 4;  // the local ZIP64 extra's uncompressed size
  lie[local_usize] = 0xFF, lie[local_usize + 1] = 0xFF, lie[local_usize + 2] = 0xFF, lie[local_usize + 3] = 0x7F;
  CHECK(load_error(lie).find("more than deflate can encode") != std::string::npos);
}

TEST_CASE("bad input: a member that inflates to more or less than declared") {
  for (int delta : {-1, +1}) {
    CAPTURE(delta);
    auto b = archive_with("x.bin", std::string(1000, 'a'), true);
    const size_t cd = find(b, "PK\x01\x02");
    const uint32_t usize = uint32_t(1000 + delta);
    for (int k = 0; k < 4; ++k)
      b[cd + 24 + k] = uint8_t(usize >> (8 * k)), b[30 + 5 + 4 + k] = uint8_t(usize >> (8 * k));
    try {
      const ZipReader z(std::make_shared<MemorySource>("bad.npz", b));
      auto in = z.open_member(z.entries()[0]);
      std::string s(in->total(), '\0');
      in->read(s.data(), s.size());
      in->finish();
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find(delta < 0 ? "inflates to more than its declared 999 bytes"
                                                 : "deflate stream ends before the declared 1001 bytes") !=
            std::string::npos);
    }
  }
}

TEST_CASE("bad input: every single-byte corruption of an archive is an error or a clean load") {
  for (const char* name : {"deflated.npz", "zip64.npz"}) {
    const auto good = fixture_bytes(name);
    int errors = 0;
    for (size_t i = 0; i < good.size(); ++i) {
      auto b = good;
      b[i] ^= 0xA5;
      errors += !load_error(b).empty();  // anything but gnn::Error escapes and fails the test
    }
    CAPTURE(name);
    CHECK(errors > int(good.size()) / 2);
  }
}

TEST_CASE("bad input: every regression input is refused with its message") {
  namespace fs = std::filesystem;
  const fs::path dir = testing::source_path("tests/data/fuzz_regressions");
  std::map<std::string, std::string> expected;  // file -> a piece of its error
  std::ifstream list(dir / "expected.tsv");
  REQUIRE_MESSAGE(list, (dir / "expected.tsv").string() << " is missing");
  for (std::string line; std::getline(list, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.find('\t');
    REQUIRE_MESSAGE(tab != std::string::npos, "expected.tsv: no tab in '" << line << "'");
    expected[line.substr(0, tab)] = line.substr(tab + 1);
  }
  std::set<std::string> files;
  for (const auto& f : fs::directory_iterator(dir))
    if (f.path().extension() != ".md" && f.path().filename() != "expected.tsv")
      files.insert(f.path().filename().string());
  REQUIRE(!files.empty());  // an empty folder checks nothing
  for (const auto& [name, _] : expected) CHECK_MESSAGE(files.count(name), name << " is listed but missing");
  for (const std::string& name : files) {
    CAPTURE(name);
    REQUIRE_MESSAGE(expected.count(name), name << " has no line in expected.tsv");
    const std::string path = (dir / name).string();
    std::string err;
    try {
      (void)load_tpugraph(path);
    } catch (const Error& e) {
      err = e.what();
    }
    CHECK(err.find(path + ": ") == 0);
    CHECK(err.find(expected[name]) != std::string::npos);
    // The zip/npy layer alone and a bare .npy read of the same bytes: an error or a load, nothing else.
    (void)load_error(testing::read_bytes(path));
    auto src = std::make_shared<MemorySource>("r.npy", testing::read_bytes(path));
    RangeStream in(src, 0, src->size());
    try {
      (void)read_npy(in);
    } catch (const Error&) {}
  }
  MESSAGE(files.size() << " regression inputs");
}
