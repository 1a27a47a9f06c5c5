// gnn demo: the README's main job. It generates a small tile and a small layout dataset in the
// official tree (gnn synth), trains the official tile baseline (EarlyJoinSAGE) and the official layout
// baseline (ResModel) next to their MLP baselines, scores each on the valid split with the
// competition metrics, and prints a comparison table. Everything it runs is what gnn synth / train /
// eval run; nothing is downloaded.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "apps/commands.h"
#include "apps/train/trainer.h"
#include "io/json.h"
#include "io/synth.h"
#include "runtime/allocator.h"
#include "runtime/parallel.h"

namespace gnn::cli {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Entry {
  std::string model, metric;
  double score = 0, train_s = 0, configs_per_s = 0;
  int64_t steps = 0;
};

}  // namespace

Command demo_command() {
  Command c;
  c.name = "demo";
  c.summary = "the README's main job: generate tile + layout data, train the official baselines and MLPs, compare";
  c.flags = {{"tile-graphs", "N", "tile graphs per split", "80"},
             {"layout-graphs", "N", "layout graphs per split", "16"},
             {"tile-epochs", "E", "epochs for the tile models", "60"},
             {"layout-epochs", "E", "epochs for the layout models", "60"},
             {"seed", "S", "seed for the data and the training", "1"},
             {"threads", "T", "CPU threads (default: all)"},
             {"out", "DIR", "keep the dataset and the runs here (default: a temporary directory, removed)"}};
  c.details =
      "Data: gnn synth writes tile kernels (30 nodes, 100 configs each) and layout programs (1000 nodes,\n"
      "64 configs each) with runtimes from an analytic TPU-like cost model (docs/synthetic.md). Models:\n"
      "tile-mlp and tile-earlyjoin-sage scored by 1 - slowdown@5 (the Kaggle tile score), layout-mlp and\n"
      "layout-resmodel by Kendall tau, on the test split (the generator keeps its runtimes) with the weights\n"
      "of the epoch that scored best on the valid split. The synthetic\n"
      "features are heavy-tailed products, so the demo trains with sign-log1p features (--node-transform\n"
      "log1p, --config-transform log1p) and lr 0.01; everything else is each recipe's default.\n"
      "The last line of stdout is one JSON object with every score.";
  c.run = [](const Args& a) {
    if (a.has("threads")) set_num_threads(int(a.integer("threads", 1, 4096)));
    const int64_t tile_graphs = a.integer("tile-graphs", 2, 100'000), layout_graphs = a.integer("layout-graphs", 2, 10'000);
    const int64_t tile_epochs = a.integer("tile-epochs", 1, 100'000), layout_epochs = a.integer("layout-epochs", 1, 100'000);
    const uint64_t seed = uint64_t(a.integer("seed", 0, INT64_MAX));
    namespace fs = std::filesystem;
    const bool keep = a.has("out");
    const fs::path dir =
        keep ? fs::path(a.str("out")) : fs::temp_directory_path() / ("gnn_demo_" + std::to_string(::getpid()));
    const auto t_all = std::chrono::steady_clock::now();
    std::printf("gnn demo: TpuGraphs-style runtime ranking on generated data, %d threads\n", num_threads());
    std::vector<Entry> table;
    try {
      const fs::path data = dir / "data";
      synth::DatasetOptions t;
      t.collection = "tile", t.graphs = tile_graphs, t.configs = 100, t.seed = seed;
      synth::DatasetOptions l;
      l.collection = "layout", l.graphs = layout_graphs, l.nodes = 1000, l.configs = 64, l.seed = seed + 1;
      auto t0 = std::chrono::steady_clock::now();
      synth::write_dataset(data.string(), t);
      synth::write_dataset(data.string(), l);
      std::printf("  data     %lld tile kernels x 100 configs and %lld layout programs x 1000 nodes x 64 configs per "
                  "split, in %.1f s (%s)\n\n",
                  (long long)tile_graphs, (long long)layout_graphs, seconds_since(t0), data.c_str());
      struct Job {
        const char* model;
        int64_t epochs;
      };
      for (const Job& j : {Job{"tile-mlp", tile_epochs}, Job{"tile-earlyjoin-sage", tile_epochs}, Job{"layout-mlp", layout_epochs},
                           Job{"layout-resmodel", layout_epochs}}) {
        train::TrainOptions o;
        o.recipe = j.model, o.data = data.string(), o.out = (dir / "runs" / j.model).string();
        o.epochs = j.epochs, o.seed = seed, o.progress = 0, o.quiet = true;
        o.hparams = {{"node-transform", "log1p"}, {"lr", "0.01"}};
        if (std::string(j.model).rfind("tile", 0) == 0) o.hparams["config-transform"] = "log1p";
        if (fs::exists(o.out)) fs::remove_all(o.out);
        std::printf("  training %-20s %3lld epochs ... ", j.model, (long long)j.epochs);
        std::fflush(stdout);
        const train::TrainResult r = train::run_training(o);
        const bool layout = std::string(j.model).rfind("layout", 0) == 0;
        // The epoch with the best valid score, scored on the test split (the generator keeps its runtimes).
        const train::LoadedModel m = train::load_model(train::run_checkpoint(o.out, "auto"));
        train::GraphSource test(train::kind_files(data.string(), layout ? "layout" : "tile", "test"), m.prep, uint64_t(1) << 30);
        const train::Evaluation ev = train::evaluate(*m.model, test, m.hparams.integer("eval-chunk"), "");
        table.push_back({j.model, layout ? "Kendall tau" : "1 - slowdown@5", ev.score, r.seconds,
                         double(r.configs) / std::max(1e-9, r.seconds), r.steps});
        std::printf("test %.3f (valid %.3f at epoch %lld) in %.1f s\n", ev.score, r.best_score, (long long)m.epoch, r.seconds);
      }
    } catch (...) {
      if (!keep) fs::remove_all(dir);
      throw;
    }
    std::printf("\n  %-20s  %-15s  %7s  %6s  %8s  %10s\n", "model", "test metric", "score", "steps", "train s", "configs/s");
    for (const Entry& e : table)
      std::printf("  %-20s  %-15s  %7.3f  %6lld  %8.1f  %10.0f\n", e.model.c_str(), e.metric.c_str(), e.score,
                  (long long)e.steps, e.train_s, e.configs_per_s);
    std::printf("\n  the official baselines against their MLPs: tile %+.3f, layout %+.3f\n", table[1].score - table[0].score,
                table[3].score - table[2].score);
    const MemoryStats m = host_memory_stats();
    std::printf("  host memory peak %.1f MB; %.1f s in all\n", double(m.peak_bytes) / 1e6, seconds_since(t_all));
    if (keep)
      std::printf("  dataset and runs kept in %s (try: gnn plot %s/runs/layout-resmodel)\n", dir.c_str(), dir.c_str());
    else
      fs::remove_all(dir);
    Json j = Json::object();
    for (const Entry& e : table) j.set(e.model, e.score);
    j.set("seconds", seconds_since(t_all));
    std::printf("%s\n", j.dump().c_str());
    return 0;
  };
  return c;
}

}  // namespace gnn::cli
