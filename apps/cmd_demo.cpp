// gnn demo: the README's main job. It generates a small tile and a small layout dataset in the
// official tree (gnn synth), trains the official tile baseline (EarlyJoinSAGE) and the official layout
// baseline (ResModel) next to their MLP baselines, and the 1st place Kaggle layout model (TGraph, at a
// smaller width) beside them, with a few training seeds each, scores each on the
// test split with the competition metrics beside a random ranking's score, says what the numbers show,
// and writes one report of every run's curves. Everything it runs is what gnn synth / train / eval / plot
// run; nothing is downloaded.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "apps/commands.h"
#include "apps/plot.h"
#include "apps/scoring.h"
#include "apps/train/trainer.h"
#include "dist/comm.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/synth.h"
#include "runtime/allocator.h"
#include "runtime/parallel.h"

namespace gnn::cli {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? NAN : s / double(v.size());
}
double stddev(const std::vector<double>& v) {  // sample standard deviation (n - 1)
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / double(v.size() - 1));
}

struct Entry {
  std::string model, metric;
  std::vector<double> scores;  // test score per training seed
  double train_s = 0;
  int64_t configs = 0;
};

// What a ranking that ignores the graph scores on the test split: every config of every graph given a
// random order, averaged over 20 draws from a fixed seed. The floor a model must clear to have learnt.
double random_ranking_score(const std::string& data, bool layout) {
  const std::vector<DatasetFile> files = train::kind_files(data, layout ? "layout" : "tile", "test");
  std::vector<std::vector<double>> runtimes;  // read once, ranked 20 times
  for (const DatasetFile& f : files) runtimes.push_back(scored_runtimes(f));
  std::vector<double> draws;
  Rng rng(12345);
  for (int d = 0; d < 20; ++d) {
    std::vector<std::pair<std::string, GraphScore>> scores;
    for (size_t i = 0; i < files.size(); ++i) {
      const std::vector<double>& y = runtimes[i];
      std::vector<double> p(y.size());
      for (double& v : p) v = rng.uniform();
      scores.emplace_back(files[i].collection.str(), score_predictions(files[i].id(), layout, p, y, int64_t(p.size())));
    }
    draws.push_back(mean_score(scores));
  }
  return mean(draws);
}

// The 1st place model's width in the demo: 256 would take most of the demo's two minutes alone.
constexpr int kDemoTgraphWidth = 64;
constexpr const char* kDemoMarker = ".gnn-demo";  // in --out: a folder the demo made

// A new folder from a mkdtemp template (...XXXXXX).
std::filesystem::path make_temp_folder(const std::filesystem::path& pattern) {
  std::string name = pattern.string();
  GNN_CHECK(::mkdtemp(name.data()) != nullptr, "cannot make a temporary folder ", pattern.string(), " (",
            std::strerror(errno), "); set TMPDIR to another folder, or give --out DIR");
  return name;
}

// One demo at a time in a folder: the second would remove the first's data/ and runs/ under it. The marker file
// is the lock (flock, released when the process ends, however it ends); made in place, never renamed over,
// so two demos starting at once lock the same file.
class DemoLock {
 public:
  DemoLock() = default;
  DemoLock(const DemoLock&) = delete;
  DemoLock& operator=(const DemoLock&) = delete;
  ~DemoLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  void take(const std::filesystem::path& marker, const std::filesystem::path& dir) {
    fd_ = ::open(marker.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    GNN_CHECK(fd_ >= 0, "gnn demo: --out ", dir.string(), ": cannot open its marker file ", marker.string(), " (",
              std::strerror(errno), ")");
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK)  // (no flock on this filesystem: unlocked)
      throw UsageError("gnn demo: --out " + dir.string() +
                       ": another gnn demo is running in this folder; wait for it to end, or give another --out");
    struct stat st {};
    static constexpr char kText[] = "a folder of gnn demo's: its data/ and runs/ are made anew by each demo\n";
    if (::fstat(fd_, &st) == 0 && st.st_size == 0)
      GNN_CHECK(::write(fd_, kText, sizeof kText - 1) == ssize_t(sizeof kText - 1), "gnn demo: ", marker.string(),
                ": write failed (", std::strerror(errno), ")");
  }

 private:
  int fd_ = -1;
};

