#include <cmath>

#include "io/json.h"
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
