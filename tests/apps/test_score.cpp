// gnn score on generated tile and layout splits: a ranking by the true runtimes scores 1, the reverse
// ranking gives Kendall tau -1, and malformed submissions are refused naming the line or graph.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "apps/scoring.h"
#include "io/json.h"
#include "testing.h"

namespace gnn {
namespace {

// Writes a submission ranking every valid graph by its runtimes (reverse = slowest first).
void write_submission(const std::string& path, const std::vector<DatasetFile>& files, bool reverse) {
  std::ofstream out(path);
  out << "ID,TopConfigs\n";
  for (const DatasetFile& f : files) {
    const std::vector<double> rt = scored_runtimes(f);
    std::vector<int64_t> order(rt.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return rt[size_t(a)] < rt[size_t(b)]; });
    if (reverse) std::reverse(order.begin(), order.end());
    if (!f.collection.is_layout()) order.resize(std::min<size_t>(5, order.size()));
    out << f.id() << ",";
    for (size_t i = 0; i < order.size(); ++i) out << (i ? ";" : "") << order[i];
    out << "\n";
  }
}

Json last_json(std::string out) {
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return Json::parse(out.substr(out.rfind('\n') + 1));
}

TEST_CASE("score: perfect and reversed rankings on synthetic tile and layout splits") {
  testing::TempDir dir;
  REQUIRE(testing::run_gnn("synth --collection tile --out " + dir.file("d") + " --graphs 3 --configs 40 --split valid")
              .exit_code == 0);
  REQUIRE(testing::run_gnn("synth --collection layout --out " + dir.file("d") +
                           " --graphs 2 --nodes 60 --configs 30 --split valid --configurable-share 0.1")
              .exit_code == 0);
  WalkOptions wo;
  wo.splits = {"valid"};
  const auto files = walk_dataset(dir.file("d"), wo);
  REQUIRE(files.size() == 5);
  write_submission(dir.file("best.csv"), files, false);
  auto r = testing::run_gnn("score --submission " + dir.file("best.csv") + " --data " + dir.file("d") +
                            " --per-graph " + dir.file("per.jsonl"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  Json j = last_json(r.out);
  CHECK(j["collections"]["tile:xla"]["score"].as_number() == 1.0);
  CHECK(j["collections"]["tile:xla"]["slowdown@1"].as_number() == 1.0);
  CHECK(j["collections"]["layout:xla:default"]["kendall_tau"].as_number() == doctest::Approx(1.0));
  CHECK(j["collections"]["layout:xla:default"]["opa"].as_number() == doctest::Approx(1.0));
  CHECK(j["score"].as_number() == doctest::Approx(1.0));
  std::ifstream per(dir.file("per.jsonl"));
  CHECK(std::count(std::istreambuf_iterator<char>(per), {}, '\n') == 5);
  write_submission(dir.file("worst.csv"), files, true);
  r = testing::run_gnn("score --submission " + dir.file("worst.csv") + " --data " + dir.file("d") +
                       "/npz/layout/xla/default");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  j = last_json(r.out);
  CHECK(j["kendall_tau"].as_number() < -0.9);  // runtimes may tie, so exactly -1 is not promised
  CHECK(j["slowdown@1"].as_number() < 1.0);

  SUBCASE("bad submissions") {
    std::ofstream(dir.file("bad1.csv")) << "Id,Configs\n";
    r = testing::run_gnn("score --submission " + dir.file("bad1.csv") + " --data " + dir.file("d"));
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("header 'ID,TopConfigs'") != std::string::npos);
    std::ofstream(dir.file("bad2.csv")) << "ID,TopConfigs\n" << files[0].id() << ",1;x\n";
    r = testing::run_gnn("score --submission " + dir.file("bad2.csv") + " --data " + dir.file("d"));
    CHECK(r.err.find("line 2") != std::string::npos);
    // A token of megabytes is cut in the message (it was echoed whole: one error line of 60 MB)
    std::ofstream(dir.file("long.csv")) << "ID,TopConfigs\n"
                                        << files[0].id() << ",1;" << std::string(5000, '7') << "x\n";
    r = testing::run_gnn("score --submission " + dir.file("long.csv") + " --data " + dir.file("d"));
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(
        r.err.find("'" + std::string(40, '7') + "... (5001 bytes)' is not a config index") != std::string::npos, r.err);
    CHECK(r.err.size() < 400);
    // ... as is an ID of as many, in each error that names it
    const std::string long_id(5000, 'i');
    for (const std::string& rows : {long_id + ",\n", long_id + ",1\n" + long_id + ",2\n"}) {
      std::ofstream(dir.file("long.csv"), std::ios::trunc) << "ID,TopConfigs\n" << rows;
      r = testing::run_gnn("score --submission " + dir.file("long.csv") + " --data " + dir.file("d"));
      CHECK(r.exit_code == 1);
      CHECK_MESSAGE(r.err.find(std::string(120, 'i') + "... (5000 bytes)") != std::string::npos, r.err);
      CHECK(r.err.size() < 400);
    }
    // Indices as the sample writes them: no sign, space or trailing ';'; a byte order mark is named as such.
    for (const char* row : {",+1;0", ", 1;0", ",1;0;", ",1;;0"}) {
      CAPTURE(row);
      std::ofstream(dir.file("lax.csv")) << "ID,TopConfigs\n" << files[0].id() << row << "\n";
      r = testing::run_gnn("score --submission " + dir.file("lax.csv") + " --data " + dir.file("d"));
      CHECK(r.exit_code == 1);
      CHECK_MESSAGE(r.err.find(dir.file("lax.csv") + ": line 2 (" + files[0].id() + "): '") != std::string::npos,
                    r.err);
    }
    std::ofstream(dir.file("bom.csv")) << "\xEF\xBB\xBFID,TopConfigs\n";
    r = testing::run_gnn("score --submission " + dir.file("bom.csv") + " --data " + dir.file("d"));
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("bom.csv: starts with a UTF-8 byte order mark") != std::string::npos);
    r = testing::run_gnn("score --submission " + dir.file("missing.csv") + " --data " + dir.file("d") + " --split ''");
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("--split: expected train, valid or test, got ''") != std::string::npos);
    r = testing::run_gnn("score --submission " + dir.file("missing.csv") + " --data " + dir.file("d") +
                         " --split vaild");
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("--split: expected train, valid or test, got 'vaild'") != std::string::npos);
    std::ofstream(dir.file("bad3.csv")) << "ID,TopConfigs\n" << files[0].id() << ",1;0\n";  // (every kernel has 2+)
    r = testing::run_gnn("score --submission " + dir.file("bad3.csv") + " --data " + dir.file("d"));
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("no row for") != std::string::npos);
    // A row the metrics refuse (a config twice, one out of range) names the file and its line.
    std::vector<DatasetFile> tile;
    for (const DatasetFile& f : files)
      if (!f.collection.is_layout()) tile.push_back(f);
    REQUIRE(tile.size() == 3);
    std::ofstream(dir.file("bad4.csv")) << "ID,TopConfigs\n" << tile[1].id() << ",0;1;2;3;4\n"
                                        << tile[0].id() << ",0;0\n";
    std::ofstream(dir.file("bad5.csv")) << "ID,TopConfigs\n" << tile[0].id() << ",0;99999\n";
    std::ofstream(dir.file("bad6.csv")) << "ID,TopConfigs\n" << tile[0].id() << ",0;1;2;3;4;5;6\n";  // (top 7)
    for (const char* csv : {"bad4.csv", "bad5.csv", "bad6.csv"}) {
      CAPTURE(csv);
      r = testing::run_gnn("score --submission " + dir.file(csv) + " --data " + dir.file("d") + "/npz/tile/xla");
      CHECK(r.exit_code == 1);
      const std::string where = dir.file(csv) + ": line " + (csv[3] == '4' ? "3 (" : "2 (") + tile[0].id() + "): ";
      CHECK_MESSAGE(r.err.find(where) != std::string::npos, r.err);
    }
    CHECK_MESSAGE(r.err.find("a tile row lists at most 5 configs (the predicted top 5), got 7") != std::string::npos,
                  r.err);
  }
  SUBCASE("--per-graph: a graph whose tau is undefined (one config) writes null, and every line is JSON") {
    REQUIRE(testing::run_gnn("synth --collection layout --out " + dir.file("one") +
                             " --graphs 1 --nodes 60 --configs 1 --split valid --configurable-share 0.1")
                .exit_code == 0);
    wo.splits = {"valid"};
    write_submission(dir.file("one.csv"), walk_dataset(dir.file("one"), wo), false);
    r = testing::run_gnn("score --submission " + dir.file("one.csv") + " --data " + dir.file("one") +
                         " --per-graph " + dir.file("one.jsonl"));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    std::ifstream in(dir.file("one.jsonl"));
    std::string line;
    REQUIRE(std::getline(in, line));
    CHECK_MESSAGE(Json::parse(line)["kendall_tau"].is_null(), line);
  }
  SUBCASE("--eval-indices: a folder without the collection's file is refused, not ignored") {
    std::filesystem::create_directories(dir.file("ei"));
    std::ofstream(dir.file("ei/xla_random.json")) << "{}";
    const std::string cmd = "score --submission " + dir.file("best.csv") + " --data " + dir.file("d") +
                            " --eval-indices " + dir.file("ei");
    r = testing::run_gnn(cmd);
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(r.err.find("--eval-indices " + dir.file("ei") + ": no xla_default.json for the layout:xla:default "
                             "graphs") != std::string::npos,
                  r.err);
    std::vector<std::string> stems;
    for (const DatasetFile& f : files)
      if (f.collection.is_layout()) stems.push_back(f.stem);
    REQUIRE(stems.size() == 2);
    // A graph the file does not list is refused (scored on every config beside the other's subset before)
    std::ofstream(dir.file("ei/xla_default.json")) << "{\"" << stems[0] << "\": [0, 1, 2]}";
    r = testing::run_gnn(cmd);
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(r.err.find(dir.file("ei/xla_default.json") + ": lists no subset for the graph " + stems[1] + " (") !=
                      std::string::npos,
                  r.err);
    std::ofstream(dir.file("ei/xla_default.json"), std::ios::trunc)
        << "{\"" << stems[0] << "\": [0, 1, 2], \"" << stems[1] << "\": [3, 4], \"other_graph\": [0]}";
    r = testing::run_gnn(cmd);
    CHECK_MESSAGE(r.exit_code == 0, r.err);
    // An index past the graph's configs names the JSON file; tile graphs alone have no subsets to take.
    std::ofstream(dir.file("ei/xla_default.json"), std::ios::trunc)
        << "{\"" << stems[0] << "\": [0, 99999], \"" << stems[1] << "\": [0]}";
    r = testing::run_gnn(cmd);
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(r.err.find(dir.file("ei/xla_default.json") + ": eval index 99999 for " + stems[0] +
                             " is outside its 30 configs") != std::string::npos,
                  r.err);
    r = testing::run_gnn("score --submission " + dir.file("best.csv") + " --data " + dir.file("d") +
                         "/npz/tile/xla --eval-indices " + dir.file("ei"));
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(r.err.find("the official subsets are of layout graphs of a search (xla_default, ...), and none of "
                             "the 3 graphs scored is one") != std::string::npos,
                  r.err);
  }
  CHECK_THROWS_WITH_AS(score_ranking("layout:xla:default:g", true, {0, 1}, {1.0, 2.0, 3.0}),
                       doctest::Contains("must list all 3 configs"), Error);
  CHECK_THROWS_WITH_AS(score_ranking("tile:xla:g", false, {0, 0}, {1.0, 2.0}), doctest::Contains("listed twice"),
                       Error);
}