// "tile-earlyjoin-sage beats tile-mlp by 0.120 (more than twice the seeds' spread)", or "trails ... by".
std::string compare(const Entry& model, const Entry& baseline) {
  const double d = mean(model.scores) - mean(baseline.scores);
  const double spread = std::max(stddev(model.scores), stddev(baseline.scores));
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s %s %s by %.3f (%s)", model.model.c_str(),
                d > 0   ? "beats"
                : d < 0 ? "trails"
                        : "ties with",
                baseline.model.c_str(), std::fabs(d),
                model.scores.size() < 2     ? "one seed each: no spread to judge by"
                : std::fabs(d) > 2 * spread ? "more than twice the seeds' spread"
                                            : "within twice the seeds' spread: not a clear difference");
  return buf;
}

}  // namespace

Command demo_command() {
  Command c;
  c.name = "demo";
  c.summary =
      "the README's main job: generate tile + layout data, train the official baselines, their MLPs and the 1st place "
      "model, compare";
  c.flags = {
      {"tile-graphs", "N", "tile kernels in the train split (valid and test hold an eighth as many each)", "800"},
      {"layout-graphs", "N", "layout programs in the train split (valid and test hold a quarter as many each)", "64"},
      {"tile-epochs", "E", "epochs for the tile models", "60"},
      {"layout-epochs", "E", "epochs for the layout models", "30"},
      {"seeds", "K", "training seeds per model (the spread of the scores is over these)", "3"},
      {"seed", "S", "seed for the data and the first training seed", "1"},
      kThreadsFlag,
      {"out", "DIR",
       "keep the dataset and the runs here: a new or empty folder, or one an earlier demo made, whose data/ "
       "and runs/ are replaced (default: a temporary directory, of which only the report is kept)"}};
  c.details =
      "Data: gnn synth writes tile kernels (4-60 nodes, each admitting 40 to 100 distinct tiles, as the\n"
      "release's larger kernels do: with fewer, a top 5 covers most of a kernel and every ranking scores\n"
      "near 1) and layout programs (1000 nodes, 64 configs each; 64 to train on, as the release's 61 per XLA\n"
      "search, and 16 each to validate and test) with runtimes from an analytic TPU-like\n"
      "cost model calibrated against the real samples (docs/synthetic.md). Models: tile-mlp and\n"
      "tile-earlyjoin-sage scored by 1 - slowdown@5 (the Kaggle tile score), layout-mlp, layout-resmodel\n"
      "and layout-tgraph (the 1st place model, width 64 here instead of 256) by Kendall tau, on the test\n"
      "split (the generator keeps its runtimes) with the weights of the epoch that scored best on the valid\n"
      "split, each trained with --seeds seeds on the same data. A random ranking's score on the same split\n"
      "is printed beside them: the floor a model must clear. The synthetic features are heavy-tailed\n"
      "products, so the demo trains with sign-log1p features (--node-transform log1p, --config-transform\n"
      "log1p), lr 0.003, and 2 graphs per step on layout (64 programs make 32 steps an epoch); everything\n"
      "else is each recipe's default. The curves of every run go into one report (report.html). The last\n"
      "line of stdout is one JSON object with every score.";
  c.run = [](const Args& a) {
    // (its runs, synth and report belong to one process: under mpirun each rank would make and remove them)
    if (dist::world().size > 1)
      throw UsageError("gnn demo runs in one process; run it without mpirun (gnn train, eval and predict take it)");
    const int64_t tile_graphs = a.integer("tile-graphs", 2, 100'000),
                  layout_graphs = a.integer("layout-graphs", 2, 10'000);
    const int64_t tile_epochs = a.integer("tile-epochs", 1, 100'000),
                  layout_epochs = a.integer("layout-epochs", 1, 100'000);
    const int64_t seeds = a.integer("seeds", 1, 100);
    // (its runs are seeded --seed to --seed + --seeds - 1: each must be a seed gnn train takes)
    const uint64_t seed = uint64_t(a.integer("seed", 0, INT64_MAX - (seeds - 1)));
    namespace fs = std::filesystem;
    const bool keep = a.has("out");
    const auto temp = [] {
      const char* env = std::getenv("TMPDIR");
      if (env && !*env) return fs::path("/tmp");  // (set but empty: as unset)
      std::error_code ec;
      const fs::path t = fs::temp_directory_path(ec);
      if (ec)
        GNN_FAIL("no folder for temporary files (TMPDIR ", env ? env : "unset", ": ", ec.message(),
                 "); set TMPDIR to one, or give --out DIR");
      return t;
    };
    // Without --out, a folder made for this demo alone (mkdtemp: never one that was there, nor a link).
    const fs::path dir = keep ? fs::path(a.str("out")) : make_temp_folder(temp() / "gnn_demo_XXXXXX");
    // The demo replaces its own data/ and runs/ in --out each time: a folder it did not make (no marker
    // file) must be new or empty, so that nothing of the user's is removed.
    const fs::path marker = dir / kDemoMarker;
    DemoLock lock;
    if (keep) {
      check_output_folder("out", dir.string());
      if (fs::exists(dir) && !fs::is_empty(dir) && !fs::exists(marker))
        throw UsageError("gnn demo: --out " + dir.string() +
                         ": a folder with files in it that no earlier demo made; the demo replaces its data/ and "
                         "runs/ there, so give a new or empty folder (one an older gnn demo made has no marker: "
                         "create " + marker.string() + " to reuse it)");
      fs::create_directories(dir);
      lock.take(marker, dir);
    }
    const auto t_all = std::chrono::steady_clock::now();
    std::printf("gnn demo: TpuGraphs-style runtime ranking on generated data, %d threads\n", num_threads());
    std::vector<Entry> table;
    std::vector<PlotRun> curves;
    double random_tile = 0, random_layout = 0;
    const fs::path data = dir / "data";
    // A signal while it makes data or trains stops it between graphs or steps, so that its temporary
    // folder goes; past this block one ends it at once (what is left then is the folder and its report).
    {
      CooperativeInterrupt scope;
      try {
        synth::DatasetOptions t;
        t.collection = "tile", t.graphs = tile_graphs, t.configs = 100, t.seed = seed, t.splits = {"train"};
        t.nodes = 4, t.nodes_max = 60, t.min_configs = 40;
        synth::DatasetOptions l;
        l.collection = "layout", l.graphs = layout_graphs, l.nodes = 1000, l.configs = 64, l.seed = seed + 1;
        auto t0 = std::chrono::steady_clock::now();
        fs::remove_all(data);  // the demo's own data, made anew (gnn synth refuses to mix it with an old one)
        fs::remove_all(dir / "runs");  // and its runs: an earlier demo's other seeds were trained on the old data
        fs::remove(dir / "report.html");  // and their report (a demo stopped now must not leave it to this data)
        synth::write_dataset(data.string(), t);
        // Its own seed: a split's graphs follow from the seed and the split's place in the list.
        t.graphs = std::max<int64_t>(2, tile_graphs / 8), t.splits = {"valid", "test"}, t.seed = seed + 1;
        synth::write_dataset(data.string(), t);
        // Layout: as many programs to train on as a real XLA search holds (61); with the 16 of an earlier
        // demo the 1st place model fell below the baseline across programs (docs/synthetic.md, "The
        // generated data as a proxy"). Valid and test: a quarter as many each, from a seed of their own.
        l.splits = {"train"};
        synth::write_dataset(data.string(), l);
        l.graphs = std::max<int64_t>(2, layout_graphs / 4), l.splits = {"valid", "test"}, l.seed = seed + 2;
        synth::write_dataset(data.string(), l);
        std::printf(
            "  data     %lld / %lld / %lld tile kernels x 40-100 configs and %lld / %lld / %lld layout programs x 1000 "
            "nodes x 64 configs (train / valid / test), in %.1f s (%s)\n\n",
            (long long)tile_graphs, (long long)t.graphs, (long long)t.graphs, (long long)layout_graphs,
            (long long)l.graphs, (long long)l.graphs, seconds_since(t0), data.c_str());
        random_tile = random_ranking_score(data.string(), false);
        random_layout = random_ranking_score(data.string(), true);
        struct Job {
          const char* model;
          int64_t epochs;
        };
        for (const Job& j :
             {Job{"tile-mlp", tile_epochs}, Job{"tile-earlyjoin-sage", tile_epochs}, Job{"layout-mlp", layout_epochs},
              Job{"layout-resmodel", layout_epochs}, Job{"layout-tgraph", layout_epochs}}) {
          const bool layout = std::string(j.model).rfind("layout", 0) == 0;
          Entry e{j.model, layout ? "Kendall tau" : "1 - slowdown@5"};
          std::printf("  training %-20s %3lld epochs, seeds", j.model, (long long)j.epochs);
          for (int64_t k = 0; k < seeds; ++k) {
            train::TrainOptions o;
            const std::string name = std::string(j.model) + "-seed" + std::to_string(seed + uint64_t(k));
            o.recipe = j.model, o.data = data.string(), o.out = (dir / "runs" / name).string();
            o.epochs = j.epochs, o.seed = seed + uint64_t(k), o.progress = 0, o.quiet = true;
            o.hparams = {{"node-transform", "log1p"}, {"lr", "0.003"}};
            if (!layout) o.hparams["config-transform"] = "log1p";
            if (layout) o.hparams["batch-graphs"] = "2";  // 32 steps an epoch, not 8
            if (o.recipe == "layout-tgraph") o.hparams["hidden"] = std::to_string(kDemoTgraphWidth);
            if (fs::exists(o.out)) fs::remove_all(o.out);
            const train::TrainResult r = train::run_training(o);
            // The epoch with the best valid score, scored on the test split (the generator keeps its runtimes).
            const train::LoadedModel m = train::load_model(train::run_checkpoint(o.out, "auto"));
            train::GraphSource test(train::kind_files(data.string(), layout ? "layout" : "tile", "test"), m.prep,
                                    uint64_t(1) << 30, false, m.model->needs().features);
            e.scores.push_back(train::evaluate(*m.model, test, m.train.eval_chunk, "", m.train.tta).score);
            e.train_s += r.seconds, e.configs += r.configs;
            curves.push_back(read_plot_run(o.out));
            std::printf(" %.3f", e.scores.back());
            std::fflush(stdout);
          }
          std::printf("\n");
          table.push_back(e);
        }
        std::error_code ec;  // (the curves and scores are read; a folder that cannot go is no failure)
        if (!keep) fs::remove_all(data, ec), fs::remove_all(dir / "runs", ec);
        throw_if_interrupted();
      } catch (const InterruptedError& e) {
        std::error_code ec;
        if (keep) throw;
        fs::remove_all(dir, ec);
        throw InterruptedError(e.signal(), "its folder " + dir.string() + " is removed");
      } catch (...) {
        std::error_code ec;  // (a folder that cannot be removed does not hide what went wrong)
        if (!keep) fs::remove_all(dir, ec);
        throw;
      }
    }
    std::printf("\n  %-20s  %-15s  %-22s  %-22s  %8s  %10s\n", "model", "test metric", "mean +- sd over seeds",
                "per seed", "train s", "configs/s");
    auto row = [&](const Entry& e) {
      std::string per;
      char buf[32];
      for (double v : e.scores) std::snprintf(buf, sizeof buf, "%s%.3f", per.empty() ? "" : " ", v), per += buf;
      std::snprintf(buf, sizeof buf, "%.3f +- %.3f", mean(e.scores), stddev(e.scores));
      std::printf("  %-20s  %-15s  %-22s  %-22s  %8.1f  %10.0f\n", e.model.c_str(), e.metric.c_str(), buf, per.c_str(),
                  e.train_s, double(e.configs) / std::max(1e-9, e.train_s));
    };
    row(table[0]), row(table[1]);
    std::printf("  %-20s  %-15s  %.3f\n", "(a random ranking)", "1 - slowdown@5", random_tile);
    row(table[2]), row(table[3]), row(table[4]);
    std::printf("  %-20s  %-15s  %.3f\n", "(a random ranking)", "Kendall tau", random_layout);
    std::printf("\n  reading: tile: %s; layout: %s; the 1st place: %s.\n", compare(table[1], table[0]).c_str(),
                compare(table[3], table[2]).c_str(), compare(table[4], table[3]).c_str());
    std::printf("  (the TpuGraphs paper, on the real data: tile EarlyJoinSAGE 0.96 against an MLP's 0.29)\n");
    std::printf(
        "  (layout-tgraph, the 1st place Kaggle model, runs at width %d here instead of 256; on generated data its\n"
        "   place against layout-resmodel depends on how many programs it trains on, 64 by default: "
        "docs/synthetic.md,\n   \"The generated data as a proxy\")\n",
        kDemoTgraphWidth);
    const MemoryStats mem = host_memory_stats();
    std::printf("  host memory peak %.1f MB; %.1f s in all\n", double(mem.peak_bytes) / 1e6, seconds_since(t_all));
    const fs::path report = dir / "report.html";
    remove_stale_temporaries(report.string());  // (an earlier demo's into --out, killed while writing it)
    write_file_atomic(report.string(),
                      plot_html("gnn demo: every run's curves", curves,
                                "Validation scores: tile runs 1 - slowdown@5, layout runs Kendall tau."));
    if (keep) {
      std::printf("  dataset and runs kept in %s; the curves of every run: %s\n", dir.c_str(), report.c_str());
    } else {
      std::printf("  the curves of every run: %s\n", report.c_str());
    }
    Json j = Json::object();
    for (const Entry& e : table) {
      j.set(e.model, mean(e.scores));
      j.set(e.model + "_sd", stddev(e.scores));
    }
    j.set("random_tile", random_tile);
    j.set("random_layout", random_layout);
    j.set("seconds", seconds_since(t_all));
    std::printf("%s\n", j.dump().c_str());
    return 0;
  };
  return c;
}

}  // namespace gnn::cli
