#include "apps/train/profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "kernels/gemm.h"
#include "runtime/tensor.h"

namespace gnn::train {

namespace {

// This machine's SGEMM rate now: a 768^3 product on the run's threads, best of 5 after one warm-up.
double measure_gemm_gflops() {
  constexpr int64_t n = 768;
  Tensor a = Tensor::full({n, n}, 0.5, DType::F32), b = Tensor::full({n, n}, 0.25, DType::F32);
  Tensor c = Tensor::empty({n, n}, DType::F32);
  double best = 1e30;
  for (int rep = 0; rep < 6; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    gemm_cpu(false, false, n, n, n, 1.0f, a.f32(), n, b.f32(), n, 0.0f, c.f32(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::min(best, s);
  }
  return 2.0 * double(n) * double(n) * double(n) / best / 1e9;
}

}  // namespace

void StepProfile::begin_step() {
  ag::set_op_profiling(true);
  flops_at_start_ = gemm_cpu_flops();
  ag::profile_mark();
}

void StepProfile::phase(const char* name, double seconds) {
  (first_.steps == 0 ? first_ : rest_).phases[name] += seconds;
}

void StepProfile::end_step(double step_seconds) {
  Totals& t = first_.steps == 0 ? first_ : rest_;
  t.flops += gemm_cpu_flops() - flops_at_start_;
  t.step_s += step_seconds;
  t.steps += 1;
  for (const auto& [op, o] : ag::take_op_profile()) {
    ag::OpTime& s = t.ops[op];
    s.forward_s += o.forward_s, s.backward_s += o.backward_s, s.calls += o.calls;
  }
  ag::set_op_profiling(false);  // (validation and checkpoints between steps are not timed)
}

Json StepProfile::json() const {
  const Totals& t = shown();
  if (peak_gflops_ == 0) peak_gflops_ = measure_gemm_gflops();
  const double n = double(std::max<int64_t>(t.steps, 1)), step_ms = 1e3 * t.step_s / n;
  Json j = Json::object();
  j.set("steps", t.steps);
  j.set("first_step_left_out", rest_.steps > 0);
  j.set("step_ms", step_ms);
  Json phases = Json::object();
  for (const auto& [name, s] : t.phases) phases.set(name, 1e3 * s / n);
  j.set("phases_ms", phases);
  Json ops = Json::object();
  for (const auto& [name, o] : t.ops) {
    Json e = Json::object();
    e.set("forward_ms", 1e3 * o.forward_s / n);
    e.set("backward_ms", 1e3 * o.backward_s / n);
    e.set("calls", double(o.calls) / n);
    ops.set(name, e);
  }
  j.set("ops", ops);
  const double gflop = double(t.flops) / n / 1e9;
  j.set("gemm_gflop", gflop);
  j.set("gemm_peak_gflops", peak_gflops_);
  j.set("gemm_floor_ms", 1e3 * gflop / peak_gflops_);
  return j;
}

std::string StepProfile::table() const {
  if (shown().steps == 0) return "profile: no step ran in this process\n";
  const Json j = json();
  const double step = j["step_ms"].as_number();
  std::string out;
  char line[160];
  const auto row = [&](const std::string& name, double ms, const char* extra) {
    std::snprintf(line, sizeof line, "  %-28s %10.2f %6.1f%%%s\n", name.c_str(), ms, 100 * ms / step, extra);
    out += line;
  };
  std::snprintf(line, sizeof line, "profile: %.1f ms a step over %lld steps%s\n", step,
                (long long)j["steps"].as_number(),
                j["first_step_left_out"].as_bool() ? " (the process's first step left out)" : "");
  out += line;
  std::snprintf(line, sizeof line, "  %-28s %10s %7s\n", "phase / op", "ms a step", "share");
  out += line;
  for (const auto& [name, v] : j["phases_ms"].items()) row(name, v.as_number(), "");
  std::vector<std::pair<double, std::string>> ops;
  for (const auto& [name, v] : j["ops"].items())
    ops.push_back({v["forward_ms"].as_number() + v["backward_ms"].as_number(), name});
  std::sort(ops.rbegin(), ops.rend());
  out += "  ops (forward + backward), largest first:\n";
  for (const auto& [ms, name] : ops) {
    const Json& v = j["ops"][name];
    char extra[64];
    std::snprintf(extra, sizeof extra, "   fwd %.2f bwd %.2f, %.0f a step", v["forward_ms"].as_number(),
                  v["backward_ms"].as_number(), v["calls"].as_number());
    row("  " + name, ms, extra);
  }
  std::snprintf(line, sizeof line,
                "  GEMM: %.2f GFLOP a step; this machine's SGEMM peak now %.1f GFLOP/s (768^3): floor %.2f ms "
                "a step (%.1f%% of it)\n",
                j["gemm_gflop"].as_number(), j["gemm_peak_gflops"].as_number(), j["gemm_floor_ms"].as_number(),
                100 * j["gemm_floor_ms"].as_number() / step);
  out += line;
  return out;
}

}  // namespace gnn::train