TEST_CASE("score: a graph with no tau (its runtimes all tie) is left out of the means and counted, not made null") {
  const auto layout = [](const char* id, double tau, double opa) {
    GraphScore s;
    s.id = id, s.layout = true, s.kendall_tau = tau, s.opa = opa;
    s.slowdown = {{1, 0.5}, {10, 0.1}, {100, 0.0}};
    return s;
  };
  const double nan = std::nan("");
  std::vector<std::pair<std::string, GraphScore>> scores = {{"layout:xla:default", layout("a", 0.6, 0.8)},
                                                            {"layout:xla:default", layout("tied", nan, nan)},
                                                            {"layout:xla:default", layout("b", 0.2, 0.6)}};
  CHECK(mean_score(scores) == doctest::Approx(0.4));
  Json j = Json::parse(summary_json(scores));
  CHECK(j["graphs"].as_int() == 3);
  CHECK(j["unscored"].as_int() == 1);
  CHECK(j["kendall_tau"].as_number() == doctest::Approx(0.4));
  CHECK(j["opa"].as_number() == doctest::Approx(0.7));
  CHECK(j["score"].as_number() == doctest::Approx(0.4));
  CHECK(j["slowdown@1"].as_number() == doctest::Approx(0.5));  // (defined for every graph: all three)
  // Every graph unscored: null, and a second collection's score alone makes the mean over collections.
  scores = {{"layout:xla:default", layout("t1", nan, nan)}, {"layout:xla:default", layout("t2", nan, nan)}};
  CHECK(std::isnan(mean_score(scores)));
  j = Json::parse(summary_json(scores));
  CHECK(j["score"].is_null());
  CHECK(j["unscored"].as_int() == 2);
  scores.push_back({"layout:xla:random", layout("c", 0.3, 0.7)});
  CHECK(mean_score(scores) == doctest::Approx(0.3));
  j = Json::parse(summary_json(scores));
  CHECK(j["score"].as_number() == doctest::Approx(0.3));
  CHECK(j["collections"]["layout:xla:default"]["score"].is_null());
  CHECK(j["unscored_collections"].as_int() == 1);
  // Without an undefined graph there is no "unscored" key (the JSON as before).
  CHECK_FALSE(Json::parse(summary_json({{"layout:xla:default", layout("a", 0.6, 0.8)}})).contains("unscored"));
  scores.back().second = layout("c", nan, nan);  // no collection scored: null over collections too
  CHECK(Json::parse(summary_json(scores))["score"].is_null());
  CHECK(Json::parse(summary_json(scores))["unscored_collections"].as_int() == 2);
}

