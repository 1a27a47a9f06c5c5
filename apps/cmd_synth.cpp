// gnn synth: a synthetic TpuGraphs dataset in the official tree and exact schema (io/synth.h).
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "apps/cli.h"
#include "apps/commands.h"
#include "dist/comm.h"
#include "io/synth.h"
#include "io/tpugraphs.h"

namespace gnn::cli {
namespace {

// Fewer bytes than one generated graph's arrays take (what the writer stores, before deflate): node
// features, opcodes, N / 4 edges, the runtimes, and the config features (a layout program's [C, K, 18] over
// its K configurable nodes, taken as 0.4 of the share asked for, none where that share is under 40 nodes; a
// tile kernel's [C, 24]). Generated layout programs of 100 to 20,000 nodes at shares 0.02 and 0.4 hold
// 0.90-1.34 edges a node and, where the share is 40 nodes or more, 0.87 of it or more on average and 0.43
// to 1.37 in single graphs (500 graphs each at 400 nodes and share 0.1, 200 and 0.2, 150 and 0.27); a
// tile kernel of 4 nodes holds 1 edge.
double graph_bytes_at_least(bool layout, double nodes, double configs, double share) {
  const double configurable = share * nodes >= 40 ? std::floor(0.4 * share * nodes) : 0;
  const double base = nodes * (kNodeFeatures * 4.0 + 1) + nodes / 4 * 16 + configs * 8;
  return base + (layout ? configs * configurable * kLayoutConfigFeatures * 4.0 + configurable * 8
                        : configs * (kTileConfigFeatures * 4.0 + 8));
}

// Free bytes where DIR will be written (its nearest existing ancestor), or -1 where that cannot be told.
double free_bytes_at(const std::string& dir) {
  std::filesystem::path p = std::filesystem::absolute(dir);
  std::error_code ec;
  while (!p.empty() && !std::filesystem::exists(p, ec)) p = p.parent_path();
  struct statvfs st;
  if (p.empty() || ::statvfs(p.c_str(), &st) != 0) return -1;
  return double(st.f_bavail) * double(st.f_frsize);
}

// Refuses, before anything is generated, a dataset whose largest graph cannot be held in memory, or whose
// files cannot fit on the disk at --out. Stored files (--stored) take the arrays' bytes; deflated ones are
// taken at 1/32 of them, a bound the generated files stay well inside (they deflate 13-19x: tile kernels of
// 300 and 100,000 nodes, layout programs of 3,000). A tile kernel is generated with --configs tiles in
// memory but keeps only its distinct ones (often 2 to 200), so on disk it counts --min-configs, or 1.
void check_size(const Args& a, const synth::DatasetOptions& o) {
  const bool layout = o.collection == "layout";
  const double n0 = double(o.nodes ? o.nodes : synth::default_nodes(layout));
  const double c0 = double(o.configs ? o.configs : synth::default_configs(layout));
  const double n1 = std::max(n0, double(o.nodes_max)), c1 = std::max(c0, double(o.configs_max));
  const double one = graph_bytes_at_least(layout, n1, c1, o.configurable_share);
  const double memory = double(usable_memory_bytes());
  const std::string sizes =
      std::string(o.nodes_max > o.nodes ? "--nodes-max" : "--nodes") + " " + std::to_string(int64_t(n1)) + " and " +
      (o.configs_max > o.configs ? "--configs-max" : "--configs") + " " + std::to_string(int64_t(c1));
  if (memory > 0 && one > memory)
    throw UsageError("gnn synth: one graph of " + sizes + " takes at least " + size_text(one) +
                     " in memory, more than the " + size_text(memory) + " this process may use; give smaller sizes");
  const double kept = layout ? c0 : double(std::max<int64_t>(1, o.min_configs));
  const double stored =
      double(o.graphs) * double(o.splits.size()) * graph_bytes_at_least(layout, n0, kept, o.configurable_share);
  const double total = o.compress ? stored / 32 : stored, free = free_bytes_at(a.str("out"));
  if (free >= 0 && total > free)
    throw UsageError("gnn synth: --graphs " + std::to_string(o.graphs) + " in each of " +
                     std::to_string(o.splits.size()) + " splits take at least " + size_text(total) +
                     (o.compress ? " deflated" : " stored") + ", more than the " + size_text(free) + " free at --out");
}

}  // namespace

Command synth_command() {
  Command c;
  c.name = "synth";
  c.summary = "write a synthetic TpuGraphs dataset (official tree, exact schema, cost-model runtimes)";
  c.flags = {{"collection", "tile|layout", "which collection to generate", "", true},
             {"out", "DIR", "where to write DIR/npz/...", "", true},
             {"graphs", "N", "graphs per split", "8"},
             {"nodes", "N", "nodes per graph (default 30 for tile, 2000 for layout)"},
             {"nodes-max", "N", "draw each graph's node count log-uniformly in [--nodes, N]"},
             {"configs", "C",
              "configs per layout graph (default 100); for tile the most per kernel (default 200): each tile is drawn "
              "once, and a kernel whose shape admits fewer lists fewer"},
             {"configs-max", "C", "draw each graph's config count uniformly in [--configs, C]"},
             {"min-configs", "C",
              "tile: replace a kernel that admits fewer distinct tiles than C by another, so every kernel ranks at "
              "least C configs (the real release's kernels list up to a few thousand)"},
             {"configurable-share", "F",
              "layout: the share of nodes that are configurable (reshape, dot, "
              "convolution; real files 2-7%)",
              "0.02"},
             {"seed", "S", "generator seed: the same seed writes the same bytes", "0"},
             {"split", "LIST",
              "splits to write; each is seeded by --seed and its place in LIST, so splits written by separate "
              "calls need different --seed values",
              "train,valid,test"},
             {"stored", "", "store members instead of deflating them (the official files are deflated)"},
             kThreadsFlag};
  c.details =
      "Programs are HLO-like DAGs (parameters, constants, elementwise chains, fusions, broadcasts, reduces,\n"
      "transposes, reshapes, dots, convolutions) with the 140 node features filled by meaning. Runtimes\n"
      "come from the analytic cost model of docs/synthetic.md with about 1% log-normal noise. Sizes that\n"
      "cannot fit are refused before anything is generated: one graph larger than memory, or files larger\n"
      "than the free space at --out, by a lower bound of their size (a dataset that fills the disk all the\n"
      "same is removed, whole or not at all).";
  c.run = [](const Args& a) {
    // (a dataset belongs to one writer: under mpirun each rank would write, lock and remove the same tree)
    if (dist::world().size > 1) throw UsageError("gnn synth writes a dataset in one process; run it without mpirun");
    synth::DatasetOptions o;
    o.collection = a.str("collection");
    if (o.collection != "tile" && o.collection != "layout")
      throw UsageError("gnn synth: --collection must be tile or layout, got '" + o.collection + "'");
    o.graphs = a.integer("graphs", 1, 1'000'000);
    if (a.has("nodes")) o.nodes = a.integer("nodes", 4, 10'000'000);
    if (a.has("configs")) o.configs = a.integer("configs", 1, 1'000'000);
    const bool layout = o.collection == "layout";  // the defaults of --nodes and --configs bound the maxima
    if (a.has("nodes-max"))
      o.nodes_max = a.integer("nodes-max", o.nodes ? o.nodes : synth::default_nodes(layout), 10'000'000);
    if (a.has("configs-max"))
      o.configs_max = a.integer("configs-max", o.configs ? o.configs : synth::default_configs(layout), 1'000'000);
    if (a.has("min-configs")) {
      if (layout)
        throw UsageError("gnn synth: --min-configs is for --collection tile (a layout program lists --configs)");
      o.min_configs = a.integer("min-configs", 1, o.configs ? o.configs : synth::default_configs(layout));
    }
    if (!layout && a.on("configurable-share"))
      throw UsageError("gnn synth: --configurable-share is for --collection layout (a tile kernel has no "
                       "configurable nodes: its configs are the whole kernel's tiles)");
    o.configurable_share = a.number("configurable-share");
    if (!(o.configurable_share > 0 && o.configurable_share <= 0.4))
      throw UsageError("gnn synth: --configurable-share must be in (0, 0.4], got " + a.str("configurable-share"));
    o.seed = uint64_t(a.integer("seed", 0, INT64_MAX));
    o.splits = a.list("split");
    if (o.splits.empty()) throw UsageError("gnn synth: --split lists no split (train, valid, test)");
    std::set<std::string> seen;
    for (const std::string& s : o.splits) {
      if (s != "train" && s != "valid" && s != "test")
        throw UsageError("gnn synth: --split takes train, valid, test; got '" + s + "'");
      if (!seen.insert(s).second) throw UsageError("gnn synth: --split names '" + s + "' twice");
    }
    o.compress = !a.on("stored");
    check_output_folder("out", a.str("out"));
    check_size(a, o);
    const auto t0 = std::chrono::steady_clock::now();
    const auto paths = synth::write_dataset(a.str("out"), o);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("gnn synth: wrote %zu %s graphs under %s/npz in %.2f s\n", paths.size(), o.collection.c_str(),
                a.str("out").c_str(), s);
    return 0;
  };
  return c;
}

}  // namespace gnn::cli
