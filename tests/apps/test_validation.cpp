// Validation cadence in training: --val-every N validates only the epochs that reach a multiple of N steps
// (and the last), the same epochs after a kill and a resume; --val-configs K scores each valid graph on
// the same K configs every time.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "io/json.h"
#include "testing.h"

using namespace gnn;
using testing::run_gnn;
using testing::TempDir;

namespace {

// (epoch, valid_score or NaN) of each metrics.jsonl line.
std::vector<std::pair<int64_t, double>> validated(const std::string& run) {
  std::ifstream in(run + "/metrics.jsonl");
  std::vector<std::pair<int64_t, double>> out;
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line);
    out.emplace_back(int64_t(j["epoch"].as_number()), j.contains("valid_score") ? j["valid_score"].as_number() : NAN);
  }
  return out;
}

}  // namespace

TEST_CASE("validation: --val-every validates where the steps reach its multiples, and after a resume the same") {
  TempDir t;
  // Three training graphs at --batch-graphs 2: two steps per epoch.
  const std::string data = testing::tile_and_layout(t.file("data"), {2, 0, 10, 7}, {3, 80, 12, 9});
  const std::string base = " --model layout-mlp --data " + data + " --epochs 7 --batch-graphs 2 --val-every 3" +
                           " --progress lines --checkpoint-minutes 0";
  const std::string a = t.file("a"), b = t.file("b");
  auto r = run_gnn("train --out " + a + base);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  // Steps 2, 4, 6, 8, 10, 12, 14 end the epochs: 3 | 4 (epoch 2), 6 (3), 9 | 10 (5), 12 (6), and the last.
  const auto seen = validated(a);
  REQUIRE(seen.size() == 7);
  const std::set<int64_t> want{2, 3, 5, 6, 7};
  for (const auto& [epoch, score] : seen) {
    CAPTURE(epoch);
    CHECK(std::isfinite(score) == bool(want.count(epoch)));
  }
  // Killed after step 5 (inside epoch 3) and resumed: the same epochs validate, with the same scores.
  r = run_gnn("train --out " + b + base + " --kill-after-steps 5");
  REQUIRE(r.exit_code != 0);
  r = run_gnn("train --resume --out " + b + base);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto again = validated(b);
  REQUIRE(again.size() == seen.size());
  for (size_t i = 0; i < seen.size(); ++i) {
    CHECK(again[i].first == seen[i].first);
    CHECK((std::isnan(again[i].second) ? std::isnan(seen[i].second) : again[i].second == seen[i].second));
  }
  // --val-every 0 (the default) validates every epoch.
  r = run_gnn("train --out " + t.file("c") + " --model layout-mlp --data " + data + " --epochs 3 --progress lines");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  for (const auto& [epoch, score] : validated(t.file("c"))) CHECK(std::isfinite(score));
}

TEST_CASE("validation: --val-configs scores every valid graph on the same few configs") {
  TempDir t;
  const std::string data = testing::tile_and_layout(t.file("data"), {2, 0, 10, 7}, {3, 80, 12, 9});
  const std::string base = " --model layout-mlp --data " + data + " --epochs 3 --progress lines --val-configs ";
  auto r = run_gnn("train --out " + t.file("two") + base + "2");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  // Two configs per graph: each graph's tau is -1 or 1, so the mean over 3 graphs is a multiple of 1/3.
  for (const auto& [epoch, score] : validated(t.file("two"))) {
    CAPTURE(score);
    CHECK(std::abs(score * 3 - std::round(score * 3)) < 1e-9);
    CHECK(std::abs(score) <= 1);
  }
  // As many as a graph has, or more: every config, the score of a run without the flag.
  r = run_gnn("train --out " + t.file("all") + base + "1000");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = run_gnn("train --out " + t.file("none") + " --model layout-mlp --data " + data + " --epochs 3 --progress lines");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(validated(t.file("all")) == validated(t.file("none")));
  // The subset is fixed: with weights that do not move (--lr 1e-12) every validation scores the same
  // configs, so the same score; a subset drawn anew each time would move it.
  r = run_gnn("train --out " + t.file("still") + " --model layout-mlp --data " + data +
              " --epochs 6 --progress lines --lr 1e-12 --val-configs 2");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto still = validated(t.file("still"));
  REQUIRE(still.size() == 6);
  for (const auto& [epoch, score] : still) CHECK(score == still[0].second);
  // Kendall tau needs two configs: 1 is refused before anything is written.
  r = run_gnn("train --out " + t.file("one") + base + "1");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--val-configs: expected 0 or an integer >= 2") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(t.file("one")));
}

TEST_CASE("validation: --patience counts validations under --val-every, and a resumed run may validate anew") {
  TempDir t;
  const std::string data = testing::tile_and_layout(t.file("data"), {2, 0, 10, 7}, {3, 80, 12, 9});
  // One step an epoch; weights that do not move, so no validation after the first beats it.
  const std::string run = t.file("run");
  auto r = run_gnn("train --model layout-mlp --data " + data + " --out " + run +
                   " --epochs 40 --lr 1e-12 --val-every 3 --patience 2 --progress lines");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const Json j = Json::parse(testing::last_line(r.out));
  CHECK(j["stopped_early"].as_bool());
  const auto seen = validated(run);
  REQUIRE(!seen.empty());
  const int64_t last = seen.back().first;
  CHECK(last % 3 == 0);  // it stops on an epoch that validated ...
  CHECK(std::isfinite(seen.back().second));
  CHECK(last >= 6);  // ... two validations after the best at the earliest, never before one
  CHECK(last <= 9);
  CHECK(r.out.find("in the last 2 validations (--patience)") != std::string::npos);
  // How often to validate may change on resume (no training step depends on it); other settings may not.
  r = run_gnn("train --resume --out " + run + " --epochs 42 --val-every 1 --patience 2");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("--val-every 1: the run was started with 3") != std::string::npos);
  r = run_gnn("train --resume --out " + run + " --lr 0.1");
  CHECK(r.exit_code == 2);
}
