// The training runs: the CLI trains, resumes bit for bit after kill -9 and refuses bad input with one line;
// each training technique and recipe end to end; predict / eval / score agree.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <tuple>

#include "apps/checkpoint.h"
#include "apps/scoring.h"
#include "apps/train/blocks.h"
#include "apps/train/run_state.h"
#include "apps/train/segment_pass.h"
#include "apps/train/step_graph.h"
#include "apps/train/trainer.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/npz.h"
#include "io/synth.h"
#include "kernels/gemm.h"
#include "nn/loss.h"
#include "runtime/cuda.h"
#include "testing.h"
#include "train_fixtures.h"

using namespace gnn;
using testing::last_line;
using namespace gnn::train;
using testing::checkpoint_weights;
using testing::run_gnn;
using testing::run_gnn_env;
using testing::same_bits;
using testing::TempDir;
using testing::tile_and_layout;
using namespace train_fixtures;

namespace {
// The configs a run has trained on (its checkpoint's state/configs).
int64_t configs_trained(const std::string& run) {
  return get_i64(NpzReader(run + "/model.npz").load_all(), "state/configs", run);
}

// Rewrites a checkpoint as one written before hyper-parameter `name` existed: its key leaves meta/hparams.
void drop_hparam(const std::string& checkpoint, const std::string& name) {
  std::vector<std::pair<std::string, Tensor>> older;
  for (auto& [k, v] : NpzReader(checkpoint).load_all()) {
    if (k != "meta/hparams") {
      older.emplace_back(k, v);
      continue;
    }
    std::string json = tensor_text({{k, v}}, k, checkpoint);
    const size_t at = json.find("\"" + name + "\"");
    REQUIRE(at != std::string::npos);
    const size_t end = json.find_first_of(",}", json.find(':', at) + 1);
    if (json[end] == ',') json.erase(at, end - at + 1);
    else json.erase(at - 1, end - at + 1);  // the last key: its leading comma goes
    older.emplace_back(k, text_tensor(json));
  }
  save_npz(checkpoint, older);
}
}  // namespace

TEST_CASE("train: the CLI trains, resumes bit for bit after kill -9, and predict / eval / score agree") {
  TempDir t;
  const std::string base = "--data " + dataset() + " --epochs 3 --batch-graphs 2 --configs 8 --progress lines";
  for (const char* model : {"tile-earlyjoin-sage", "layout-resmodel"}) {
    CAPTURE(model);
    const std::string extra = std::string(model) == "layout-resmodel" ? " --segment 120" : "";
    const std::string a = t.file(std::string(model) + "_a"), b = t.file(std::string(model) + "_b");
    auto r = run_gnn(std::string("train --model ") + model + " --out " + a + " " + base + extra + " --threads 2");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const Json summary = Json::parse(last_line(r.out));
    // tile: 6 graphs in 3 batches per epoch; layout: 3 graphs in 2.
    const bool layout = std::string(model) == "layout-resmodel";
    CHECK(summary["steps"].as_int() == (layout ? 6 : 9));
    CHECK(summary["epochs"].as_int() == 3);
    // The same run killed with SIGKILL after step 4 (tile: mid-epoch 2, checkpointing every step; layout:
    // right after epoch 2's checkpoint), then resumed.
    r = run_gnn(std::string("train --model ") + model + " --out " + b + " " + base + extra +
                " --checkpoint-minutes 0 --kill-after-steps 4");
    CHECK(r.exit_code != 0);
    CHECK(metric_lines(b + "/metrics.jsonl").size() == (layout ? 2u : 1u));
    r = run_gnn(std::string("train --resume --out ") + b + " " + base);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(r.out.find(layout ? "resuming at epoch 3, batch 1 of 2 (after step 4)"
                            : "resuming at epoch 2, batch 2 of 3 (after step 4)") != std::string::npos);
    CHECK(same_bits(checkpoint_weights(a + "/model.npz"), checkpoint_weights(b + "/model.npz")));
    CHECK(same_bits(checkpoint_weights(a + "/best.npz"), checkpoint_weights(b + "/best.npz")));
    CHECK(metric_lines(a + "/metrics.jsonl") == metric_lines(b + "/metrics.jsonl"));
    // One thread gives the same weights as two.
    const std::string c = t.file(std::string(model) + "_c");
    r = run_gnn(std::string("train --model ") + model + " --out " + c + " " + base + extra + " --threads 1");
    REQUIRE(r.exit_code == 0);
    CHECK(same_bits(checkpoint_weights(a + "/model.npz"), checkpoint_weights(c + "/model.npz")));

    // predict writes the competition's format; scoring it against the valid split gives eval's numbers.
    const std::string csv = t.file(std::string(model) + ".csv");
    r = run_gnn("predict --run " + a + " --data " + dataset() + " --split valid --out " + csv);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const auto rows = read_submission(csv);
    CHECK(rows.size() == (layout ? 3u : 6u));
    const auto valid = kind_files(dataset(), layout ? "layout" : "tile", "valid");
    for (const auto& [id, list] : rows) {
      CHECK(id.rfind(layout ? "layout:xla:default:synth_valid_" : "tile:xla:synth_valid_", 0) == 0);
      int64_t configs = 0;
      for (const DatasetFile& f : valid)
        if (f.id() == id) configs = file_configs(f);
      CHECK(int64_t(list.size()) == (layout ? 24 : std::min<int64_t>(5, configs)));
    }
    r = run_gnn("eval --run " + a + " --data " + dataset());
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const Json ev = Json::parse(last_line(r.out));
    const std::string coll = layout ? "/npz/layout/xla/default" : "/npz/tile/xla";
    r = run_gnn("score --submission " + csv + " --data " + dataset() + coll);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const Json sc = Json::parse(last_line(r.out));
    CHECK(sc["score"].as_number() == doctest::Approx(ev["score"].as_number()).epsilon(1e-6));
    CHECK(ev["score"].as_number() == doctest::Approx(summary["best_valid_score"].as_number()).epsilon(1e-6));
    CHECK(std::filesystem::exists(a + "/eval_valid.jsonl"));
    r = run_gnn("plot " + a);
    REQUIRE(r.exit_code == 0);
    std::ifstream html(a + "/report.html");
    const std::string text((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
    CHECK(text.find("<polyline") != std::string::npos);
  }
}

TEST_CASE("train: a non-finite loss stops with the step and graph named, or is skipped and counted") {
  TempDir t;
  const std::string base =
      "train --model tile-mlp --data " + dataset() + " --epochs 2 --batch-graphs 2 --lr 1e30 --progress lines";
  auto r = run_gnn(base + " --out " + t.file("a"));
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("non-finite") != std::string::npos);
  CHECK(r.err.find("at step ") != std::string::npos);
  CHECK(r.err.find("tile:xla:synth_train_") != std::string::npos);
  r = run_gnn(base + " --out " + t.file("b") + " --skip-nonfinite");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const Json summary = Json::parse(last_line(r.out));
  CHECK(summary["skipped"].as_int() > 0);
  // The weights after the first update are finite but predict NaN: ranked last by index, those configs
  // score as something, but such a validation picks no best.npz and says why.
  std::ifstream in(t.file("b") + "/metrics.jsonl");
  int validations = 0;
  for (std::string line; std::getline(in, line);) {
    const Json m = Json::parse(line);
    if (!m.contains("valid")) continue;
    ++validations;
    CHECK(m["valid"]["nonfinite_predictions"].as_int() > 0);
    CHECK(m["valid"]["collections"]["tile:xla"]["nonfinite_predictions"].as_int() > 0);
  }
  CHECK(validations == 2);
  CHECK(r.out.find("predictions not finite: not a best") != std::string::npos);
  CHECK_FALSE(summary.contains("best_valid_score"));
  CHECK_FALSE(std::filesystem::exists(t.file("b") + "/best.npz"));
}

TEST_CASE("train: bad flags and runs are refused with one line naming them") {
  TempDir t;
  const std::string d = " --data " + dataset();
  struct Case {
    std::string args, message;
    int code;
  };
  const std::string run = t.file("run");
  REQUIRE(run_gnn("train --model tile-mlp --epochs 1 --progress lines --out " + run + d).exit_code == 0);
  for (const Case& c : std::vector<Case>{
           {"train --model tile-nope --out " + t.file("x") + d, "unknown recipe 'tile-nope'", 2},
           {"train --model tile-mlp --out " + run + d, "already holds a run", 2},
           {"train --resume --lr 0.5 --out " + run + d, "a resumed run keeps its hyper-parameters", 2},
           {"train --resume --model tile-earlyjoin-sage --out " + run + d, "a resumed run keeps its recipe", 2},
           {"train --resume --seed 9 --out " + run, "a resumed run keeps its seed", 2},
           {"train --model tile-mlp --segment 10 --out " + t.file("y") + d,
            "--segment: not a hyper-parameter of tile-mlp", 2},
           {"train --model tile-mlp --device tpu --out " + t.file("z") + d, "--device", 2},
           {"train --model tile-mlp --configs 1 --out " + t.file("w") + d, "--configs: expected an integer in [2, ", 2},
           {"train --model tile-mlp --lr fast --out " + t.file("v") + d, "--lr: expected a number", 2},
           {"eval --run " + t.file("nothing") + d, "not a directory", 1},
           {"eval --run " + run + d + " --tta 3", "--tta 3: averages over orders of the configs, and tile-mlp", 2},
           {"eval --run " + run + d + " --split bogus", "--split: expected train, valid or test, got 'bogus'", 2},
           {"train --model tile-mlp --eval-indices " + run + " --out " + t.file("u") + d,
            "--eval-indices: the official subsets are of layout graphs, and tile-mlp is a tile recipe", 2},
           {"eval --run " + run + d + " --eval-indices " + run,  // (a folder: the kind is what is refused)
            "the official subsets are of layout graphs, and " + run + " is a tile model (tile-mlp)", 2},
           {"predict --run " + run + d + " --checkpoint best --out " + t.file("p.csv"), "", 0},
           {cuda_available() ? "models" : "train --model tile-mlp --device cuda --out " + t.file("z") + d,
            cuda_available() ? "" : "--device cuda is not usable here", cuda_available() ? 0 : 2},
       }) {
    CAPTURE(c.args);
    const auto r = run_gnn(c.args);
    CHECK(r.exit_code == c.code);
    if (c.code) {
      CHECK(r.err.find(c.message) != std::string::npos);
      CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    }
  }
}

TEST_CASE("train: every numeric hyper-parameter is range-checked before anything is written, exit 2") {
  TempDir t;
  const std::string d = " --data " + dataset() + " --progress lines";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--model tile-mlp --lr -1", "--lr: expected a number > 0, got '-1'"},
      {"--model tile-mlp --lr nan", "--lr: expected a number > 0, got 'nan'"},
      {"--model tile-mlp --lr 0", "--lr: expected a number > 0"},
      {"--model layout-resmodel --segment -1", "--segment: expected an integer >= 0, got '-1'"},
      {"--model tile-mlp --clip -1", "--clip: expected a number >= 0"},
      {"--model tile-mlp --warmup -5", "--warmup: expected an integer >= 0"},
      {"--model layout-resmodel --khops -2", "--khops: expected an integer >= -1"},
      {"--model layout-sage-6th --khops-direction up", "--khops-direction: expected one of both|consumers, got 'up'"},
      {"--model layout-tgraph --khops -1 --khops-edges configurable",  // region flags without a region
       "--khops-edges: the edges a --khops region keeps; this run keeps every node (--khops -1)"},
      {"--model layout-sage-6th --khops -1 --khops-direction consumers",
       "--khops-direction: the edges a --khops hop follows; this run keeps every node (--khops -1)"},
      {"--model layout-gin-6th --dropout 1", "--dropout: expected a number in [0, 0.95], got '1'"},
      // flags another setting makes moot: refused, not ignored
      {"--model layout-resmodel --khops 0 --khops-direction consumers",
       "--khops-direction: the edges a --khops hop follows; this run keeps only the configurable nodes (--khops 0)"},
      {"--model tile-mlp --loss hinge --temperature 3", "--temperature: acts on ListMLE; --loss hinge is not listmle"},
      {"--model tile-mlp --loss logistic --listmle-order slowest", "--listmle-order: acts on ListMLE; --loss logistic"},
      {"--model tile-mlp --loss logistic --margin 0.7", "--margin: the pairwise hinge's margin; --loss logistic"},
      {"--model tile-mlp --loss mse --mse-weight 0.5", "--mse-weight: an MSE term beside the loss; --loss mse is"},
      {"--model layout-sage-6th --dropout 0 --dropout-mask config",
       "--dropout-mask: the mask of --dropout; this run has --dropout 0"},
      {"--model layout-resmodel --segment 0 --segment-backward mask",
       "--segment-backward: how --segment trains; this run has --segment 0"},
      {"--model layout-gst --segment 10",
       "--segment: layout-gst takes no gradient cut through a range of nodes (its own segments are --segment-nodes)"},
      {"--model layout-mlp --segment 10", "--segment: layout-mlp takes no gradient cut"},
      {"--model layout-tgraph --cross-attn off --sage-order aggregate-first",
       "--sage-order: the order of the SAGE blocks that narrow the width; with --cross-attn off none do"},
      {"--model tile-mlp --edge-dropout 0.5",
       "--edge-dropout: acts on the graph's edges, and tile-mlp passes no messages along them"},
      {"--model layout-mlp --khops 1 --khops-edges configurable",
       "--khops-edges: acts on the graph's edges, and layout-mlp passes no messages"},
      {"--model tile-mlp --batch-graphs 1 --accumulate 4",
       "--accumulate 4: a step of --batch-graphs 1 splits into at most that many micro-batches"},
      {"--model tile-mlp --tta 5", "--tta 5: averages over orders of the configs, and tile-mlp scores each config"},
      {"--model layout-tgraph --cross-attn off --tta 5", "--tta 5: averages over orders of the configs, and layout"},
      {"--model tile-gat-6th --eval-chunk 1",  // (its norm over the configs made every score alike)
       "--eval-chunk 1: tile-gat-6th's configs interact (its norms or attention run over the configs scored "
       "together), and chunks of at most 1 leave a config scored alone; give 3 or more"},
      {"--model layout-tgraph --eval-chunk 2", "--eval-chunk 2: layout-tgraph's configs interact"},  // (3: 1 + 2)
      {"--model tile-mlp --margin inf", "--margin: expected a number >= 0, got 'inf'"},
      {"--model tile-mlp --hidden 0", "--hidden: expected an integer in [1, 65536], got '0'"},
      {"--model layout-resmodel --layers 0", "--layers: expected an integer in [1, 64]"},
      {"--model tile-mlp --batch-graphs 99999999999999999999", "--batch-graphs: expected an integer"},
      {"--model tile-mlp --loss hinge2", "--loss: expected one of listmle|hinge|logistic|mse"},
      {"--model tile-mlp --schedule linear", "--schedule: expected one of constant|cosine"},
      {"--model layout-resmodel --eval-indices " + t.file("no_such_folder"),
       "--eval-indices " + t.file("no_such_folder") + ": not a directory"},
      {"--model tile-mlp --memory-limit lots", "--memory-limit: expected bytes"},
      {"--model tile-mlp --memory-limit 9223372036854775807", "--memory-limit 9223372036854775807: more than the most"},
      {"--model tile-mlp --memory-limit 8589934591G",
       "--memory-limit 8589934591G: more than the most it takes, 9e18 bytes"},
      {"--model tile-mlp --memory-limit inf", "--memory-limit: expected bytes"},
      {"--model tile-mlp --checkpoint-minutes inf", "--checkpoint-minutes expects a finite number, got 'inf'"},
  };
  for (const auto& [args, want] : cases) {
    CAPTURE(args);
    const std::string out = t.file("run");
    const auto r = run_gnn("train " + args + d + " --out " + out);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(want) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(!std::filesystem::exists(out));  // nothing created on disk
  }
  {  // A recipe's own default direction (layout-sage-6th: consumers) is no flag: --khops -1 alone trains.
    const auto ok = run_gnn("train --model layout-sage-6th --khops -1 --epochs 1 --hidden 8 --op-embed 4 --layers 1" +
                            d + " --out " + t.file("whole"));
    CHECK_MESSAGE(ok.exit_code == 0, ok.err);
  }
  const auto r = run_gnn("train --model tile-mlp --out " + t.file("run") + " --data " + t.file("no_such_data"));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("no_such_data: no such file or directory") != std::string::npos);
  for (const char* cmd : {"eval --run x", "score --submission x.csv"}) {  // a missing folder is not ignored
    CAPTURE(cmd);
    const auto e = run_gnn(std::string(cmd) + " --data " + dataset() + " --eval-indices " + t.file("no_such_folder"));
    CHECK(e.exit_code == 2);
    CHECK(e.err.find("--eval-indices " + t.file("no_such_folder") + ": not a directory") != std::string::npos);
  }
}

