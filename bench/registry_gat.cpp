// Registry cases (bench/registry.h) for graph attention on the CPU: the segment softmax alone, and the
// GAT layer as the chain of kernels it runs (GEMM, edge scores, segment softmax, weighted gather).
#include <algorithm>
#include <memory>

#include "bench/registry_cases.h"
#include "kernels/gemm.h"
#include "kernels/segment_softmax.h"
#include "kernels/spmm.h"

namespace gnn::cli {

// The traffic and flops of a GAT layer pass: forward reads x, writes h, reads h per edge (gather) and
// per node, writes y; backward about twice that.
void gat_traffic(KernelCase& k, int64_t N, int64_t E, int64_t F, int64_t H, int64_t D, bool bwd) {
  const int64_t HD = H * D;
  const double fwd = 4.0 * (double(N) * F + 2.0 * N * HD + double(E) * HD + 6.0 * E * H);
  k.bytes = fwd * (bwd ? 3 : 1);
  k.flops = (2.0 * N * F * HD + 2.0 * E * HD) * (bwd ? 3 : 1);
}

namespace {

// segment-softmax: softmax over each node's in-edges of one score per edge and head; --configs sets
// the number of heads H: x, y [E, H].
KernelCase softmax_case(const KernelShape& s) {
  auto d = std::make_shared<GraphData>(s);
  const int64_t E = d->g.num_edges, N = s.nodes, H = s.configs;
  auto x = std::make_shared<Tensor>(random_tensor(E, H, 1));
  auto y = std::make_shared<Tensor>(Tensor::empty({E, H}, DType::F32));
  auto dx = std::make_shared<Tensor>(Tensor::empty({E, H}, DType::F32));
  const bool bwd = s.backward;
  KernelCase k;
  k.step = [=] {
    segment_softmax_forward_cpu(y->f32(), x->f32(), d->g.csr_indptr.i32(), N, H);
    if (bwd) segment_softmax_backward_cpu(dx->f32(), y->f32(), x->f32(), d->g.csr_indptr.i32(), N, H);
  };
  k.bytes = 4.0 * (2.0 * E * H + double(N + 1)) * (bwd ? 2.5 : 1);  // read x, write y (+ read y, dy, write dx)
  k.flops = 4.0 * double(E) * H * (bwd ? 2 : 1);
  return k;
}

// gat-layer: 4 heads of F/4 (concat), h = x W; a_src/a_dst = per-head dots with the attention
// vectors; s = leaky_relu(a_src[u] + a_dst[v]); alpha = segment softmax; y[v, h] = sum alpha h[u, h].
// The weighted gather runs every head in one call (spmm_heads_*, weights [E, H]), as autograd's spmm
// does. --backward runs the chain back to dx and dW.
KernelCase gat_case(const KernelShape& s) {
  auto d = std::make_shared<GraphData>(s);
  const int64_t N = s.nodes, F = s.features * s.configs, H = 4, D = std::max<int64_t>(1, F / H), HD = H * D;
  const int64_t E = d->g.num_edges;
  struct Buffers {
    Tensor x, W, att_src, att_dst, h, as, ad, sc, alpha, y, dy, dh, dalpha, dsc, das, dad, dx, dW;
  };
  auto b = std::make_shared<Buffers>();
  b->x = random_tensor(N, F, 1), b->W = random_tensor(F, HD, 2);
  b->att_src = random_tensor(H, D, 3), b->att_dst = random_tensor(H, D, 4);
  for (Tensor* t : {&b->h, &b->y, &b->dh}) *t = Tensor::empty({N, HD}, DType::F32);
  for (Tensor* t : {&b->as, &b->ad, &b->das, &b->dad}) *t = Tensor::empty({N, H}, DType::F32);
  for (Tensor* t : {&b->sc, &b->alpha, &b->dalpha, &b->dsc}) *t = Tensor::empty({E, H}, DType::F32);
  b->dx = Tensor::empty({N, F}, DType::F32), b->dW = Tensor::empty({F, HD}, DType::F32);
  const bool bwd = s.backward;
  KernelCase k;
  k.step = [=] {
    Buffers& B = *b;
    gemm_cpu(false, false, N, HD, F, 1.0f, B.x.f32(), F, B.W.f32(), HD, 0.0f, B.h.f32(), HD);
    const float *h = B.h.f32(), *ws = B.att_src.f32(), *wd = B.att_dst.f32();
    float *as = B.as.f32(), *ad = B.ad.f32();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t hh = 0; hh < H; ++hh) {
        float a = 0.0f, c = 0.0f;
        for (int64_t j = 0; j < D; ++j)
          a += h[i * HD + hh * D + j] * ws[hh * D + j], c += h[i * HD + hh * D + j] * wd[hh * D + j];
        as[i * H + hh] = a, ad[i * H + hh] = c;
      }
    gat_scores_forward_cpu(B.sc.f32(), as, ad, d->v, H, 0.2f);
    segment_softmax_forward_cpu(B.alpha.f32(), B.sc.f32(), d->g.csr_indptr.i32(), N, H);
    spmm_heads_forward_cpu(B.y.f32(), h, B.alpha.f32(), d->v, H, D, Reduce::kSum);
    if (!bwd) return;
    const float* dy = B.y.f32();  // the output stands in for the incoming gradient
    spmm_heads_backward_x_cpu(B.dh.f32(), dy, B.alpha.f32(), d->v, H, D, Reduce::kSum);
    spmm_heads_backward_w_cpu(B.dalpha.f32(), dy, h, d->v, H, D, Reduce::kSum);
    segment_softmax_backward_cpu(B.dsc.f32(), B.alpha.f32(), B.dalpha.f32(), d->g.csr_indptr.i32(), N, H);
    gat_scores_backward_cpu(B.das.f32(), B.dad.f32(), B.dsc.f32(), as, ad, d->v, H, 0.2f);
    float* dh = B.dh.f32();
    const float *das = B.das.f32(), *dad = B.dad.f32();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t hh = 0; hh < H; ++hh)
        for (int64_t j = 0; j < D; ++j)
          dh[i * HD + hh * D + j] += das[i * H + hh] * ws[hh * D + j] + dad[i * H + hh] * wd[hh * D + j];
    gemm_cpu(true, false, F, HD, N, 1.0f, B.x.f32(), F, dh, HD, 0.0f, B.dW.f32(), HD);
    gemm_cpu(false, true, N, F, HD, 1.0f, dh, HD, B.W.f32(), HD, 0.0f, B.dx.f32(), F);
  };
  gat_traffic(k, N, E, F, H, D, bwd);
  return k;
}

}  // namespace

std::vector<KernelEntry> gat_kernels() {
  return on_edges({
      {"segment-softmax", false, true, softmax_case},
      {"gat-layer", true, false,
       [](const KernelShape& s) { return s.cuda ? gpu_layer_case(true, false, s) : gat_case(s); }},
  });
}

}  // namespace gnn::cli
