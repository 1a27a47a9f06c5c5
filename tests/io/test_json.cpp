#include <cmath>

#include "io/atomic_file.h"
#include "io/json.h"
#include "io/tpugraphs.h"
#include "testing.h"

using namespace gnn;

TEST_CASE("json: dump keeps insertion order and exact numbers") {
  Json j = Json::object();
  j.set("name", "spmm-mean");
  j.set("median_ms", 0.125);
  j.set("count", int64_t(1) << 53);
  j.set("nan", std::nan(""));
  Json a = Json::array();
  a.push_back(1), a.push_back(true), a.push_back(Json()), a.push_back("q\"\n");
  j.set("list", a);
  j.set("name", "replaced");
  CHECK(
      j.dump() ==
      R"({"name": "replaced", "median_ms": 0.125, "count": 9007199254740992, "nan": null, "list": [1, true, null, "q\"\n"]})");
  CHECK(Json(0.1).dump() == "0.1");
}

TEST_CASE("json: parse what dump writes, and the eval_indices shape") {
  const Json j = Json::parse(R"( {"a": [1, 2.5, -3e2, "x\u00e9"], "b": {"c": false}, "d": null} )");
  CHECK(j["a"][0].as_int() == 1);
  CHECK(j["a"][1].as_number() == 2.5);
  CHECK(j["a"][2].as_number() == -300);
  CHECK(j["a"][3].as_string() == "x\xc3\xa9");
  CHECK(j["b"]["c"].as_bool() == false);
  CHECK(j["d"].is_null());
  CHECK(Json::parse(j.dump()).dump() == j.dump());
  CHECK_THROWS_WITH_AS(j["zz"], doctest::Contains("no key 'zz'"), Error);
}

TEST_CASE("json: malformed input names the source and the byte") {
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "tru", "\"abc", "[1] 2", "{\"a\":}", "01x"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(Json::parse(bad, "idx.json"), doctest::Contains("idx.json: bad JSON at byte"), Error);
  }
  std::string deep(1000, '[');
  CHECK_THROWS_WITH_AS(Json::parse(deep), doctest::Contains("nested too deeply"), Error);
}

TEST_CASE("json: an integer past int64 is no index (it read as 0 before), and eval_indices entries are checked") {
  CHECK(Json::parse("9223372036854775807").as_int() == INT64_MAX);
  CHECK(Json::parse("-9223372036854775808").as_int() == INT64_MIN);
  for (const char* text : {"9223372036854775808", "18446744073709551617", "-9223372036854775809"}) {
    CAPTURE(text);
    const Json j = Json::parse(text, "x.json");  // valid JSON: a number, but no integer gnn can index with
    CHECK_THROWS_WITH_AS(j.as_int(), doctest::Contains("expected an integer"), Error);
    CHECK(std::fabs(j.as_number()) > 9.2e18);
  }
  CHECK_THROWS_WITH_AS(Json::parse("[1e999]", "x.json"), doctest::Contains("out of the range of a double"), Error);
  // A number of a million digits is named by its first ones and its size: the error stays a line.
  const std::string huge = "[1" + std::string(1'000'000, '0') + "]";
  try {
    Json::parse(huge, "x.json");
    FAIL("a million-digit number parsed");
  } catch (const Error& e) {
    CHECK_MESSAGE(e.message().find("... (1000001 bytes) is out of the range of a double") != std::string::npos,
                  e.message().substr(0, 300));
    CHECK(e.message().size() < 400);
  }
  CHECK(Json::parse("1e-320").as_number() > 0);  // subnormal: kept
  CHECK(Json::parse("1e-400").as_number() == 0);  // below every double: 0, as strtod reads it
  testing::TempDir t;
  write_file_atomic(t.file("e.json"), "{\"g\": [1, 9223372036854775808]}");
  CHECK_THROWS_WITH_AS(load_eval_indices(t.file("e.json")),
                       doctest::Contains("e.json: 'g' holds something other than a config index (an integer >= 0) at entry 1: 9223372036854775808"), Error);
  write_file_atomic(t.file("e.json"), "{\"g\": [1, 1.5]}");
  CHECK_THROWS_WITH_AS(load_eval_indices(t.file("e.json")),
                       doctest::Contains("e.json: 'g' holds something other than a config index (an integer >= 0) at entry 1: 1.5"), Error);
  write_file_atomic(t.file("e.json"), "{\"g\": []}");
  CHECK_THROWS_WITH_AS(load_eval_indices(t.file("e.json")), doctest::Contains("'g' lists no config index"), Error);
  // Repeats are kept: the official xla_random.json holds them.
  write_file_atomic(t.file("e.json"), "{\"g\": [3, 3, 0]}");
  CHECK(load_eval_indices(t.file("e.json")).at("g") == std::vector<int64_t>{3, 3, 0});
}