TEST_CASE("train: the training hyper-parameters read once into typed fields, every recipe's defaults too") {
  for (const train::Recipe& r : train::recipes()) {
    CAPTURE(r.name);
    const train::HParams h = r.defaults();
    CHECK(train::check_hparams(r.hparams, h, r.name).empty());
    const train::TrainHParams t = train::TrainHParams::read(h, r.kind == "layout");
    CHECK(t.lr == h.num("lr"));
    CHECK(t.batch_graphs == h.integer("batch-graphs"));
    CHECK(t.configs == h.integer("configs"));
    CHECK(t.regression() == (h.str("loss") == "mse" || h.str("loss") == "mape"));
    const bool layout = r.kind == "layout";
    CHECK(t.segment == (layout ? h.integer("segment") : 0));
    CHECK(t.khops == (layout ? h.integer("khops") : -1));
  }
  // Every field from its own flag: each set to a value no other field has.
  train::HParams h = train::find_recipe("layout-resmodel").defaults();
  for (const auto& [k, v] : std::map<std::string, std::string>{{"loss", "mape"},
                                                               {"lr", "0.02"},
                                                               {"weight-decay", "0.03"},
                                                               {"clip", "0.5"},
                                                               {"schedule", "cosine"},
                                                               {"warmup", "7"},
                                                               {"temperature", "2.5"},
                                                               {"margin", "0.3"},
                                                               {"mse-weight", "0.4"},
                                                               {"batch-graphs", "5"},
                                                               {"configs", "11"},
                                                               {"accumulate", "3"},
                                                               {"eval-chunk", "17"},
                                                               {"tta", "4"},
                                                               {"swa", "6"},
                                                               {"patience", "9"},
                                                               {"dedup", "on"},
                                                               {"draw", "with"},
                                                               {"edge-dropout", "0.15"},
                                                               {"sample-nodes", "123"},
                                                               {"node-transform", "log1p"},
                                                               {"khops", "13"},
                                                               {"segment", "77"},
                                                               {"khops-direction", "consumers"}})
    h.values[k] = v;
  REQUIRE(train::check_hparams(train::find_recipe("layout-resmodel").hparams, h, "layout-resmodel").empty());
  train::TrainHParams t = train::TrainHParams::read(h, true);
  CHECK(t.loss == train::TrainHParams::Loss::kMape);
  CHECK(t.regression());
  CHECK((t.lr == 0.02 && t.weight_decay == 0.03 && t.clip == 0.5 && t.warmup == 7));
  CHECK(t.schedule == nn::LrSchedule::Kind::kCosine);
  CHECK((t.temperature == 2.5 && t.margin == 0.3 && t.mse_weight == 0.4));
  CHECK((t.batch_graphs == 5 && t.configs == 11 && t.accumulate == 3 && t.eval_chunk == 17 && t.tta == 4));
  CHECK((t.swa == 6 && t.patience == 9 && t.dedup && t.edge_dropout == 0.15 && t.sample_nodes == 123));
  CHECK(t.draw_with_replacement);
  CHECK((t.khops == 13 && t.segment == 77 && t.khops_direction == HopDirection::kConsumers));
  CHECK(t.node_transform == FeatureTransform::kLog1p);
  CHECK(t.config_transform == FeatureTransform::kNone);  // layout configs are not transformed
  h = train::find_recipe("tile-mlp").defaults();
  h.values["config-transform"] = "standardize", h.values["loss"] = "hinge", h.values["margin"] = "0.25";
  t = train::TrainHParams::read(h, false);
  CHECK((t.loss == train::TrainHParams::Loss::kHinge && t.margin == 0.25 && !t.regression()));
  CHECK(t.config_transform == FeatureTransform::kStandardize);
  h.values["loss"] = "l1";  // what check_hparams refuses first: read names the flag all the same
  CHECK_THROWS_WITH(train::TrainHParams::read(h, false), doctest::Contains("--loss: unknown loss 'l1'"));
}

TEST_CASE("train: a hyper-parameter table gives the specs and fills its struct's fields, typed") {
  enum class Kind { kA, kB };
  struct P {
    int64_t width = 0;
    double rate = 0;
    bool shared = false;
    std::string stack;
    Kind kind = Kind::kA;
  };
  Kind (*parse_kind)(const std::string&) = [](const std::string& v) { return v == "b" ? Kind::kB : Kind::kA; };
  const auto table = train::HParamTable<P>()
                         .add(&P::width, train::integer_hp("width", "8", 1, 64, "w"))
                         .add(&P::rate, train::number_hp("rate", "0.5", 0, 1, "r"))
                         .add(&P::shared, train::dropout_mask_hp("config"), "shared")
                         .add(&P::stack, train::choice_hp("stack", "xla", "xla|nlp", "s"))
                         .add(&P::kind, train::choice_hp("kind", "a", "a|b", "k"), parse_kind);
  REQUIRE(table.specs().size() == 5u);
  CHECK(table.specs()[2].name == "dropout-mask");
  train::HParams h;
  for (const train::HParamSpec& s : table.specs()) h.values[s.name] = s.default_value;
  P p = table.read(h);
  CHECK((p.width == 8 && p.rate == 0.5 && !p.shared && p.stack == "xla" && p.kind == Kind::kA));
  h.values = {{"width", "33"}, {"rate", "0.25"}, {"dropout-mask", "shared"}, {"stack", "nlp"}, {"kind", "b"}};
  REQUIRE(train::check_hparams(table.specs(), h, "test").empty());
  p = table.read(h);
  CHECK((p.width == 33 && p.rate == 0.25 && p.shared && p.stack == "nlp" && p.kind == Kind::kB));
  // A derived struct's table extends the base's: every base row first, filling the base's fields.
  struct Q : P {
    int64_t depth = 0;
  };
  const auto more = train::HParamTable<Q>().extend(table).add(&Q::depth, train::integer_hp("depth", "2", 1, 9, "d"));
  REQUIRE(more.specs().size() == 6u);
  CHECK(more.specs()[5].name == "depth");
  h.values["depth"] = "7";
  const Q q = more.read(h);
  CHECK((q.width == 33 && q.rate == 0.25 && q.shared && q.stack == "nlp" && q.kind == Kind::kB && q.depth == 7));
  // A row whose field does not match its spec, or a bool for a value the choice lacks, is refused.
  CHECK_THROWS_WITH(train::HParamTable<P>().add(&P::rate, train::integer_hp("rate", "1", 0, 9, "")),
                    doctest::Contains("--rate's spec and field are of different types"));
  CHECK_THROWS_WITH(train::HParamTable<P>().add(&P::shared, train::choice_hp("mask", "on", "on|off", ""), "yes"),
                    doctest::Contains("--mask has no value 'yes'"));
  // Only the validation flags may change on resume, in every recipe.
  for (const train::Recipe& r : train::recipes())
    for (const train::HParamSpec& s : r.hparams)
      CHECK_MESSAGE(!s.resume_change.empty() == (s.name == "val-every" || s.name == "val-configs"), r.name, " --",
                    s.name);
}

TEST_CASE("train: a resumed run keeps its data, epochs and seed, extends when told, and clears killed writes") {
  TempDir t;
  const std::string run = t.file("run");
  auto r = run_gnn("train --model tile-mlp --data " + dataset() + " --epochs 3 --batch-graphs 2 --progress lines " +
                   "--checkpoint-minutes 0 --kill-after-steps 4 --out " + run);
  CHECK(r.exit_code != 0);
  // What a kill during the best-checkpoint write leaves: the temporary of a process that is gone.
  const std::string stale = run + "/best.npz.tmp-999999999";
  std::ofstream(stale) << "half a checkpoint";
  r = run_gnn("train --resume --out " + run);  // as the README writes it: the run knows its data and length
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(Json::parse(last_line(r.out))["epochs"].as_int() == 3);
  CHECK(metric_lines(run + "/metrics.jsonl").size() == 3u);
  CHECK(!std::filesystem::exists(stale));
  // Asked for more epochs, the finished run goes on and says so.
  r = run_gnn("train --resume --out " + run + " --epochs 5");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("resuming with --epochs 5: the run was started with 3; it now ends after epoch 5") !=
        std::string::npos);
  CHECK(Json::parse(last_line(r.out))["epochs"].as_int() == 5);
  CHECK(metric_lines(run + "/metrics.jsonl").size() == 5u);
  // And the next plain resume keeps the new length: nothing left to do.
  r = run_gnn("train --resume --out " + run);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(Json::parse(last_line(r.out))["epochs"].as_int() == 5);
}

TEST_CASE("train: a checkpoint from before the run's settings were recorded resumes on the command line's") {
  TempDir t;
  const std::string run = t.file("run");
  auto r = run_gnn("train --model tile-mlp --data " + dataset() + " --epochs 2 --progress lines --out " + run);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  {  // model.npz as an older gnn wrote it: no meta/data, epochs, steps, max_graphs, eval_indices
    std::vector<std::pair<std::string, Tensor>> kept;
    for (auto& [k, v] : NpzReader(run + "/model.npz").load_all())
      if (k != "meta/data" && k != "meta/epochs" && k != "meta/steps" && k != "meta/max_graphs" &&
          k != "meta/eval_indices")
        kept.emplace_back(k, v);
    save_npz(run + "/model.npz", kept);
  }
  r = run_gnn("train --resume --out " + run);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("does not record its dataset (written by an older gnn); pass --data") != std::string::npos);
  r = run_gnn("train --resume --out " + run + " --data " + dataset() + " --epochs 3 --max-graphs 100");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("resuming with --epochs 3: the run was started with ? (not recorded") != std::string::npos);
  CHECK(Json::parse(last_line(r.out))["epochs"].as_int() == 3);
  r = run_gnn("train --resume --out " + run);  // recorded now
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(Json::parse(last_line(r.out))["epochs"].as_int() == 3);
}

TEST_CASE("train: a dataset holding a graph with no nodes stops naming the file") {
  TempDir t;
  const std::string split = t.file("data/npz/tile/xla/train");
  std::filesystem::create_directories(split);
  for (const auto& f : std::filesystem::directory_iterator(dataset() + "/npz/tile/xla/train"))
    std::filesystem::copy_file(f.path(), split + "/" + f.path().filename().string());
  std::filesystem::copy_file(testing::source_path("tests/data/fuzz_regressions/zero_nodes.npz"), split + "/empty.npz");
  const auto r = run_gnn("train --model tile-mlp --epochs 1 --progress lines --data " + t.file("data") + " --out " +
                         t.file("run"));
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("empty.npz: array 'node_feat': shape (0, 140) has no nodes") != std::string::npos);
  CHECK(!std::filesystem::exists(t.file("run/model.npz")));
}

