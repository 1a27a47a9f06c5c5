// Synthetic TpuGraphs: HLO-like programs in the exact npz schema with runtimes from an analytic,
// TPU-like cost model (docs/synthetic.md). `gnn synth` writes a dataset in the official tree; it is
// the embedded default of the README's main job and of the tests. Deterministic for a seed.
#pragma once
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "io/tpugraphs.h"

namespace gnn::synth {

// HLO opcode ids: the five TPUGRAPHS.md names (convolution 26, dot 34, fusion 41, parameter 63,
// reshape 75); the others are fixed stand-ins below 121.
enum Op : int32_t {
  kAdd = 2,
  kBroadcast = 12,
  kConvolution = 26,
  kConstant = 30,
  kConvert = 31,
  kDot = 34,
  kExp = 38,
  kFusion = 41,
  kMaximum = 56,
  kMultiply = 58,
  kParameter = 63,
  kReshape = 75,
  kReduce = 77,
  kSubtract = 92,
  kTanh = 97,
  kTranspose = 98,
};
bool is_configurable(int32_t op);  // convolution, dot, reshape

enum ElementType : int32_t { kPred = 1, kS32 = 4, kF32 = 11, kBF16 = 13 };  // index into the 19-way one-hot

struct Node {
  int32_t op = kParameter;
  int32_t etype = kF32;
  int32_t rank = 0;
  int64_t dims[6] = {0, 0, 0, 0, 0, 0};
  std::vector<int32_t> inputs;  // operand node ids, all lower than this node's id
  int32_t attr[6] = {0, 0, 0, 0, 0, 0};  // reduce: reduced dim; transpose: the permutation; conv: window
  int32_t param_number = 0;
  int32_t stride = 1;  // convolution
  bool root = false;
  int64_t numel() const;
};

struct Program {
  std::vector<Node> nodes;
  std::vector<int64_t> splits;  // computation boundaries, 0 .. n
};

// An HLO-like program of about `nodes` nodes in computations of 20-400 nodes. `fused` makes one small
// kernel instead (the tile collection): parameters, an elementwise/reduce/dot body, one root.
// configurable_steps: the share of growth steps that make a reshape, dot or convolution (1:2:1). About
// half of the nodes come from steps (the rest are their parameters and constants), so a share s of
// configurable nodes takes about 2.05 s (configurable_steps_for).
Program generate_program(int64_t nodes, bool fused, std::mt19937_64& rng, double configurable_steps);
inline constexpr double kConfigurableShare = 0.02;  // layout default: the real program in ../shared/data
inline constexpr double kTileConfigurableSteps = 0.12;  // tile kernels: dots and reshapes as often as before
inline double configurable_steps_for(double share) { return std::min(1.0, 2.05 * share); }

// The 140 node features of ../shared/TPUGRAPHS.md section 3, filled from each node's meaning.
Tensor node_features(const Program& p);

// ---- cost model ----------------------------------------------------------------------------------

struct Machine {
  double flops_per_ns = 1.0e5;  // 100 TFLOP/s
  double bytes_per_ns = 1.0e3;  // 1 TB/s
  double op_overhead_ns = 200;  // per HLO op
  double tile_overhead_ns = 100;  // per tile iteration (the smallest tiles run 7-29x slower than the best
                                  // on the real kernels in ../shared/data; docs/synthetic.md)
  double vmem_bytes = 16 << 20;  // a tile's working set must fit, or it spills
  double noise = 0.01;  // sigma of the log-normal measurement noise
};

// Layout runtime of one configuration: cfg is [NC, 18] for the configurable nodes in `config_nodes`
// (ascending ids). noise_rng null: the noiseless cost.
double layout_runtime(const Program& p, const std::vector<int32_t>& config_nodes, const float* cfg, const Machine& m,
                      std::mt19937_64* noise_rng);
// Tile runtime of one configuration (24 features as in the files).
double tile_runtime(const Program& p, const float* cfg, const Machine& m, std::mt19937_64* noise_rng);

// Random but valid configurations: layout [C, NC, 18] (entry 0 all -1, the compiler default);
// tile [C', 24] (entry 0 the default tile, whose runtime is the normaliser), C' <= C distinct tiles: as an
// autotuner proposes each tile once, a kernel whose shape admits few tiles gets few configs (at least 2:
// a kernel with one tile lists it twice, as real single-tile kernels do). *distinct, when given, gets the
// number of distinct tiles (1 for such a kernel).
Tensor random_layout_configs(const Program& p, const std::vector<int32_t>& config_nodes, int64_t configs,
                             std::mt19937_64& rng);
Tensor random_tile_configs(const Program& p, int64_t configs, std::mt19937_64& rng, int64_t* distinct = nullptr);

// ---- datasets ------------------------------------------------------------------------------------

inline int64_t default_nodes(bool layout) { return layout ? 2000 : 30; }
inline int64_t default_configs(bool layout) { return layout ? 100 : 200; }

struct DatasetOptions {
  std::string collection = "tile";  // tile | layout
  int64_t graphs = 8;  // per split
  int64_t nodes = 0;  // per graph (0: 30 for tile, 2000 for layout)
  int64_t nodes_max = 0;  // > nodes: each graph's size drawn log-uniformly in [nodes, nodes_max]
  int64_t configs = 0;  // per graph (0: 200 for tile, 100 for layout)
  int64_t configs_max = 0;  // > configs: each graph's config count drawn uniformly in [configs, configs_max]
  // tile: a kernel that admits fewer distinct tiles than this is replaced by another (drawn from the next
  // seed), so every kernel lists at least min_configs configs. 0: every kernel is kept.
  int64_t min_configs = 0;
  double configurable_share = kConfigurableShare;  // layout: the share of configurable nodes aimed at
  uint64_t seed = 0;
  std::vector<std::string> splits = {"train", "valid", "test"};
  bool compress = true;  // deflated like the official files (level 1)
};

// One graph as arrays in the file schema (what the writer stores), e.g. for tests. A tile kernel that
// admits fewer than min_configs distinct tiles gives no arrays (found before any runtime is computed);
// a layout program ignores min_configs (it lists `configs` configs).
std::vector<std::pair<std::string, Tensor>> make_graph(bool layout, int64_t nodes, int64_t configs, uint64_t seed,
                                                       bool with_runtimes = true,
                                                       double configurable_share = kConfigurableShare,
                                                       int64_t min_configs = 0);
// Writes DIR/npz/tile/xla/{split}/*.npz or DIR/npz/layout/xla/default/{split}/*.npz; returns the paths.
std::vector<std::string> write_dataset(const std::string& dir, const DatasetOptions& options);

}  // namespace gnn::synth
