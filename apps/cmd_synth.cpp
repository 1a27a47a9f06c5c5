// gnn synth: a synthetic TpuGraphs dataset in the official tree and exact schema (io/synth.h).
#include <chrono>
#include <cstdio>

#include "apps/commands.h"
#include "io/synth.h"

namespace gnn::cli {

Command synth_command() {
  Command c;
  c.name = "synth";
  c.summary = "write a synthetic TpuGraphs dataset (official tree, exact schema, cost-model runtimes)";
  c.flags = {{"collection", "tile|layout", "which collection to generate", "", true},
             {"out", "DIR", "where to write DIR/npz/...", "", true},
             {"graphs", "N", "graphs per split", "8"},
             {"nodes", "N", "nodes per graph (default 30 for tile, 2000 for layout)"},
             {"nodes-max", "N", "draw each graph's node count log-uniformly in [--nodes, N]"},
             {"configs", "C", "configs per graph (default 200 for tile, 100 for layout)"},
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
             {"stored", "", "store members instead of deflating them (the official files are deflated)"}};
  c.details =
      "Programs are HLO-like DAGs (parameters, constants, elementwise chains, fusions, broadcasts, reduces,\n"
      "transposes, reshapes, dots, convolutions) with the 140 node features filled by meaning. Runtimes\n"
      "come from the analytic cost model of docs/synthetic.md with about 1% log-normal noise.";
  c.run = [](const Args& a) {
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
    o.configurable_share = a.number("configurable-share");
    if (!(o.configurable_share > 0 && o.configurable_share <= 0.4))
      throw UsageError("gnn synth: --configurable-share must be in (0, 0.4], got " + a.str("configurable-share"));
    o.seed = uint64_t(a.integer("seed", 0, INT64_MAX));
    o.splits = a.list("split");
    if (o.splits.empty()) throw UsageError("gnn synth: --split lists no split (train, valid, test)");
    for (const std::string& s : o.splits)
      if (s != "train" && s != "valid" && s != "test")
        throw UsageError("gnn synth: --split takes train, valid, test; got '" + s + "'");
    o.compress = !a.on("stored");
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