// The real release's tile train split (one kernel of 2 configs) has every config column constant, so
// preprocessing keeps none: batches then carry [G*C, 0] config features. (The null memcpy this once made
// shows under scripts/sanitize.sh's UBSan; every build checks that such a run trains and validates.)
TEST_CASE("train: tile configs whose every feature is constant train on zero config columns") {
  TempDir t;
  for (const char* split : {"train", "valid"}) {
    const std::string dir = t.file(std::string("data/npz/tile/xla/") + split);
    std::filesystem::create_directories(dir);
    for (const auto& f : std::filesystem::directory_iterator(dataset() + "/npz/tile/xla/" + split)) {
      std::map<std::string, Tensor> a = NpzReader(f.path().string()).load_all();
      Tensor& cfg = a.at("config_feat");
      for (int64_t i = 0; i < cfg.numel(); ++i) cfg.f32()[i] = float(i % cfg.size(1));  // constant per column
      save_npz(dir + "/" + f.path().filename().string(), {a.begin(), a.end()});
    }
  }
  const auto r = run_gnn("train --model tile-mlp --epochs 2 --configs 2 --progress lines --data " + t.file("data") +
                         " --out " + t.file("run"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(std::isfinite(Json::parse(last_line(r.out))["best_valid_score"].as_number()));
}

TEST_CASE("train: a batch that does not fit in --memory-limit stops with its graphs and the bytes named") {
  TempDir t;
  const std::string base = "train --model layout-resmodel --data " + dataset() + " --epochs 1 --progress lines --out ";
  auto r = run_gnn(base + t.file("fits") + " --memory-limit 1G");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  // The graphs load (a few hundred KB) but a step of the 3 train graphs x 24 configs does not fit in 2 MB.
  r = run_gnn(base + t.file("tight") + " --memory-limit 2M --configs 24");
  CHECK(r.exit_code == 1);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.find("step 1 (graphs layout:xla:default:synth_train_") != std::string::npos);
  CHECK(r.err.find("does not fit in the memory limit of 2097152 bytes (--memory-limit): it needs more than ") !=
        std::string::npos);
  CHECK(!std::filesystem::exists(t.file("tight")));  // the folder it made, lock file and all, is gone again
  r = run_gnn(base + t.file("n1/n2/tight") + " --memory-limit 2M --configs 24");
  CHECK(r.exit_code == 1);
  CHECK(!std::filesystem::exists(t.file("n1")));  // and the parents it made for it
  std::filesystem::create_directories(t.file("mine"));  // a folder the user made stays
  r = run_gnn(base + t.file("mine") + " --memory-limit 2M --configs 24");
  CHECK(r.exit_code == 1);
  CHECK(std::filesystem::exists(t.file("mine")));
}

TEST_CASE("train: the validation flags without a valid split are refused, not ignored") {
  TempDir t;
  REQUIRE(run_gnn("synth --collection tile --graphs 2 --configs 8 --split train --out " + t.file("d")).exit_code == 0);
  REQUIRE(run_gnn("synth --collection layout --graphs 2 --nodes 60 --configs 8 --split train --out " + t.file("d"))
              .exit_code == 0);
  std::filesystem::create_directories(t.file("ei"));
  std::ofstream(t.file("ei/xla_random.json")) << "{}";
  for (const std::string& flag :
       std::vector<std::string>{"--patience 3", "--val-every 2", "--val-configs 4", "--eval-indices " + t.file("ei")}) {
    CAPTURE(flag);
    // (--eval-indices acts on layout validation only: a tile recipe refuses it whatever its data)
    const std::string kind = flag.rfind("--eval-indices", 0) == 0 ? "layout" : "tile";
    const auto r = run_gnn("train --model " + kind + "-mlp --epochs 1 --data " + t.file("d") + " --out " +
                           t.file("run") + " " + flag);
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.err.find(flag.substr(0, flag.find(' ')) + ": acts on validation, and --data " + t.file("d") +
                             " has no " + kind + " valid files") != std::string::npos,
                  r.err);
    CHECK(!std::filesystem::exists(t.file("run")));
  }
  // An --eval-indices folder without the valid graphs' collection's file: refused before training, not at
  // the first validation.
  const auto r = run_gnn("train --model layout-mlp --epochs 1 --data " + dataset() + " --out " + t.file("run") +
                         " --eval-indices " + t.file("ei"));
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(r.err.find("--eval-indices " + t.file("ei") + ": no xla_default.json for the layout:xla:default") !=
                    std::string::npos,
                r.err);
  CHECK(!std::filesystem::exists(t.file("run")));
}

TEST_CASE("train: --accumulate takes the one-batch step in parts, in less memory") {
  TempDir t;
  // tile: ListMLE + an MSE term; layout: the pairwise hinge + a MAPE term, with segments. A batch of 3
  // graphs in 1, 2 (2 + 1 graphs: unequal parts) and 3 micro-batches.
  for (const char* model : {"tile-mlp", "layout-resmodel"}) {
    CAPTURE(model);
    const bool layout = std::string(model).rfind("layout", 0) == 0;
    const std::string base = std::string(" --model ") + model + " --data " + dataset() +
                             " --epochs 3 --batch-graphs 3 " +
                             (layout ? "--loss hinge --segment 150 --mape-weight 0.01" : "--mse-weight 0.5");
    std::vector<std::vector<Json>> curves;
    std::vector<double> peak;
    for (int a : {1, 2, 3}) {
      const std::string run = t.file(std::string(model) + std::to_string(a));
      const auto r = run_gnn("train --out " + run + base + " --accumulate " + std::to_string(a));
      REQUIRE_MESSAGE(r.exit_code == 0, r.err);
      peak.push_back(Json::parse(last_line(r.out))["peak_tensor_mb"].as_number());
      std::vector<Json> lines;
      std::ifstream in(run + "/metrics.jsonl");
      for (std::string l; std::getline(in, l);) lines.push_back(Json::parse(l));
      REQUIRE(lines.size() == 3);
      curves.push_back(lines);
    }
    for (size_t a = 1; a < curves.size(); ++a)
      for (size_t e = 0; e < 3; ++e) {
        const double x = curves[0][e]["train_loss"].as_number(), y = curves[a][e]["train_loss"].as_number();
        CHECK(std::fabs(x - y) <= 1e-4 * std::fabs(x));  // the same step, summed in another order
      }
    // One graph at a time holds a third of the activations (the prepared graphs are the same).
    if (layout) CHECK(peak[2] < peak[0]);
  }
}

TEST_CASE("train: each graph ranks min(--configs, its own count) configs, whatever its batch's others hold") {
  // Kernels of 3 to 40 configs (real tile kernels list from 2 to thousands), all in one batch of 8. Each
  // trains min(20, its count), as the originals sample a kernel; before, all trained the fewest any held.
  TempDir t;
  const std::string data = t.file("d");
  auto r = run_gnn("synth --collection tile --out " + data + " --graphs 8 --configs 3 --configs-max 40 --seed 4 "
                   "--split train");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  int64_t want = 0, fewest = INT64_MAX;
  std::set<int64_t> below;
  for (const DatasetFile& f : kind_files(data, "tile", "train")) {
    const int64_t n = file_configs(f);
    want += std::min<int64_t>(20, n), fewest = std::min(fewest, n);
    if (n < 20) below.insert(n);
  }
  REQUIRE(below.size() >= 2);  // two counts under --configs: two micro-batches of their own, and more
  REQUIRE(want > 8 * fewest);
  for (const char* accumulate : {"1", "3"}) {
    CAPTURE(accumulate);
    r = run_gnn("train --model tile-mlp --data " + data + " --out " + t.file(std::string("run") + accumulate) +
                " --epochs 1 --batch-graphs 8 --configs 20 --accumulate " + accumulate);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const Json j = Json::parse(last_line(r.out));
    REQUIRE(j["steps"].as_int() == 1);
    const double configs = j["configs_per_s"].as_number() * j["train_seconds"].as_number();
    CHECK(std::fabs(configs - double(want)) <= 1e-6 * double(want));
  }
}

TEST_CASE("train: --patience stops after that many epochs without a better valid score, resumed runs too") {
  TempDir t;
  const std::string run = t.file("run");
  // A learning rate too small to move any prediction: epoch 1 sets the best score and none beats it.
  auto r = run_gnn("train --model tile-mlp --data " + dataset() + " --out " + run +
                   " --epochs 20 --batch-graphs 2 --lr 1e-12 --patience 2 --checkpoint-minutes 0 --kill-after-steps 4");
  CHECK(r.exit_code != 0);  // killed in epoch 2 (3 steps per epoch)
  r = run_gnn("train --resume --out " + run);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("stopping early: no better valid score in the last 2 epochs (--patience); the best was epoch 1's") !=
        std::string::npos);
  const Json j = Json::parse(last_line(r.out));
  CHECK(j["epochs"].as_int() == 3);
  CHECK(j["best_epoch"].as_int() == 1);
  CHECK(j["stopped_early"].as_bool());
  CHECK(metric_lines(run + "/metrics.jsonl").size() == 3u);
  r = run_gnn("train --resume --out " + run);  // nothing left to do
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(Json::parse(last_line(r.out))["epochs"].as_int() == 3);
}

TEST_CASE("train: --dedup trains on each distinct config once, the fastest of its copies") {
  const auto files = kind_files(dataset(), "layout", "train");
  const Preprocessing prep = fit_preprocessing(files, true, FeatureTransform::kOfficial, FeatureTransform::kNone, -1);
  int64_t dropped = 0;
  for (const DatasetFile& f : files) {
    CAPTURE(f.path);
    const ModelGraph all = prepare_graph(f, prep), once = prepare_graph(f, prep, true);
    CHECK(all.num_configs() == file_configs(f));
    CHECK(once.num_configs() == file_configs(f, true));
    dropped += all.num_configs() - once.num_configs();
    // Every config of the file has a kept copy (equal features) that is at least as fast.
    const int64_t row = all.config.numel() / all.num_configs();
    for (int64_t c = 0; c < all.num_configs(); ++c) {
      bool covered = false;
      for (int64_t k = 0; k < once.num_configs() && !covered; ++k)
        covered = std::memcmp(all.config.f32() + c * row, once.config.f32() + k * row, size_t(row) * 4) == 0 &&
                  once.target[size_t(k)] <= all.target[size_t(c)];
      CHECK(covered);
    }
  }
  CHECK(dropped > 0);  // the generator repeats about 15% of the layout configs, as a real search does
  TempDir t;
  const auto r = run_gnn("train --model layout-resmodel --data " + dataset() + " --out " + t.file("run") +
                         " --epochs 1 --dedup on --batch-graphs 3 --configs 24");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  // 3 graphs x min(24, its distinct configs) each (some hold fewer than the 24 each file lists)
  int64_t fewest = 24, want = 0;
  for (const DatasetFile& f : files)
    fewest = std::min(fewest, file_configs(f, true)), want += std::min<int64_t>(24, file_configs(f, true));
  const Json j = Json::parse(last_line(r.out));
  CHECK(j["steps"].as_int() == 1);
  CHECK(fewest < 24);
  const double trained = j["configs_per_s"].as_number() * j["train_seconds"].as_number();
  CHECK(std::fabs(trained - double(want)) <= 1e-6 * double(want));
}

