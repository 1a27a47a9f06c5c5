// Registry cases (bench/registry.h) for every op case of bench/op_cases.h, as `op:NAME`: the op at the
// benchmark's shape (N nodes, E edges, F features, C configs, graphs of --graph-nodes) through the
// autograd on the case's device, which picks the kernel. Forward under no-grad, or forward and backward
// from a fixed upstream gradient. GB/s counts the least traffic any op must have: its inputs read and
// its output written (+ the upstream gradient and the inputs read, every input's gradient written);
// graphs and index arrays are not counted, and an op case counts no flops (GFLOP/s reads 0): the
// kernels' own cases above carry the formulas.
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "bench/op_cases.h"
#include "bench/registry_cases.h"

namespace gnn::cli {

namespace {

KernelCase op_case(const OpCase& c, const KernelShape& s) {
  const OpSize size{s.nodes, s.edges, s.features, s.configs, s.graph_nodes, s.seed};
  struct State {
    OpInputs in;
    OpOperands x;
    Tensor dy;
  };
  auto st = std::make_shared<State>();
  st->in = c.make(size);
  if (st->in.graph.num_nodes > 0) save_graph(s, st->in.graph);
  st->x = op_operands(st->in, DType::F32, device_of(s));
  double inputs = 0, output = 0;
  for (const ag::Var& v : st->x.vars) inputs += double(v.value().numel());
  {
    ag::NoGrad no_tape;
    const ag::Var y = c.apply(st->x.vars, st->x.graph, st->in);
    output = double(y.value().numel());
    st->dy = random_tensor(1, y.value().numel(), 7).reshape(y.shape().vec()).to(y.device());
  }
  const bool bwd = s.backward;
  const auto apply = c.apply;
  KernelCase k;
  k.step = [st, bwd, apply] {
    if (!bwd) {
      ag::NoGrad no_tape;
      apply(st->x.vars, st->x.graph, st->in);
      return;
    }
    ag::backward(apply(st->x.vars, st->x.graph, st->in), st->dy);
    for (ag::Var& v : st->x.vars) v.zero_grad();
  };
  k.bytes = 4.0 * (inputs + output) + (bwd ? 4.0 * (output + 2 * inputs) : 0.0);
  k.flops = 0;
  return k;
}

}  // namespace

std::vector<KernelEntry> ops_kernels() {
  // The entries' names live as long as the process. (Called once, from the registry's one-time list.)
  static std::deque<std::string> names;
  std::vector<KernelEntry> v;
  for (const OpCase& c : op_cases()) {
    names.push_back(std::string("op:") + c.name);
    v.push_back({names.back().c_str(), true, true, [&c](const KernelShape& s) { return op_case(c, s); }});
    // What it reads, from its inputs at a small shape (the bench tests') and at a second graph size: a
    // graph means edges, inputs that differ mean --graph-nodes. (A case that cannot be made at that shape
    // is let through: with --save-graph, one that makes no graph at the asked shape is then refused.)
    v.back().reads = [&c] {
      KernelReads r{.edges = true, .graph_nodes = true};
      OpInputs a;
      try {
        a = c.make(OpSize{300, 600, 16, 1, 64, 1});
      } catch (const std::exception&) {
        return r;
      }
      r.edges = a.graph.num_nodes > 0;
      try {
        const OpInputs b = c.make(OpSize{300, 600, 16, 1, 50, 1});
        const auto same = [](const std::vector<Tensor>& x, const std::vector<Tensor>& y) {
          for (size_t i = 0; i < x.size(); ++i)
            if (x[i].shape() != y[i].shape() ||
                (x[i].nbytes() && std::memcmp(x[i].data(), y[i].data(), x[i].nbytes()) != 0))
              return false;
          return x.size() == y.size();
        };
        r.graph_nodes = !(a.index.size() == b.index.size() && same(a.index, b.index) &&
                          a.vars.size() == b.vars.size() && same(a.vars, b.vars));
      } catch (const std::exception&) {  // (as above: let through)
      }
      return r;
    };
  }
  return v;
}

}  // namespace gnn::cli
