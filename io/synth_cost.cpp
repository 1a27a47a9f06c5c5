// The analytic TPU-like cost model behind the synthetic runtimes (docs/synthetic.md).
//   tensor bytes:  the two minor-most dims of a tensor's layout are padded to an (8, 128) tile
//   op cost:       overhead + max(flops / peak * inefficiency, padded bytes in and out / bandwidth)
//   copy cost:     an edge whose producer layout differs from what its consumer needs pays a transpose
//                  (read + write of the padded tensor) plus an op overhead
//   layouts:       parameters and constants have the default layout; configurable nodes take theirs
//                  from the config; same-shape ops pass their first operand's layout on; transpose,
//                  broadcast and reduce derive theirs from their input's
#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "io/synth.h"

namespace gnn::synth {
namespace {

struct Layout {
  int8_t m2m[6] = {0, 0, 0, 0, 0, 0};  // minor_to_major: m2m[0] is the minor-most dim
  int8_t rank = 0;
  friend bool operator==(const Layout& a, const Layout& b) {
    return a.rank == b.rank && std::equal(a.m2m, a.m2m + a.rank, b.m2m);
  }
};

Layout default_layout(int rank) {
  Layout l;
  l.rank = int8_t(rank);
  for (int i = 0; i < rank; ++i) l.m2m[i] = int8_t(rank - 1 - i);
  return l;
}

// A config group of 6 values: a permutation of 0..rank-1 then -1s, or all -1 (the default).
Layout from_config(const float* g, int rank) {
  if (rank == 0 || g[0] < 0) return default_layout(rank);
  Layout l;
  l.rank = int8_t(rank);
  for (int i = 0; i < rank; ++i) l.m2m[i] = int8_t(g[i]);
  return l;
}

int esize(int32_t etype) { return etype == kBF16 ? 2 : etype == kPred ? 1 : 4; }

double padded_bytes(const Node& n, const Layout& l) {
  if (n.rank == 0) return double(esize(n.etype)) * 8 * 128;
  double b = esize(n.etype);
  for (int i = 0; i < n.rank; ++i) {
    const int64_t d = n.dims[i];
    const int64_t pad = i == l.m2m[0] ? 128 : (n.rank > 1 && i == l.m2m[1]) ? 8 : 1;
    b *= double((d + pad - 1) / pad * pad);
  }
  return n.rank == 1 ? b * 8 : b;
}

double flops(const Program& p, const Node& n) {
  switch (n.op) {
    case kDot: {
      const Node& a = p.nodes[size_t(n.inputs[0])];
      return 2.0 * double(n.numel()) * double(a.dims[a.rank - 1]);
    }
    case kConvolution: {
      const Node& a = p.nodes[size_t(n.inputs[0])];
      return 2.0 * double(n.numel()) * double(n.attr[0]) * double(n.attr[1]) * double(a.dims[3]);
    }
    case kParameter:
    case kConstant:
    case kReshape:
    case kTranspose:
    case kBroadcast:
      return 0;
    case kReduce:
      return double(p.nodes[size_t(n.inputs[0])].numel());
    default:
      return double(n.numel());
  }
}

double noise_factor(std::mt19937_64* rng, double sigma) {
  if (rng == nullptr || sigma == 0) return 1.0;
  std::normal_distribution<double> d(0.0, sigma);
  return std::exp(d(*rng));
}

}  // namespace

double layout_runtime(const Program& p, const std::vector<int32_t>& config_nodes, const float* cfg, const Machine& m,
                      std::mt19937_64* noise_rng) {
  const size_t n = p.nodes.size();
  std::vector<Layout> out(n);
  std::vector<int32_t> config_row(n, -1);
  for (size_t k = 0; k < config_nodes.size(); ++k) config_row[size_t(config_nodes[k])] = int32_t(k);
  double total = 0;
  for (size_t v = 0; v < n; ++v) {
    const Node& nd = p.nodes[v];
    const int r = config_row[v];
    const float* g = r >= 0 ? cfg + size_t(r) * kLayoutConfigFeatures : nullptr;
    // The layout each operand is needed in, and this node's output layout.
    Layout need[4];
    const size_t k_in = std::min<size_t>(nd.inputs.size(), 4);
    for (size_t k = 0; k < k_in; ++k) need[k] = out[size_t(nd.inputs[k])];  // by default: as produced
    if (g != nullptr) {
      out[v] = from_config(g, nd.rank);
      need[0] = from_config(g + 6, p.nodes[size_t(nd.inputs[0])].rank);
      if (k_in > 1) need[1] = from_config(g + 12, p.nodes[size_t(nd.inputs[1])].rank);
    } else if (nd.op == kParameter || nd.op == kConstant) {
      out[v] = default_layout(nd.rank);
    } else if (nd.op == kTranspose) {  // same bytes, dims renamed: output dim i is input dim attr[i]
      const Layout& in = out[size_t(nd.inputs[0])];
      int inv[6];
      for (int i = 0; i < nd.rank; ++i) inv[nd.attr[i]] = i;
      out[v].rank = int8_t(nd.rank);
      for (int i = 0; i < nd.rank; ++i) out[v].m2m[i] = int8_t(inv[in.m2m[i]]);
    } else if (nd.op == kBroadcast) {  // the new dim 0 is major-most
      const Layout& in = out[size_t(nd.inputs[0])];
      out[v].rank = int8_t(nd.rank);
      for (int i = 0; i < in.rank; ++i) out[v].m2m[i] = int8_t(in.m2m[i] + 1);
      out[v].m2m[nd.rank - 1] = 0;
    } else if (nd.op == kReduce) {  // the reduced dim drops out of the order
      const Layout& in = out[size_t(nd.inputs[0])];
      const int d = nd.attr[0];
      out[v].rank = int8_t(nd.rank);
      for (int i = 0, j = 0; i < in.rank; ++i)
        if (in.m2m[i] != d) out[v].m2m[j++] = int8_t(in.m2m[i] > d ? in.m2m[i] - 1 : in.m2m[i]);
    } else {  // same-shape ops pass the first operand's layout on and need the others to match it
      out[v] = out[size_t(nd.inputs[0])];
      for (size_t k = 1; k < k_in; ++k)
        if (p.nodes[size_t(nd.inputs[k])].rank == nd.rank) need[k] = out[v];
    }
    if (nd.op == kParameter || nd.op == kConstant) continue;  // free: already in memory
    double bytes = padded_bytes(nd, out[v]);
    for (size_t k = 0; k < k_in; ++k) {
      const Node& in = p.nodes[size_t(nd.inputs[k])];
      bytes += padded_bytes(in, need[k]);
      if (!(need[k] == out[size_t(nd.inputs[k])]))  // a layout change on this edge: a transpose
        total +=
            m.op_overhead_ns +
            2.0 * std::max(padded_bytes(in, need[k]), padded_bytes(in, out[size_t(nd.inputs[k])])) / m.bytes_per_ns;
    }
    // The MXU wants the contracted dim minor-most: dot's K, convolution's input features (dim 3).
    double inefficiency = 1;
    if (nd.op == kDot) {
      const int rank_a = p.nodes[size_t(nd.inputs[0])].rank;
      inefficiency = need[0].m2m[0] == rank_a - 1 ? 1.0 : 1.7;
    } else if (nd.op == kConvolution) {
      inefficiency = (need[0].m2m[0] == 3 ? 1.0 : 2.0) * (out[v].m2m[0] == 3 ? 1.0 : 1.3);
    }
    total += m.op_overhead_ns + std::max(flops(p, nd) / m.flops_per_ns * inefficiency, bytes / m.bytes_per_ns);
  }
  return total * noise_factor(noise_rng, m.noise);
}

// ---- tile configs --------------------------------------------------------------------------------
// A config tiles the root's output: output_bounds t (one per dim), kernel_bounds t plus the reduction
// tile of a dot, input_bounds the matching tile of the first input. Each iteration reads its input
// tiles and writes its output tile, padded to (8, 128) on the two minor dims.

namespace {

struct TileShape {
  int rank = 0;
  int64_t dims[6] = {1, 1, 1, 1, 1, 1};
  int64_t reduction = 0;  // K of a dot in the kernel, 0 if none
  double flops = 0;  // the whole kernel's
  double in_bytes_per_element = 0;  // bytes of kernel inputs per output element
  int ebytes = 4;
};

TileShape tile_shape(const Program& p) {
  TileShape s;
  const Node& root = p.nodes.back();
  s.rank = std::max(root.rank, 1);
  for (int i = 0; i < root.rank; ++i) s.dims[i] = root.dims[i];
  s.ebytes = esize(root.etype);
  double in_bytes = 0;
  for (const Node& n : p.nodes) {
    s.flops += flops(p, n);
    if (n.op == kDot)
      s.reduction = std::max(s.reduction, p.nodes[size_t(n.inputs[0])].dims[p.nodes[size_t(n.inputs[0])].rank - 1]);
    if (n.op == kParameter) in_bytes += double(n.numel()) * esize(n.etype);
  }
  s.in_bytes_per_element = in_bytes / double(std::max<int64_t>(root.numel(), 1));
  return s;
}

double tile_bytes(const int64_t* t, int rank, int ebytes) {
  double b = ebytes;
  for (int i = 0; i < rank; ++i) {
    const int64_t pad = i == rank - 1 ? 128 : i == rank - 2 ? 8 : 1;
    b *= double((t[i] + pad - 1) / pad * pad);
  }
  return b;
}

// The bytes a tile reads and writes per iteration: its padded output and its share of the inputs (a
// dot's K tile tk of its reduction), with 30% for the input's own padding.
struct TileBytes {
  double out = 0, in = 0;
  double working_set() const { return 2 * (out + in); }  // double buffered
};
TileBytes tile_traffic(const TileShape& s, const int64_t* t, int64_t tk) {
  double elems = 1;
  for (int i = 0; i < s.rank; ++i) elems *= double(t[i]);
  const double k_share = tk > 0 ? double(tk) / double(s.reduction) : 1.0;
  return {tile_bytes(t, s.rank, s.ebytes), elems * s.in_bytes_per_element * k_share * 1.3};
}

// The noiseless runtime of tile t (one size per dim of the root) with K tile tk (0: no dot).
double tile_cost(const TileShape& s, const int64_t* t, int64_t tk, const Machine& m) {
  double iterations = 1, tile_elems = 1, total_out = 1;
  for (int i = 0; i < s.rank; ++i) {
    iterations *= double((s.dims[i] + t[i] - 1) / t[i]);
    tile_elems *= double(t[i]), total_out *= double(s.dims[i]);
  }
  if (tk > 0) iterations *= double((s.reduction + tk - 1) / tk);
  const TileBytes traffic = tile_traffic(s, t, tk);
  const double flops_tile = s.flops / total_out * tile_elems * (tk > 0 ? double(tk) / double(s.reduction) : 1.0);
  const double spill = traffic.working_set() > m.vmem_bytes ? 3.0 : 1.0;
  const double per_iteration =
      m.tile_overhead_ns + std::max(flops_tile / m.flops_per_ns, spill * (traffic.out + traffic.in) / m.bytes_per_ns);
  // The loop is software-pipelined (double buffered): the first tile's load and the last tile's store
  // overlap nothing, so a tile too large for the loop to pipeline pays its traffic twice.
  const double fill_drain = (traffic.out + traffic.in) / m.bytes_per_ns;
  return m.op_overhead_ns + iterations * per_iteration + fill_drain;
}

// The compiler's default: grown from the hardware tile while the double-buffered working set fits in
// half of VMEM, each round doubling the first of the K tile, then the dims from the minor-most out, that
// can still grow; of the tiles on that path, the one the cost model rates fastest (the compiler's own
// model sees the pipeline too). Tiles off the path (divisors, other shapes) can still beat it.
void default_tile(const TileShape& s, const Machine& m, int64_t* t, int64_t* tk) {
  int64_t best[6], best_k = *tk;
  std::copy(t, t + 6, best);
  double best_cost = tile_cost(s, t, *tk, m);
  for (bool grew = true; grew;) {
    grew = false;
    for (int i = s.rank; i >= 0 && !grew; --i) {  // i == rank: the K tile
      int64_t& v = i == s.rank ? *tk : t[i];
      const int64_t dim = i == s.rank ? s.reduction : s.dims[i];
      if (v <= 0 || v * 2 > dim) continue;
      v *= 2;
      const TileBytes b = tile_traffic(s, t, *tk);
      if (b.working_set() <= m.vmem_bytes / 2) grew = true;
      else v /= 2;
    }
    if (const double c = tile_cost(s, t, *tk, m); grew && c < best_cost)
      best_cost = c, best_k = *tk, std::copy(t, t + 6, best);
  }
  std::copy(best, best + 6, t), *tk = best_k;
}

void put_seq(float* f, const int64_t* v, int k) {  // 6 values (0-padded), sum, product
  double sum = 0, prod = 1;
  for (int i = 0; i < 6; ++i) f[i] = i < k ? float(v[i]) : 0.0f;
  for (int i = 0; i < k; ++i) sum += double(v[i]), prod *= double(v[i]);
  f[6] = float(sum), f[7] = float(prod);
}

}  // namespace

double tile_runtime(const Program& p, const float* cfg, const Machine& m, std::mt19937_64* noise_rng) {
  const TileShape s = tile_shape(p);
  int64_t t[6] = {1, 1, 1, 1, 1, 1};
  for (int i = 0; i < s.rank; ++i) t[i] = std::max<int64_t>(1, int64_t(cfg[8 + i]));  // output_bounds
  const int64_t tk = s.reduction > 0 ? std::max<int64_t>(1, int64_t(cfg[s.rank])) : 0;  // kernel_bounds' extra dim
  return tile_cost(s, t, tk, m) * noise_factor(noise_rng, m.noise);
}

// Tile sizes are drawn in units of the hardware tile ((8, 128) on the two minor dims, the MXU's 128 on
// the contracted dim): a power of two of units up to the dim, a divisor of the dim's unit count, or the
// whole dim (which may pad). No config splits work finer than the hardware does, as the real compiler's
// candidates do not. The default (config 0) is default_tile's: the cheapest tile on the compiler's
// doubling path, as the compiler's heuristic picks a good tile: real defaults are within 0.88x of the
// best measured config (../shared/data).
Tensor random_tile_configs(const Program& p, int64_t configs, std::mt19937_64& rng, int64_t* distinct) {
  const TileShape s = tile_shape(p);
  const Machine m;
  Tensor out = Tensor::zeros({configs, kTileConfigFeatures}, DType::F32);
  auto unit_of = [&](int i) { return std::min<int64_t>(s.dims[i], i == s.rank - 1 ? 128 : i == s.rank - 2 ? 8 : 1); };
  // The divisors of each dim's hardware units (the reduction's last), listed once per kernel: the
  // compiler also proposes tiles that split a dim evenly.
  std::vector<std::vector<int64_t>> divisors(size_t(s.rank) + 1);
  auto list_divisors = [](int64_t dim, int64_t unit) {
    const int64_t units = (dim + unit - 1) / unit;
    std::vector<int64_t> d;
    for (int64_t k = 1; k * k <= units; ++k)
      if (units % k == 0) {
        d.push_back(k);
        if (k * k != units) d.push_back(units / k);
      }
    std::sort(d.begin(), d.end());
    return d;
  };
  for (int i = 0; i < s.rank; ++i) divisors[size_t(i)] = list_divisors(s.dims[i], unit_of(i));
  if (s.reduction > 0) divisors[size_t(s.rank)] = list_divisors(s.reduction, std::min<int64_t>(s.reduction, 128));
  // The whole dim one time in six; else, as often, unit * 2^k up to the dim or unit * a divisor of its units.
  auto draw = [&](int64_t dim, int64_t unit, const std::vector<int64_t>& divs) {
    int64_t cap = 1;
    while (cap * unit < dim) cap *= 2;
    const int steps = int(std::log2(double(cap))) + 1;
    if (rng() % 6 == 0) return dim;
    if (rng() % 2 == 0) return std::min(dim, unit << (rng() % uint64_t(steps)));
    return std::min(dim, unit * divs[rng() % divs.size()]);
  };
  auto hardware_tile = [&](int64_t* t, int64_t* tk) {
    for (int i = 0; i < s.rank; ++i) t[i] = unit_of(i);
    if (s.reduction > 0) *tk = std::min<int64_t>(s.reduction, 128);
  };
  // Each tile once: the 15 real kernels list 2 to 579 configs, all distinct but for three single-tile
  // reshapes. A kernel stops at the tiles 64 draws in a row did not add to.
  std::set<std::array<int64_t, 7>> seen;
  int64_t c = 0;
  for (int misses = 0; c < configs && misses < 64;) {
    int64_t t[6] = {1, 1, 1, 1, 1, 1}, tk = 0;
    if (c == 0) {
      hardware_tile(t, &tk);
      default_tile(s, m, t, &tk);
    } else {
      // The compiler refuses a tile whose double-buffered working set does not fit VMEM, so the real
      // files hold none: draw again (17 draws at most, then the hardware tile).
      for (int attempt = 0;; ++attempt) {
        for (int i = 0; i < s.rank; ++i) t[i] = draw(s.dims[i], unit_of(i), divisors[size_t(i)]);
        if (s.reduction > 0) tk = draw(s.reduction, std::min<int64_t>(s.reduction, 128), divisors[size_t(s.rank)]);
        if (tile_traffic(s, t, tk).working_set() <= m.vmem_bytes) break;
        if (attempt == 16) {
          hardware_tile(t, &tk);
          break;
        }
      }
    }
    if (!seen.insert({t[0], t[1], t[2], t[3], t[4], t[5], tk}).second) {
      ++misses;
      continue;
    }
    misses = 0;
    int64_t kernel[6];
    std::copy(t, t + 6, kernel);
    int kr = s.rank;
    if (s.reduction > 0 && kr < 6) kernel[kr++] = tk;
    float* f = out.f32() + c * kTileConfigFeatures;
    put_seq(f, kernel, kr);
    put_seq(f + 8, t, s.rank);
    put_seq(f + 16, t, s.rank);
    ++c;
  }
  if (distinct) *distinct = c;
  if (c == 1 && configs >= 2) {  // one tile only: listed twice (with room for the second row)
    std::copy_n(out.f32(), kTileConfigFeatures, out.f32() + kTileConfigFeatures);
    c = 2;
  }
  return c == configs ? out : out.slice(0, c).clone();
}

Tensor random_layout_configs(const Program& p, const std::vector<int32_t>& config_nodes, int64_t configs,
                             std::mt19937_64& rng) {
  const int64_t nc = int64_t(config_nodes.size());
  Tensor out = Tensor::full({configs, nc, kLayoutConfigFeatures}, -1, DType::F32);
  for (int64_t c = 1; c < configs; ++c) {  // config 0 keeps every node at the compiler default
    // A search revisits configs: 15% repeat an earlier one (its runtime measured again, with fresh noise),
    // as 18.8% of the real program's configs in ../shared/data repeat one.
    if (c > 1 && rng() % 100 < 15) {
      const int64_t from = 1 + int64_t(rng() % uint64_t(c - 1));
      std::copy_n(out.f32() + from * nc * kLayoutConfigFeatures, nc * kLayoutConfigFeatures,
                  out.f32() + c * nc * kLayoutConfigFeatures);
      continue;
    }
    for (int64_t k = 0; k < nc; ++k) {
      if (rng() % 10 < 3) continue;  // this node stays at its default
      const Node& nd = p.nodes[size_t(config_nodes[size_t(k)])];
      float* g = out.f32() + (c * nc + k) * kLayoutConfigFeatures;
      const int ranks[3] = {nd.rank, p.nodes[size_t(nd.inputs[0])].rank,
                            nd.inputs.size() > 1 ? p.nodes[size_t(nd.inputs[1])].rank : 0};
      for (int grp = 0; grp < 3; ++grp) {
        if (ranks[grp] == 0 || rng() % 2 == 0) continue;  // default for this operand
        int perm[6] = {0, 1, 2, 3, 4, 5};
        std::shuffle(perm, perm + ranks[grp], rng);
        for (int i = 0; i < ranks[grp]; ++i) g[grp * 6 + i] = float(perm[i]);
      }
    }
  }
  return out;
}

}  // namespace gnn::synth