TEST_CASE("train: --draw with draws --configs configs of each graph with replacement, past its count") {
  // The draw itself: every index in range, repeats where k > n, the same draws from the same generator.
  Rng a(7), b(7);
  const std::vector<int64_t> d = sample_with_replacement(3, 200, a);
  REQUIRE(d.size() == 200);
  std::vector<int64_t> seen(3, 0);
  for (int64_t i : d) {
    REQUIRE((i >= 0 && i < 3));
    ++seen[size_t(i)];
  }
  CHECK((seen[0] > 0 && seen[1] > 0 && seen[2] > 0));
  CHECK(sample_with_replacement(3, 200, b) == d);
  CHECK(sample_with_replacement(5, 0, a).empty());
  CHECK_THROWS_WITH_AS(sample_with_replacement(0, 2, a), doctest::Contains("2 draws from nothing"), Error);
  // One step of 3 graphs x 24 configs: without replacement a graph with fewer distinct configs gives
  // fewer (the --dedup case above); with replacement every graph gives 24.
  const auto files = kind_files(dataset(), "layout", "train");
  int64_t fewest = 24;
  for (const DatasetFile& f : files) fewest = std::min(fewest, file_configs(f, true));
  REQUIRE(fewest < 24);
  TempDir t;
  const std::string base = "train --model layout-resmodel --data " + dataset() + " --dedup on";
  for (const char* draw : {"without", "with"}) {
    CAPTURE(draw);
    const auto r =
        run_gnn(base + " --configs 24 --epochs 1 --batch-graphs 3 --draw " + draw + " --out " + t.file(draw));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    if (std::string(draw) == "with") CHECK(configs_trained(t.file(draw)) == 3 * 24);
    else CHECK(configs_trained(t.file(draw)) < 3 * 24);
  }
  // Where every graph holds --configs configs the two draws give other slates (not one draw cut short).
  const std::string small = base + " --configs 3 --epochs 1 --batch-graphs 3 --out ";
  auto r = run_gnn(small + t.file("small-without"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = run_gnn(small + t.file("small-with") + " --draw with");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(configs_trained(t.file("small-without")) == configs_trained(t.file("small-with")));
  CHECK_FALSE(same_bits(checkpoint_weights(t.file("small-without") + "/model.npz"),
                        checkpoint_weights(t.file("small-with") + "/model.npz")));
  // Killed in the middle of epoch 2 and resumed, a run drawing with replacement ends where the unbroken
  // one did (3 graphs in 2 steps an epoch).
  const std::string runs = base + " --configs 24 --epochs 2 --batch-graphs 2 --draw with --out ";
  const std::string whole = t.file("whole"), killed = t.file("killed");
  r = run_gnn(runs + whole);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = run_gnn(runs + killed + " --checkpoint-minutes 0 --kill-after-steps 3");
  CHECK(r.exit_code != 0);
  r = run_gnn("train --resume --out " + killed);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(same_bits(checkpoint_weights(whole + "/model.npz"), checkpoint_weights(killed + "/model.npz")));
  CHECK(configs_trained(whole) == configs_trained(killed));
  // A run from before the flag drew without replacement: it resumes so, and goes on.
  drop_hparam(whole + "/model.npz", "draw");
  CHECK(read_meta(whole + "/model.npz").hparams.str("draw") == "without");
  r = run_gnn("train --resume --out " + whole + " --epochs 3");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(configs_trained(whole) < configs_trained(killed) + 3 * 24);  // epoch 3 drew no more than each count
  r = run_gnn(base + " --epochs 1 --batch-graphs 3 --draw twice --out " + t.file("bad"));
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("--draw") != std::string::npos);
}

TEST_CASE("train: --swa averages the last K epochs' weights into swa.npz, scored, resumed bit for bit") {
  TempDir t;
  const std::string base = " --model tile-mlp --data " + dataset() + " --batch-graphs 2 --swa 2";
  const std::string whole = t.file("whole"), killed = t.file("killed");
  auto r = run_gnn("train --out " + whole + base + " --epochs 4");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto lines = metric_lines(whole + "/metrics.jsonl");
  REQUIRE(lines.size() == 4u);
  for (size_t e = 0; e < 4; ++e) {
    const Json j = Json::parse(lines[e]);
    CHECK(j["swa_snapshots"].as_int() == std::min<int64_t>(int64_t(e) + 1, 2));
    CHECK(std::isfinite(j["swa_valid_score"].as_number()));
  }
  // swa.npz holds the mean of epochs 3 and 4's weights: train the same run to 3 and to 4 epochs.
  const std::string three = t.file("three");
  r = run_gnn("train --out " + three + base + " --epochs 3");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto w3 = checkpoint_weights(three + "/model.npz"), w4 = checkpoint_weights(whole + "/model.npz");
  const auto swa = checkpoint_weights(whole + "/swa.npz");
  for (const auto& [k, v] : swa) {
    CAPTURE(k);
    REQUIRE(w3.count(k));
    for (int64_t i = 0; i < v.numel(); ++i)
      CHECK(v.f32()[i] == float((double(w3.at(k).f32()[i]) + double(w4.at(k).f32()[i])) / 2));
  }
  // Killed after epoch 3's checkpoint and resumed: the same snapshots, the same average.
  r = run_gnn("train --out " + killed + base + " --epochs 4 --checkpoint-minutes 0 --kill-after-steps 9");
  CHECK(r.exit_code != 0);
  r = run_gnn("train --resume --out " + killed);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(same_bits(checkpoint_weights(whole + "/swa.npz"), checkpoint_weights(killed + "/swa.npz")));
  CHECK(metric_lines(whole + "/metrics.jsonl") == metric_lines(killed + "/metrics.jsonl"));
  // eval reads it with --checkpoint swa.
  r = run_gnn("eval --run " + whole + " --data " + dataset() + " --checkpoint swa");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(Json::parse(last_line(r.out))["score"].as_number() ==
        doctest::Approx(Json::parse(lines[3])["swa_valid_score"].as_number()).epsilon(1e-5));  // printed to 6 digits
}

TEST_CASE("train: tile-mlp sums over the kernel as the original, and a run from before --pool keeps mean and max") {
  TempDir t;
  const std::string base = "train --model tile-mlp --data " + dataset() + " --batch-graphs 2 --out ";
  auto r = run_gnn(base + t.file("sum") + " --epochs 1");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const Meta sum = read_meta(t.file("sum") + "/model.npz");
  CHECK(sum.hparams.str("pool") == "sum");
  CHECK(sum.hparams.integer("op-embed") == 32);
  // The first layer (64 wide) reads [pooled opcode embedding | pooled node features | config features]:
  // the mean-max readout doubles the pooled part.
  const auto first_layer = [](const std::string& run) {
    return NpzReader(run + "/model.npz").load("params/mlp.layers.0.weight").numel() / 64;
  };
  const std::string old = t.file("mean_max");
  r = run_gnn(base + old + " --epochs 1 --pool mean-max --op-embed 64");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const int64_t pooled = 32 + dims_of(sum.prep).node_features;
  CHECK(first_layer(t.file("sum")) == pooled + dims_of(sum.prep).config_features);
  CHECK(first_layer(old) == 2 * (pooled + 32) + dims_of(sum.prep).config_features);
  drop_hparam(old + "/model.npz", "pool");
  CHECK(read_meta(old + "/model.npz").hparams.str("pool") == "mean-max");
  r = run_gnn("train --resume --out " + old + " --epochs 2");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
}

TEST_CASE("train: the 6th place recipes train on their downstream region and resume their dropout bit for bit") {
  TempDir t;
  for (const char* model : {"layout-sage-6th", "layout-gin-6th"}) {
    CAPTURE(model);
    const std::string base = std::string("train --model ") + model + " --data " + dataset() +
                             " --hidden 16 --op-embed 8 --configs 8 --batch-graphs 2 --accumulate 2 --swa 2 --out ";
    const std::string a = t.file(std::string(model) + "_a"), b = t.file(std::string(model) + "_b");
    auto r = run_gnn(base + a + " --epochs 3");
    REQUIRE_MESSAGE(r.exit_code == 0, r.out);
    // Dropout draws from (seed, epoch, batch): a run stopped after 2 epochs and resumed draws what the
    // unbroken one drew.
    r = run_gnn(base + b + " --epochs 2");
    REQUIRE(r.exit_code == 0);
    r = run_gnn("train --resume --out " + b + " --epochs 3");
    REQUIRE_MESSAGE(r.exit_code == 0, r.out);
    CHECK(same_bits(checkpoint_weights(a + "/model.npz"), checkpoint_weights(b + "/model.npz")));
    CHECK(same_bits(checkpoint_weights(a + "/swa.npz"), checkpoint_weights(b + "/swa.npz")));
    const LoadedModel m = load_model(a + "/model.npz");
    CHECK(m.prep.khops == 5);
    CHECK(m.prep.hops == HopDirection::kConsumers);
    for (const std::string& line : metric_lines(a + "/metrics.jsonl"))
      CHECK(std::isfinite(Json::parse(line)["train_loss"].as_number()));
    // The pruned graph keeps the configurable nodes and what consumes them within 5 hops, no more.
    const auto files = kind_files(dataset(), "layout", "train");
    const ModelGraph pruned = prepare_graph(files[0], m.prep);
    const TpuGraph raw = load_tpugraph(files[0].path);
    CHECK(pruned.num_nodes() == prune_to_configurable(raw, 5, nullptr, HopDirection::kConsumers).num_nodes());
    CHECK(pruned.num_nodes() < raw.num_nodes());
    // A checkpoint from before --dropout-mask drew a mask per config: it resumes with that, not the
    // new default.
    CHECK(read_meta(a + "/model.npz").hparams.str("dropout-mask") == "shared");
    drop_hparam(a + "/model.npz", "dropout-mask");
    CHECK(read_meta(a + "/model.npz").hparams.str("dropout-mask") == "config");
    r = run_gnn("train --resume --out " + a + " --epochs 4 --dropout-mask config");
    CHECK_MESSAGE(r.exit_code == 0, r.err);
  }
}

TEST_CASE("train: --graph-repeats lists each graph R times an epoch, a step may hold one graph R times") {
  TempDir t;
  // The 2nd place's recipe draws its slates from the training graphs repeated 100 times, with margin 0.01.
  const HParams d = find_recipe("layout-sage-2nd").defaults();
  CHECK(d.integer("graph-repeats") == 100);
  CHECK(d.str("margin") == "0.01");
  CHECK(find_recipe("layout-resmodel").defaults().integer("graph-repeats") == 1);
  // One training graph listed 6 times, 3 slates a step: 2 steps an epoch, each of 3 copies x 4 configs.
  const std::string base =
      "train --model layout-sage-2nd --data " + dataset() + " --max-graphs 1 --configs 4 --batch-graphs 3 --out ";
  const std::string a = t.file("a"), b = t.file("b"), once = t.file("once");
  auto r = run_gnn(base + a + " --epochs 2 --graph-repeats 6");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("on 1 train / 1 valid layout graphs, each 6 times an epoch (a step's copies of a graph run as "
                   "one); 3 graphs x 4 configs per step, 2 steps per epoch") != std::string::npos);
  CHECK(Json::parse(last_line(r.out))["steps"].as_number() == 4);
  CHECK(configs_trained(a) == 4 * 3 * 4);
  // Listed once, the graph is one slate of a step, whatever --batch-graphs says.
  r = run_gnn(base + once + " --epochs 2 --graph-repeats 1");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(configs_trained(once) == 2 * 4);
  // Killed in the middle of epoch 2 and resumed, it ends where the unbroken run did.
  r = run_gnn(base + b + " --epochs 2 --graph-repeats 6 --checkpoint-minutes 0 --kill-after-steps 3");
  CHECK(r.exit_code != 0);
  r = run_gnn("train --resume --out " + b);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(same_bits(checkpoint_weights(a + "/model.npz"), checkpoint_weights(b + "/model.npz")));
  CHECK(metric_lines(a + "/metrics.jsonl") == metric_lines(b + "/metrics.jsonl"));
  // A run from before the flag listed each graph once: it resumes so.
  drop_hparam(once + "/model.npz", "graph-repeats");
  CHECK(read_meta(once + "/model.npz").hparams.integer("graph-repeats") == 1);
  r = run_gnn("train --resume --out " + once + " --epochs 3");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(configs_trained(once) == 3 * 4);
  r = run_gnn(base + t.file("bad") + " --graph-repeats 0");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("--graph-repeats") != std::string::npos);
  // A resumed run keeps its list: changing R would move every later step's graphs.
  r = run_gnn("train --resume --out " + a + " --epochs 3 --graph-repeats 3");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--graph-repeats 3: the run in") != std::string::npos);
  CHECK(r.err.find("was started with 6; a resumed run keeps its hyper-parameters") != std::string::npos);
  // Each copy in a step draws its own configs: the first step's loss (before any update) over two copies
  // of the graph is not that of the first copy alone, as it would be were the second the first again
  // (layout-sage-2nd has no dropout; the first copy draws what a step of one graph draws).
  const auto first_loss = [&](const std::string& run, const std::string& flags) {
    const auto q = run_gnn("train --model layout-sage-2nd --data " + dataset() + " --max-graphs 1 --configs 4" +
                           flags + " --steps 1 --out " + run);
    REQUIRE_MESSAGE(q.exit_code == 0, q.err);
    return Json::parse(metric_lines(run + "/metrics.jsonl")[0])["train_loss"].as_number();
  };
  const double one = first_loss(t.file("one"), " --batch-graphs 1 --graph-repeats 1");
  const double one_again = first_loss(t.file("one-again"), " --batch-graphs 1 --graph-repeats 1");
  const double two = first_loss(t.file("two"), " --batch-graphs 2 --graph-repeats 2");
  CHECK(one == one_again);
  CHECK(std::isfinite(two));
  CHECK(std::fabs(two - one) > 1e-6 * std::fabs(one));  // more than the order of the sums could move
}

TEST_CASE("train: a step's copies of one graph run as one graph, each copy's configs a slate of its own") {
  // layout-sage-2nd scores each config on its own, so with --share on the 4 copies of a step run as one
  // graph of 16 configs in 4 ranking groups; --share off runs them as 4 graphs. The same slates, so the
  // same losses and, after 4 steps, the same weights up to the order of the floating-point sums (which
  // Adam can lift to about the rate where a gradient is zero but for rounding: a bias before the per-config
  // sum adds the same to every config of a slate, and the hinge sees only differences).
  // Two graphs listed twice, 3 a step: the first step holds one graph twice and the other once (A A B or
  // A B B), and each part of equal copies runs as a micro-batch of its own.
  for (const auto& [data, lines] : std::vector<std::pair<std::string, size_t>>{
           {" --max-graphs 1 --graph-repeats 4 --batch-graphs 4 --epochs 4", 4},
           {" --max-graphs 2 --graph-repeats 2 --batch-graphs 3 --epochs 2", 2}}) {
  CAPTURE(data);
  TempDir t;
  const std::string base = "train --model layout-sage-2nd --data " + dataset() + data + " --configs 4 --out ";
  const auto on = run_gnn(base + t.file("on") + " --share on");
  REQUIRE_MESSAGE(on.exit_code == 0, on.err);
  CHECK(on.out.find("(a step's copies of a graph run as one)") != std::string::npos);
  CHECK(on.out.find(lines == 2 ? "on 2 train" : "on 1 train") != std::string::npos);
  const auto off = run_gnn(base + t.file("off") + " --share off");
  REQUIRE_MESSAGE(off.exit_code == 0, off.err);
  CHECK(off.out.find("copies of a graph run as one") == std::string::npos);
  const auto losses = [](const std::string& run) {
    std::vector<double> l;
    for (const std::string& line : metric_lines(run + "/metrics.jsonl"))
      l.push_back(Json::parse(line)["train_loss"].as_number());
    return l;
  };
  const std::vector<double> a = losses(t.file("on")), b = losses(t.file("off"));
  REQUIRE(a.size() == lines);  // a line an epoch
  REQUIRE(b.size() == lines);
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-6));
  const auto wa = checkpoint_weights(t.file("on") + "/model.npz"), wb = checkpoint_weights(t.file("off") + "/model.npz");
  REQUIRE(wa.size() == wb.size());
  for (const auto& [name, x] : wa) {
    if (name.find("out.bias") != std::string::npos) continue;  // shift-invariant: its gradient is rounding
    CAPTURE(name);
    const std::vector<double> u = x.astype(DType::F64).to_vector<double>(),
                              v = wb.at(name).astype(DType::F64).to_vector<double>();
    REQUIRE(u.size() == v.size());
    double worst = 0;
    for (size_t i = 0; i < u.size(); ++i) worst = std::max(worst, std::fabs(u[i] - v[i]));
    CHECK(worst < 1e-5);  // (the rate is 1e-3)
  }
  }
}

TEST_CASE("train: --schedule multistep divides the rate by sqrt(10) at 60, 70, 80 and 90% of the run") {
  TempDir t;
  CHECK(find_recipe("layout-sage-2nd").defaults().str("schedule") == "multistep");
  const auto r = run_gnn("train --model layout-sage-2nd --data " + dataset() + " --out " + t.file("r") +
                         " --max-graphs 1 --batch-graphs 1 --graph-repeats 1 --configs 4 --epochs 10 --lr 0.01");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  std::vector<double> lr;
  for (const std::string& line : metric_lines(t.file("r") + "/metrics.jsonl"))
    lr.push_back(Json::parse(line)["lr"].as_number());
  REQUIRE(lr.size() == 10u);
  // Steps 1-6 at 0.01; then from step index int(10 * f) on, one more factor each (torch's MultiStepLR).
  for (size_t s = 0; s < 6; ++s) CHECK(lr[s] == doctest::Approx(0.01));
  for (size_t s = 6; s < 10; ++s) CHECK(lr[s] == doctest::Approx(0.01 * std::pow(10.0, -0.5 * double(s - 5))));
}

TEST_CASE("train: --mape-weight adds the 2nd place's MAPE on seconds to a ranking loss, and only there") {
  TempDir t;
  const std::string base = "train --model layout-sage-2nd --data " + dataset() +
                           " --max-graphs 1 --configs 4 --batch-graphs 2 --graph-repeats 2 --epochs 1 --out ";
  // The first step's loss is taken before any update: the term adds w * mean |p - t| / t to it, t the
  // runtime in seconds, so a larger w adds proportionally more.
  std::vector<double> first;
  for (const char* w : {"0", "1", "2"}) {
    const auto r = run_gnn(base + t.file(std::string("w") + w) + " --mape-weight " + w + " --steps 1");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    first.push_back(Json::parse(metric_lines(t.file(std::string("w") + w) + "/metrics.jsonl")[0])["train_loss"]
                        .as_number());
  }
  CHECK(first[1] > first[0]);
  CHECK(first[2] - first[0] == doctest::Approx(2 * (first[1] - first[0])).epsilon(1e-6));
  for (const char* loss : {"mse", "mape"}) {
    const auto r = run_gnn(base + t.file(loss) + " --loss " + std::string(loss) + " --mape-weight 1");
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("--mape-weight: a MAPE term on the prediction read as seconds") != std::string::npos);
    CHECK(!std::filesystem::exists(t.file(loss)));
  }
  // Beside the MSE term it would read the prediction on two scales at once.
  {
    const auto q = run_gnn(base + t.file("both") + " --mape-weight 1 --mse-weight 1");
    CHECK(q.exit_code == 2);
    CHECK(q.err.find("--mape-weight with --mse-weight") != std::string::npos);
    CHECK(!std::filesystem::exists(t.file("both")));
  }
  // A tile recipe has no such flag (its runtimes are not in seconds).
  const auto r =
      run_gnn("train --model tile-mlp --data " + dataset() + " --out " + t.file("tile") + " --mape-weight 1");
  CHECK(r.exit_code == 2);
}

