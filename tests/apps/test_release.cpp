// Real programs end to end: the files of the official release in ../shared/data/tpugraphs-release (its
// tree, its dtypes, test files as published) trained on their train split, validated on their valid
// split, and predicted on their test split into a CSV whose rows the competition's sample submission
// names. Skips, saying why, where ../shared/data is absent.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "io/json.h"
#include "testing.h"

using namespace gnn;
using testing::last_line;
using testing::run_gnn;
using testing::TempDir;

namespace {

// The IDs of the competition's sample submission (every official test graph).
std::set<std::string> official_ids() {
  std::set<std::string> ids;
  for (const std::string& row : testing::read_lines(testing::shared_data("tpugraphs/sample_submission.csv")))
    ids.insert(row.substr(0, row.find(',')));
  return ids;
}

}  // namespace

TEST_CASE("release: train, validate and predict real programs of the official tree into an official CSV") {
  const std::string release = testing::shared_data("tpugraphs-release/npz");
  if (!std::filesystem::is_directory(release) ||
      !std::filesystem::exists(testing::shared_data("tpugraphs/sample_submission.csv"))) {
    testing::skip("../shared/data/tpugraphs-release and tpugraphs/sample_submission.csv are absent");
    return;
  }
  const std::set<std::string> ids = official_ids();
  TempDir t;
  struct Case {
    std::string model, data, extra;
    size_t listed;  // configs per row: 5 for tile, every config for layout
  };
  const std::vector<Case> cases = {
      {"layout-resmodel", release + "/layout/xla/default", " --val-configs 64 --configs 16", 1000},
      {"tile-mlp", release + "/tile/xla", " --configs 2", 5},
  };
  for (const Case& c : cases) {
    CAPTURE(c.model);
    const std::string run = t.file(c.model);
    auto r = run_gnn("train --model " + c.model + " --data " + c.data + " --out " + run +
                     " --epochs 2 --progress lines" + c.extra);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const Json summary = Json::parse(last_line(r.out));
    CHECK(std::isfinite(summary["best_valid_score"].as_number()));  // the real valid program was scored
    const std::string csv = t.file(c.model + ".csv");
    r = run_gnn("predict --run " + run + " --data " + c.data + " --out " + csv);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const std::vector<std::string> rows = testing::read_lines(csv);
    REQUIRE(rows.size() == 2);  // the header and the split's one test program
    CHECK(rows[0] == "ID,TopConfigs");
    const std::string id = rows[1].substr(0, rows[1].find(','));
    CHECK_MESSAGE(ids.count(id), id, " is not an ID of the official sample submission");
    std::set<int64_t> configs;
    std::stringstream list(rows[1].substr(rows[1].find(',') + 1));
    for (std::string v; std::getline(list, v, ';');) configs.insert(std::stoll(v));
    CHECK(configs.size() == c.listed);  // distinct configs, as many as a row of the kind lists
    if (c.listed == 1000) {  // layout: every config of the test program, each once
      CHECK(*configs.begin() == 0);
      CHECK(*configs.rbegin() == 999);
    } else {  // tile: 5 of the test kernel's 25
      CHECK(*configs.begin() >= 0);
      CHECK(*configs.rbegin() < 25);
    }
  }
}
