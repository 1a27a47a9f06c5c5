// An autograd op run on the host and on the GPU from the same inputs: the values and every input's
// gradient must agree (the loss is <y, r> for a fixed random r, so each backward sees a dense,
// non-uniform upstream gradient), and a second GPU run must give the same bits (no atomics in any
// backward). Index arrays stay on the host, as the ops take them. The callers skip without a GPU.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "autograd/ops.h"
#include "kernels/graph_cases.h"
#include "runtime/graph.h"

namespace gnn::testing {

using OpFn = std::function<ag::Var(const std::vector<ag::Var>&, const Graph&)>;

struct OpRun {
  std::vector<float> y;
  std::vector<std::vector<float>> grads;
};

inline OpRun run_op(Device dev, const std::vector<Tensor>& inputs, const Graph& host_graph, const OpFn& f) {
  std::vector<ag::Var> vars;
  for (const Tensor& t : inputs) vars.push_back(ag::Var::param(dev.is_cpu() ? t.clone() : t.to(dev)));
  const Graph g = dev.is_cpu() || host_graph.num_nodes == 0 ? host_graph : host_graph.to(dev);
  const ag::Var y = f(vars, g);
  REQUIRE(y.device() == dev);
  const Tensor r = Tensor::from_vector(random_values<float>(static_cast<size_t>(y.value().numel()), 77), y.shape());
  ag::backward(ag::sum(ag::mul(y, ag::Var(r.on(dev)))));
  OpRun out;
  out.y = y.value().to_vector<float>();
  for (const ag::Var& v : vars) out.grads.push_back(v.has_grad() ? v.grad().to_vector<float>() : std::vector<float>());
  return out;
}

inline void check_device_close(const std::vector<float>& gpu, const std::vector<float>& cpu, const char* what) {
  CAPTURE(what);
  REQUIRE(gpu.size() == cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(gpu[i] - cpu[i]) <= 1e-4f * std::max(1.0f, std::fabs(cpu[i])));
  }
}

// The op on the host, then twice on GPU 0: values and gradients close to the host's, the two GPU runs
// the same bits.
inline void check_op(const char* name, const std::vector<Tensor>& inputs, const OpFn& f, const Graph& graph = Graph()) {
  CAPTURE(name);
  const OpRun cpu = run_op(Device::cpu(), inputs, graph, f);
  const OpRun gpu = run_op(Device::cuda(0), inputs, graph, f), again = run_op(Device::cuda(0), inputs, graph, f);
  check_device_close(gpu.y, cpu.y, "value");
  REQUIRE(gpu.grads.size() == cpu.grads.size());
  for (size_t i = 0; i < cpu.grads.size(); ++i) check_device_close(gpu.grads[i], cpu.grads[i], "gradient");
  CHECK(std::memcmp(gpu.y.data(), again.y.data(), gpu.y.size() * sizeof(float)) == 0);
  for (size_t i = 0; i < gpu.grads.size(); ++i)
    CHECK(std::memcmp(gpu.grads[i].data(), again.grads[i].data(), gpu.grads[i].size() * sizeof(float)) == 0);
}

// A host f32 tensor of the given shape, values uniform in [-1, 1] from the seed.
inline Tensor rand(Shape s, uint64_t seed) {
  return Tensor::from_vector(random_values<float>(static_cast<size_t>(s.numel()), uint32_t(seed)), s);
}

}  // namespace gnn::testing