TEST_CASE("train: --batch-pairs-weight adds the pairwise loss over the whole batch, graphs mixed") {
  TempDir t;
  const auto files = kind_files(dataset(), "layout", "train");
  REQUIRE(files.size() >= 2);
  // Two programs in one step, every config of each (24), no DropEdge: the first step's loss is that of
  // the initial weights, which a learning rate of 1e-30 leaves as they were for the scores below.
  const std::string base = "train --model layout-sage-5th --data " + dataset() +
                           " --max-graphs 2 --batch-graphs 2 --configs 24 --edge-dropout 0 --hidden 16 --op-embed 8 "
                           "--layers 2 --lr 1e-30 --steps 1 --threads 2 --out ";
  std::vector<double> first;  // hinge (the recipe's) at weights 0 and 1.5, then logistic at the same
  for (const std::string loss : {"hinge", "logistic"})
    for (const std::string w : {"0", "1.5"}) {
      const std::string run = t.file(loss + w);
      const auto r = run_gnn(base + run + " --loss " + loss + " --batch-pairs-weight " + w);
      REQUIRE_MESSAGE(r.exit_code == 0, r.err);
      first.push_back(Json::parse(metric_lines(run + "/metrics.jsonl")[0])["train_loss"].as_number());
    }
  const LoadedModel m = load_model(t.file("hinge0") + "/model.npz");
  std::vector<double> p, y;  // both programs' scores and runtimes, side by side
  std::vector<size_t> graph_of;
  for (size_t f = 0; f < 2; ++f) {
    const ModelGraph g = prepare_graph(files[f], m.prep, false, m.model->needs().features);
    REQUIRE(g.num_configs() == 24);
    std::vector<int64_t> all(24);
    std::iota(all.begin(), all.end(), 0);
    for (double s : predict_configs(*m.model, g, all, 64)) p.push_back(s), graph_of.push_back(f);
    y.insert(y.end(), g.target.begin(), g.target.end());
  }
  // The 5th place's hinge (margin 1), and the logistic loss, each a mean over the ordered pairs t_i > t_j:
  // within each program, and over every pair of the 48 configs.
  for (const bool logistic : {false, true}) {
    CAPTURE(logistic);
    double within = 0, across = 0, n_within = 0, n_across = 0;
    for (size_t i = 0; i < p.size(); ++i)
      for (size_t j = 0; j < p.size(); ++j) {
        if (!(y[i] > y[j])) continue;
        const double d = p[i] - p[j], h = logistic ? std::log1p(std::exp(-d)) : std::max(0.0, 1.0 - d);
        across += h, n_across += 1;
        if (graph_of[i] == graph_of[j]) within += h, n_within += 1;
      }
    within /= n_within, across /= n_across;
    CHECK(std::fabs(across - within) > 1e-3);  // the programs' runtimes differ: the terms are not the same
    CHECK(first[logistic ? 2 : 0] == doctest::Approx(within).epsilon(1e-5));
    CHECK(first[logistic ? 3 : 1] == doctest::Approx(within + 1.5 * across).epsilon(1e-5));
  }
  // A step's copies of a graph stay graphs of one micro-batch: not merged (merging runs a micro-batch per
  // pattern of copies, A A | B, whose pairs across them the term would miss).
  const auto copies = run_gnn("train --model layout-sage-2nd --data " + dataset() +
                              " --max-graphs 2 --graph-repeats 2 --batch-graphs 3 --configs 4 --steps 1 "
                              "--batch-pairs-weight 1 --out " + t.file("copies"));
  REQUIRE_MESSAGE(copies.exit_code == 0, copies.err);
  CHECK(copies.out.find("each 2 times an epoch") != std::string::npos);
  CHECK(copies.out.find("run as one") == std::string::npos);
  // Graphs with fewer configs than --configs run as micro-batches of their own: said, once.
  const std::string tiles = t.file("tiles");
  auto r = run_gnn("synth --collection tile --out " + tiles + " --graphs 8 --configs 3 --configs-max 40 --seed 4 "
                   "--split train");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = run_gnn("train --model tile-mlp --data " + tiles + " --loss hinge --configs 20 --batch-graphs 8 --steps 2 "
              "--batch-pairs-weight 1 --out " + t.file("tile_run"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string said = "the term pairs configs within each (said once)";
  CHECK(r.err.find(said) != std::string::npos);
  CHECK(r.err.find(said) == r.err.rfind(said));
  // Refused where the batch's pairs would be split, or the loss has no pairs.
  for (const auto& [flags, says] : std::vector<std::pair<std::string, std::string>>{
           {" --accumulate 2", "which --accumulate splits"}, {" --loss listmle", "is not pairwise"}}) {
    CAPTURE(flags);
    const auto r = run_gnn(base + t.file("refused") + " --batch-pairs-weight 1" + flags);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("--batch-pairs-weight: ") != std::string::npos);
    CHECK(r.err.find(says) != std::string::npos);
    CHECK(!std::filesystem::exists(t.file("refused")));
  }
}

TEST_CASE("train: --op-max-norm renormalises the opcode rows the batches look up, and resumes bit for bit") {
  TempDir t;
  for (const char* model : {"layout-sage-6th", "layout-gst"}) {
    CAPTURE(model);
    const std::string base = std::string("train --model ") + model + " --data " + dataset() +
                             " --hidden 16 --op-embed 8 --configs 8 --batch-graphs 2 --accumulate 2 --out ";
    const std::string plain = t.file(std::string(model) + "_plain"), a = t.file(std::string(model) + "_a"),
                      b = t.file(std::string(model) + "_b");
    auto r = run_gnn(base + plain + " --epochs 3");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    r = run_gnn(base + a + " --epochs 3 --op-max-norm 1");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    r = run_gnn(base + b + " --epochs 2 --op-max-norm 1");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    r = run_gnn("train --resume --out " + b + " --epochs 3");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(same_bits(checkpoint_weights(a + "/model.npz"), checkpoint_weights(b + "/model.npz")));
    CHECK(read_meta(a + "/model.npz").hparams.str("op-max-norm") == "1");
    // Every opcode of the (pruned) training and validation graphs was looked up (validation renormalises
    // too, as torch's eval does) and renormalised to norm 1, then moved by a few optimiser steps; the
    // others got no gradient, so they moved as the plain run's did.
    const LoadedModel m = load_model(a + "/model.npz");
    std::vector<bool> used(size_t(kOpcodes), false);
    for (const char* split : {"train", "valid"})
      for (const DatasetFile& f : kind_files(dataset(), "layout", split)) {
        const ModelGraph g = prepare_graph(f, m.prep);
        for (int64_t i = 0; i < g.num_nodes(); ++i) used[size_t(g.opcode.i32()[i])] = true;
      }
    const std::string key = "params/op_embedding.weight";
    const std::vector<float> w = checkpoint_weights(a + "/model.npz").at(key).to_vector<float>(),
                             w0 = checkpoint_weights(plain + "/model.npz").at(key).to_vector<float>();
    int64_t n_used = 0;
    for (int64_t k = 0; k < kOpcodes; ++k) {
      CAPTURE(k);
      double ss = 0;
      for (int64_t f = 0; f < 8; ++f) ss += double(w[size_t(k * 8 + f)]) * w[size_t(k * 8 + f)];
      if (used[size_t(k)]) {
        ++n_used;
        CHECK(std::sqrt(ss) < 1.05);
      } else {
        for (int64_t f = 0; f < 8; ++f) CHECK(w[size_t(k * 8 + f)] == w0[size_t(k * 8 + f)]);
      }
    }
    CHECK(n_used > 3);
  }
  {  // gnn pass writes the weights its forward starts from, and the rows the forward renormalised as it left
     // them. One step at a large rate moves the rows it looked up off norm 1 (and its partial epoch's
     // validation hands the weights back as the step left them), so the pass renormalises some.
    const std::string run = t.file("pass_run"), out = t.file("pass.npz");
    auto r = run_gnn("train --model layout-sage-6th --data " + dataset() +
                     " --hidden 16 --op-embed 8 --configs 8 --batch-graphs 1 --epochs 1 --steps 1 --lr 0.05" +
                     " --op-max-norm 1 --out " + run);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    r = run_gnn("pass --run " + run + " --checkpoint last --data " + dataset() + " --configs 0,1,2,3 --out " + out);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const auto z = NpzReader(out).load_all();
    const auto w = checkpoint_weights(run + "/model.npz");
    for (const auto& [name, value] : w)
      if (name.rfind("params/", 0) == 0) CHECK(testing::same_bytes(z.at("param/" + name.substr(7)), value));
    for (const auto& [name, value] : z)
      if (name.rfind("param_after/", 0) == 0) CHECK(name == "param_after/op_embedding.weight");
    REQUIRE(z.count("param_after/op_embedding.weight"));
    const std::vector<float> before = z.at("param/op_embedding.weight").to_vector<float>(),
                             after = z.at("param_after/op_embedding.weight").to_vector<float>();
    int64_t renormed = 0;
    for (int64_t k = 0; k < kOpcodes; ++k) {
      CAPTURE(k);
      double n0 = 0, n1 = 0;
      bool same = true;
      for (int64_t f = 0; f < 8; ++f) {
        const float u = before[size_t(k * 8 + f)], v = after[size_t(k * 8 + f)];
        n0 += double(u) * u, n1 += double(v) * v, same = same && u == v;
      }
      if (same) continue;
      ++renormed;
      CHECK(std::sqrt(n0) > 1);
      CHECK(std::sqrt(n1) <= 1 + 1e-6);
      for (int64_t f = 0; f < 8; ++f)
        CHECK(after[size_t(k * 8 + f)] ==
              doctest::Approx(before[size_t(k * 8 + f)] / (std::sqrt(n0) + 1e-7)).epsilon(1e-6));
    }
    CHECK(renormed > 0);
  }
  const auto r = run_gnn("train --model layout-sage-6th --data " + dataset() + " --epochs 1 --op-max-norm -1 --out " +
                         t.file("bad"));
  CHECK(r.exit_code != 0);
  CHECK_MESSAGE(r.err.find("--op-max-norm") != std::string::npos, r.err);
  CHECK_FALSE(std::filesystem::exists(t.file("bad")));
}

TEST_CASE("train: tile-gat-6th trains with either join, resumes bit for bit after kill -9, predicts and evaluates") {
  TempDir t;
  for (const char* join : {"late", "early"}) {
    CAPTURE(join);
    const std::string base = std::string("train --model tile-gat-6th --data ") + dataset() +
                             " --hidden 16 --heads 2 --op-embed 8 --configs 8 --batch-graphs 2 --join " + join +
                             " --out ";
    const std::string a = t.file(std::string(join) + "_a"), b = t.file(std::string(join) + "_b");
    auto r = run_gnn(base + a + " --epochs 3");
    REQUIRE_MESSAGE(r.exit_code == 0, std::string(r.out + r.err));
    const double best = Json::parse(last_line(r.out))["best_valid_score"].as_number();
    for (const std::string& line : metric_lines(a + "/metrics.jsonl"))
      CHECK(std::isfinite(Json::parse(line)["train_loss"].as_number()));
    // 6 kernels in 3 batches an epoch: killed after step 4 (mid-epoch 2) and resumed, it ends where the
    // unbroken run did.
    r = run_gnn(base + b + " --epochs 3 --checkpoint-minutes 0 --kill-after-steps 4");
    CHECK(r.exit_code != 0);
    r = run_gnn("train --resume --out " + b);
    REQUIRE_MESSAGE(r.exit_code == 0, std::string(r.out + r.err));
    CHECK(same_bits(checkpoint_weights(a + "/model.npz"), checkpoint_weights(b + "/model.npz")));
    CHECK(metric_lines(a + "/metrics.jsonl") == metric_lines(b + "/metrics.jsonl"));
    const std::string csv = t.file(std::string(join) + ".csv");
    r = run_gnn("predict --run " + a + " --data " + dataset() + " --split valid --out " + csv);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(read_submission(csv).size() == 6u);
    r = run_gnn("eval --run " + a + " --data " + dataset());
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    // (the best epoch's weights, scored on the valid split as training scored them)
    CHECK(Json::parse(last_line(r.out))["score"].as_number() == doctest::Approx(best).epsilon(1e-6));
  }
  // Concatenated heads must divide the width.
  auto r = run_gnn(std::string("train --model tile-gat-6th --data ") + dataset() + " --hidden 30 --heads 4 --out " +
                   t.file("bad"));
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("--hidden 30 must be a multiple of --heads 4") != std::string::npos);
  CHECK(!std::filesystem::exists(t.file("bad")));
}

