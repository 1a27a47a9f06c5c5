// gnn bench: timings of the engine's own code paths, median of repeated runs after a warm-up.
//   gnn bench npz FILE: load every array (or --keys) of an .npz, as np.load(f)[k] does for each key.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "apps/commands.h"
#include "io/json.h"
#include "io/npz.h"
#include "runtime/parallel.h"

namespace gnn::cli {
namespace {

template <class F>
std::vector<double> time_runs(int warmup, int repeat, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return ms;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int bench_npz(const Args& a, const std::string& path) {
  const int repeat = int(a.integer("repeat", 1, 10000));  // flags first: a usage error never waits on I/O
  const NpzReader npz(path);
  const std::vector<std::string> keys = a.has("keys") ? a.list("keys") : npz.keys();
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
    std::printf("npz-load %s: %zu arrays, %.1f MB raw, median %.2f ms over %d runs (min %.2f, max %.2f), %.2f GB/s, "
                "%d threads\n",
                path.c_str(), keys.size(), double(raw) / 1e6, med, repeat, *std::min_element(ms.begin(), ms.end()),
                *std::max_element(ms.begin(), ms.end()), gbps, num_threads());
  }
  return 0;
}

}  // namespace

Command bench_command() {
  Command c;
  c.name = "bench";
  c.summary = "time one engine path: `npz FILE` (loading every array of an archive)";
  c.positionals = {{"WHAT", "npz"}, {"TARGET", "for npz: the archive to load"}};
  c.flags = {{"keys", "K1,K2", "load only these arrays"},
             {"repeat", "N", "timed runs after one warm-up", "20"},
             {"threads", "T", "CPU threads (default: all)"},
             {"json", "", "one JSON object: name, median_ms, gbps, gflops"}};
  c.details = "bench/peers/npz_load.py times numpy's np.load on the same file for comparison.";
  c.run = [](const Args& a) {
    if (a.has("threads")) set_num_threads(int(a.integer("threads", 1, 4096)));
    const std::string what = a.positional(0);
    if (what == "npz") return bench_npz(a, a.positional(1));
    throw UsageError("gnn bench: unknown benchmark '" + what + "' (available: npz)");
  };
  return c;
}

}  // namespace gnn::cli
