// gnn eval / predict over several runs (--run A --run B, --runs FILE): each run scores with its own
// preprocessing, the scores of a graph's configs combine per graph (standardised mean, mean rank or raw mean), and
// what cannot be an ensemble is refused as a usage error.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>

#include "apps/cli.h"
#include "apps/train/trainer.h"
#include "io/json.h"
#include "testing.h"

using namespace gnn;
using testing::last_line;
using testing::run_gnn;
using testing::TempDir;

namespace {

// gnn predict --runtimes: graph id -> config -> predicted runtime.
std::map<std::string, std::map<int64_t, double>> runtimes(const std::string& path) {
  std::map<std::string, std::map<int64_t, double>> out;
  const std::vector<std::string> rows = testing::read_lines(path);
  for (size_t i = 1; i < rows.size(); ++i) {
    const size_t a = rows[i].rfind(','), b = rows[i].rfind(',', a - 1);
    out[rows[i].substr(0, b)][std::stoll(rows[i].substr(b + 1, a - b - 1))] = std::stod(rows[i].substr(a + 1));
  }
  return out;
}

// "one0.csv": a file per member (built by append: gcc 12 warns falsely on "literal" + std::string).
std::string member_file(const char* stem, size_t k) {
  std::string name(stem);
  name.append(std::to_string(k)).append(".csv");
  return name;
}

}  // namespace

TEST_CASE("ensemble: combine_scores standardises, ranks or averages each member, and one member passes through") {
  using train::Combine;
  const std::vector<double> a{1, 2, 3, 4}, b{40, 10, 30, 20};
  CHECK(train::combine_scores({a}, Combine::kMeanZ) == a);
  // z of a: (-1.5, -0.5, 0.5, 1.5) / sd 1.118..; of b: (15, -15, 5, -5) / 11.18..
  const std::vector<double> z = train::combine_scores({a, b}, Combine::kMeanZ);
  const double sa = std::sqrt(1.25), sb = std::sqrt(125.0);
  for (size_t i = 0; i < 4; ++i) CHECK(z[i] == doctest::Approx(((a[i] - 2.5) / sa + (b[i] - 25) / sb) / 2));
  const std::vector<double> r = train::combine_scores({a, b}, Combine::kMeanRank);
  CHECK(r == std::vector<double>{(0 + 3) / 2.0, (1 + 0) / 2.0, (2 + 2) / 2.0, (3 + 1) / 2.0});
  // Ties rank by position; equal scores standardise to 0; a non-finite prediction ranks last.
  CHECK(train::combine_scores({{5, 5, 5}, {5, 5, 5}}, Combine::kMeanRank) == std::vector<double>{0, 1, 2});
  CHECK(train::combine_scores({{5, 5, 5}, {5, 5, 5}}, Combine::kMeanZ) == std::vector<double>{0, 0, 0});
  const double bad = std::numeric_limits<double>::max();
  const std::vector<double> w = train::combine_scores({{1, bad, 3}, {1, 2, 3}}, Combine::kMeanZ);
  // Member 0's finite scores standardise to (-1, 1) and its non-finite one takes 1 + 1; member 1's z is 0 there.
  CHECK(w[1] == doctest::Approx(1.0));
  CHECK(w[0] == doctest::Approx((-1 - std::sqrt(1.5)) / 2));
  // Under mean-rank a member's configs it could not score share the places after its others (their mean): one
  // that scored none is neutral, and leaves the other's order as it is.
  CHECK(train::combine_scores({{3, 1, 2}, {bad, bad, bad}}, Combine::kMeanRank) == std::vector<double>{1.5, 0.5, 1});
  CHECK(train::combine_scores({{bad, 0, bad}, {0, 1, 2}}, Combine::kMeanRank) == std::vector<double>{0.75, 0.5, 1.75});
  CHECK(train::parse_combine("mean-rank") == Combine::kMeanRank);
  CHECK_THROWS_AS(train::parse_combine("median"), Error);
  // The raw mean, as the 6th place's submission; a config a member could not score ranks last.
  CHECK(train::parse_combine("mean") == Combine::kMean);
  CHECK(train::combine_scores({a, b}, Combine::kMean) == std::vector<double>{20.5, 6, 16.5, 12});
  const std::vector<double> m = train::combine_scores({{1, 2, 3}, {1, bad, 3}, {3, 2, 1}}, Combine::kMean);
  CHECK(m[0] == doctest::Approx(5.0 / 3));
  CHECK(m[1] == bad);
  CHECK(m[2] == doctest::Approx(7.0 / 3));
  CHECK_THROWS_AS(train::combine_scores({{1, 2}, {1, 2, 3}}, Combine::kMeanZ), Error);
}