TEST_CASE("train: the seed documents' and top solutions' recipes resume bit for bit after kill -9, predict, eval") {
  TempDir t;
  // (layout-gnn-selfattn drops 10% of the edges of every training batch by default, layout-attn-violation
  // samples 150 of each graph's 300 nodes per step here, the 6th place's recipes draw dropout masks:
  // resumed, they draw the same)
  const std::string small = " --hidden 16 --op-embed 8";
  for (const auto& [name, flags] : std::vector<std::pair<std::string, std::string>>{
           {"sage", "--model layout-seed-sage --conv sage" + small},
           {"gcn", "--model layout-seed-sage --conv gcn" + small},
           {"selfattn", "--model layout-gnn-selfattn --heads 2" + small},
           {"violation",
            "--model layout-attn-violation --heads 2 --head-dim 8 --attn-window 100 --sample-nodes 150" + small},
           {"anee", "--model dnnperf-anee --edge-dim 8" + small},
           {"gst", "--model layout-gst --segment-nodes 100 --lr 0.001" + small},
           {"sage6th", "--model layout-sage-6th --accumulate 2 --swa 2" + small},
           {"gin6th", "--model layout-gin-6th --accumulate 2" + small},
           {"sage2nd", "--model layout-sage-2nd --graph-repeats 1"},  // (its own test above repeats graphs)
           {"sage5th", "--model layout-sage-5th --hidden 16 --op-embed 8"}}) {
    CAPTURE(name);
    const std::string base = "train " + flags + " --data " + dataset() + " --configs 8 --batch-graphs 2" +
                             (name == "gst" ? "" : " --segment 120") + " --out ";  // (gst cuts its own segments)
    const std::string a = t.file(name + "_a"), b = t.file(name + "_b");
    auto r = run_gnn(base + a + " --epochs 3");
    REQUIRE_MESSAGE(r.exit_code == 0, std::string(r.out + r.err));
    const double best = Json::parse(last_line(r.out))["best_valid_score"].as_number();
    const auto lines = metric_lines(a + "/metrics.jsonl");
    REQUIRE(lines.size() == 3u);
    for (const std::string& line : lines) CHECK(std::isfinite(Json::parse(line)["train_loss"].as_number()));
    // 3 layout graphs in 2 batches an epoch: killed after step 3 (mid-epoch 2) and resumed, it ends where
    // the unbroken run did, segments included.
    r = run_gnn(base + b + " --epochs 3 --checkpoint-minutes 0 --kill-after-steps 3");
    CHECK(r.exit_code != 0);
    r = run_gnn("train --resume --out " + b);
    REQUIRE_MESSAGE(r.exit_code == 0, std::string(r.out + r.err));
    CHECK(same_bits(checkpoint_weights(a + "/model.npz"), checkpoint_weights(b + "/model.npz")));
    CHECK(metric_lines(a + "/metrics.jsonl") == lines);
    CHECK(metric_lines(b + "/metrics.jsonl") == lines);
    const std::string csv = t.file(name + ".csv");
    r = run_gnn("predict --run " + a + " --data " + dataset() + " --split valid --out " + csv);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(!read_submission(csv).empty());
    r = run_gnn("eval --run " + a + " --data " + dataset());
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(Json::parse(last_line(r.out))["score"].as_number() == doctest::Approx(best).epsilon(1e-6));
  }
  // The Harvard report's ablation: without the violation ratio the head has one input fewer; without
  // node sampling the weights differ.
  const std::string violation = "train --model layout-attn-violation --data " + dataset() +
                                " --heads 2 --head-dim 8 --hidden 16 --op-embed 8 --configs 8 --batch-graphs 2 "
                                "--segment 120 --attn-window 100 --epochs 3 --out ";
  auto v = run_gnn(violation + t.file("violation_off") + " --sample-nodes 150 --violation off");
  REQUIRE_MESSAGE(v.exit_code == 0, v.err);
  CHECK(checkpoint_weights(t.file("violation_a/model.npz")).at("params/head.layers.0.weight").size(0) == 17);
  CHECK(checkpoint_weights(t.file("violation_off/model.npz")).at("params/head.layers.0.weight").size(0) == 16);
  v = run_gnn(violation + t.file("violation_whole") + " --sample-nodes 0");
  REQUIRE_MESSAGE(v.exit_code == 0, v.err);
  CHECK(!same_bits(checkpoint_weights(t.file("violation_a/model.npz")),
                   checkpoint_weights(t.file("violation_whole/model.npz"))));
  v = run_gnn(violation + t.file("bad") + " --soft-weight 0");
  CHECK(v.exit_code == 2);
  CHECK(v.err.find("--soft-weight") != std::string::npos);
  CHECK(!std::filesystem::exists(t.file("bad")));
  // dnnperf-anee regresses log runtime read as its output plus the training set's mean log runtime: an
  // untrained model is off by about the spread of the log runtimes, not by their mean (the squared offset)
  // as it would be without; validation and eval report its MRE.
  const double offset = fit_preprocessing(kind_files(dataset(), "layout", "train"), true, FeatureTransform::kOfficial,
                                          FeatureTransform::kNone, -1)
                            .log_offset;
  REQUIRE(offset > 4);
  for (const std::string& line : metric_lines(t.file("anee_a/metrics.jsonl"))) {
    CHECK(Json::parse(line)["train_loss"].as_number() < offset * offset / 4);
    CHECK(Json::parse(line)["valid"]["mre"].as_number() >= 0);
  }
  v = run_gnn("eval --run " + t.file("anee_a") + " --data " + dataset());
  REQUIRE_MESSAGE(v.exit_code == 0, v.err);
  CHECK(std::isfinite(Json::parse(last_line(v.out))["mre"].as_number()));
  v = run_gnn("train --model dnnperf-anee --data " + dataset() +
              " --hidden 16 --edge-dim 8 --op-embed 8 --configs 8 --batch-graphs 2 --epochs 1 --loss mape --mse-weight "
              "1 --out " +
              t.file("anee_mape"));
  REQUIRE_MESSAGE(v.exit_code == 0, v.err);
  // The per-node cost readout is the default; --readout mean has no cost MLP, and a run from before the
  // flag (whose only readout was the means) resumes as one.
  CHECK(checkpoint_weights(t.file("anee_a/model.npz")).count("params/node_cost.layers.0.weight") == 1);
  const std::string anee_mean = t.file("anee_mean");
  v = run_gnn("train --model dnnperf-anee --data " + dataset() +
              " --hidden 16 --edge-dim 8 --op-embed 8 --configs 8 --batch-graphs 2 --epochs 1 --readout mean --out " +
              anee_mean);
  REQUIRE_MESSAGE(v.exit_code == 0, v.err);
  CHECK(checkpoint_weights(anee_mean + "/model.npz").count("params/node_cost.layers.0.weight") == 0);
  drop_hparam(anee_mean + "/model.npz", "readout");
  CHECK(read_meta(anee_mean + "/model.npz").hparams.str("readout") == "mean");
  v = run_gnn("train --resume --out " + anee_mean + " --epochs 2");
  CHECK_MESSAGE(v.exit_code == 0, v.err);
  // Without edge dropout the self-attention model trains to other weights.
  auto r = run_gnn(
      "train --model layout-gnn-selfattn --heads 2 --data " + dataset() +
      " --hidden 16 --op-embed 8 --configs 8 --batch-graphs 2 --segment 120 --epochs 3 --edge-dropout 0 --out " +
      t.file("selfattn_full"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(!same_bits(checkpoint_weights(t.file("selfattn_a/model.npz")),
                   checkpoint_weights(t.file("selfattn_full/model.npz"))));
  // The GCN has no SAGE layer's weights and the other way round: a run remembers its conv.
  const auto sage = checkpoint_weights(t.file("sage_a/model.npz")), gcn = checkpoint_weights(t.file("gcn_a/model.npz"));
  CHECK(sage.count("params/layers.0.lin.bias") == 1);  // SAGE: Linear([agg ; x]) with its bias
  CHECK(sage.count("params/layers.0.bias") == 0);
  CHECK(gcn.count("params/layers.0.bias") == 1);  // GCN: the bias after the aggregation
  CHECK(gcn.count("params/layers.0.lin.bias") == 0);
  r = run_gnn(std::string("train --model layout-seed-sage --data ") + dataset() + " --conv gat --out " + t.file("bad"));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--conv") != std::string::npos);
  CHECK(!std::filesystem::exists(t.file("bad")));
}

TEST_CASE("train: validation and eval stop at the next graph once a cooperative scope records a signal") {
  // (the demo trains, validates and scores inside such a scope: a first Ctrl-C stops it within a graph)
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 1;  // evaluate ran to its end
    try {
      set_num_threads(1);  // (no OpenMP team in a forked child: one the parent started would not be there)
      install_interrupt_handlers();
      const auto files = kind_files(dataset(), "layout", "valid");
      const Preprocessing prep =
          fit_preprocessing(files, true, FeatureTransform::kOfficial, FeatureTransform::kNone, -1);
      const Recipe& r = find_recipe("layout-mlp");
      Rng rng(3);
      auto model = r.build(r.defaults(), {prep.node_features(), prep.config_features()}, rng);
      model->eval();
      GraphSource src(files, prep, uint64_t(1) << 30);
      CooperativeInterrupt scope;
      ::raise(SIGTERM);  // recorded, not acted on
      try {
        evaluate(*model, src, 100, "");
      } catch (const InterruptedError& e) {
        code = e.signal() == SIGTERM ? 0 : 2;
      }
      ::_exit(code);  // (before the scope ends: it would end the process by the signal)
    } catch (...) {
      ::_exit(3);
    }
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("train: eval reports the mean relative error of log-runtime predictions (--loss mse, mape)") {
  // |exp(p) - y| / y by hand: 3 against 2, 0.5 against 0.5, 4 against 10
  CHECK(mean_relative_error({std::log(3.0), std::log(0.5), std::log(4.0)}, {2.0, 0.5, 10.0}) ==
        doctest::Approx((0.5 + 0.0 + 0.6) / 3));
  CHECK_THROWS_WITH_AS(mean_relative_error({0.0}, {-1.0}), doctest::Contains("must be positive"), Error);
  // evaluate() with log_runtime: each graph's MRE is that of its predictions, and the summary their mean.
  const auto files = kind_files(dataset(), "layout", "valid");
  REQUIRE(files.size() >= 2);
  const Preprocessing prep = fit_preprocessing(files, true, FeatureTransform::kOfficial, FeatureTransform::kNone, -1);
  const Recipe& r = find_recipe("layout-mlp");
  Rng rng(3);
  auto model = r.build(r.defaults(), {prep.node_features(), prep.config_features()}, rng);
  model->eval();
  GraphSource src(files, prep, uint64_t(1) << 30);
  const Evaluation ev = evaluate(*model, src, 100, "", 1, /*log_runtime=*/true);
  REQUIRE(ev.scores.size() == files.size());
  double mean = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const auto g = src.get(i);
    std::vector<int64_t> all(size_t(g->num_configs()));
    std::iota(all.begin(), all.end(), 0);
    const double want = mean_relative_error(predict_configs(*model, *g, all, 100), g->target);
    CHECK(ev.scores[i].second.mre == doctest::Approx(want).epsilon(1e-12));
    mean += want / double(files.size());
  }
  CHECK(Json::parse(ev.json)["mre"].as_number() == doctest::Approx(mean).epsilon(1e-5));
  CHECK(evaluate(*model, src, 100, "").json.find("mre") == std::string::npos);  // scores only: no MRE
  // The preprocessing keeps the mean log runtime of its graphs' configs, and eval reads the model's
  // output plus that offset as the log runtime.
  double log_sum = 0, log_n = 0;
  for (size_t i = 0; i < files.size(); ++i)
    for (double y : src.get(i)->target) log_sum += std::log(y), log_n += 1;
  CHECK(prep.log_offset == doctest::Approx(log_sum / log_n).epsilon(1e-12));
  CHECK(prep.log_offset > 1);  // generated runtimes are far from 1: an offset of 0 would start far off
  std::vector<std::pair<std::string, Tensor>> saved;
  prep.save(saved);
  CHECK(Preprocessing::load({saved.begin(), saved.end()}, "prep").log_offset == prep.log_offset);
  const Evaluation shifted = evaluate(*model, src, 100, "", 1, true, prep.log_offset);
  const auto g0 = src.get(0);
  std::vector<int64_t> all0(size_t(g0->num_configs()));
  std::iota(all0.begin(), all0.end(), 0);
  std::vector<double> p0 = predict_configs(*model, *g0, all0, 100);
  for (double& v : p0) v += prep.log_offset;
  CHECK(shifted.scores[0].second.mre == doctest::Approx(mean_relative_error(p0, g0->target)).epsilon(1e-12));
  // The CLI: a run trained with --loss mape (or mse) is evaluated with its MRE, a ranking run without.
  TempDir t;
  for (const char* loss : {"mape", "listmle"}) {
    const std::string run = t.file(loss);
    auto c = run_gnn(std::string("train --model layout-mlp --data ") + dataset() +
                     " --configs 8 --batch-graphs 2 --epochs 2 --loss " + loss + " --out " + run);
    REQUIRE_MESSAGE(c.exit_code == 0, std::string(c.out + c.err));
    c = run_gnn("eval --run " + run + " --data " + dataset());
    REQUIRE_MESSAGE(c.exit_code == 0, c.err);
    const Json j = Json::parse(last_line(c.out));
    if (std::string(loss) == "mape") CHECK(j["mre"].as_number() >= 0);
    else CHECK(last_line(c.out).find("mre") == std::string::npos);
    // predict --runtimes writes each config's predicted runtime for a regression, and score --runtimes
    // gives eval's MRE and tau from that file alone; a ranking run predicts no runtimes (exit 2).
    const std::string csv = t.file(std::string(loss) + ".csv"), rts = t.file(std::string(loss) + "_rt.csv");
    c = run_gnn("predict --run " + run + " --data " + dataset() + " --split valid --out " + csv + " --runtimes " + rts);
    if (std::string(loss) != "mape") {
      CHECK(c.exit_code == 2);
      CHECK(c.err.find("--runtimes: ") != std::string::npos);
      CHECK(c.err.find("--loss listmle") != std::string::npos);
      CHECK(!std::filesystem::exists(rts));
      continue;
    }
    REQUIRE_MESSAGE(c.exit_code == 0, c.err);
    auto same = run_gnn("predict --run " + run + " --data " + dataset() + " --out " + csv + " --runtimes " + csv);
    CHECK(same.exit_code == 2);  // one path for both would leave one of the two files
    CHECK(same.err.find("is the --out file too") != std::string::npos);
    const std::string layout_data = dataset() + "/npz/layout/xla/default";
    c = run_gnn("score --runtimes " + rts + " --data " + layout_data);
    REQUIRE_MESSAGE(c.exit_code == 0, c.err);
    const Json s = Json::parse(last_line(c.out));
    CHECK(s["mre"].as_number() == doctest::Approx(j["mre"].as_number()).epsilon(1e-9));
    CHECK(s["kendall_tau"].as_number() == doctest::Approx(j["kendall_tau"].as_number()).epsilon(1e-9));
    c = run_gnn("score --submission " + csv + " --data " + layout_data);  // the ranking agrees with the file
    REQUIRE_MESSAGE(c.exit_code == 0, c.err);
    CHECK(Json::parse(last_line(c.out))["kendall_tau"].as_number() ==
          doctest::Approx(s["kendall_tau"].as_number()).epsilon(1e-9));
    // A file that is not complete, or not runtimes, is refused with its line named.
    std::vector<std::string> lines;
    {
      std::ifstream in(rts);
      for (std::string l; std::getline(in, l);) lines.push_back(l);
    }
    REQUIRE(lines.size() > 3);
    const std::string first_id = lines[1].substr(0, lines[1].find(','));
    auto write = [&](const std::vector<std::string>& ls) {
      std::ofstream out(t.file("bad_rt.csv"));
      for (const std::string& l : ls) out << l << "\n";
    };
    std::vector<std::string> cut = lines;
    cut.erase(cut.begin() + 1);
    write(cut);
    c = run_gnn("score --runtimes " + t.file("bad_rt.csv") + " --data " + layout_data);
    CHECK(c.exit_code == 1);
    CHECK(c.err.find(first_id + " has no predicted runtime for config 0") != std::string::npos);
    for (const auto& [row, want] : std::vector<std::pair<std::string, std::string>>{
             {first_id + ",0,-3", "line 2 (" + first_id + ", config 0): '-3' is not a runtime"},
             {first_id + ",0,nan", "'nan' is not a runtime"},
             {first_id + ",x,1", "'x' is not a config index"},
             {first_id + ",+0,1", "'+0' is not a config index"},  // plain decimal only
             {first_id + ",0,0x1p3", "'0x1p3' is not a runtime"},
             {first_id + ",0, 1", "' 1' is not a runtime"},
             {first_id + ",1", "line 2 is not 'ID,config,runtime'"},
             {lines[2], "line 3: " + first_id + " config 1 appears twice"}}) {
      CAPTURE(row);
      std::vector<std::string> bad = lines;
      bad[1] = row;
      write(bad);
      c = run_gnn("score --runtimes " + t.file("bad_rt.csv") + " --data " + layout_data);
      CHECK(c.exit_code == 1);
      CHECK(c.err.find(want) != std::string::npos);
      CHECK(std::count(c.err.begin(), c.err.end(), '\n') == 1);
    }
    c = run_gnn("score --runtimes " + rts + " --submission " + csv + " --data " + dataset());
    CHECK(c.exit_code == 2);
    CHECK(c.err.find("one of --submission FILE or --runtimes FILE") != std::string::npos);
  }
}

TEST_CASE("train: layout-tgraph trains on the configurable nodes and neighbours, resumes, evaluates with --tta") {
  TempDir t;
  const std::string base =
      "train --model layout-tgraph --data " + dataset() + " --hidden 16 --op-embed 8 --configs 8 --warmup 2 --out ";
  const std::string a = t.file("a"), b = t.file("b");
  auto r = run_gnn(base + a + " --epochs 3");
  REQUIRE_MESSAGE(r.exit_code == 0, std::string(r.out + r.err));
  // Dropout draws from (seed, epoch, batch) and the cosine schedule from the step: killed after 5 of its
  // 9 steps and resumed, the run ends where the unbroken one did.
  r = run_gnn(base + b + " --epochs 3 --checkpoint-minutes 0 --kill-after-steps 5");
  CHECK(r.exit_code != 0);
  r = run_gnn("train --resume --out " + b);
  REQUIRE_MESSAGE(r.exit_code == 0, std::string(r.out + r.err));
  CHECK(same_bits(checkpoint_weights(a + "/model.npz"), checkpoint_weights(b + "/model.npz")));
  for (const std::string& line : metric_lines(a + "/metrics.jsonl"))
    CHECK(std::isfinite(Json::parse(line)["train_loss"].as_number()));
  const LoadedModel m = load_model(a + "/model.npz");
  CHECK(m.prep.khops == 1);
  CHECK(m.prep.hops == HopDirection::kBoth);
  CHECK(m.prep.edges == RegionEdges::kAll);
  const auto files = kind_files(dataset(), "layout", "train");
  const TpuGraph raw = load_tpugraph(files[0].path);
  CHECK(prepare_graph(files[0], m.prep).num_nodes() ==
        prune_to_configurable(raw, 1, nullptr, HopDirection::kBoth).num_nodes());
  {  // --khops-edges configurable: the 1st place's pruning, stored with the model and used by eval
    const std::string e = t.file("edges");
    r = run_gnn(base + e + " --epochs 1 --khops-edges configurable");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const LoadedModel me = load_model(e + "/model.npz");
    CHECK(me.prep.edges == RegionEdges::kConfigurable);
    int64_t fewer = 0;
    for (const DatasetFile& f : files) {
      const TpuGraph g = load_tpugraph(f.path);
      const TpuGraph want = prune_to_configurable(g, 1, nullptr, HopDirection::kBoth, RegionEdges::kConfigurable);
      const ModelGraph got = prepare_graph(f, me.prep);
      CHECK(got.edges.to_vector<int64_t>() == want.edge_index.to_vector<int64_t>());
      CHECK(got.num_nodes() == prepare_graph(f, m.prep).num_nodes());
      fewer += prepare_graph(f, m.prep).edges.size(0) - got.edges.size(0);
    }
    CHECK(fewer > 0);  // the generated programs have edges between two neighbours of configurable nodes
    r = run_gnn("eval --run " + e + " --data " + dataset());
    CHECK_MESSAGE(r.exit_code == 0, r.err);
  }
  // The learned temperature moved from its start.
  const auto w = checkpoint_weights(a + "/model.npz");
  bool moved = false;
  for (const auto& [name, tensor] : w)
    if (name.find("cross.beta") != std::string::npos) moved = moved || tensor.astype(DType::F64).f64()[0] != 2.0;
  CHECK(moved);
  r = run_gnn("eval --run " + a + " --data " + dataset() + " --tta 3");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const double tau = Json::parse(last_line(r.out))["score"].as_number();
  CHECK(tau >= -1);
  CHECK(tau <= 1);
  // A run from before --sage-order summed its SAGE blocks' means first: it resumes so.
  CHECK(read_meta(a + "/model.npz").hparams.str("sage-order") == "product-first");
  drop_hparam(a + "/model.npz", "sage-order");
  CHECK(read_meta(a + "/model.npz").hparams.str("sage-order") == "aggregate-first");
}

TEST_CASE("train: --matmul-precision bf16 trains on bf16 products, resumes bit for bit, and eval computes so") {
  TempDir t;
  const std::string base = "train --model layout-tgraph --data " + dataset() +
                           " --hidden 16 --op-embed 8 --configs 8 --warmup 2 --epochs 2 --out ";
  const std::string f32 = t.file("f32"), a = t.file("a"), b = t.file("b");
  if (!gemm_bf16_supported()) {
    const auto r = run_gnn(base + a + " --matmul-precision bf16");
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("--matmul-precision bf16: this CPU has no AVX512-BF16") != std::string::npos);
    return testing::skip("this CPU has no AVX512-BF16");
  }
  const testing::PrecisionRestored precision_back;  // load_model sets the process's precision from the run
  auto r = run_gnn(base + f32);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = run_gnn(base + a + " --matmul-precision bf16");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  // Other products, so other weights; finite losses.
  CHECK_FALSE(same_bits(checkpoint_weights(f32 + "/model.npz"), checkpoint_weights(a + "/model.npz")));
  for (const std::string& line : metric_lines(a + "/metrics.jsonl"))
    CHECK(std::isfinite(Json::parse(line)["train_loss"].as_number()));
  // Killed after 3 of its 6 steps and resumed (the precision read back from the checkpoint), it ends where the
  // unbroken run did.
  r = run_gnn(base + b + " --matmul-precision bf16 --checkpoint-minutes 0 --kill-after-steps 3");
  CHECK(r.exit_code != 0);
  r = run_gnn("train --resume --out " + b);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(same_bits(checkpoint_weights(a + "/model.npz"), checkpoint_weights(b + "/model.npz")));
  // Loading a run sets the products it trained with; an ensemble's runs must agree.
  CHECK(load_model(a + "/model.npz").train.matmul_bf16);
  CHECK(gemm_cpu_precision() == GemmPrecision::kBf16);
  CHECK_FALSE(load_model(f32 + "/model.npz").train.matmul_bf16);
  CHECK(gemm_cpu_precision() == GemmPrecision::kF32);
  r = run_gnn("eval --run " + a + " --data " + dataset() + " --tta 1");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  r = run_gnn("eval --run " + a + " --run " + f32 + " --data " + dataset());
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("an ensemble's runs share one precision") != std::string::npos);
  // GNN_BF16_KERNEL picks the kernel: on AMX, the AVX-512 one sums in another order (other last bits), and
  // the run trains alike; a kernel it does not know is refused before the run is written.
  const std::string c = t.file("c"), d = t.file("d");
  if (gemm_bf16_kernel_supported(Bf16Kernel::kAmx) && !std::getenv("GNN_BF16_KERNEL")) {  // a: AMX's run
    r = run_gnn_env("GNN_BF16_KERNEL=avx512bf16", base + c + " --matmul-precision bf16");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK_FALSE(same_bits(checkpoint_weights(a + "/model.npz"), checkpoint_weights(c + "/model.npz")));
    const auto last_loss = [&](const std::string& run) {
      return Json::parse(metric_lines(run + "/metrics.jsonl").back())["train_loss"].as_number();
    };
    CHECK(last_loss(c) == doctest::Approx(last_loss(a)).epsilon(0.05));
  } else {
    MESSAGE("this CPU has no AMX (or may not use it), or GNN_BF16_KERNEL is set: the two bf16 kernels not compared");
  }
  r = run_gnn_env("GNN_BF16_KERNEL=tpu", base + d + " --matmul-precision bf16");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("GNN_BF16_KERNEL=tpu: unknown (amx, avx512bf16)") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(d + "/model.npz"));
}

