// gnn train --profile: the phases add up to the step, the ops to the forward and backward, the GEMM
// FLOPs are the model's, and the floor sits under the step; the weights are those of a run without it.
#include <string>

#include "io/json.h"
#include "kernels/gemm.h"
#include "testing.h"

using namespace gnn;
using testing::last_line;
using testing::run_gnn;
using testing::TempDir;

TEST_CASE("train --profile: phases and ops add up to the step, the GEMM floor is under it, weights unchanged") {
  TempDir t;
  const std::string data = testing::tile_and_layout(t.file("data"), {2, 0, 8, 4}, {2, 200, 16, 5});
  const std::string common =
      " --model layout-tgraph --data " + data + " --epochs 3 --configs 8 --hidden 32 --threads 2 --progress lines";
  const auto plain = run_gnn("train" + common + " --out " + t.file("plain"));
  REQUIRE_MESSAGE(plain.exit_code == 0, plain.err);
  const auto r = run_gnn("train" + common + " --out " + t.file("profiled") + " --profile");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("profile: ") != std::string::npos);
  CHECK(r.out.find("  ops (forward + backward), largest first:") != std::string::npos);
  const Json p = Json::parse(last_line(r.out), "summary")["profile"];
  const int64_t steps = int64_t(Json::parse(last_line(r.out), "summary")["steps"].as_number());
  CHECK(p["steps"].as_number() == double(steps - 1));  // the first step left out
  CHECK(p["first_step_left_out"].as_bool());
  const double step = p["step_ms"].as_number();
  REQUIRE(step > 0);
  double phases = 0;
  for (const auto& [name, v] : p["phases_ms"].items()) phases += v.as_number();
  CHECK(phases <= step * 1.001);
  CHECK(phases >= step * 0.8);  // what no phase covers: the loop's own bookkeeping
  double forward = 0, backward = 0;
  for (const auto& [name, v] : p["ops"].items()) {
    forward += v["forward_ms"].as_number(), backward += v["backward_ms"].as_number();
    CHECK(v["calls"].as_number() > 0);
  }
  // (the loss's own ops are recorded in the loss phase)
  CHECK(forward <= (p["phases_ms"]["forward"].as_number() + p["phases_ms"]["loss"].as_number()) * 1.001);
  CHECK(forward >= p["phases_ms"]["forward"].as_number() * 0.5);
  CHECK(backward <= p["phases_ms"]["backward"].as_number() * 1.001);
  CHECK(p["ops"]["matmul"]["calls"].as_number() >= 4);  // the SE gates' products
  CHECK(p["ops"]["sage_combine"]["calls"].as_number() >= 2);  // the SAGE blocks' means after their products
  CHECK(p["ops"]["matmul_bias"]["calls"].as_number() >= 2);  // the input blocks' config part, the readout
  CHECK(p["gemm_gflop"].as_number() > 0);
  CHECK(p["gemm_peak_gflops"].as_number() > 0);
  CHECK(p["gemm_floor_ms"].as_number() < step);
  CHECK(p["gemm_kernel"].as_string() == gemm_isa_name(gemm_isa()));  // f32: the ISA's micro-kernel
  // timing changes nothing the run computes
  CHECK(testing::same_bits(testing::checkpoint_weights(t.file("plain/model.npz")),
                           testing::checkpoint_weights(t.file("profiled/model.npz"))));
}

TEST_CASE("train --profile: a run that resumes a finished one has no step to show") {
  TempDir t;
  const std::string data = testing::tile_and_layout(t.file("data"), {6, 0, 30, 4}, {2, 60, 12, 5});
  const std::string run = t.file("run");
  auto r = run_gnn("train --model tile-mlp --data " + data + " --epochs 1 --threads 1 --out " + run);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = run_gnn("train --resume --out " + run + " --profile");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("profile: no step ran in this process") != std::string::npos);
  CHECK(Json::parse(last_line(r.out), "summary")["profile"]["steps"].as_number() == 0);
}

TEST_CASE("train --profile on the GPU: ops waited for, phases add up, cuBLAS FLOPs and the device's peak") {
  GNN_SKIP_UNLESS_CUDA();
  TempDir t;
  const std::string data = testing::tile_and_layout(t.file("data"), {2, 0, 8, 4}, {2, 200, 16, 5});
  const std::string common = " --model layout-tgraph --data " + data +
                             " --epochs 3 --configs 8 --hidden 32 --threads 2 --progress lines --device cuda";
  const auto plain = run_gnn("train" + common + " --out " + t.file("plain"));
  REQUIRE_MESSAGE(plain.exit_code == 0, plain.err);
  const auto r = run_gnn("train" + common + " --out " + t.file("profiled") + " --profile");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("(on cuda:0: each op waited for") != std::string::npos);
  CHECK(r.out.find("the GPU's cuBLAS SGEMM peak") != std::string::npos);
  const Json p = Json::parse(last_line(r.out), "summary")["profile"];
  CHECK(p["device"].as_string() == "cuda:0");
  const double step = p["step_ms"].as_number();
  REQUIRE(step > 0);
  double phases = 0;
  for (const auto& [name, v] : p["phases_ms"].items()) phases += v.as_number();
  CHECK(phases <= step * 1.001);
  CHECK(phases >= step * 0.8);
  double backward = 0;
  for (const auto& [name, v] : p["ops"].items()) backward += v["backward_ms"].as_number();
  CHECK(backward <= p["phases_ms"]["backward"].as_number() * 1.001);
  CHECK(p["gemm_gflop"].as_number() > 0);  // cuBLAS's products counted, not the host's (none here)
  CHECK(p["gemm_peak_gflops"].as_number() > 0);
  CHECK(p["gemm_peak_size"].as_number() >= 256);
  CHECK(p["gemm_floor_ms"].as_number() < step);
  CHECK(p["gemm_kernel"].as_string() == "cublas");
  CHECK(testing::same_bits(testing::checkpoint_weights(t.file("plain/model.npz")),
                           testing::checkpoint_weights(t.file("profiled/model.npz"))));
}
