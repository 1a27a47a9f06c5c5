// Registry cases (bench/registry.h) for the per-graph and per-row kernels around the message passing:
// instance norm, layer norm, the row-wise softmax / log-softmax / l2 normalisation, pooling (the
// readout), the embedding lookup and the squeeze-and-excitation gate.
#include <memory>
#include <vector>

#include "autograd/ops.h"
#include "autograd/var.h"
#include "bench/registry_cases.h"
#include "kernels/embedding.h"
#include "kernels/instance_norm.h"
#include "kernels/layer_norm.h"
#include "kernels/pooling.h"
#include "kernels/rowwise.h"
#include "runtime/cuda.h"

namespace gnn::cli {

namespace {

// instance-norm: the graph instance norm without affine parameters on x [N, C*F], graphs of
// --graph-nodes rows (the 6th and 1st place recipes' norm, per graph, config and channel). GB/s counts
// x read and y written (+ x and dy read, dx written); the kernel reads x two more times, from cache
// when a graph's block of channels fits. instance-norm-residual-gelu: GELU(norm(x + res)), the 6th
// place's layer end, in one pass each way: res read too (forward and backward), 12 flops more per
// value forward (the sum, GELU's erf counted as one and its 4 others), 16 more backward.
KernelCase instance_norm_case(const KernelShape& s, bool fused) {
  const int64_t N = s.nodes, F = s.features * s.configs;
  auto gp = graph_ranges(N, s.graph_nodes);
  const int64_t G = int64_t(gp->size()) - 1;
  auto x = std::make_shared<Tensor>(random_tensor(N, F, 1));
  auto res = std::make_shared<Tensor>(fused ? random_tensor(N, F, 3) : Tensor());
  auto dy = std::make_shared<Tensor>(random_tensor(N, F, 2));
  auto y = std::make_shared<Tensor>(Tensor::empty({N, F}, DType::F32));
  auto dx = std::make_shared<Tensor>(Tensor::empty({N, F}, DType::F32));
  auto stats = std::make_shared<Tensor>(Tensor::empty({2, G, F}, DType::F32));
  const bool bwd = s.backward;
  const Act act = fused ? Act::kGelu : Act::kNone;
  KernelCase k;
  k.step = [=] {
    float* mean = stats->f32();
    float* rstd = mean + G * F;
    const float* r = fused ? res->f32() : nullptr;
    instance_norm_forward_cpu(y->f32(), mean, rstd, x->f32(), r, nullptr, nullptr, gp->data(), G, F, 1e-5f, act);
    if (bwd)
      instance_norm_backward_cpu(dx->f32(), nullptr, nullptr, dy->f32(), x->f32(), r, mean, rstd, nullptr, nullptr,
                                 gp->data(), G, F, act);
  };
  k.bytes = 4.0 * double(N) * F * (bwd ? 5 : 2) + (fused ? 4.0 * double(N) * F * (bwd ? 2 : 1) : 0.0);
  k.flops = 8.0 * double(N) * F * (bwd ? 2.5 : 1) + (fused ? double(N) * F * (bwd ? 28 : 12) : 0.0);
  return k;
}

// gate: the squeeze-and-excitation gate's product y = x * sigmoid(z + b) on [N*C, F] (ag::gate, the 1st
// place's ChannelAttention), --device cuda too. Least traffic: x and z read, y written (+ dy, x, z read,
// dx and dz written). Operations, the exp counted as one: 5 per value forward, 8 more backward.
KernelCase gate_case(const KernelShape& s) {
  const Device dev = device_of(s);
  const int64_t R = s.nodes * s.configs, F = s.features;
  struct State {
    ag::Var x, z, b;
    Tensor dy;
  };
  auto st = std::make_shared<State>();
  st->x = ag::Var::param(random_tensor(R, F, 1).to(dev));
  st->z = ag::Var::param(random_tensor(R, F, 2).to(dev));
  st->b = ag::Var::param(random_tensor(1, F, 3).reshape({F}).to(dev));
  st->dy = random_tensor(R, F, 4).to(dev);
  const bool bwd = s.backward;
  KernelCase k;
  k.step = [st, bwd] {
    if (!bwd) {
      ag::NoGrad no_tape;
      ag::gate(st->x, st->z, st->b);
      return;
    }
    ag::backward(ag::gate(st->x, st->z, st->b), st->dy);
    for (ag::Var* v : {&st->x, &st->z, &st->b}) v->zero_grad();
  };
  k.bytes = 4.0 * double(R) * double(F) * (bwd ? 8.0 : 3.0);
  k.flops = double(R) * double(F) * (bwd ? 13.0 : 5.0);
  return k;
}

// layer-norm: y = (x - mean) / sqrt(var + eps) * gamma + beta over each row of F, on the N*C rows of
// node-major x [N, C*F] (each config normalised alone, as the recipes' LayerNorm does), gamma and beta
// [F]; --backward adds dx, dgamma and dbeta from dy. Least traffic: read x, write y and mean, rstd [R]
// (+ read dy, x, mean, rstd, write dx); gamma, beta and their gradients are [F] and not counted.
// Flops per element: 8 forward (the sum; sub, mul, add for the variance; sub, mul, mul, add for y),
// 13 more backward (xhat 2, dy * gamma 1, the two row sums 3, dgamma and dbeta 3, dx 4).
KernelCase layer_norm_case(const KernelShape& s) {
  const int64_t R = s.nodes * s.configs, F = s.features;
  const Device dev = device_of(s);
  auto x = std::make_shared<Tensor>(random_tensor(R, F, 1).to(dev));
  auto dy = std::make_shared<Tensor>(random_tensor(R, F, 2).to(dev));
  auto gamma = std::make_shared<Tensor>(random_tensor(1, F, 3).to(dev));
  auto beta = std::make_shared<Tensor>(random_tensor(1, F, 4).to(dev));
  auto y = std::make_shared<Tensor>(Tensor::empty({R, F}, DType::F32, dev));
  auto dx = std::make_shared<Tensor>(Tensor::empty({R, F}, DType::F32, dev));
  auto stats = std::make_shared<Tensor>(Tensor::empty({2, R}, DType::F32, dev));
  auto dgb = std::make_shared<Tensor>(Tensor::empty({2, F}, DType::F32, dev));
  int64_t ws_floats = 0;
#ifdef GNN_WITH_CUDA
  if (s.cuda) ws_floats = layer_norm_backward_workspace_cuda(R, F);
#endif
  auto ws = std::make_shared<Tensor>(Tensor::empty({ws_floats}, DType::F32, dev));
  const bool bwd = s.backward, cuda = s.cuda;
  KernelCase k;
  k.graph_safe = cuda;
  k.step = [=] {
    float *mean = stats->f32(), *rstd = mean + R, *dgamma = dgb->f32(), *dbeta = dgamma + F;
    if (!cuda) {
      layer_norm_forward_cpu(y->f32(), mean, rstd, x->f32(), gamma->f32(), beta->f32(), R, F, 1e-5f);
      if (bwd) layer_norm_backward_cpu(dx->f32(), dgamma, dbeta, dy->f32(), x->f32(), mean, rstd, gamma->f32(), R, F);
      return;
    }
#ifdef GNN_WITH_CUDA
    layer_norm_forward_cuda(y->f32(), mean, rstd, x->f32(), gamma->f32(), beta->f32(), R, F, 1e-5f, cuda_stream(0));
    if (bwd)
      layer_norm_backward_cuda(dx->f32(), dgamma, dbeta, dy->f32(), x->f32(), mean, rstd, gamma->f32(), R, F, ws->f32(),
                               cuda_stream(0));
#endif
  };
  k.bytes = 4.0 * (2.0 * R * F + 2.0 * R) + (bwd ? 4.0 * (3.0 * R * F + 2.0 * R) : 0);
  k.flops = double(R) * F * (bwd ? 21 : 8);
  return k;
}

// rowwise-softmax, rowwise-log-softmax, rowwise-l2-normalize (kernels/rowwise.h) over each row of F, on
// the N*C rows of node-major x [N, C*F]. Least traffic: read x, write y; --backward reads y and dy (and
// x for l2-normalize) and writes dx. Flops per element, forward: softmax 5 (max; sub, exp; sum; divide),
// log-softmax 5 (max; sub, exp; sum; sub), l2-normalize 3 (square, sum; divide); backward: softmax 4
// (the dot 2; sub, mul), log-softmax 4 (sum; exp, mul, sub), l2-normalize 7 (the two sums 4; mul,
// sub, divide).
KernelCase rowwise_case(RowOp op, const KernelShape& s) {
  const int64_t R = s.nodes * s.configs, F = s.features;
  const Device dev = device_of(s);
  auto x = std::make_shared<Tensor>(random_tensor(R, F, 1).to(dev));
  auto dy = std::make_shared<Tensor>(random_tensor(R, F, 2).to(dev));
  auto y = std::make_shared<Tensor>(Tensor::empty({R, F}, DType::F32, dev));
  auto dx = std::make_shared<Tensor>(Tensor::empty({R, F}, DType::F32, dev));
  const bool bwd = s.backward, cuda = s.cuda;
  const float eps = 1e-12f;
  KernelCase k;
  k.graph_safe = cuda;
  k.step = [=] {
    if (!cuda) {
      rowwise_forward_cpu(y->f32(), x->f32(), R, F, op, eps);
      if (bwd) rowwise_backward_cpu(dx->f32(), y->f32(), dy->f32(), x->f32(), R, F, op, eps);
      return;
    }
#ifdef GNN_WITH_CUDA
    rowwise_forward_cuda(y->f32(), x->f32(), R, F, op, eps, cuda_stream(0));
    if (bwd) rowwise_backward_cuda(dx->f32(), y->f32(), dy->f32(), x->f32(), R, F, op, eps, cuda_stream(0));
#endif
  };
  const bool l2 = op == RowOp::kL2Normalize;
  k.bytes = 4.0 * R * F * (2 + (bwd ? (l2 ? 4 : 3) : 0));
  k.flops = double(R) * F * ((l2 ? 3 : 5) + (bwd ? (l2 ? 7 : 4) : 0));
  return k;
}

// pool-{sum,mean,max,logsumexp}: the readout y[g] = reduce over graph g's rows of x, x [N, C*F] in graphs
// of --graph-nodes rows, y [G, C*F]; --backward broadcasts dy back (max: to the argmax rows; logsumexp:
// times exp(x - y), reading x and y again).
KernelCase pool_case(Reduce op, const KernelShape& s, bool logsumexp = false) {
  const int64_t N = s.nodes, F = s.features * s.configs;
  auto gp = graph_ranges(N, s.graph_nodes);
  const int64_t G = int64_t(gp->size()) - 1;
  const Device dev = device_of(s);
  auto x = std::make_shared<Tensor>(random_tensor(N, F, 1).to(dev));
  auto y = std::make_shared<Tensor>(Tensor::empty({G, F}, DType::F32, dev));
  auto dx = std::make_shared<Tensor>(Tensor::empty({N, F}, DType::F32, dev));
  const bool max = op == Reduce::kMax && !logsumexp;
  auto arg = std::make_shared<Tensor>(Tensor::empty({max ? G : 0, F}, DType::I32, dev));
  // The CUDA kernels read graph_ptr on the device.
  auto gpd = std::make_shared<Tensor>(Tensor::from_vector(*gp).to(dev));
  const bool bwd = s.backward, cuda = s.cuda;
  KernelCase k;
  k.graph_safe = cuda;
  k.step = [=] {
    int32_t* am = max ? arg->i32() : nullptr;
    if (!cuda && logsumexp) {
      pool_logsumexp_forward_cpu(y->f32(), x->f32(), gp->data(), G, F);
      if (bwd) pool_logsumexp_backward_cpu(dx->f32(), y->f32(), x->f32(), y->f32(), gp->data(), G, F);
      return;
    }
    if (!cuda) {
      pool_forward_cpu(y->f32(), am, x->f32(), gp->data(), G, F, op);
      if (bwd) pool_backward_cpu(dx->f32(), y->f32(), am, gp->data(), G, F, op);
      return;
    }
#ifdef GNN_WITH_CUDA
    if (logsumexp) {
      pool_logsumexp_forward_cuda(y->f32(), x->f32(), gpd->i64(), G, F, cuda_stream(0));
      if (bwd)
        pool_logsumexp_backward_cuda(dx->f32(), y->f32(), x->f32(), y->f32(), gpd->i64(), N, G, F, cuda_stream(0));
      return;
    }
    pool_forward_cuda(y->f32(), am, x->f32(), gpd->i64(), G, F, op, cuda_stream(0));
    if (bwd) pool_backward_cuda(dx->f32(), y->f32(), am, gpd->i64(), N, G, F, op, nullptr, cuda_stream(0));
#endif
  };
  // forward: read x, write y (+ argmax); backward: read dy (+ argmax) per graph, write dx (logsumexp: x
  // read twice forward, and x and y again backward)
  const double am = max ? 4.0 * G * F : 0, xg = double(N) * F + double(G) * F;
  k.bytes = logsumexp ? 4.0 * (xg + double(N) * F) + (bwd ? 4.0 * (xg + double(N) * F + double(G) * F) : 0)
                      : 4.0 * xg + am + (bwd ? 4.0 * xg + am : 0);
  k.flops = double(N) * F * (logsumexp ? (bwd ? 5 : 3) : (bwd ? 2 : 1));
  return k;
}

// embedding: y[i] = table[idx[i]] for N lookups into a 128-row table of width C*F, the opcodes drawn
// skewed as in TpuGraphs (a few opcodes own most nodes); --backward sums dy into dtable per row in the
// fixed order of embedding_inverse (on the GPU the inverse is built once, outside the timed step, as
// the op would per batch on the host).
KernelCase embedding_case(const KernelShape& s) {
  const int64_t N = s.nodes, F = s.features * s.configs, K = 128;
  const Device dev = device_of(s);
  Tensor idx = Tensor::empty({N}, DType::I32);
  uint64_t r = s.seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < N; ++i) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    const uint64_t u = r % 1000;
    idx.i32()[i] = int32_t(u < 600 ? u % 8 : u % uint64_t(K));  // 60% of the uses on 8 rows
  }
  Tensor ptr = Tensor::empty({K + 1}, DType::I64), uses = Tensor::empty({N}, DType::I64),
         chunk_ptr = Tensor::empty({K + 1}, DType::I64);
  const int64_t chunks = embedding_inverse(idx.i32(), N, K, ptr.i64(), uses.i64(), chunk_ptr.i64());
  auto inv = std::make_shared<std::vector<Tensor>>(std::vector<Tensor>{ptr.to(dev), uses.to(dev), chunk_ptr.to(dev)});
  auto id = std::make_shared<Tensor>(idx.to(dev));
  auto table = std::make_shared<Tensor>(random_tensor(K, F, 1).to(dev));
  auto dtable = std::make_shared<Tensor>(Tensor::empty({K, F}, DType::F32, dev));
  auto y = std::make_shared<Tensor>(Tensor::empty({N, F}, DType::F32, dev));
  auto ws = std::make_shared<Tensor>(Tensor::empty({chunks, F}, DType::F32, dev));
  const bool bwd = s.backward, cuda = s.cuda;
  KernelCase k;
  k.graph_safe = cuda;
  k.step = [=] {
    if (!cuda) {
      embedding_forward_cpu(y->f32(), table->f32(), id->i32(), N, F);
      if (bwd) embedding_backward_cpu(dtable->f32(), y->f32(), id->i32(), N, K, F);
      return;
    }
#ifdef GNN_WITH_CUDA
    embedding_forward_cuda(y->f32(), table->f32(), id->i32(), N, F, cuda_stream(0));
    if (bwd)
      embedding_backward_cuda(dtable->f32(), y->f32(), (*inv)[0].i64(), (*inv)[1].i64(), (*inv)[2].i64(), chunks, K, F,
                              ws->f32(), cuda_stream(0));
#endif
  };
  // forward: read idx and one table row per lookup (the table stays in cache: each row looked up counted once,
  // at most min(N, K) of them), write y; backward: read dy and the inverse, write dtable
  k.bytes = 4.0 * (double(N) + double(std::min<int64_t>(N, K)) * F + double(N) * F) +
            (bwd ? 4.0 * double(N) * F + 8.0 * N + 4.0 * K * F : 0);
  k.flops = bwd ? double(N) * F : 0.0;  // a lookup is a copy: GFLOP/s reads 0 forward
  return k;
}

}  // namespace

