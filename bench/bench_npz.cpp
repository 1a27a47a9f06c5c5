// Loading a TpuGraphs-like layout archive (node_feat, edges, configs, runtimes: 64 MiB raw) stored
// and deflated. Bytes: the raw (uncompressed) size of all arrays. The 1 GB comparison with numpy
// is bench/peers/npz_load.py.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "io/npz.h"

using namespace gnn;

namespace {

// A layout-like archive: 10k nodes x 140 features, 20k edges, 1000 configs x 200 configurable nodes x
// 18 layout values in {-1..5} (compresses like the real ones), runtimes.
std::string make_archive(bool compress) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            (std::string("gnn_bench_layout_") + (compress ? "deflated" : "stored") + ".npz"))
                               .string();
  if (std::filesystem::exists(path)) return path;
  std::mt19937 rng(7);
  const int64_t N = 10000, E = 20000, C = 1000, NC = 200;
  Tensor feat = Tensor::empty({N, 140}, DType::F32), ei = Tensor::empty({E, 2}, DType::I64);
  Tensor cfg = Tensor::empty({C, NC, 18}, DType::F32), rt = Tensor::empty({C}, DType::I64);
  for (int64_t i = 0; i < feat.numel(); ++i) feat.f32()[i] = i % 7 == 0 ? float(rng() % 1000) : 0.0f;
  for (int64_t i = 0; i < 2 * E; ++i) ei.i64()[i] = int64_t(rng() % N);
  for (int64_t i = 0; i < cfg.numel(); ++i) cfg.f32()[i] = float(int(rng() % 7) - 1);
  for (int64_t i = 0; i < C; ++i) rt.i64()[i] = 100000 + int64_t(rng() % 1000000);
  save_npz(path, {{"node_feat", feat}, {"edge_index", ei}, {"node_config_feat", cfg}, {"config_runtime", rt}},
           compress);
  return path;
}

void BM_npz_load(benchmark::State& state) {
  const std::string path = make_archive(state.range(0) != 0);
  uint64_t raw = 0;
  for (const std::string& k : NpzReader(path).keys()) raw += NpzReader(path).info(k).entry.uncompressed_size;
  for (auto _ : state) benchmark::DoNotOptimize(NpzReader(path).load_all());
  state.SetBytesProcessed(int64_t(state.iterations() * raw));  // raw bytes of every array
  state.SetLabel(state.range(0) ? "deflated" : "stored");
}

}  // namespace

BENCHMARK(BM_npz_load)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
