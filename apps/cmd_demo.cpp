// gnn demo: the README's main job. Until the training pipeline exists it runs the most complete path
// the engine has, end to end on generated data, and says so: a layout-shaped graph written as npz
// (stored and deflated), read back with every CRC checked and compared, its CSR/CSC built, timed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include <unistd.h>

#include "apps/commands.h"
#include "io/npz.h"
#include "runtime/allocator.h"
#include "runtime/graph.h"
#include "runtime/parallel.h"

namespace gnn::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A DAG shaped like an HLO program: node u consumes 1-3 earlier nodes, mostly recent ones, with a
// few long-range edges to parameters (hubs); rows [u, v] with u > v, as in TpuGraphs.
std::vector<std::pair<std::string, Tensor>> generate(int64_t N, int64_t C, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> edges;
  for (int64_t u = 1; u < N; ++u) {
    const int k = 1 + int(rng() % 3);
    for (int i = 0; i < k; ++i) {
      const int64_t back = rng() % 8 == 0 ? int64_t(rng() % uint64_t(u)) + 1 : 1 + int64_t(rng() % std::min<int64_t>(u, 4));
      edges.push_back(u), edges.push_back(u - back);
    }
  }
  const int64_t E = int64_t(edges.size()) / 2, NC = std::max<int64_t>(1, N / 50);
  Tensor feat = Tensor::zeros({N, 140}, DType::F32), op = Tensor::empty({N}, DType::U8);
  for (int64_t v = 0; v < N; ++v) {
    op.u8()[v] = uint8_t(rng() % 121);
    float* f = feat.f32() + v * 140;
    f[13] = 1.0f;  // element type f32
    for (int d = 0; d < 4; ++d) f[21 + d] = float(1 << (rng() % 9));
    f[27] = f[21] + f[22] + f[23] + f[24];
    f[28] = f[21] * f[22] * f[23] * f[24];
  }
  std::vector<int64_t> ids(static_cast<size_t>(N));
  for (int64_t v = 0; v < N; ++v) ids[size_t(v)] = v;
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.resize(size_t(NC));
  std::sort(ids.begin(), ids.end());
  Tensor cfg = Tensor::empty({C, NC, 18}, DType::F32), rt = Tensor::empty({C}, DType::I64);
  for (int64_t i = 0; i < cfg.numel(); ++i) cfg.f32()[i] = float(int(rng() % 7) - 1);
  for (int64_t c = 0; c < C; ++c) rt.i64()[c] = 100000 + int64_t(rng() % 10000000);
  return {{"node_feat", feat},
          {"node_opcode", op},
          {"edge_index", Tensor::from_vector(edges, Shape{E, 2})},
          {"node_config_ids", Tensor::from_vector(ids)},
          {"node_config_feat", cfg},
          {"config_runtime", rt},
          {"node_splits", Tensor::from_vector<int64_t>({0, N}, Shape{1, 2})}};
}

}  // namespace

Command demo_command() {
  Command c;
  c.name = "demo";
  c.summary = "the README's main job on generated data (today: the data path end to end)";
  c.flags = {{"nodes", "N", "nodes of the generated graph", "20000"},
             {"configs", "C", "layout configurations", "1000"},
             {"seed", "S", "generator seed", "1"},
             {"out", "DIR", "keep the generated files here (default: a temporary directory, removed)"}};
  c.details =
      "What it runs: a layout-shaped graph (HLO-like DAG, 140 node features, configs over 2% of the nodes)\n"
      "is written as npz stored and deflated, read back with every CRC checked and compared bit for bit,\n"
      "and turned into CSR/CSC. The training pipeline (train, eval, predict, score) is not built yet.";
  c.run = [](const Args& a) {
    const int64_t N = a.integer("nodes", 2, 5'000'000), C = a.integer("configs", 1, 100'000);
    const uint64_t seed = uint64_t(a.integer("seed", 0, INT64_MAX));
    namespace fs = std::filesystem;
    const bool keep = a.has("out");
    const fs::path dir = keep ? fs::path(a.str("out")) : fs::temp_directory_path() / ("gnn_demo_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::printf("gnn demo: the data path end to end on a generated layout-shaped graph (%d threads)\n", num_threads());
    std::printf("  the training pipeline (train / eval / predict / score) is not built yet; this is what exists\n\n");

    auto t0 = std::chrono::steady_clock::now();
    const auto arrays = generate(N, C, seed);
    uint64_t raw = 0;
    for (const auto& kv : arrays) raw += kv.second.nbytes();
    std::printf("  generate     %8.3f s  %lld nodes, %lld edges, %lld configs, %.1f MB of arrays\n", seconds_since(t0),
                (long long)N, (long long)arrays[2].second.size(0), (long long)C, double(raw) / 1e6);
    int failures = 0;
    for (bool compress : {false, true}) {
      const std::string path = (dir / (compress ? "graph_deflated.npz" : "graph_stored.npz")).string();
      t0 = std::chrono::steady_clock::now();
      save_npz(path, arrays, compress);
      const double write_s = seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
      const auto back = NpzReader(path).load_all();
      const double read_s = seconds_since(t0);
      for (const auto& [key, t] : arrays) {
        const Tensor& b = back.at(key);
        if (!(b.shape() == t.shape()) || std::memcmp(b.data(), t.data(), t.nbytes()) != 0) {
          std::printf("  MISMATCH in %s of %s\n", key.c_str(), path.c_str());
          ++failures;
        }
      }
      std::printf("  %-8s     write %6.3f s, read %6.3f s (%5.2f GB/s), file %.1f MB, every array identical\n",
                  compress ? "deflated" : "stored", write_s, read_s, double(raw) / read_s / 1e9,
                  double(fs::file_size(path)) / 1e6);
    }
    t0 = std::chrono::steady_clock::now();
    const Graph g = Graph::from_edge_index(arrays[2].second, N, EdgeColumns::kDstSrc, "edge_index");
    const double build_s = seconds_since(t0);
    int64_t max_in = 0, max_out = 0, sources = 0;
    for (int64_t v = 0; v < N; ++v) {
      max_in = std::max(max_in, g.in_degree(v)), max_out = std::max(max_out, g.out_degree(v));
      sources += g.in_degree(v) == 0;
    }
    std::printf("  csr + csc    %8.3f s  max in-degree %lld, max out-degree %lld, %lld nodes without inputs\n",
                build_s, (long long)max_in, (long long)max_out, (long long)sources);
    const MemoryStats m = host_memory_stats();
    std::printf("  host memory  peak %.1f MB\n", double(m.peak_bytes) / 1e6);
    if (keep)
      std::printf("\n  files kept in %s (try: gnn inspect %s/graph_deflated.npz)\n", dir.c_str(), dir.c_str());
    else
      fs::remove_all(dir);
    return failures == 0 ? 0 : 1;
  };
  return c;
}

}  // namespace gnn::cli