std::vector<KernelEntry> norms_kernels() {
  return {
      {"instance-norm", false, true, [](const KernelShape& s) { return instance_norm_case(s, false); },
       kSplitsGraphs},
      {"instance-norm-residual-gelu", false, true, [](const KernelShape& s) { return instance_norm_case(s, true); },
       kSplitsGraphs},
      {"layer-norm", true, true, layer_norm_case},
      {"rowwise-softmax", true, true, [](const KernelShape& s) { return rowwise_case(RowOp::kSoftmax, s); }},
      {"rowwise-log-softmax", true, true, [](const KernelShape& s) { return rowwise_case(RowOp::kLogSoftmax, s); }},
      {"rowwise-l2-normalize", true, true, [](const KernelShape& s) { return rowwise_case(RowOp::kL2Normalize, s); }},
      {"pool-sum", true, true, [](const KernelShape& s) { return pool_case(Reduce::kSum, s); }, kSplitsGraphs},
      {"pool-mean", true, true, [](const KernelShape& s) { return pool_case(Reduce::kMean, s); }, kSplitsGraphs},
      {"pool-max", true, true, [](const KernelShape& s) { return pool_case(Reduce::kMax, s); }, kSplitsGraphs},
      {"pool-logsumexp", true, true, [](const KernelShape& s) { return pool_case(Reduce::kSum, s, true); },
       kSplitsGraphs},
      {"embedding", true, true, embedding_case},
      {"gate", true, true, gate_case},
  };
}

}  // namespace gnn::cli
