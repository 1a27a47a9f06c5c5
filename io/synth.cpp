// The synthetic program generator and the dataset writer. The cost model is in synth_cost.cpp.
#include "io/synth.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <typeinfo>

#include "io/atomic_file.h"
#include "io/npz.h"

namespace gnn::synth {
namespace {

constexpr int64_t kMaxElements = int64_t(1) << 26;  // keeps every tensor under 256 MiB of f32

uint64_t mix(uint64_t x) {  // splitmix64: independent seeds for graphs, splits and configs
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int64_t pick(std::mt19937_64& rng, std::initializer_list<int64_t> v) { return *(v.begin() + rng() % v.size()); }
double uniform01(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1p-53; }  // [0, 1), the same on every platform

// The kinds of step a computation grows by, and their weights. The configurable ones (reshape, dot,
// convolution, 1:2:1) take `configurable_steps` of the steps; the others share the rest in fixed
// proportions. A step whose operand does not fit its kind (a transpose of a vector) becomes a unary
// elementwise op, never another kind, so the configurable share is what was asked for.
enum StepKind {
  kUnaryStep,
  kBinaryStep,
  kFusionStep,
  kBroadcastStep,
  kReduceStep,
  kTransposeStep,
  kReshapeStep,
  kDotStep,
  kConvolutionStep,
  kStepKinds
};
constexpr double kOtherWeights[kReshapeStep] = {25, 28, 16, 8, 10, 9};  // unary .. transpose
constexpr double kConfigurableWeights[3] = {1, 2, 1};  // reshape, dot, convolution

class Builder {
 public:
  Builder(Program& p, std::mt19937_64& rng, double configurable_steps) : p_(p), rng_(rng) {
    double other = 0, config = 0, at = 0;
    for (double w : kOtherWeights) other += w;
    for (double w : kConfigurableWeights) config += w;
    for (int k = 0; k < kStepKinds; ++k) {
      at += k < kReshapeStep ? (1 - configurable_steps) * kOtherWeights[k] / other
                             : configurable_steps * kConfigurableWeights[k - kReshapeStep] / config;
      cumulative_[k] = at;
    }
    cumulative_[kStepKinds - 1] = 1;
  }

  int32_t add(Node n) {
    p_.nodes.push_back(std::move(n));
    return int32_t(p_.nodes.size() - 1);
  }

  int32_t parameter(int rank, int32_t etype = kF32) {
    Node n;
    n.op = kParameter, n.etype = etype, n.rank = rank, n.param_number = params_++;
    for (int i = 0; i < rank; ++i) n.dims[i] = pick(rng_, {1, 2, 4, 8, 16, 32, 64, 100, 128, 256, 512, 768, 1024});
    clamp(n);
    return add(n);
  }

  int32_t constant_like(const Node& like) {
    Node n;
    n.op = kConstant, n.etype = like.etype, n.rank = like.rank;
    std::copy(like.dims, like.dims + 6, n.dims);
    return add(n);
  }

  // A recent node of this computation, mostly among the last few (HLO is local), sometimes far back.
  int32_t operand(int32_t begin) {
    const int32_t end = int32_t(p_.nodes.size());
    if (rng_() % 5 != 0) return std::max(begin, end - 1 - int32_t(rng_() % 6));
    return begin + int32_t(rng_() % uint64_t(end - begin));
  }

  // One new node consuming earlier nodes of the computation starting at `begin`.
  void step(int32_t begin) {
    const int32_t a = operand(begin);
    const Node A = p_.nodes[size_t(a)];
    const double u = uniform01(rng_);
    const StepKind kind = StepKind(std::upper_bound(cumulative_, cumulative_ + kStepKinds, u) - cumulative_);
    Node n;
    n.etype = A.etype, n.rank = A.rank;
    std::copy(A.dims, A.dims + 6, n.dims);
    n.inputs = {a};
    n.op = kTanh;  // what a kind whose shape rule does not fit the operand becomes
    if (kind == kUnaryStep) {
      n.op = int32_t(pick(rng_, {kExp, kTanh, kConvert}));
      if (n.op == kConvert) n.etype = A.etype == kF32 ? kBF16 : kF32;
    } else if (kind == kBinaryStep || kind == kFusionStep) {  // same-shape operands
      n.op = kind == kBinaryStep ? int32_t(pick(rng_, {kAdd, kMultiply, kSubtract, kMaximum})) : int32_t(kFusion);
      const int extra = n.op == kFusion ? 1 + int(rng_() % 2) : 1;
      for (int k = 0; k < extra; ++k) n.inputs.push_back(same_shape(begin, A));
    } else if (kind == kBroadcastStep && A.rank < 4) {  // a new major dim
      n.op = kBroadcast, n.rank = A.rank + 1;
      n.dims[0] = pick(rng_, {2, 4, 8, 16, 128});
      std::copy(A.dims, A.dims + A.rank, n.dims + 1);
      for (int i = 0; i < A.rank; ++i) n.attr[i] = i + 1;
    } else if (kind == kReduceStep && A.rank >= 2) {  // reduce one dim
      n.op = kReduce, n.rank = A.rank - 1;
      const int d = int(rng_() % uint64_t(A.rank));
      n.attr[0] = d;
      for (int i = 0, j = 0; i < A.rank; ++i)
        if (i != d) n.dims[j++] = A.dims[i];
      Node init;
      init.op = kConstant, init.etype = A.etype, init.rank = 0;
      n.inputs.push_back(add(init));
    } else if (kind == kTransposeStep && A.rank >= 2) {
      n.op = kTranspose;
      int perm[6] = {0, 1, 2, 3, 4, 5};
      std::shuffle(perm, perm + A.rank, rng_);
      for (int i = 0; i < A.rank; ++i) n.attr[i] = perm[i], n.dims[i] = A.dims[perm[i]];
    } else if (kind == kReshapeStep && A.rank >= 1) {  // merge two dims or split one
      if (A.rank >= 2 && (A.rank == 4 || rng_() % 2)) {
        n.op = kReshape;
        const int i = int(rng_() % uint64_t(A.rank - 1));
        n.rank = A.rank - 1;
        for (int s = 0, d = 0; s < A.rank; ++s) {
          if (s == i + 1) n.dims[d - 1] *= A.dims[s];  // dims i and i + 1 become one
          else n.dims[d++] = A.dims[s];
        }
      } else if (A.dims[A.rank - 1] % 2 == 0) {
        n.op = kReshape;
        n.rank = A.rank + 1;
        std::copy(A.dims, A.dims + A.rank, n.dims);
        n.dims[A.rank - 1] = 2, n.dims[A.rank] = A.dims[A.rank - 1] / 2;
      } else {
        n.op = kConvert;
      }
    } else if (kind == kDotStep && A.rank >= 2 && A.rank <= 3) {  // with a weight matrix [K, N]
      n.op = kDot;
      const int64_t K = A.dims[A.rank - 1], N = pick(rng_, {64, 128, 256, 512, 1000});
      Node w;
      w.op = kParameter, w.etype = A.etype, w.rank = 2, w.dims[0] = K, w.dims[1] = N, w.param_number = params_++;
      n.inputs.push_back(add(w));
      n.dims[A.rank - 1] = N;
    } else if (kind == kConvolutionStep) {  // of an NHWC image with an HWIO kernel
      const int32_t img = A.rank == 4 && A.dims[1] == A.dims[2] && A.dims[1] >= 7 ? a : image();
      const Node I = p_.nodes[size_t(img)];
      n = Node{};
      n.op = kConvolution, n.etype = I.etype, n.rank = 4;
      const int64_t kh = pick(rng_, {1, 3, 3, 5}), O = pick(rng_, {16, 32, 64, 128, 256});
      n.stride = I.dims[1] >= 14 && rng_() % 3 == 0 ? 2 : 1;
      Node k;
      k.op = kParameter, k.etype = I.etype, k.rank = 4, k.param_number = params_++;
      k.dims[0] = kh, k.dims[1] = kh, k.dims[2] = I.dims[3], k.dims[3] = O;
      n.inputs = {img, add(k)};
      n.attr[0] = int32_t(kh), n.attr[1] = int32_t(kh);
      n.dims[0] = I.dims[0], n.dims[1] = I.dims[1] / n.stride, n.dims[2] = I.dims[2] / n.stride, n.dims[3] = O;
    }
    if (n.numel() > kMaxElements || n.numel() == 0) return;  // too big: skip this step
    add(n);
  }

  int32_t finish() {  // the root: a fusion of the last node
    Node n = p_.nodes.back();
    n.op = kFusion, n.inputs = {int32_t(p_.nodes.size() - 1)}, n.root = true, n.param_number = 0;
    return add(n);
  }

 private:
  int32_t same_shape(int32_t begin, const Node& like) {
    const int32_t end = int32_t(p_.nodes.size());
    for (int32_t i = end - 1; i >= std::max(begin, end - 12); --i) {
      const Node& c = p_.nodes[size_t(i)];
      if (c.rank == like.rank && std::equal(c.dims, c.dims + c.rank, like.dims) && c.etype == like.etype) {
        if (rng_() % 2) return i;
      }
    }
    return constant_like(like);
  }

  int32_t image() {
    Node n;
    n.op = kParameter, n.etype = kF32, n.rank = 4, n.param_number = params_++;
    n.dims[0] = pick(rng_, {1, 2, 8, 32});
    n.dims[1] = n.dims[2] = pick(rng_, {7, 14, 28, 56});
    n.dims[3] = pick(rng_, {3, 16, 32, 64, 128});
    return add(n);
  }

  void clamp(Node& n) {
    while (n.numel() > kMaxElements / 4)
      for (int i = 0; i < n.rank; ++i) n.dims[i] = std::max<int64_t>(1, n.dims[i] / 2);
  }

  Program& p_;
  std::mt19937_64& rng_;
  int32_t params_ = 0;
  double cumulative_[kStepKinds];  // step kind k when a uniform draw falls below cumulative_[k]
};

}  // namespace

int64_t Node::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

bool is_configurable(int32_t op) { return op == kConvolution || op == kDot || op == kReshape; }

Program generate_program(int64_t nodes, bool fused, std::mt19937_64& rng, double configurable_steps) {
  Program p;
  p.splits.push_back(0);
  while (int64_t(p.nodes.size()) < nodes) {
    const int64_t left = nodes - int64_t(p.nodes.size());
    const int64_t size = fused ? left : std::min<int64_t>(left, 20 + int64_t(rng() % 380));
    Builder b(p, rng, configurable_steps);
    const int32_t begin = int32_t(p.nodes.size());
    const int params = 1 + int(rng() % 3);
    for (int i = 0; i < params; ++i) b.parameter(2 + int(rng() % 3), rng() % 8 == 0 ? kBF16 : kF32);
    for (int guard = 0; int64_t(p.nodes.size()) - begin < size - 1 && guard < 20 * size; ++guard) b.step(begin);
    b.finish();
    p.splits.push_back(int64_t(p.nodes.size()));
  }
  return p;
}

Tensor node_features(const Program& p) {
  const int64_t n = int64_t(p.nodes.size());
  Tensor t = Tensor::zeros({n, kNodeFeatures}, DType::F32);
  auto seq = [](float* f, const int64_t* v, int k, int len) {  // k values, 0-padded to len, sum, product
    double sum = 0, prod = 1;
    for (int i = 0; i < k; ++i) f[i] = float(v[i]), sum += double(v[i]), prod *= double(v[i]);
    f[len] = float(sum), f[len + 1] = float(prod);
  };
  for (int64_t i = 0; i < n; ++i) {
    const Node& nd = p.nodes[size_t(i)];
    float* f = t.f32() + i * kNodeFeatures;
    f[0] = nd.root;
    f[2 + nd.etype] = 1;
    seq(f + 21, nd.dims, nd.rank, 6);
    f[30] = float(nd.param_number);
    for (int k = 0; k < 6; ++k)
      f[31 + k] = float(nd.attr[k]) * (nd.op == kReduce || nd.op == kTranspose || nd.op == kBroadcast);
    // Window: size, stride, padding low, high, dilation, base dilation; products of empty lists are 1.
    const bool conv = nd.op == kConvolution;
    const int wk = conv ? 2 : 0;
    const int64_t pad = conv ? nd.attr[0] / 2 : 0;
    const int64_t size[2] = {nd.attr[0], nd.attr[1]}, stride[2] = {nd.stride, nd.stride}, pads[2] = {pad, pad},
                  ones[2] = {1, 1};
    seq(f + 37, size, wk, 6);
    seq(f + 45, stride, wk, 6);
    seq(f + 53, pads, wk, 6);
    seq(f + 61, pads, wk, 6);
    seq(f + 69, ones, wk, 6);
    seq(f + 77, ones, wk, 6);
    f[91] = float(wk);  // window reversal: no true, wk false
    if (conv) {  // NHWC input, HWIO kernel, NHWC output
      const float dn[14] = {0, 3, 1, 2, 2, 3, 0, 1, 0, 3, 1, 2, 0, 0};
      std::copy(dn, dn + 14, f + 93);
      f[107] = f[108] = 1;  // feature and batch group counts
    }
    f[112] = f[116] = f[120] = 1;  // slice start/stride/limit products (empty)
    f[124] = f[128] = f[132] = 1;  // dynamic slice sizes and padding products (empty)
    for (int k = 0; k < nd.rank; ++k) f[134 + k] = float(nd.rank - 1 - k);  // default layout, minor first
  }
  return t;
}

// ---- datasets ------------------------------------------------------------------------------------

std::vector<std::pair<std::string, Tensor>> make_graph(bool layout, int64_t nodes, int64_t configs, uint64_t seed,
                                                       bool with_runtimes, double configurable_share,
                                                       int64_t min_configs) {
  std::mt19937_64 rng(mix(seed));
  const double steps = layout ? configurable_steps_for(configurable_share) : kTileConfigurableSteps;
  Program p = generate_program(std::max<int64_t>(nodes, 4), !layout, rng, steps);
  // A layout program without a configurable op (a small one can be drawn so) has no config to rank: its
  // configs would differ in runtime by noise alone. Drawn again, on from where the generator stands, so
  // every graph that had one is as before; after 20 draws at a share too small for its size, at twice the
  // share each draw (up to half of its steps), so a share far too small gives about the fewest configurable
  // nodes a program of that size can have (before, half its steps: 22% of 2,000 nodes at --configurable-share
  // 1e-9, against 1 node at 1e-4).
  const auto configurable = [](const Program& q) {
    return std::any_of(q.nodes.begin(), q.nodes.end(), [](const auto& v) { return is_configurable(v.op); });
  };
  for (int tries = 1; layout && !configurable(p); ++tries) {
    GNN_CHECK(tries < 1000, "synth: no program of ", nodes, " nodes with a configurable op in 1000 draws");
    const double grown = tries < 20 ? steps : std::min(0.5, steps * std::ldexp(1.0, std::min(tries - 19, 60)));
    p = generate_program(std::max<int64_t>(nodes, 4), !layout, rng, std::max(steps, grown));
  }
  const int64_t n = int64_t(p.nodes.size());
  std::vector<int64_t> edges, opcodes(static_cast<size_t>(n));
  for (int64_t u = 0; u < n; ++u) {
    opcodes[size_t(u)] = p.nodes[size_t(u)].op;
    for (int32_t v : p.nodes[size_t(u)].inputs) edges.push_back(u), edges.push_back(v);
  }
  std::vector<std::pair<std::string, Tensor>> out = {
      {"node_feat", node_features(p)},
      {"node_opcode", Tensor::from_vector(opcodes).astype(DType::U8)},
      {"edge_index", Tensor::from_vector(edges, Shape{int64_t(edges.size() / 2), 2})},
  };
  const Machine m;
  Tensor runtime = Tensor::empty({configs}, DType::I64);
  if (layout) {
    std::vector<int32_t> config_nodes;
    for (int64_t v = 0; v < n; ++v)
      if (is_configurable(p.nodes[size_t(v)].op)) config_nodes.push_back(int32_t(v));
    const Tensor cfg = random_layout_configs(p, config_nodes, configs, rng);
    const int64_t row = int64_t(config_nodes.size()) * kLayoutConfigFeatures;
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t c = 0; c < configs; ++c) {
      std::mt19937_64 noise(mix(seed ^ mix(uint64_t(c) + 1)));
      runtime.i64()[c] = int64_t(std::llround(layout_runtime(p, config_nodes, cfg.f32() + c * row, m, &noise)));
    }
    std::vector<int64_t> ids(config_nodes.begin(), config_nodes.end());
    out.emplace_back("node_config_ids", Tensor::from_vector(ids));
    out.emplace_back("node_config_feat", cfg);
    if (with_runtimes) out.emplace_back("config_runtime", runtime);
    out.emplace_back("node_splits", Tensor::from_vector(p.splits, Shape{1, int64_t(p.splits.size())}));
  } else {
    int64_t distinct = 0;
    const Tensor cfg = random_tile_configs(p, configs, rng, &distinct);
    if (distinct < min_configs) return {};
    configs = cfg.size(0);  // the distinct tiles this kernel admits, at most --configs
    runtime = Tensor::empty({configs}, DType::I64);
    for (int64_t c = 0; c < configs; ++c) {
      std::mt19937_64 noise(mix(seed ^ mix(uint64_t(c) + 1)));
      runtime.i64()[c] = int64_t(std::llround(tile_runtime(p, cfg.f32() + c * kTileConfigFeatures, m, &noise)));
    }
    out.emplace_back("config_feat", cfg);
    if (with_runtimes) out.emplace_back("config_runtime", runtime);
    // As in the real files: every config is normalised by the measured runtime of the default one.
    out.emplace_back("config_runtime_normalizers", Tensor::full({configs}, double(runtime.i64()[0]), DType::I64));
  }
  return out;
}

namespace {

// write_dataset's graphs, split after split, each under its name and .tmp-PID (no reader lists it); each file
// written is added to `paths` and each folder created to `made` as it happens.
void write_splits(const std::filesystem::path& root, const DatasetOptions& o, bool layout, int64_t nodes,
                  int64_t configs, std::vector<std::string>& paths, std::vector<std::filesystem::path>& made) {
  namespace fs = std::filesystem;
  for (size_t s = 0; s < o.splits.size(); ++s) {
    const std::string& split = o.splits[s];
    for (fs::path d = root / split; !d.empty() && !fs::exists(fs::symlink_status(d)); d = d.parent_path())
      made.push_back(d);
    fs::create_directories(root / split);
    // Seeded by the split's place in the list: splits written by separate calls need their own --seed.
    const uint64_t split_seed = mix(o.seed * 1000003 + s + (layout ? 7 : 0));
    for (int64_t i = 0; i < o.graphs; ++i) {
      throw_if_interrupted();
      char name[64];
      std::snprintf(name, sizeof name, "synth_%s_%04lld.npz", split.c_str(), (long long)i);
      const std::string path = (root / split / name).string();
      // Sizes drawn from their own stream, so a dataset of fixed sizes keeps the bytes it had.
      std::mt19937_64 size_rng(mix(split_seed ^ mix(uint64_t(i) + 0x5eed)));
      const double u = uniform01(size_rng);
      const int64_t n = o.nodes_max > nodes
                            ? int64_t(std::llround(double(nodes) * std::pow(double(o.nodes_max) / double(nodes), u)))
                            : nodes;
      const int64_t c =
          o.configs_max > configs ? configs + int64_t(size_rng() % uint64_t(o.configs_max - configs + 1)) : configs;
      // Attempt 0 keeps the seed a dataset without --min-configs has, so those keep their bytes.
      constexpr uint64_t kDraws = 10'000;
      std::vector<std::pair<std::string, Tensor>> arrays;
      for (uint64_t attempt = 0;; ++attempt) {
        GNN_CHECK(attempt < kDraws, "--min-configs ", o.min_configs, ": no kernel of ", n, " nodes in ", kDraws,
                  " draws admits that many distinct tiles (at most --configs ", c, ")");
        const uint64_t seed = mix(split_seed + uint64_t(i)) ^ (attempt ? mix(attempt * 0x9e3779b97f4a7c15ULL) : 0);
        arrays = make_graph(layout, n, c, seed, true, o.configurable_share, layout ? 0 : o.min_configs);
        if (!arrays.empty()) break;
      }
      const std::string staged = path + ".tmp-" + std::to_string(::getpid());
      try {
        NpzWriter w(staged, o.compress, /*level=*/1);  // level 1: a 100k-node layout graph writes in seconds
        for (const auto& [key, t] : arrays) w.add(key, t);
        w.close();
      } catch (const Error& e) {  // (a failed write said of the graph, not of the name it waits under)
        std::string m = e.message();
        if (typeid(e) != typeid(Error) || m.find(staged) == std::string::npos) throw;  // (another kind: as it is)
        for (size_t at = 0; (at = m.find(staged, at)) != std::string::npos; at += path.size())
          m.replace(at, staged.size(), path);
        throw Error(m, e.where());
      }
      paths.push_back(staged);
    }
  }
}

}  // namespace

std::vector<std::string> write_dataset(const std::string& dir, const DatasetOptions& o) {
  namespace fs = std::filesystem;
  GNN_CHECK(o.collection == "tile" || o.collection == "layout", "--collection must be tile or layout, got '",
            o.collection, "'");
  const bool layout = o.collection == "layout";
  const int64_t nodes = o.nodes > 0 ? o.nodes : default_nodes(layout);
  const int64_t configs = o.configs > 0 ? o.configs : default_configs(layout);
  GNN_CHECK(o.nodes_max == 0 || o.nodes_max >= nodes, "--nodes-max ", o.nodes_max, " is below --nodes ", nodes);
  GNN_CHECK(o.configs_max == 0 || o.configs_max >= configs, "--configs-max ", o.configs_max, " is below --configs ",
            configs);
  GNN_CHECK(o.min_configs <= configs, "--min-configs ", o.min_configs, " is above --configs ", configs,
            " (a kernel lists at most --configs tiles)");
  GNN_CHECK(o.configurable_share > 0 && o.configurable_share <= 0.4, "--configurable-share must be in (0, 0.4], got ",
            o.configurable_share);
  const fs::path root = fs::path(dir) / "npz" / (layout ? fs::path("layout/xla/default") : fs::path("tile/xla"));
  // Every split is checked before anything is written, and a call that fails removes what it wrote: a
  // dataset is written whole or not at all.
  for (const std::string& split : o.splits)
    GNN_CHECK(split == "train" || split == "valid" || split == "test", "unknown split '", split,
              "' (train, valid, test)");
  std::vector<std::string> paths;
  std::vector<fs::path> made;  // the folders this call created
  const auto remove_written = [&] {
    std::error_code ec;
    for (const std::string& p : paths) fs::remove(p, ec);
    std::sort(made.begin(), made.end(), [](const fs::path& a, const fs::path& b) {
      return a.native().size() > b.native().size();  // the deepest first
    });
    for (const fs::path& d : made) fs::remove(d, ec);  // (only an empty folder goes)
  };
  const CooperativeInterrupt interrupt;  // (SIGINT, SIGTERM, SIGHUP stop it between graphs, and it cleans up)
  int lock = -1;
  try {
    // One writer of a collection's tree at a time: two calls into one --out would pass the check below
    // together and mix their graphs. (flock on the folder itself: nothing is left behind; freed on exit.)
    for (fs::path d = root; !d.empty() && !fs::exists(fs::symlink_status(d)); d = d.parent_path()) made.push_back(d);
    fs::create_directories(root);
    lock = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    GNN_CHECK(lock >= 0, root.string(), ": cannot open (", std::strerror(errno), ")");
    const bool lock_held = ::flock(lock, LOCK_EX | LOCK_NB) == 0;
    if (!lock_held) {
      const int err = errno;
      if (err == EWOULDBLOCK) {
        made.clear();  // (the holder may have made them: they are its)
        GNN_FAIL(root.string(), ": another gnn synth is writing into it; wait for it, or write to another --out");
      }
      std::fprintf(stderr, "gnn synth: warning: %s cannot be locked here (%s); nothing stops a second writer\n",
                   root.c_str(), std::strerror(err));  // (a filesystem without flock: as RunLock does)
    }
    // Graphs already there would mix with these (a smaller --graphs leaves the old ones past its end):
    // a split is written whole, into a folder without graphs.
    // (What a synth killed with SIGKILL left, its temporaries, goes first: no handler ran to remove them.)
    for (const std::string& split : o.splits)
      if (fs::is_directory(root / split)) {
        // (a staged graph, NAME.npz.tmp-PID, and its own writer's temporary, NAME.npz.tmp-PID.tmp-PID; stale
        // whatever their pid where this call holds the tree's lock)
        remove_stale_temporaries_in((root / split).string(),
                                    [](const std::string& name) {
                                      return name.starts_with("synth_") && name.find(".npz") != std::string::npos;
                                    },
                                    lock_held);
        for (const auto& e : fs::directory_iterator(root / split))
          GNN_CHECK(e.path().extension() != ".npz", (root / split).string(), " already holds graphs (",
                    e.path().filename().string(), "); write a new dataset into an empty --out, or remove them first");
      }
    write_splits(root, o, layout, nodes, configs, paths, made);
    throw_if_interrupted();  // (one that came during the last graph)
    // Every graph written: each renamed to its own name, so that a process killed outright (SIGKILL, which
    // no handler sees) while it generates leaves no part of a dataset that reads as whole, only its staged
    // files, which the next synth into the folder removes. (A kill within these renames, microseconds a
    // graph, still leaves those renamed so far.)
    for (std::string& p : paths) {
      const std::string name = p.substr(0, p.rfind(".tmp-"));
      std::error_code ec;
      fs::rename(p, name, ec);
      GNN_CHECK(!ec, name, ": cannot move the written graph into place (", ec.message(), ")");
      p = name;
    }
  } catch (...) {
    remove_written();
    if (lock >= 0) ::close(lock);
    throw_if_interrupted("the graphs it had written are removed");  // (a signal, or a failure after one)
    throw;
  }
  ::close(lock);
  return paths;
}

}  // namespace gnn::synth
