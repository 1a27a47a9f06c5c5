// gnn bench: timings of the engine's own code paths, median of repeated runs after a warm-up.
//   gnn bench npz FILE: load every array (or --keys) of an .npz, as np.load(f)[k] does for each key.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "apps/commands.h"
#include "bench/registry.h"
#include "io/json.h"
#include "io/npz.h"
#include "kernels/gemm.h"
#include "runtime/cuda.h"
#include "runtime/parallel.h"
#include "runtime/tensor.h"

namespace gnn::cli {
namespace {

// Wall-clock milliseconds of each run, or what f returns when it times itself (a double). before() runs
// ahead of each timed run, outside its time.
template <class F, class Before>
std::vector<double> time_runs(int warmup, int repeat, F&& f, Before&& before) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < repeat; ++i) {
    before();
    const auto t0 = std::chrono::steady_clock::now();
    if constexpr (std::is_same_v<decltype(f()), double>) {
      ms.push_back(f());
    } else {
      f();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  return ms;
}
template <class F>
std::vector<double> time_runs(int warmup, int repeat, F&& f) {
  return time_runs(warmup, repeat, f, [] {});
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int bench_npz(const Args& a, const std::string& path) {
  const int repeat = int(a.integer("repeat", 1, 10000));  // flags first: a usage error never waits on I/O
  std::vector<std::string> keys = a.has("keys") ? a.list("keys") : std::vector<std::string>{};
  for (size_t i = 0; i < keys.size(); ++i)  // (loaded once: counted twice, the rate would be overstated)
    if (std::find(keys.begin(), keys.begin() + ptrdiff_t(i), keys[i]) != keys.begin() + ptrdiff_t(i))
      throw UsageError("--keys: '" + keys[i] + "' is listed twice");
  const NpzReader npz(path);
  if (!a.has("keys")) keys = npz.keys();
  uint64_t raw = 0;
  for (const std::string& k : keys) raw += npz.info(k).entry.uncompressed_size;
  const auto ms = time_runs(1, repeat, [&] {
    const NpzReader fresh(path);  // as np.load: open, read the directory, load the arrays
    volatile size_t sink = fresh.load_keys(keys).size();
    (void)sink;
  });
  const double med = median(ms);
  const double gbps = double(raw) / (med * 1e-3) / 1e9;
  if (a.on("json")) {
    Json j = Json::object();
    j.set("name", "npz-load"), j.set("median_ms", med), j.set("gbps", gbps), j.set("gflops", Json());
    j.set("file", path), j.set("raw_bytes", raw), j.set("threads", num_threads()), j.set("repeat", repeat);
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "npz-load %s: %zu arrays, %.1f MB raw, median %.2f ms over %d runs (min %.2f, max %.2f), %.2f GB/s, "
        "%d threads\n",
        path.c_str(), keys.size(), double(raw) / 1e6, med, repeat, *std::min_element(ms.begin(), ms.end()),
        *std::max_element(ms.begin(), ms.end()), gbps, num_threads());
  }
  return 0;
}

// --cold MIB: ahead of each timed run, MIB MiB written through the caches (on the CPU a read-modify-write
// of one float a cache line, over the threads; on a GPU a fill on the stream the events time, before its
// start event), so that the kernel starts with its inputs and outputs out of the caches, as it does inside
// a training step where other ops run between two calls; warm, each run finds the last one's data where it
// left them. On this project's 2-core VM (2 MiB of L2 a core, 480 MiB of L3) tgraph's product `op:matmul
// --nodes 168 --configs 64 --features 256 --matmul-precision bf16` read 0.91-0.98 ms warm, 1.40-1.59 with
// --cold 200 and 1.74-1.97 with --cold 600, past which it levels off; the in-step time lies between
// (docs/benchmarks.md, forty-first session). So give more than the caches hold: the last-level cache, or
// the threads' L2s together where those hold more.
class CacheFlush {
 public:
  CacheFlush(int64_t mib, bool cuda) {
    if (mib == 0) return;
    try {
      lines_ = Tensor::empty({mib << 18}, DType::F32, cuda ? Device::cuda(0) : Device::cpu());
      lines_.fill_(0.0);
    } catch (const std::exception& e) {
      throw UsageError("gnn bench kernel: --cold " + std::to_string(mib) + ": " + e.what());
    }
  }
  void operator()() {
    if (!lines_.defined()) return;
    ++runs_;
    if (lines_.is_cuda()) {
      lines_.fill_(double(runs_));  // queued ahead of the run's start event
      return;
    }
    float* p = lines_.f32();
    const int64_t n = lines_.numel() / 16;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i * 16] += 1.0f;  // every line read for ownership and dirtied
  }
  int64_t runs() const { return runs_; }  // the runs it went before (the JSON's cold_runs)

 private:
  Tensor lines_;
  int64_t runs_ = 0;
};

int bench_kernel(const Args& a, const std::string& name) {
  KernelShape s;
  constexpr int64_t kMaxIndex = int64_t(std::numeric_limits<int32_t>::max()) - 1;  // a Graph's int32 indices
  s.nodes = a.integer("nodes", 1, kMaxIndex);
  s.edges = a.integer("edges", 0, kMaxIndex);
  s.features = a.integer("features", 1, 1 << 20);
  s.configs = a.integer("configs", 1, 1 << 16);
  s.graph_nodes = a.integer("graph-nodes", 1, int64_t(1) << 31);
  s.backward = a.on("backward");
  if (a.on("save-graph") && a.str("save-graph").empty())
    throw UsageError("gnn bench kernel: --save-graph: no file given");
  if (a.has("save-graph")) check_output("save-graph", a.str("save-graph"), {}), s.save_graph = a.str("save-graph");
  const int repeat = int(a.integer("repeat", 20, 100000));
  const int64_t cold = a.integer("cold", 0, int64_t(1) << 20);
  // (the allocation would succeed and the flush's first write be killed for memory: refused first)
  if (const int64_t mib = usable_memory_bytes() >> 20; mib > 0 && cold > mib / 2)
    throw UsageError("gnn bench kernel: --cold " + std::to_string(cold) + " MiB is more than half of the " +
                     std::to_string(mib) + " MiB of memory this process may use; the caches' size is enough");
  const std::string device = a.str("device"), spmm = a.str("spmm");
  if (device != "cpu" && device != "cuda")
    throw UsageError("gnn bench kernel: --device must be cpu or cuda, got '" + device + "'");
  if (spmm != "gnn" && spmm != "cusparse")
    throw UsageError("gnn bench kernel: --spmm must be gnn or cusparse, got '" + spmm + "'");
  s.cuda = device == "cuda", s.cusparse = spmm == "cusparse", s.cuda_graph = a.on("cuda-graph");
  // A shape flag the case does not read is said (scripts give one shape to a list of cases, so it is not
  // refused), and left out of the line and the JSON.
  KernelReads reads;
  try {
    reads = bench_kernel_reads(name);
  } catch (const KernelUsageError& e) {
    throw UsageError(e.what());
  }
  if (a.on("edges") && !reads.edges)
    std::fprintf(stderr, "gnn bench kernel: warning: --edges: %s runs on no graph's edges; ignored\n", name.c_str());
  if (a.on("graph-nodes") && !reads.graph_nodes)
    std::fprintf(stderr, "gnn bench kernel: warning: --graph-nodes: %s does not split its rows into graphs; ignored\n",
                 name.c_str());
  // The least any case holds on the host: one [N, C*F] float tensor, and its graph's CSR and CSC when it
  // runs on edges. Past the memory this process may use it is refused before anything is allocated.
  const double least = 4.0 * double(s.nodes) * double(s.features) * double(s.configs) +
                       (reads.edges ? 12.0 * double(s.edges) + 8.0 * double(s.nodes) : 0.0);
  if (const int64_t usable = usable_memory_bytes(); usable > 0 && least > double(usable))
    throw UsageError("gnn bench kernel: --nodes " + std::to_string(s.nodes) +
                     (reads.edges ? " --edges " + std::to_string(s.edges) : std::string()) + " --features " +
                     std::to_string(s.features) + " --configs " + std::to_string(s.configs) + ": " + name +
                     " needs at least " + size_text(least) + ", more than the " + size_text(double(usable)) +
                     " this process may use");
  KernelCase k;
  try {
    k = make_kernel_case(name, s);
  } catch (const KernelUsageError& e) {
    throw UsageError(e.what());
  }
  std::unique_ptr<CudaGraph> graph;
  if (s.cuda_graph) {
    if (!s.cuda || !k.graph_safe)
      throw UsageError(
          "gnn bench kernel: --cuda-graph captures gemm, spmm-* (gnn's kernels) and the layers on "
          "--device cuda only; " +
          name +
          (s.cuda ? " is not capturable (cuSPARSE's SpMM, and graph-attention, which uploads a tile table each "
                    "step, are timed as launched)"
                  : " was asked for on the CPU"));
    k.step();  // once eagerly: cuBLAS and the layers' caches set themselves up outside the capture
    graph = std::make_unique<CudaGraph>(0, k.step);
  }
  if (!s.save_graph.empty()) {  // (written now that every check has passed)
    if (s.graph_arrays->empty())
      throw UsageError("gnn bench kernel: --save-graph " + s.save_graph + ": " + name + " made no graph at this shape");
    save_npz(s.save_graph, *s.graph_arrays);
    s.graph_arrays->clear();  // (not held through the timed runs)
  }
  const std::function<void()> step = graph ? std::function<void()>([&] { graph->replay(); }) : k.step;
  // On the GPU each run is timed by events on the compute stream: device time, launches included.
  CacheFlush flush(cold, s.cuda);
  const auto timed_on_gpu = [&] { return cuda_time_ms(0, step); };
  const auto ms = s.cuda ? time_runs(3, repeat, timed_on_gpu, flush) : time_runs(3, repeat, step, flush);
  const double med = median(ms);
  const double gbps = k.bytes / (med * 1e-3) / 1e9, gflops = k.flops / (med * 1e-3) / 1e9;
  if (a.on("json")) {
    Json j = Json::object();
    j.set("name", name), j.set("median_ms", med), j.set("gbps", gbps), j.set("gflops", gflops);
    j.set("nodes", s.nodes);
    if (reads.edges) j.set("edges", s.edges);
    j.set("features", s.features), j.set("configs", s.configs);
    if (reads.graph_nodes) j.set("graph_nodes", s.graph_nodes);
    j.set("backward", s.backward), j.set("threads", num_threads()), j.set("repeat", repeat), j.set("device", device);
    j.set("spmm", spmm), j.set("cuda_graph", s.cuda_graph), j.set("cold_mib", cold), j.set("cold_runs", flush.runs());
    j.set("matmul_precision", gemm_precision_name(gemm_cpu_precision()));
    j.set("matmul_kernel", device == "cuda" ? "cublas" : gemm_kernel_name());
    std::printf("%s\n", j.dump().c_str());
  } else {
    const std::string e = reads.edges ? " E=" + std::to_string(s.edges) : "";
    std::printf(
        "%s%s N=%lld%s F=%lld C=%lld: median %.3f ms over %d runs (min %.3f), %.2f GB/s, %.2f GFLOP/s, "
        "%d threads%s\n",
        name.c_str(), s.backward ? " (forward + backward)" : "", (long long)s.nodes, e.c_str(), (long long)s.features,
        (long long)s.configs, med, repeat, *std::min_element(ms.begin(), ms.end()), gbps, gflops, num_threads(),
        cold ? (", cold: " + std::to_string(cold) + " MiB written before each run").c_str() : "");
  }
  return 0;
}

// "Kernels: gemm, spmm-sum, ..." from the registry, wrapped as the rest of the help.
std::string kernel_list() {
  std::string out = "Kernels:", line = out;
  const std::vector<std::string> names = bench_kernel_names();
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string word = names[i] + (i + 1 < names.size() ? "," : ".");
    if (line.size() + 1 + word.size() > 100) out += "\n" + word, line = word;
    else out += " " + word, line += " " + word;
  }
  return out;
}

}  // namespace