TEST_CASE("train: building the next batch on a second thread during each step changes nothing") {
  for (const char* recipe : {"tile-earlyjoin-sage", "layout-resmodel"}) {
    CAPTURE(recipe);
    TempDir t;
    auto train = [&](const std::string& out, int prefetch) {
      TrainOptions o;
      o.recipe = recipe, o.data = dataset(), o.out = t.file(out), o.epochs = 3, o.steps = 5, o.quiet = true;
      o.progress = 0, o.prefetch = prefetch;
      o.hparams = {{"batch-graphs", "2"}};  // several steps per epoch; the step budget ends mid-epoch
      run_training(o);
    };
    train("serial", 0);
    train("prefetch", 1);
    CHECK(same_bits(checkpoint_weights(t.file("serial/model.npz")), checkpoint_weights(t.file("prefetch/model.npz"))));
    CHECK(metric_lines(t.file("serial/metrics.jsonl")) == metric_lines(t.file("prefetch/metrics.jsonl")));
  }
}

TEST_CASE("train: --node-transform trainable standardises inside the model, from whole-graph statistics") {
  TempDir t;
  const auto files = kind_files(dataset(), "layout", "train");
  ColumnStats whole, pruned;
  for (const DatasetFile& f : files) {
    const TpuGraph g = load_tpugraph(f.path);
    whole.add(g.node_feat);
    pruned.add(prune_to_configurable(g, 5, nullptr, HopDirection::kConsumers).node_feat);
  }
  const ColumnTransform want(FeatureTransform::kTrainable, whole), region(FeatureTransform::kTrainable, pruned);
  CHECK(want.shift() != region.shift());  // the statistics are the whole graphs', not the 5-hop regions'
  for (const char* model : {"layout-sage-6th", "layout-gin-6th"}) {
    CAPTURE(model);
    const std::string base = std::string("train --model ") + model + " --data " + dataset() +
                             " --hidden 16 --op-embed 8 --configs 8 --batch-graphs 2 --accumulate 1" +
                             " --node-transform trainable --out ";
    const std::string a = t.file(std::string(model) + "_a"), b = t.file(std::string(model) + "_b");
    auto r = run_gnn(base + a + " --epochs 2");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    r = run_gnn(base + b + " --epochs 1");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    r = run_gnn("train --resume --out " + b + " --epochs 2");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(same_bits(checkpoint_weights(a + "/model.npz"), checkpoint_weights(b + "/model.npz")));
    const LoadedModel m = load_model(a + "/model.npz");
    REQUIRE(m.prep.node.kind() == FeatureTransform::kTrainable);
    CHECK(m.prep.node.shift() == want.shift());
    CHECK(m.prep.node.scale() == want.scale());
    // The data side leaves the (pruned) features as they are.
    const TpuGraph raw = prune_to_configurable(load_tpugraph(files[0].path), 5, nullptr, HopDirection::kConsumers);
    CHECK(prepare_graph(files[0], m.prep).x.to_vector<float>() == raw.node_feat.to_vector<float>());
    // A new model starts from the statistics, and training moved them (their gradients reach them).
    Rng rng(1);
    const auto fresh = m.recipe->build(m.hparams, dims_of(m.prep), rng);
    const auto w = checkpoint_weights(a + "/model.npz");
    for (const nn::NamedParam& p : fresh->parameters()) {
      if (p.name.rfind("node_norm.", 0) != 0) continue;
      const std::vector<double>& stat = p.name == "node_norm.mean" ? want.shift() : want.scale();
      const std::vector<float> start = p.var.value().to_vector<float>(),
                               trained = w.at("params/" + p.name).to_vector<float>();
      REQUIRE(start.size() == stat.size());
      for (size_t j = 0; j < stat.size(); ++j) CHECK(start[j] == float(stat[j]));
      CHECK(trained != start);
    }
    CHECK(w.count("params/node_norm.mean"));
    r = run_gnn("eval --run " + a + " --data " + dataset());
    CHECK_MESSAGE(r.exit_code == 0, r.err);
    // A checkpoint whose hyper-parameters and preprocessing disagree is refused, not run unstandardised.
    std::map<std::string, Tensor> arrays = NpzReader(a + "/model.npz").load_all();
    std::string hp = tensor_text(arrays, "meta/hparams", a);
    const std::string from = "\"node-transform\": \"trainable\"";
    REQUIRE(hp.find(from) != std::string::npos);
    hp.replace(hp.find(from), from.size(), "\"node-transform\": \"standardize\"");
    arrays["meta/hparams"] = text_tensor(hp);
    save_npz(t.file("damaged.npz"), std::vector<std::pair<std::string, Tensor>>(arrays.begin(), arrays.end()));
    CHECK_THROWS_WITH_AS(load_model(t.file("damaged.npz")),
                         doctest::Contains("meta/hparams has node-transform standardize but the stored preprocessing "
                                           "is trainable; the checkpoint is damaged"),
                         Error);
  }
  {  // tile-gat-6th: the node features and the config features, each with its own
    const std::string base = "train --model tile-gat-6th --data " + dataset() +
                             " --hidden 16 --op-embed 8 --heads 2 --configs 8 --batch-graphs 4 --node-transform" +
                             " trainable --config-transform trainable --out ";
    auto r = run_gnn(base + t.file("tile_a") + " --epochs 2");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    r = run_gnn(base + t.file("tile_b") + " --epochs 1");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    r = run_gnn("train --resume --out " + t.file("tile_b") + " --epochs 2");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(same_bits(checkpoint_weights(t.file("tile_a/model.npz")), checkpoint_weights(t.file("tile_b/model.npz"))));
    ColumnStats config;
    for (const DatasetFile& f : kind_files(dataset(), "tile", "train")) config.add(load_tpugraph(f.path).config_feat);
    const LoadedModel m = load_model(t.file("tile_a/model.npz"));
    REQUIRE(m.prep.config.kind() == FeatureTransform::kTrainable);
    CHECK(m.prep.config.shift() == ColumnTransform(FeatureTransform::kTrainable, config).shift());
    const auto w = checkpoint_weights(t.file("tile_a/model.npz"));
    for (const char* p : {"node_norm.mean", "node_norm.std", "config_norm.mean", "config_norm.std"})
      CHECK(w.count(std::string("params/") + p));
    r = run_gnn("eval --run " + t.file("tile_a") + " --data " + dataset());
    CHECK_MESSAGE(r.exit_code == 0, r.err);
  }
  // A recipe whose model has no standardisation of its own refuses it, naming the layout recipes that take it.
  const auto r = run_gnn("train --model layout-resmodel --data " + dataset() + " --node-transform trainable --out " +
                         t.file("bad"));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--node-transform: layout-resmodel takes official|log1p|standardize|none|5th, got 'trainable' "
                   "(a value of layout-sage-6th, layout-gin-6th)") != std::string::npos);
}