TEST_CASE("ensemble: eval and predict over several runs combine the runs' own scores per graph") {
  TempDir t;
  const std::string data = testing::tile_and_layout(t.file("data"), {2, 0, 10, 7}, {3, 120, 24, 8});
  // Regression runs, so --runtimes shows each run's scores (log runtime = score + the run's offset).
  std::vector<std::string> runs;
  for (const char* seed : {"1", "2", "3"}) {
    runs.push_back(t.file(std::string("run") + seed));
    const auto r = run_gnn("train --model layout-mlp --data " + data + " --out " + runs.back() +
                           " --epochs 2 --loss mse --seed " + seed + " --progress lines");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  }
  const std::string on = " --data " + data + " --split valid";
  // The same run twice is the run: standardising, ranking or averaging keeps its order, so every metric is
  // its own.
  const auto one = run_gnn("eval --run " + runs[0] + on);
  REQUIRE_MESSAGE(one.exit_code == 0, one.err);
  for (const char* how : {"mean-z", "mean-rank", "mean"}) {
    const auto twice = run_gnn("eval --run " + runs[0] + " --run " + runs[0] + on + " --ensemble " + how);
    REQUIRE_MESSAGE(twice.exit_code == 0, twice.err);
    CHECK_MESSAGE(
        twice.err.find("gnn eval: note: --run " + runs[0] +
                       ": the same run given again; it weighs as many times in the ensemble") != std::string::npos,
        twice.err);
    const Json a = Json::parse(last_line(one.out)), b = Json::parse(last_line(twice.out));
    CHECK(a["kendall_tau"].as_number() == b["kendall_tau"].as_number());
    CHECK(a["opa"].as_number() == b["opa"].as_number());
  }
  // Three runs: the submission ranks each graph's configs by the mean of the runs' standardised scores,
  // computed here from each run's own predicted runtimes (z of log runtime = z of the score).
  std::map<std::string, std::vector<std::vector<double>>> per_graph;  // id -> run -> config
  for (size_t k = 0; k < runs.size(); ++k) {
    const std::string sub = t.file(member_file("one", k)), rt = t.file(member_file("rt", k));
    const auto r = run_gnn("predict --run " + runs[k] + on + " --out " + sub + " --runtimes " + rt);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    for (const auto& [id, configs] : runtimes(rt)) {
      std::vector<double> logs;
      for (const auto& [c, v] : configs) logs.push_back(std::log(v));
      per_graph[id].push_back(logs);
    }
  }
  // A submission row: the graph's configs in ascending order of the combined scores, ties by index.
  const auto want_row = [&](const std::string& id, train::Combine how) {
    const std::vector<double> z = train::combine_scores(per_graph[id], how);
    std::vector<int64_t> order(z.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return z[size_t(x)] < z[size_t(y)]; });
    std::string want = id + ",";
    for (size_t k = 0; k < order.size(); ++k) want.append(k ? ";" : "").append(std::to_string(order[k]));
    return want;
  };
  std::ofstream(t.file("runs.txt")) << "# the other two\n" << runs[1] << "\n\n" << runs[2] << "\n";
  const auto ens =
      run_gnn("predict --run " + runs[0] + " --runs " + t.file("runs.txt") + on + " --out " + t.file("ensemble.csv"));
  REQUIRE_MESSAGE(ens.exit_code == 0, ens.err);
  CHECK(ens.out.find("an ensemble of 3 runs") != std::string::npos);
  const std::vector<std::string> rows = testing::read_lines(t.file("ensemble.csv"));
  REQUIRE(rows.size() == per_graph.size() + 1);
  int differs_from_a_member = 0;
  for (size_t i = 1; i < rows.size(); ++i) {
    const std::string id = rows[i].substr(0, rows[i].find(','));
    REQUIRE(per_graph.count(id));
    CHECK(rows[i] == want_row(id, train::Combine::kMeanZ));
    for (size_t k = 0; k < runs.size(); ++k)
      differs_from_a_member += testing::read_lines(t.file(member_file("one", k)))[i] != rows[i];
  }
  CHECK(differs_from_a_member > 0);  // the members disagree, so the combination is not any one of them
  // --ensemble mean ranks by the mean of the raw scores: each run's log runtimes less its offset, whose
  // mean moves every config alike, so the mean of the log runtimes ranks the same.
  const auto raw = run_gnn("predict --run " + runs[0] + " --runs " + t.file("runs.txt") + on +
                           " --ensemble mean --out " + t.file("mean.csv"));
  REQUIRE_MESSAGE(raw.exit_code == 0, raw.err);
  const std::vector<std::string> mean_rows = testing::read_lines(t.file("mean.csv"));
  REQUIRE(mean_rows.size() == rows.size());
  int differs_from_mean_z = 0;
  for (size_t i = 1; i < mean_rows.size(); ++i) {
    CHECK(mean_rows[i] == want_row(mean_rows[i].substr(0, mean_rows[i].find(',')), train::Combine::kMean));
    differs_from_mean_z += mean_rows[i] != rows[i];
  }
  CHECK(differs_from_mean_z > 0);  // so the flag reached the combination: these runs' scales differ
  // The ensemble's eval scores the same combination: one JSON line, and no per-graph file in a run.
  const auto ev = run_gnn("eval --run " + runs[0] + " --run " + runs[1] + " --run " + runs[2] + on);
  REQUIRE_MESSAGE(ev.exit_code == 0, ev.err);
  const Json ej = Json::parse(last_line(ev.out));
  CHECK(ej["graphs"].as_number() == double(per_graph.size()));
  // ... the metrics of the submission the same ensemble writes.
  const auto sc = run_gnn("score --submission " + t.file("ensemble.csv") + " --data " + data +
                          "/npz/layout/xla/default --split valid");
  REQUIRE_MESSAGE(sc.exit_code == 0, sc.err);
  CHECK(Json::parse(last_line(sc.out))["kendall_tau"].as_number() == ej["kendall_tau"].as_number());
  // A member whose finite weights predict NaN (an update that overflowed the forward, kept by
  // --skip-nonfinite): its configs take finite places under mean-z and mean-rank, and are counted.
  const std::string nan_run = t.file("nan");
  auto r = run_gnn("train --model layout-mlp --data " + data + " --out " + nan_run +
                   " --epochs 2 --lr 1e30 --skip-nonfinite --progress lines");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  for (const char* how : {"mean-z", "mean-rank", "mean"}) {
    CAPTURE(how);
    r = run_gnn("eval --run " + runs[0] + " --run " + nan_run + on + " --checkpoint last --ensemble " + how);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(Json::parse(last_line(r.out))["nonfinite_predictions"].as_int() > 0);
  }
  // --eval-indices (a subset, a config listed twice as the release's xla random file lists 519): a config ties
  // with itself, so eval scores what the submission of a run whose scores do not interact scores.
  std::string json = "{";
  for (const DatasetFile& f : train::kind_files(data, "layout", "valid"))
    json.append(json.size() > 1 ? ", \"" : "\"").append(f.stem).append("\": [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]");
  std::filesystem::create_directories(t.file("ei"));
  std::ofstream(t.file("ei/xla_default.json")) << json << "}\n";
  const std::string ei = " --eval-indices " + t.file("ei");
  r = run_gnn("predict --run " + runs[0] + on + " --out " + t.file("sub.csv"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto scored = run_gnn("score --submission " + t.file("sub.csv") + " --data " + data +
                              "/npz/layout/xla/default --split valid" + ei);
  REQUIRE_MESSAGE(scored.exit_code == 0, scored.err);
  const auto evaluated = run_gnn("eval --run " + runs[0] + on + ei);
  REQUIRE_MESSAGE(evaluated.exit_code == 0, evaluated.err);
  const Json s = Json::parse(last_line(scored.out)), e = Json::parse(last_line(evaluated.out));
  CHECK(s["kendall_tau"].as_number() == e["kendall_tau"].as_number());
  CHECK(s["opa"].as_number() == e["opa"].as_number());
}

TEST_CASE("ensemble: a repeatable flag keeps every value in order, any other flag twice is refused") {
  cli::Command c;
  c.name = "x";
  c.flags = {{"run", "RUN", "", "", false, true}, {"data", "DIR", ""}};
  const cli::Args a = cli::parse_args(c, {"--run=A", "--data", "D", "--run", "B", "--run=C"});
  CHECK(a.all("run") == std::vector<std::string>{"A", "B", "C"});
  CHECK(a.str("run") == "A");
  CHECK(a.all("data") == std::vector<std::string>{"D"});
  CHECK_THROWS_WITH_AS(cli::parse_args(c, {"--data", "D", "--data", "E"}), doctest::Contains("--data given twice"),
                       cli::UsageError);
  // A mean-rank ensemble ranks ties by config index, as a submission does, whatever the order scored.
  CHECK(train::combine_scores({{1, 1, 0}, {1, 1, 0}}, train::Combine::kMeanRank, {7, 3, 5}) ==
        std::vector<double>{2, 1, 0});
}

TEST_CASE("ensemble: what cannot be combined is refused before anything is scored") {
  TempDir t;
  const std::string data = testing::tile_and_layout(t.file("data"), {2, 0, 10, 7}, {2, 80, 12, 8});
  const std::string tile = t.file("tile"), layout = t.file("layout");
  REQUIRE(
      run_gnn("train --model tile-mlp --data " + data + " --out " + tile + " --epochs 1 --progress lines").exit_code ==
      0);
  REQUIRE(run_gnn("train --model layout-mlp --data " + data + " --out " + layout + " --epochs 1 --progress lines")
              .exit_code == 0);
  std::ofstream(t.file("empty.txt")) << "# nothing\n\n";
  std::ofstream(t.file("long.txt")) << layout << "\n" << std::string(100'000, 'x') << "\n";  // (no list of runs)
  // (written with CRLF and a byte order mark, as some editors write: the blank line is one, the mark no part of
  // the first path; the line that is no folder named)
  std::ofstream(t.file("crlf.txt")) << "\xEF\xBB\xBF" << layout << "\r\n\r\n" << layout << "_not\r\n";
  const std::string on = " --data " + data;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"eval --run " + layout + " --run " + tile + on, "cannot join an ensemble of layout models"},
      {"eval --run " + layout + " --run " + layout + on + " --ensemble median", "expected mean-z, mean-rank or mean"},
      {"eval --run " + layout + on + " --ensemble mean-rank",  // (one run: nothing to combine)
       "--ensemble mean-rank: combines the scores of several runs (--run A --run B, or --runs FILE), and one run is "
       "given"},
      {"predict --run " + layout + on + " --out " + t.file("s1.csv") + " --ensemble mean", "and one run is given"},
      {"eval" + on, "missing --run"},
      {"eval --run " + t.file("absent") + on + " --tta 0", "--tta"},  // (checked before the run is looked for)
      {"eval --runs " + t.file("empty.txt") + on, "lists no run"},
      {"eval --runs " + t.file("long.txt") + on, ": line 2 (" + std::string(60, 'x') + "... (100000 bytes)) is longer"},
      {"eval --runs " + t.file("absent.txt") + on, "--runs " + t.file("absent.txt") + ": cannot open"},
      {"eval --runs " + t.file("crlf.txt") + on, "--runs " + t.file("crlf.txt") + ": line 3: " + layout +
                                                     "_not is not a directory (a run folder; relative paths are from "
                                                     "the current folder)"},
      {"eval --runs " + t.file("") + on, ": not a regular file (a directory)"},
      {"predict --run " + layout + " --run " + layout + on + " --out " + t.file("s.csv") + " --runtimes " +
           t.file("r.csv"),
       "an ensemble's combined scores are no runtimes"},
  };
  for (const auto& [args, message] : cases) {
    CAPTURE(args);
    const auto r = run_gnn(args);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(message) != std::string::npos);
  }
}

