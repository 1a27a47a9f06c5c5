// Registry cases (bench/registry.h) for the GraphSAGE layer: composed from the separate kernels or
// fused on the CPU, and on the GPU the nn layers (SAGE and GAT) through the autograd.
#include <memory>
#include <vector>

#include "autograd/var.h"
#include "bench/registry_cases.h"
#include "kernels/activation.h"
#include "kernels/gemm.h"
#include "kernels/sage.h"
#include "kernels/spmm.h"
#include "nn/conv.h"
#include "runtime/rng.h"

namespace gnn::cli {

// The least memory traffic and the flops of a SAGE layer pass: forward reads x (gathered per edge, and
// once as the root), writes y (and z); backward reads dy, z, x again (gathers and root), writes dx,
// reads d_agg per edge. Weights are small and not counted.
void sage_traffic(KernelCase& k, int64_t N, int64_t E, int64_t F, int64_t O, int64_t C, bool bwd) {
  const int64_t M = N * C, CF = C * F;
  const double fwd = 4.0 * (double(E) * CF + double(M) * F + double(M) * O * (bwd ? 2 : 1));
  const double bwdb = 4.0 * (2.0 * M * O + double(E) * CF + 2.0 * M * F + double(E) * CF);
  k.bytes = fwd + (bwd ? bwdb : 0);
  k.flops = 2.0 * M * (2 * F) * O * (bwd ? 3 : 1) + double(E) * CF * (bwd ? 2 : 1);  // GEMMs + gathers
}

namespace {

// sage-layer / sage-layer-fused: y = relu([mean_{j->i} x_j | x_i] W + b), W [2F, F].
// The composed layer runs the separate kernels (spmm mean, two GEMMs, bias + relu); the fused one
// builds [agg | x] per row block and multiplies once (kernels/sage.h). --backward adds dx, dW, db.
// --configs C (composed only): x is node-major [N, C*F], as the training pipeline lays out configs;
// the mean gathers C*F values per neighbour and the GEMMs read it as [N*C, F] with shared weights.
KernelCase sage_case(bool fused, const KernelShape& s) {
  auto d = std::make_shared<GraphData>(s);
  const int64_t N = s.nodes, F = s.features, O = F, E = d->g.num_edges, C = s.configs, M = N * C, CF = C * F;
  auto x = std::make_shared<Tensor>(random_tensor(M, F, 1));
  auto W = std::make_shared<Tensor>(random_tensor(2 * F, O, 2));
  auto b = std::make_shared<Tensor>(random_tensor(1, O, 3));
  auto y = std::make_shared<Tensor>(Tensor::empty({M, O}, DType::F32));
  auto z = std::make_shared<Tensor>(Tensor::empty({M, O}, DType::F32));
  auto agg = std::make_shared<Tensor>(Tensor::empty({M, F}, DType::F32));
  auto h = std::make_shared<Tensor>(Tensor::empty({fused ? N : 0, 2 * F}, DType::F32));
  auto ws = std::make_shared<Tensor>(Tensor::empty({fused ? sage_backward_workspace(N, F, O) : 0}, DType::F32));
  auto dz = std::make_shared<Tensor>(Tensor::empty({M, O}, DType::F32));
  auto dagg = std::make_shared<Tensor>(Tensor::empty({M, F}, DType::F32));
  auto dx = std::make_shared<Tensor>(Tensor::empty({M, F}, DType::F32));
  auto dW = std::make_shared<Tensor>(Tensor::empty({2 * F, O}, DType::F32));
  auto db = std::make_shared<Tensor>(Tensor::empty({O}, DType::F32));
  const bool bwd = s.backward;
  KernelCase k;
  if (fused) {
    k.step = [=] {
      sage_forward_cpu(y->f32(), bwd ? z->f32() : nullptr, bwd ? h->f32() : nullptr, x->f32(), d->v, W->f32(), b->f32(),
                       F, O, Act::kRelu, 0.0f);
      if (bwd)  // y stands in for the incoming gradient
        sage_backward_cpu(dx->f32(), dW->f32(), db->f32(), y->f32(), z->f32(), h->f32(), d->v, W->f32(), F, O,
                          Act::kRelu, 0.0f, ws->f32());
    };
  } else {
    k.step = [=] {
      spmm_forward_cpu(agg->f32(), nullptr, x->f32(), nullptr, d->v, CF, CF, CF, Reduce::kMean);
      gemm_cpu(false, false, M, O, F, 1.0f, agg->f32(), F, W->f32(), O, 0.0f, z->f32(), O);
      gemm_cpu(false, false, M, O, F, 1.0f, x->f32(), F, W->f32() + F * O, O, 1.0f, z->f32(), O);
      float* zp = z->f32();
      const float* bp = b->f32();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t o = 0; o < O; ++o) zp[i * O + o] += bp[o];
      act_forward_cpu(y->f32(), z->f32(), M * O, Act::kRelu, 0.0f);
      if (!bwd) return;
      act_backward_cpu(dz->f32(), y->f32(), z->f32(), M * O, Act::kRelu, 0.0f);
      gemm_cpu(true, false, F, O, M, 1.0f, agg->f32(), F, dz->f32(), O, 0.0f, dW->f32(), O);
      gemm_cpu(true, false, F, O, M, 1.0f, x->f32(), F, dz->f32(), O, 0.0f, dW->f32() + F * O, O);
      float* dbp = db->f32();
      const float* dzp = dz->f32();
      for (int64_t o = 0; o < O; ++o) dbp[o] = 0;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t o = 0; o < O; ++o) dbp[o] += dzp[i * O + o];
      gemm_cpu(false, true, M, F, O, 1.0f, dz->f32(), O, W->f32(), O, 0.0f, dagg->f32(), F);
      gemm_cpu(false, true, M, F, O, 1.0f, dz->f32(), O, W->f32() + F * O, O, 0.0f, dx->f32(), F);
      spmm_backward_x_cpu(dx->f32(), dagg->f32(), nullptr, nullptr, d->v, CF, CF, CF, Reduce::kMean, dx->f32());
    };
  }
  sage_traffic(k, N, E, F, O, C, bwd);
  return k;
}

}  // namespace

