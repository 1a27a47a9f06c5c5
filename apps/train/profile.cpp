#include "apps/train/profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "kernels/gemm.h"
#include "runtime/cuda.h"
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

// The GPU's SGEMM rate now, through gemm_cuda as the ops call it (TF32 where GNN_TF32 turns it on): square
// products of 256, 1024 and 4096, best of 3 after one warm-up each, timed with CUDA events; the sizes stop
// growing once one product takes over 5 ms (a slow device or the emulator). Sets n_used to the size whose
// rate it returns.
double measure_gemm_gflops_cuda(Device device, int64_t& n_used) {
  const BlasHandle blas = cuda_blas(device.index);
  const Stream stream = cuda_stream(device.index);
  double best_rate = 0;
  for (const int64_t n : {256, 1024, 4096}) {
    Tensor a = Tensor::full({n, n}, 0.5, DType::F32, device), b = Tensor::full({n, n}, 0.25, DType::F32, device);
    Tensor c = Tensor::empty({n, n}, DType::F32, device);
    const auto product = [&] {
      if constexpr (kWithCuda)  // (a build without CUDA has no gemm_cuda, and no device to run this on)
        gemm_cuda(false, false, n, n, n, 1.0f, a.f32(), n, b.f32(), n, 0.0f, c.f32(), n, blas, stream);
    };
    double best_ms = 1e30;
    for (int rep = 0; rep < 4; ++rep) {
      const double ms = cuda_time_ms(device.index, product);
      if (rep > 0) best_ms = std::min(best_ms, ms);
    }
    const double rate = 2.0 * double(n) * double(n) * double(n) / (std::max(best_ms, 1e-6) * 1e-3) / 1e9;
    if (rate > best_rate) best_rate = rate, n_used = n;
    if (best_ms > 5.0) break;
  }
  return best_rate;
}

}  // namespace

void StepProfile::wait() const {
  if (device_.is_cuda()) cuda_synchronize(device_.index);
}

int64_t StepProfile::flops() const { return device_.is_cuda() ? gemm_cuda_flops() : gemm_cpu_flops(); }

void StepProfile::begin_step() {
  ag::set_op_profiling(true);
  flops_at_start_ = flops();
  ag::profile_mark();
}

void StepProfile::phase(const char* name, double seconds) {
  (first_.steps == 0 ? first_ : rest_).phases[name] += seconds;
}

void StepProfile::end_step(double step_seconds) {
  Totals& t = first_.steps == 0 ? first_ : rest_;
  t.flops += flops() - flops_at_start_;
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
  if (peak_gflops_ == 0) {
    if (device_.is_cuda()) peak_gflops_ = measure_gemm_gflops_cuda(device_, peak_n_);
    else peak_gflops_ = measure_gemm_gflops(), peak_n_ = 768;
  }
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
  j.set("gemm_peak_size", peak_n_);
  j.set("gemm_kernel", device_.is_cuda() ? "cublas" : gemm_kernel_name());
  j.set("device", device_.str());
  j.set("gemm_floor_ms", 1e3 * gflop / peak_gflops_);
  return j;
}

std::string StepProfile::table() const {
  if (shown().steps == 0) return "profile: no step ran in this process\n";
  const Json j = json();
  const double step = j["step_ms"].as_number();
  std::string out;
  char line[200];
  const auto row = [&](const std::string& name, double ms, const char* extra) {
    std::snprintf(line, sizeof line, "  %-28s %10.2f %6.1f%%%s\n", name.c_str(), ms, 100 * ms / step, extra);
    out += line;
  };
  std::snprintf(line, sizeof line, "profile: %.1f ms a step over %lld steps%s\n", step,
                (long long)j["steps"].as_number(),
                j["first_step_left_out"].as_bool() ? " (the process's first step left out)" : "");
  out += line;
  if (device_.is_cuda())
    out += "  (on " + device_.str() +
           ": each op waited for, so the times are its kernels' and the step is slower "
           "than an unprofiled one)\n";
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
  // the CPU's kernel named beside its precision: "SGEMM (avx512)", "bf16 GEMM (amx)"
  const std::string gemm = device_.is_cuda()
                               ? "SGEMM"
                               : (gemm_cpu_precision() == GemmPrecision::kBf16 ? "bf16 GEMM (" : "SGEMM (") +
                                     j["gemm_kernel"].as_string() + ")";
  std::snprintf(line, sizeof line,
                "  GEMM: %.2f GFLOP a step; %s %s peak now %.1f GFLOP/s (%lld^3): floor %.2f ms "
                "a step (%.1f%% of it)\n",
                j["gemm_gflop"].as_number(), device_.is_cuda() ? "the GPU's cuBLAS" : "this machine's", gemm.c_str(),
                j["gemm_peak_gflops"].as_number(), (long long)peak_n_, j["gemm_floor_ms"].as_number(),
                100 * j["gemm_floor_ms"].as_number() / step);
  out += line;
  return out;
}

}  // namespace gnn::train