Command bench_command() {
  Command c;
  c.name = "bench";
  c.summary = "time a kernel (`kernel NAME`) or npz loading (`npz FILE`): median of repeated runs";
  c.positionals = {{"WHAT", "kernel or npz"}, {"TARGET", "the kernel's name, or the archive to load"}};
  c.flags = {
      {"nodes", "N", "kernel: graph nodes", "10000"},
      {"edges", "E", "kernel: graph edges (TpuGraphs-like: mean in-degree 2, skewed, hubs)", "20000"},
      {"features", "F", "kernel: feature width", "128"},
      {"configs", "C", "kernel: configs batched node-major as N x (C*F)", "1"},
      {"graph-nodes", "S",
       "kernel: graph-attention's, instance-norm's and pool-*'s nodes per graph (the N nodes split into graphs of S)",
       "64"},
      {"backward", "", "kernel: time forward + backward"},
      {"device", "cpu|cuda",
       "kernel: where to run (cuda: all but segment-softmax and instance-norm; timed by CUDA events)", "cpu"},
      {"spmm", "gnn|cusparse", "kernel: spmm-sum/mean on cuda through gnn's kernel or cuSPARSE", "gnn"},
      {"cuda-graph", "",
       "kernel: on cuda, time replays of the step captured once as a CUDA graph (gemm, spmm-*, the layers)"},
      {"save-graph", "FILE",
       "kernel: also write the graph (edge_index) as npz, for peer scripts (the cases that run on edges)"},
      {"keys", "K1,K2", "npz: load only these arrays"},
      {"repeat", "N", "timed runs after the warm-up (at least 20 for kernels)", "20"},
      {"cold", "MIB",
       "kernel: before each timed run (untimed) write MIB MiB through the caches, so each run starts with its data "
       "out of cache as inside a training step (give more than the caches hold: the last-level cache, or the "
       "threads' L2s together); 0: warm runs",
       "0"},
      kThreadsFlag,
      {"matmul-precision", "f32|bf16",
       "kernel: the CPU's matrix products, as gnn train's flag (bf16 needs AVX512-BF16)", "f32"},
      {"json", "", "one JSON object: name, median_ms, gbps, gflops"}};
  c.details = kernel_list() +
              "\nGB/s counts the bytes a pass must move (formulas beside each case in bench/registry_*.cpp);\n"
              "compare with build/bin/gnn_bench's BM_floor_* copy bandwidth.\n"
              "bench/peers/ times numpy, PyTorch and PyTorch Geometric on the same work.";
  c.run = [](const Args& a) {
    const std::string what = a.positional(0);
    // A flag of the other benchmark is a mistake (--nodes on `npz`, --keys on `kernel`): said, not ignored.
    static const char* const kernel_only[] = {"nodes",      "edges", "features", "configs", "graph-nodes", "backward",
                                              "device",     "spmm",  "cuda-graph", "save-graph", "cold",
                                              "matmul-precision"};
    if (what == "npz")
      for (const char* f : kernel_only)
        if (a.on(f)) throw UsageError(std::string("gnn bench npz: --") + f + " is a flag of `gnn bench kernel`");
    if (what == "kernel" && a.on("keys")) throw UsageError("gnn bench kernel: --keys is a flag of `gnn bench npz`");
    const std::string precision = a.str("matmul-precision");
    if (precision != "f32" && precision != "bf16")
      throw UsageError("--matmul-precision: expected f32 or bf16, got '" + precision + "'");
    if (precision == "bf16" && a.str("device") == "cuda")
      throw UsageError("--matmul-precision bf16: sets the CPU's products; --device cuda runs cuBLAS's");
    if (precision == "bf16" && !gemm_bf16_supported())
      throw UsageError("--matmul-precision bf16: this CPU has no AVX512-BF16, which its products need");
    set_gemm_cpu_precision(precision == "bf16" ? GemmPrecision::kBf16 : GemmPrecision::kF32);
    if (what == "npz") return bench_npz(a, a.positional(1));
    if (what == "kernel") return bench_kernel(a, a.positional(1));
    throw UsageError("gnn bench: unknown benchmark '" + what + "' (available: kernel, npz)");
  };
  return c;
}

}  // namespace gnn::cli