TEST_CASE("score: predictions that were not finite are counted per collection and in all") {
  GraphScore a, b, c;
  a.id = "a", a.layout = true, a.kendall_tau = 0.5, a.opa = 0.7, a.nonfinite = 3;
  b.id = "b", b.layout = true, b.kendall_tau = 0.1, b.opa = 0.6, b.nonfinite = 0;
  c.id = "c", c.slowdown = {{1, 0.1}, {5, 0.0}, {10, 0.0}}, c.nonfinite = 2;
  Json j = Json::parse(summary_json({{"layout:xla:default", a}, {"layout:xla:default", b}}));
  CHECK(j["nonfinite_predictions"].as_int() == 3);
  CHECK(j["collections"]["layout:xla:default"]["nonfinite_predictions"].as_int() == 3);
  j = Json::parse(summary_json({{"layout:xla:default", a}, {"layout:xla:default", b}, {"tile:xla", c}}));
  CHECK(j["nonfinite_predictions"].as_int() == 5);
  CHECK(j["collections"]["tile:xla"]["nonfinite_predictions"].as_int() == 2);
  // None: no key (the JSON as before).
  CHECK_FALSE(Json::parse(summary_json({{"layout:xla:default", b}})).contains("nonfinite_predictions"));
}

}  // namespace
}  // namespace gnn
