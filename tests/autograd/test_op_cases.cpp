// Every op case of bench/op_cases.h, the list `gnn bench kernel op:NAME` times: in f64 against central
// differences (the reference kernels' backward), in f32 (the fast CPU kernels) against f64, and on a GPU
// against the host with a second GPU run giving the same bits. A new op is an entry in that list; this
// file does not change for it. (The hand-worked values, edge cases and kernel-level checks of each family
// stay in its own test file.)
#include <string>
#include <vector>

#include "autograd/device_check.h"
#include "autograd/gradcheck.h"
#include "bench/op_cases.h"
#include "runtime/cuda.h"
#include "testing.h"

namespace gnn {
namespace {

using cli::OpCase;
using cli::OpInputs;
using cli::OpSize;

// Small enough for finite differences on every element of every input, with several graphs, hubs and
// rows without in-edges, two configs side by side, and F = 5 (no vector width divides it).
constexpr OpSize kSmall{.nodes = 23, .edges = 60, .features = 5, .configs = 2, .graph_nodes = 9, .seed = 3};

// The op in `dtype` on the host: its value and every input's gradient of <y, R> for a fixed random R.
struct HostRun {
  std::vector<double> y;
  std::vector<std::vector<double>> grads;
};
HostRun host_run(const OpCase& c, const OpInputs& in, DType dtype) {
  const cli::OpOperands o = cli::op_operands(in, dtype, Device::cpu());
  const ag::Var y = c.apply(o.vars, o.graph, in);
  REQUIRE(y.dtype() == dtype);
  const Tensor r = Tensor::from_vector(testing::random_values<double>(size_t(y.value().numel()), 77), y.shape());
  ag::backward(ag::sum(ag::mul(y, ag::Var(r.astype(dtype)))));
  HostRun out;
  out.y = y.value().astype(DType::F64).to_vector<double>();
  for (const ag::Var& v : o.vars)
    out.grads.push_back(v.has_grad() ? v.grad().astype(DType::F64).to_vector<double>() : std::vector<double>());
  return out;
}

TEST_CASE("ops: every op case in f64 against central differences, and in f32 against f64") {
  REQUIRE(cli::op_cases().size() >= 40);
  for (const OpCase& c : cli::op_cases()) {
    CAPTURE(c.name);
    const OpInputs in = c.make(kSmall);
    REQUIRE(!in.vars.empty());
    const cli::OpOperands d = cli::op_operands(in, DType::F64, Device::cpu());
    testing::check_grads(
        d.vars, [&] { return testing::probe(c.apply(d.vars, d.graph, in)); }, 400);
    const HostRun f64 = host_run(c, in, DType::F64), f32 = host_run(c, in, DType::F32);
    REQUIRE(f32.y.size() == f64.y.size());
    GNN_CHECK_CLOSE(f32.y, f64.y, 1e-5, 1e-4);
    for (size_t k = 0; k < f64.grads.size(); ++k) {
      CAPTURE(k);
      REQUIRE(f32.grads[k].size() == f64.grads[k].size());
      GNN_CHECK_CLOSE(f32.grads[k], f64.grads[k], 1e-4, 1e-3);
    }
  }
}

TEST_CASE("cuda ops: every op case on the GPU matches the host, and a second GPU run gives the same bits") {
  GNN_SKIP_UNLESS_CUDA();
  for (const OpCase& c : cli::op_cases()) {
    const OpInputs in = c.make(kSmall);
    std::vector<Tensor> inputs;
    for (const Tensor& t : in.vars) inputs.push_back(t.astype(DType::F32));
    testing::check_op(
        c.name, inputs, [&](const std::vector<ag::Var>& x, const Graph& g) { return c.apply(x, g, in); }, in.graph);
  }
}

}  // namespace
}  // namespace gnn
