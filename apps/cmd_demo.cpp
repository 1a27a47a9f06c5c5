// gnn demo: the README's main job. Until the training pipeline exists it runs the most complete path
// the engine has, end to end on generated data, and says so: synthetic tile and layout datasets in
// the official tree, walked and validated, preprocessing fitted on train and applied to every graph.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "apps/commands.h"
#include "io/preprocess.h"
#include "io/synth.h"
#include "runtime/allocator.h"
#include "runtime/parallel.h"

namespace gnn::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct CollectionReport {
  int64_t graphs = 0, nodes = 0, kept_nodes = 0, configs = 0, kept_configs = 0, edges = 0;
  int64_t features_in = 0, features_out = 0;
  double load_s = 0, preprocess_s = 0;
};

// Loads every graph of the collection once, fits the official transform on the training graphs, then
// preprocesses every graph.
CollectionReport run_collection(const std::vector<DatasetFile>& files, int khops) {
  CollectionReport r;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<TpuGraph> graphs;
  ColumnStats stats;
  for (const DatasetFile& f : files) {
    graphs.push_back(load_tpugraph(f.path));
    if (f.split == "train") stats.add(graphs.back().node_feat);
  }
  PreprocessOptions o{ColumnTransform(FeatureTransform::kOfficial, stats), khops, true};
  r.load_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (const TpuGraph& raw : graphs) {
    const PreprocessedGraph p = preprocess(raw, o);
    r.graphs += 1, r.nodes += raw.num_nodes(), r.kept_nodes += p.graph.num_nodes();
    r.configs += raw.num_configs(), r.kept_configs += p.graph.num_configs(), r.edges += p.csr.num_edges;
    r.features_in = raw.node_feat.size(1), r.features_out = p.features.size(1);
  }
  r.preprocess_s = seconds_since(t0);
  return r;
}

}  // namespace

Command demo_command() {
  Command c;
  c.name = "demo";
  c.summary = "the README's main job on generated data (today: the data path end to end)";
  c.flags = {{"graphs", "N", "graphs per split and collection", "6"},
             {"seed", "S", "generator seed", "1"},
             {"out", "DIR", "keep the generated dataset here (default: a temporary directory, removed)"}};
  c.details =
      "What it runs: `gnn synth` writes a tile and a layout dataset in the official tree; every file is\n"
      "walked and validated; the official feature transform is fitted on train; every graph is pruned to\n"
      "the 2-hop neighbourhood of its configurable nodes, deduplicated and turned into CSR/CSC.\n"
      "The training pipeline (train, eval, predict, score) is not built yet.";
  c.run = [](const Args& a) {
    const int64_t graphs = a.integer("graphs", 1, 10'000);
    const uint64_t seed = uint64_t(a.integer("seed", 0, INT64_MAX));
    namespace fs = std::filesystem;
    const bool keep = a.has("out");
    const fs::path dir =
        keep ? fs::path(a.str("out")) : fs::temp_directory_path() / ("gnn_demo_" + std::to_string(::getpid()));
    std::printf("gnn demo: the TpuGraphs data path end to end on generated data (%d threads)\n", num_threads());
    std::printf("  the training pipeline (train / eval / predict / score) is not built yet; this is what exists\n\n");
    try {
      for (const char* collection : {"tile", "layout"}) {
        synth::DatasetOptions o;
        o.collection = collection, o.graphs = graphs, o.seed = seed;
        auto t0 = std::chrono::steady_clock::now();
        const auto paths = synth::write_dataset(dir.string(), o);
        const double synth_s = seconds_since(t0);
        const std::string sub = std::string(collection) == "tile" ? "npz/tile/xla" : "npz/layout/xla/default";
        t0 = std::chrono::steady_clock::now();
        const auto files = walk_dataset((dir / sub).string());
        const double walk_s = seconds_since(t0);
        const CollectionReport r = run_collection(files, /*khops=*/2);
        std::printf("  %-7s synth    %3zu graphs (train/valid/test) in %.2f s; walk + header checks %.3f s\n", collection,
                    paths.size(), synth_s, walk_s);
        std::printf("          load     every graph, and the official transform fitted on train, in %.2f s: %lld of %lld columns kept\n",
                    r.load_s, (long long)r.features_out, (long long)r.features_in);
        std::printf("          prepare  %.2f s: nodes %lld -> %lld (2-hop pruning), configs %lld -> %lld (dedup), %lld edges in CSR\n",
                    r.preprocess_s, (long long)r.nodes, (long long)r.kept_nodes, (long long)r.configs,
                    (long long)r.kept_configs, (long long)r.edges);
      }
    } catch (...) {
      if (!keep) fs::remove_all(dir);
      throw;
    }
    const MemoryStats m = host_memory_stats();
    std::printf("\n  host memory peak %.1f MB\n", double(m.peak_bytes) / 1e6);
    if (keep)
      std::printf("  dataset kept in %s (try: gnn inspect %s)\n", dir.c_str(), dir.c_str());
    else
      fs::remove_all(dir);
    return 0;
  };
  return c;
}

}  // namespace gnn::cli