TEST_CASE("train: --node-transform 5th gives the model the 5th place's 191 columns, and eval reads them back") {
  TempDir t;
  const std::string run = t.file("fifth");
  auto r = run_gnn("train --model layout-sage-5th --data " + dataset() +
                   " --hidden 16 --op-embed 8 --configs 4 --epochs 1 --node-transform 5th --out " + run);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const LoadedModel m = load_model(run + "/model.npz");
  REQUIRE(m.prep.node.kind() == FeatureTransform::kFifthPlace);
  CHECK(dims_of(m.prep).node_features == 191);
  const DatasetFile f = kind_files(dataset(), "layout", "train")[0];
  const Tensor x = prepare_graph(f, m.prep).x;
  CHECK(x.size(1) == 191);
  CHECK(testing::same_bytes(x, m.prep.node.apply(load_tpugraph(f.path).node_feat)));  // whole graphs: no pruning
  r = run_gnn("eval --run " + run + " --data " + dataset());
  CHECK_MESSAGE(r.exit_code == 0, r.err);
}

TEST_CASE("layout-sage-5th: --opcode-groups unary shares abs's row, --own-layout zeros changes the inputs") {
  TempDir t;
  // Three runs from the same seed, the same data: each flag against neither. The pass writes every
  // gradient: under unary, the rows of the 20 merged opcodes get none (their nodes read abs's row).
  auto pass = [&](const std::string& name, const std::string& flags) {
    const std::string run = t.file(name), out = t.file(name + ".npz");
    auto r = run_gnn("train --model layout-sage-5th --data " + dataset() +
                     " --hidden 16 --op-embed 8 --configs 4 --epochs 1 --seed 1 --progress lines --out " + run + flags);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    r = run_gnn("pass --run " + run + " --data " + dataset() + " --configs 0,1,2,3 --out " + out);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    return NpzReader(out).load_all();
  };
  const std::string shared = " --opcode-groups none --own-layout rank";  // the defaults are the original's
  const auto plain = pass("plain", shared), unary = pass("unary", " --opcode-groups unary --own-layout rank"),
             zeros = pass("zeros", " --opcode-groups none --own-layout zeros");
  const int32_t merged[] = {15, 30, 91, 37, 38, 40, 49, 50, 51, 107, 53, 60, 118, 80, 94, 81, 103, 90, 120, 96};
  auto row_norm = [](const Tensor& g, int32_t row) {
    double s = 0;
    for (int64_t j = 0; j < g.size(1); ++j) s += std::fabs(double(g.f32()[row * g.size(1) + j]));
    return s;
  };
  double plain_merged = 0, unary_merged = 0;
  for (int32_t op : merged) {
    plain_merged += row_norm(plain.at("grad/opcode_embed.weight"), op);
    unary_merged += row_norm(unary.at("grad/opcode_embed.weight"), op);
  }
  CHECK(plain_merged > 0);  // the graphs hold some of them
  CHECK(unary_merged == 0);
  CHECK(row_norm(unary.at("grad/opcode_embed.weight"), 1) > 0);
  // The generated graphs hold nodes whose own layout has a 0 within the rank: their inputs change.
  CHECK(zeros.at("score").to_vector<float>() != plain.at("score").to_vector<float>());
  CHECK(plain.at("batch/x").to_vector<float>() == zeros.at("batch/x").to_vector<float>());
  // A run from before the two flags read every opcode on its own row and -1 past the rank only.
  drop_hparam(t.file("plain") + "/model.npz", "opcode-groups");
  drop_hparam(t.file("plain") + "/model.npz", "own-layout");
  const HParams h = read_meta(t.file("plain") + "/model.npz").hparams;
  CHECK(h.str("opcode-groups") == "none");
  CHECK(h.str("own-layout") == "rank");
  CHECK(read_meta(t.file("unary") + "/model.npz").hparams.str("node-transform") == "5th");  // the default
}

TEST_CASE("gnn pass: a run's scores, loss and gradients on one batch, with the batch, and bad flags named") {
  TempDir t;
  const std::string run = t.file("run"), out = t.file("pass.npz");
  // layout-sage-6th: GELU and instance norms, smooth, so finite differences check its gradients.
  auto r =
      run_gnn("train --model layout-sage-6th --data " + dataset() +
              " --epochs 1 --configs 4 --hidden 16 --op-embed 4 --layers 2 --threads 2 --progress lines --out " + run);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto files = kind_files(dataset(), "layout", "train");
  r = run_gnn("pass --run " + run + " --data " + dataset() + " --graph " + files[1].stem +
              " --configs 5,0,3,1 --threads 2 --out " + out);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const Json j = Json::parse(last_line(r.out));
  CHECK(j["graph"].as_string() == files[1].id());
  CHECK(j["mode"].as_string() == "eval");
  const auto z = NpzReader(out).load_all();
  const LoadedModel m = load_model(run + "/best.npz");
  const ModelGraph g = prepare_graph(files[1], m.prep);
  const std::vector<int64_t> configs = {5, 0, 3, 1};
  // The batch is the graph's, preprocessed as the run was; the scores are predict's.
  CHECK(z.at("batch/x").to_vector<float>() == g.x.to_vector<float>());
  CHECK(z.at("batch/config_ids").to_vector<int64_t>() == configs);
  const std::vector<double> predicted = predict_configs(*m.model, g, configs, 64);
  const Tensor& score = z.at("score");
  REQUIRE(score.numel() == 4);
  for (int64_t k = 0; k < 4; ++k) CHECK(score.f32()[k] == doctest::Approx(predicted[size_t(k)]).epsilon(1e-6));
  // The loss is the run's of those scores; each gradient the loss's finite difference.
  const Tensor target = z.at("batch/target"), groups = Tensor::from_vector(std::vector<int64_t>{0, 4});
  auto loss_of = [&](const std::vector<double>& s) {
    Tensor p = Tensor::empty({4, 1}, DType::F32);
    for (int64_t k = 0; k < 4; ++k) p.f32()[k] = float(s[size_t(k)]);
    REQUIRE(m.train.loss == TrainHParams::Loss::kLogistic);  // the 6th place's ordered-pair loss
    return nn::pairwise_logistic_loss(ag::Var(p), target, groups).value().item();
  };
  const double loss = z.at("loss").f64()[0];
  CHECK(loss == doctest::Approx(loss_of(predicted)).epsilon(1e-6));
  int checked = 0;
  for (const nn::NamedParam& p : m.model->parameters()) {
    const Tensor& grad = z.at("grad/" + p.name);
    REQUIRE(grad.shape() == p.var.shape());
    CHECK(z.at("param/" + p.name).to_vector<float>() == p.var.value().to_vector<float>());
    int64_t at = 0;  // the entry with the largest gradient
    for (int64_t i = 0; i < grad.numel(); ++i)
      if (std::fabs(grad.f32()[i]) > std::fabs(grad.f32()[at])) at = i;
    if (std::fabs(grad.f32()[at]) < 1e-2) continue;
    float* w = Tensor(p.var.value()).f32() + at;
    const float w0 = *w, h = 1e-3f;
    *w = w0 + h;
    const double up = loss_of(predict_configs(*m.model, g, configs, 64));
    *w = w0 - h;
    const double down = loss_of(predict_configs(*m.model, g, configs, 64));
    *w = w0;
    CAPTURE(p.name);
    CHECK(grad.f32()[at] == doctest::Approx((up - down) / (2.0 * h)).epsilon(0.05));
    checked += 1;
  }
  CHECK(checked >= 4);
  // Bad flags: one line naming the flag.
  r = run_gnn("pass --run " + run + " --data " + dataset() + " --graph nosuch --out " + out);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--graph nosuch: no such layout train file") != std::string::npos);
  r = run_gnn("pass --run " + run + " --data " + dataset() + " --configs 1,x --out " + out);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--configs: 'x' is not a config index") != std::string::npos);
  r = run_gnn("pass --run " + run + " --data " + dataset() + " --configs 1,100000 --out " + out);
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.err.find("--configs: config 100000 is past the ") != std::string::npos, r.err);
  // A graph of fewer configs than the default batch's eight: the default named as such.
  r = run_gnn("synth --collection layout --out " + t.file("few") + " --graphs 1 --configs 5 --split train --seed 3");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = run_gnn("pass --run " + run + " --data " + t.file("few") + " --split train --out " + out);
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(
      r.err.find("--configs (its default, 0,1,...,7): config 5 is past the 5 configs of ") != std::string::npos, r.err);
  r = run_gnn("pass --run " + run + " --data " + dataset() + " --out " + run + "/model.npz");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--out") != std::string::npos);
  const auto has = [](const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
  };
  // A graph of another split is named with the flag that reads it; a checkpoint that is none, as a usage error.
  const auto valid = kind_files(dataset(), "layout", "valid");
  r = run_gnn("pass --run " + run + " --data " + dataset() + " --graph " + valid[0].stem + " --out " + out);
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(has(r.err,
                    "(it is a valid file: --split valid); give a file stem, or an ID as the submission "
                    "CSV writes it (" +
                        files[0].id() + ")"),
                r.err);
  r = run_gnn("pass --run " + run + " --data " + dataset() + " --checkpoint bogus --out " + out);
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(has(r.err, "--checkpoint: expected auto, best, last or swa, got 'bogus'"), r.err);
  // --out inside the data's tree (onto a graph, or a new .npz beside them) would be read as a graph: refused.
  const std::vector<uint8_t> graph = testing::read_bytes(valid[0].path);
  const std::string beside = std::filesystem::path(valid[0].path).parent_path().string() + "/new.npz";
  for (const std::string& inside : {valid[0].path, beside}) {
    r = run_gnn("pass --run " + run + " --data " + dataset() + " --out " + inside);
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(has(r.err, "--out " + inside + ": lies inside "), r.err);
  }
  CHECK(testing::read_bytes(valid[0].path) == graph);
  CHECK_FALSE(std::filesystem::exists(beside));
  // A flat collection folder (its graphs in the collection's own folder) holds its graphs there too; and a
  // damaged file in another split does not turn a --graph typo into that file's error.
  const std::string flat = t.file("flat"), in_flat = flat + "/npz/layout/xla/default";
  std::filesystem::create_directories(in_flat);
  for (int k = 0; k < 2; ++k) std::filesystem::copy_file(files[k].path, in_flat + "/" + files[k].stem + ".npz");
  r = run_gnn("pass --run " + run + " --data " + flat + " --out " + in_flat + "/new.npz");
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(has(r.err, "--out " + in_flat + "/new.npz: lies inside "), r.err);
  CHECK_FALSE(std::filesystem::exists(in_flat + "/new.npz"));
  const std::string junk = t.file("junk");
  std::filesystem::copy(dataset(), junk, std::filesystem::copy_options::recursive);
  std::ofstream(std::filesystem::path(kind_files(junk, "layout", "valid")[0].path).parent_path() / "junk.npz") << "x";
  r = run_gnn("pass --run " + run + " --data " + junk + " --graph nosuch --out " + out);
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(has(r.err, "--graph nosuch: no such layout train file"), r.err);
  // A batch larger than the memory this process may use stops at the limit pass sets (90% of it), before the
  // system refuses an allocation or the kernel kills it.
  // (a model of the default width: 60,000 copies of one config are gigabytes of activations)
#if defined(__SANITIZE_ADDRESS__)
  testing::skip("the memory limit's case: AddressSanitizer reserves more address space than ulimit -v leaves");
#else
  const std::string wide = t.file("wide");
  r = run_gnn("train --model layout-tgraph --data " + dataset() + " --epochs 1 --configs 4 --threads 1 --out " + wide);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  std::string many = "0";
  for (int k = 1; k < 60000; ++k) many += ",0";
  r = run_gnn_env("ulimit -v 1500000;",
                  "pass --run " + wide + " --data " + dataset() + " --threads 1 --configs " + many + " --out " + out);
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(has(r.err, "would pass the memory limit of "), r.err);
#endif
}

TEST_CASE("train: the pipeline runs on the real TpuGraphs samples") {
  const std::string tile = testing::shared_data("tpugraphs/tile/xla"),
                    layout = testing::shared_data("tpugraphs/layout/xla");
  if (!std::filesystem::is_directory(tile) || !std::filesystem::is_directory(layout)) {
    testing::skip("../shared/data/tpugraphs is not here");
    return;
  }
  TempDir t;
  // The samples sit in flat folders: their files serve as train and valid alike (a smoke test of the
  // real schema, not a generalisation result).
  auto r = run_gnn("train --model tile-earlyjoin-sage --data " + tile + " --epochs 2 --progress lines --out " +
                   t.file("tile"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const Json tj = Json::parse(last_line(r.out));
  CHECK(tj["steps"].as_int() == 4);  // 15 kernels, 10 per step
  CHECK(std::isfinite(tj["best_valid_score"].as_number()));
  r = run_gnn("predict --run " + t.file("tile") + " --data " + tile + " --split valid --out " + t.file("tile.csv"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(read_submission(t.file("tile.csv")).count("tile:xla:fusion.191") == 1);
  r = run_gnn("train --model layout-resmodel --data " + layout + " --epochs 2 --progress lines --out " +
              t.file("layout"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = run_gnn("eval --run " + t.file("layout") + " --data " + layout);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const Json lj = Json::parse(last_line(r.out));
  CHECK(lj["kendall_tau"].as_number() >= -1);
  CHECK(lj["kendall_tau"].as_number() <= 1);
  // The 1st place model on the real program: its 62 configurable nodes and their neighbours.
  r = run_gnn("train --model layout-tgraph --hidden 32 --data " + layout + " --epochs 2 --out " + t.file("tgraph"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = run_gnn("predict --run " + t.file("tgraph") + " --data " + layout + " --split valid --tta 2 --out " +
              t.file("tgraph.csv"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(read_submission(t.file("tgraph.csv")).size() == 1);
  // The seed documents' models and the 6th place tile GAT train and predict on the real samples too.
  for (const auto& [name, flags, data] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"seed-sage", "--model layout-seed-sage", layout},
           {"selfattn", "--model layout-gnn-selfattn", layout},
           {"violation", "--model layout-attn-violation --heads 4 --head-dim 8", layout},
           {"anee", "--model dnnperf-anee", layout},
           {"gst", "--model layout-gst --hidden 64", layout},
           {"gat", "--model tile-gat-6th --hidden 32", tile}}) {
    CAPTURE(name);
    r = run_gnn("train " + flags + " --data " + data + " --epochs 1 --out " + t.file(name));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(std::isfinite(Json::parse(last_line(r.out))["best_valid_score"].as_number()));
    r = run_gnn("predict --run " + t.file(name) + " --data " + data + " --split valid --out " + t.file(name + ".csv"));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(read_submission(t.file(name + ".csv")).size() == (data == tile ? 15u : 1u));
  }
}