// On the GPU, sage-layer(-fused) and gat-layer time the engine's layers through the autograd, as a user
// runs them (nn::SAGEConv composed or fused, relu; nn::GATConv with 4 heads of F/4 concatenated, no self-loops, no
// bias), on the same graph and shapes as the CPU cases and PyG's peers: forward, and with --backward
// the backward from a fixed upstream gradient into dx and every weight (PyTorch's y.backward(dy)).
KernelCase gpu_layer_case(bool gat, bool fused, const KernelShape& s) {
  auto d = std::make_shared<GraphData>(s);
  const Device dev = device_of(s);
  const int64_t N = s.nodes, F = s.features, E = d->g.num_edges, H = 4, D = std::max<int64_t>(1, F / H);
  struct Layer {
    Rng rng{7};
    std::unique_ptr<nn::SAGEConv> sage;
    std::unique_ptr<nn::GATConv> gat;
    ag::Var x;
    Tensor dy;
    std::vector<nn::NamedParam> params;
  };
  auto L = std::make_shared<Layer>();
  if (gat) {
    L->gat =
        std::make_unique<nn::GATConv>(F, D, L->rng, nn::GatOptions{.heads = H, .add_self_loops = false, .bias = false});
    nn::move_parameters(*L->gat, dev);
    L->params = L->gat->parameters();
  } else {
    L->sage = std::make_unique<nn::SAGEConv>(F, F, L->rng, nn::SageOptions{.act = Act::kRelu, .fused = fused});
    nn::move_parameters(*L->sage, dev);
    L->params = L->sage->parameters();
  }
  L->x = ag::Var::param(random_tensor(N, F, 1).to(dev));
  L->dy = random_tensor(N, gat ? H * D : F, 2).to(dev);
  const bool bwd = s.backward;
  KernelCase k;
  k.step = [L, d, gat, bwd] {
    auto forward = [&] { return gat ? L->gat->forward(d->g, L->x) : L->sage->forward(d->g, L->x); };
    if (!bwd) {
      ag::NoGrad no_tape;
      forward();
      return;
    }
    ag::backward(forward(), L->dy);
    L->x.zero_grad();
    for (const nn::NamedParam& p : L->params) p.var.zero_grad();
  };
  // Capturable: the step's allocations go to the graph's private pool (runtime/cuda.h); the layer's
  // cached graph preparation was built by the eager run before the capture.
  k.graph_safe = true;
  if (gat) gat_traffic(k, N, E, F, H, D, bwd);
  else sage_traffic(k, N, E, F, F, 1, bwd);
  return k;
}

std::vector<KernelEntry> sage_kernels() {
  return on_edges({
      {"sage-layer", true, true,
       [](const KernelShape& s) { return s.cuda ? gpu_layer_case(false, false, s) : sage_case(false, s); }},
      {"sage-layer-fused", true, false,
       [](const KernelShape& s) { return s.cuda ? gpu_layer_case(false, true, s) : sage_case(true, s); }},
  });
}

}  // namespace gnn::cli
