// Registry cases (bench/registry.h) for full self-attention within each graph (graph-attention) and the
// 1st place's cross-config attention (config-attention), timed through the autograd ops as a user runs them.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/var.h"
#include "bench/registry_cases.h"

namespace gnn::cli {

namespace {

// graph-attention: full self-attention among the nodes of each graph (ag::graph_attention: 4 heads of
// F/4, softmax), the N nodes split into graphs of --graph-nodes S (the last shorter), from given q, k, v
// as PyTorch's scaled_dot_product_attention takes them. On the GPU, heads of at most 64 columns run the
// fused kernels (kernels/attention.h), wider ones cuBLAS per graph and head; on the CPU, the blocked GEMM
// per graph and head. Least traffic: q, k, v read and y written; the backward reads q, k, v, y, dy and
// writes dq, dk, dv. Flops: 4 F sum(n^2) forward (Q K^T, P V), 8 F sum(n^2) more backward (dV, dP, dQ, dK).
KernelCase attention_case(const KernelShape& s) {
  const Device dev = device_of(s);
  const int64_t N = s.nodes, F = s.features, H = 4, S = s.graph_nodes;
  if (F % H != 0) {
    std::string msg = "gnn bench kernel: graph-attention splits --features into 4 heads, got ";
    throw KernelUsageError(msg.append(std::to_string(F)));
  }
  std::vector<int64_t> ptr{0};
  double pairs = 0;
  while (ptr.back() < N) {
    const int64_t n = std::min(S, N - ptr.back());
    ptr.push_back(ptr.back() + n);
    pairs += double(n) * double(n);
  }
  struct State {
    ag::Var q, k, v;
    Tensor dy, graph_ptr;
  };
  auto st = std::make_shared<State>();
  st->q = ag::Var::param(random_tensor(N, F, 1).to(dev));
  st->k = ag::Var::param(random_tensor(N, F, 2).to(dev));
  st->v = ag::Var::param(random_tensor(N, F, 3).to(dev));
  st->dy = random_tensor(N, F, 4).to(dev);
  st->graph_ptr = Tensor::from_vector(ptr);
  const bool bwd = s.backward;
  KernelCase k;
  k.step = [st, bwd, H] {
    auto forward = [&] { return ag::graph_attention(st->q, st->k, st->v, st->graph_ptr, H, false); };
    if (!bwd) {
      ag::NoGrad no_tape;
      forward();
      return;
    }
    ag::backward(forward(), st->dy);
    for (ag::Var* x : {&st->q, &st->k, &st->v}) x->zero_grad();
  };
  k.bytes = 4.0 * double(N) * double(F) * (bwd ? 12.0 : 4.0);
  k.flops = (bwd ? 12.0 : 4.0) * double(F) * pairs;
  return k;
}

// config-attention: the 1st place's cross-config attention with its block's residual and GELU
// (ag::config_attention), x [N, C*F] -> y = GELU([x | x softmax_c(beta x)] + residual) [N, C*2F], C =
// --configs. Least traffic: forward reads x and the residual, writes y and the softmax w (6 N C F
// floats); the backward reads dy, x, w and the residual, writes dx and d residual (9 N C F). Operations,
// an exp or erf counted as one: 10 per (node, config, channel) forward, 24 backward.
KernelCase config_attention_case(const KernelShape& s) {
  const Device dev = device_of(s);
  const int64_t N = s.nodes, C = s.configs, F = s.features;
  struct State {
    ag::Var x, beta, res;
    Tensor dy;
  };
  auto st = std::make_shared<State>();
  st->x = ag::Var::param(random_tensor(N, C * F, 1).to(dev));
  st->beta = ag::Var::param(Tensor::full(Shape{1}, 2.0, DType::F32).to(dev));
  st->res = ag::Var::param(random_tensor(N, C * 2 * F, 2).to(dev));
  st->dy = random_tensor(N, C * 2 * F, 3).to(dev);
  const bool bwd = s.backward;
  KernelCase k;
  k.step = [st, bwd, C] {
    auto forward = [&] { return ag::config_attention(st->x, st->beta, C, st->res, Act::kGelu); };
    if (!bwd) {
      ag::NoGrad no_tape;
      forward();
      return;
    }
    ag::backward(forward(), st->dy);
    for (ag::Var* v : {&st->x, &st->beta, &st->res}) v->zero_grad();
  };
  const double elems = double(N) * double(C) * double(F);
  k.bytes = 4.0 * elems * (bwd ? 15.0 : 6.0);
  k.flops = elems * (bwd ? 34.0 : 10.0);
  return k;
}

}  // namespace

std::vector<KernelEntry> attention_kernels() {
  return {
      {"graph-attention", true, false, attention_case, kSplitsGraphs},
      {"config-attention", true, true, config_attention_case},
  };
}

}  // namespace gnn::cli