TEST_CASE("ensemble: scripts/train_seeds.sh trains a run per seed, resumes what is there, and lists them") {
  TempDir t;
  const std::string data = testing::tile_and_layout(t.file("data"), {2, 0, 10, 7}, {2, 80, 12, 8});
  const std::string script =
      "GNN=" + std::string(GNN_CLI_PATH) + " bash " + testing::source_path("scripts/train_seeds.sh");
  const std::string cmd = script + " " + t.file("ens") + " 4,5 --model layout-mlp --data " + data +
                          " --epochs 1 --progress lines > /dev/null 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream f(t.file("ens/runs.txt"));
  std::vector<std::string> listed;
  for (std::string line; std::getline(f, line);) listed.push_back(line);
  CHECK(listed == std::vector<std::string>{t.file("ens/seed-4"), t.file("ens/seed-5")});
  const auto w4 = testing::checkpoint_weights(t.file("ens/seed-4/model.npz"));
  CHECK_FALSE(testing::same_bits(w4, testing::checkpoint_weights(t.file("ens/seed-5/model.npz"))));
  // Run again: the finished runs are resumed, not trained anew, so their weights stay.
  REQUIRE(std::system(cmd.c_str()) == 0);
  CHECK(testing::same_bits(w4, testing::checkpoint_weights(t.file("ens/seed-4/model.npz"))));
  const auto r = run_gnn("eval --runs " + t.file("ens/runs.txt") + " --data " + data);
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  for (const char* seeds : {"1,x", "2,2", ","})
    CHECK(std::system((script + " " + t.file("bad") + " " + seeds + " --model layout-mlp > /dev/null 2>&1").c_str()) !=
          0);
}
