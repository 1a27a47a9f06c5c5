#include "apps/bench_kernels.h"

#include <memory>
#include <string>

#include "apps/cli.h"
#include "autograd/dispatch.h"
#include "io/npz.h"
#include "kernels/gemm.h"
#include "kernels/activation.h"
#include "kernels/embedding.h"
#include "kernels/instance_norm.h"
#include "kernels/pooling.h"
#include "kernels/sage.h"
#include "kernels/segment_softmax.h"
#include "kernels/spmm.h"
#include "kernels/spmm_cusparse.h"
#include "nn/conv.h"
#include "runtime/cuda.h"
#include "runtime/random_graph.h"
#include "runtime/tensor.h"

namespace gnn::cli {
namespace {

struct GraphData {
  Graph g;  // on the kernel's device
  CsrView v;
  explicit GraphData(const KernelShape& s) : g(tpugraphs_like_graph(s.nodes, s.edges, s.seed)) {
    if (!s.save_graph.empty()) {  // rows [dst, src] in CSR order, as TpuGraphs writes [consumer, producer]
      Tensor ei = Tensor::empty({g.num_edges, 2}, DType::I64);
      for (int64_t v = 0; v < g.num_nodes; ++v)
        for (int32_t p = g.csr_indptr.i32()[v]; p < g.csr_indptr.i32()[v + 1]; ++p)
          ei.i64()[2 * p] = v, ei.i64()[2 * p + 1] = g.csr_indices.i32()[p];
      save_npz(s.save_graph, {{"edge_index", ei}, {"num_nodes", Tensor::from_vector<int64_t>({g.num_nodes})}});
    }
    if (s.cuda) g = g.to(Device::cuda(0));
    v = ag::csr_view(g);
  }
};

Tensor random_tensor(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor t = Tensor::empty({rows, cols}, DType::F32);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    t.f32()[i] = float(int64_t(x % 2001) - 1000) / 1000.0f;
  }
  return t;
}

Device device_of(const KernelShape& s) { return s.cuda ? Device::cuda(0) : Device::cpu(); }

#ifdef GNN_WITH_CUDA
// spmm through cuSPARSE: one value per CSR entry (1, or 1/deg(v) for mean); forward only.
std::function<void()> cusparse_step(Reduce op, const std::shared_ptr<GraphData>& d, const std::shared_ptr<Tensor>& x,
                                    const std::shared_ptr<Tensor>& y, int64_t F) {
  const Graph& g = d->g;
  const auto indptr = g.csr_indptr.to_vector<int32_t>();
  std::vector<float> values(size_t(g.num_edges));
  for (int64_t v = 0; v < g.num_nodes; ++v)
    for (int32_t p = indptr[size_t(v)]; p < indptr[size_t(v + 1)]; ++p)
      values[size_t(p)] = op == Reduce::kMean ? 1.0f / float(indptr[size_t(v + 1)] - indptr[size_t(v)]) : 1.0f;
  auto vals = std::make_shared<Tensor>(Tensor::from_vector(values).to(Device::cuda(0)));
  // cuSPARSE's work buffer, ours to own (kernels allocate nothing)
  const size_t bytes = CusparseSpmm::workspace_bytes(d->v, vals->f32(), y->f32(), x->f32(), F, F, F);
  auto work = std::make_shared<Tensor>(Tensor::empty({int64_t(bytes)}, DType::U8, Device::cuda(0)));
  auto sp = std::make_shared<CusparseSpmm>(d->v, vals->f32(), y->f32(), x->f32(), F, F, F,
                                           bytes > 0 ? work->data() : nullptr, cuda_stream(0));
  return [sp, work, vals, d, x, y] { sp->run(); };
}
#endif

// spmm-{sum,mean,max}: y = reduce over in-edges of x, x and y [N, C*F].
KernelCase spmm_case(Reduce op, const KernelShape& s) {
  auto d = std::make_shared<GraphData>(s);
  const int64_t F = s.features * s.configs, N = s.nodes, E = d->g.num_edges;
  const Device dev = device_of(s);
  auto x = std::make_shared<Tensor>(random_tensor(N, F, 1).to(dev));
  auto y = std::make_shared<Tensor>(Tensor::empty({N, F}, DType::F32, dev));
  auto dx = std::make_shared<Tensor>(Tensor::empty({N, F}, DType::F32, dev));
  auto arg = std::make_shared<Tensor>(Tensor::empty({op == Reduce::kMax ? N : 0, F}, DType::I32, dev));
  KernelCase k;
  const bool bwd = s.backward;
  if (s.cusparse) {
    if (op == Reduce::kMax || bwd || !s.cuda)
      throw UsageError("gnn bench kernel: --spmm cusparse times spmm-sum and spmm-mean forward on --device cuda only");
#ifdef GNN_WITH_CUDA
    k.step = cusparse_step(op, d, x, y, F);
#endif
  } else {
    const bool cuda = s.cuda;
    k.graph_safe = cuda;
    k.step = [=] {
      int32_t* am = op == Reduce::kMax ? arg->i32() : nullptr;
      if (!cuda) {
        spmm_forward_cpu(y->f32(), am, x->f32(), nullptr, d->v, F, F, F, op);
        if (bwd) spmm_backward_x_cpu(dx->f32(), y->f32(), am, nullptr, d->v, F, F, F, op);
        return;
      }
#ifdef GNN_WITH_CUDA
      spmm_forward_cuda(y->f32(), am, x->f32(), nullptr, d->v, F, F, F, op, cuda_stream(0));
      if (bwd) spmm_backward_x_cuda(dx->f32(), y->f32(), am, nullptr, d->v, F, F, F, op, false, cuda_stream(0));
#endif
    };
  }
  // forward: read one x row per edge, write y, read indptr and indices (+ write argmax for max)
  const double fwd = 4.0 * (double(E) * F + double(N) * F + double(N + 1) + double(E)) + (op == Reduce::kMax ? 4.0 * N * F : 0);
  // backward: read one dy row per edge, write dx, read the CSC (+ argmax rows per edge for max)
  const double bwdb = 4.0 * (double(E) * F + double(N) * F + double(N + 1) + 2.0 * E) + (op == Reduce::kMax ? 4.0 * E * F : 0);
  k.bytes = fwd + (bwd ? bwdb : 0);
  k.flops = double(E) * F * (bwd ? 2 : 1);
  return k;
}

// gemm: [N*C, F] x [F, F], the dense half of a layer on config-batched activations; with --backward
// also dA = dC B^T and dB = A^T dC.
KernelCase gemm_case(const KernelShape& s) {
  const int64_t M = s.nodes * s.configs, F = s.features;
  const Device dev = device_of(s);
  auto a = std::make_shared<Tensor>(random_tensor(M, F, 1).to(dev));
  auto b = std::make_shared<Tensor>(random_tensor(F, F, 2).to(dev));
  auto c = std::make_shared<Tensor>(Tensor::empty({M, F}, DType::F32, dev));
  auto da = std::make_shared<Tensor>(Tensor::empty({M, F}, DType::F32, dev));
  auto db = std::make_shared<Tensor>(Tensor::empty({F, F}, DType::F32, dev));
  const bool bwd = s.backward, cuda = s.cuda;
  KernelCase k;
  k.step = [=] {
    auto mm = [cuda](bool ta, bool tb, int64_t m, int64_t n, int64_t kk, const float* A, const float* B, float* C) {
      if (!cuda) return gemm_cpu(ta, tb, m, n, kk, 1.0f, A, ta ? m : kk, B, tb ? kk : n, 0.0f, C, n);
#ifdef GNN_WITH_CUDA
      gemm_cuda(ta, tb, m, n, kk, 1.0f, A, ta ? m : kk, B, tb ? kk : n, 0.0f, C, n, cuda_blas(0), cuda_stream(0));
#endif
    };
    mm(false, false, M, F, F, a->f32(), b->f32(), c->f32());
    if (bwd) {
      mm(false, true, M, F, F, c->f32(), b->f32(), da->f32());
      mm(true, false, F, F, M, a->f32(), c->f32(), db->f32());
    }
  };
  k.graph_safe = cuda;
  k.bytes = 4.0 * (2.0 * M * F + F * F) * (bwd ? 3 : 1);  // read A, write C (B is tiny); 3 products with backward
  k.flops = 2.0 * double(M) * F * F * (bwd ? 3 : 1);
  return k;
}

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
      sage_forward_cpu(y->f32(), bwd ? z->f32() : nullptr, bwd ? h->f32() : nullptr, x->f32(), d->v, W->f32(),
                       b->f32(), F, O, Act::kRelu, 0.0f);
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
      spmm_backward_x_cpu(dx->f32(), dagg->f32(), nullptr, nullptr, d->v, CF, CF, CF, Reduce::kMean, true);
    };
  }
  sage_traffic(k, N, E, F, O, C, bwd);
  return k;
}

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

// The row ranges of the N nodes split into graphs of S (the last one shorter): a batch's graph_ptr.
std::shared_ptr<std::vector<int64_t>> graph_ranges(int64_t N, int64_t S) {
  auto ptr = std::make_shared<std::vector<int64_t>>();
  for (int64_t r = 0; r < N; r += std::max<int64_t>(1, S)) ptr->push_back(r);
  ptr->push_back(N);
  return ptr;
}

// instance-norm: the graph instance norm without affine parameters on x [N, C*F], graphs of
// --graph-nodes rows (the 6th and 1st place recipes' norm, per graph, config and channel). GB/s counts
// x read and y written (+ x and dy read, dx written); the kernel reads x two more times, from cache
// when a graph's block of channels fits.
KernelCase instance_norm_case(const KernelShape& s) {
  const int64_t N = s.nodes, F = s.features * s.configs;
  auto gp = graph_ranges(N, s.graph_nodes);
  const int64_t G = int64_t(gp->size()) - 1;
  auto x = std::make_shared<Tensor>(random_tensor(N, F, 1));
  auto dy = std::make_shared<Tensor>(random_tensor(N, F, 2));
  auto y = std::make_shared<Tensor>(Tensor::empty({N, F}, DType::F32));
  auto dx = std::make_shared<Tensor>(Tensor::empty({N, F}, DType::F32));
  auto stats = std::make_shared<Tensor>(Tensor::empty({2, G, F}, DType::F32));
  const bool bwd = s.backward;
  KernelCase k;
  k.step = [=] {
    float* mean = stats->f32();
    float* rstd = mean + G * F;
    instance_norm_forward_cpu(y->f32(), mean, rstd, x->f32(), nullptr, nullptr, gp->data(), G, F, 1e-5f);
    if (bwd) instance_norm_backward_cpu(dx->f32(), nullptr, nullptr, dy->f32(), x->f32(), mean, rstd, nullptr, gp->data(), G, F);
  };
  k.bytes = 4.0 * double(N) * F * (bwd ? 5 : 2);
  k.flops = 8.0 * double(N) * F * (bwd ? 2.5 : 1);
  return k;
}

// pool-{sum,mean,max}: the readout y[g] = reduce over graph g's rows of x, x [N, C*F] in graphs of
// --graph-nodes rows, y [G, C*F]; --backward broadcasts dy back (max: to the argmax rows).
KernelCase pool_case(Reduce op, const KernelShape& s) {
  const int64_t N = s.nodes, F = s.features * s.configs;
  auto gp = graph_ranges(N, s.graph_nodes);
  const int64_t G = int64_t(gp->size()) - 1;
  const Device dev = device_of(s);
  auto x = std::make_shared<Tensor>(random_tensor(N, F, 1).to(dev));
  auto y = std::make_shared<Tensor>(Tensor::empty({G, F}, DType::F32, dev));
  auto dx = std::make_shared<Tensor>(Tensor::empty({N, F}, DType::F32, dev));
  auto arg = std::make_shared<Tensor>(Tensor::empty({op == Reduce::kMax ? G : 0, F}, DType::I32, dev));
  // The CUDA kernels read graph_ptr on the device.
  auto gpd = std::make_shared<Tensor>(Tensor::from_vector(*gp).to(dev));
  const bool bwd = s.backward, cuda = s.cuda;
  KernelCase k;
  k.graph_safe = cuda;
  k.step = [=] {
    int32_t* am = op == Reduce::kMax ? arg->i32() : nullptr;
    if (!cuda) {
      pool_forward_cpu(y->f32(), am, x->f32(), gp->data(), G, F, op);
      if (bwd) pool_backward_cpu(dx->f32(), y->f32(), am, gp->data(), G, F, op);
      return;
    }
#ifdef GNN_WITH_CUDA
    pool_forward_cuda(y->f32(), am, x->f32(), gpd->i64(), G, F, op, cuda_stream(0));
    if (bwd) pool_backward_cuda(dx->f32(), y->f32(), am, gpd->i64(), N, G, F, op, cuda_stream(0));
#endif
  };
  // forward: read x, write y (+ argmax); backward: read dy (+ argmax) per graph, write dx
  const double am = op == Reduce::kMax ? 4.0 * G * F : 0;
  k.bytes = 4.0 * (double(N) * F + double(G) * F) + am + (bwd ? 4.0 * (double(N) * F + double(G) * F) + am : 0);
  k.flops = double(N) * F * (bwd ? 2 : 1);
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
  // forward: read idx and one table row per lookup (the table stays in cache: count it once), write y;
  // backward: read dy and the inverse, write dtable
  k.bytes = 4.0 * (double(N) + double(K) * F + double(N) * F) + (bwd ? 4.0 * double(N) * F + 8.0 * N + 4.0 * K * F : 0);
  k.flops = bwd ? double(N) * F : 0.0;  // a lookup is a copy: GFLOP/s reads 0 forward
  return k;
}

// The traffic and flops of a GAT layer pass: forward reads x, writes h, reads h per edge (gather) and
// per node, writes y; backward about twice that.
void gat_traffic(KernelCase& k, int64_t N, int64_t E, int64_t F, int64_t H, int64_t D, bool bwd) {
  const int64_t HD = H * D;
  const double fwd = 4.0 * (double(N) * F + 2.0 * N * HD + double(E) * HD + 6.0 * E * H);
  k.bytes = fwd * (bwd ? 3 : 1);
  k.flops = (2.0 * N * F * HD + 2.0 * E * HD) * (bwd ? 3 : 1);
}

// gat-layer: 4 heads of F/4 (concat), h = x W; a_src/a_dst = per-head dots with the attention
// vectors; s = leaky_relu(a_src[u] + a_dst[v]); alpha = segment softmax; y[v, h] = sum alpha h[u, h].
// The weighted gather runs per head on strided views of h. --backward runs the chain back to dx and dW.
KernelCase gat_case(const KernelShape& s) {
  auto d = std::make_shared<GraphData>(s);
  const int64_t N = s.nodes, F = s.features * s.configs, H = 4, D = std::max<int64_t>(1, F / H), HD = H * D;
  const int64_t E = d->g.num_edges;
  struct Buffers {
    Tensor x, W, att_src, att_dst, h, as, ad, sc, alpha, alpha_t, y, dy, dh, dalpha_t, dalpha, dsc, das, dad, dx, dW;
  };
  auto b = std::make_shared<Buffers>();
  b->x = random_tensor(N, F, 1), b->W = random_tensor(F, HD, 2);
  b->att_src = random_tensor(H, D, 3), b->att_dst = random_tensor(H, D, 4);
  for (Tensor* t : {&b->h, &b->y, &b->dh}) *t = Tensor::empty({N, HD}, DType::F32);
  for (Tensor* t : {&b->as, &b->ad, &b->das, &b->dad}) *t = Tensor::empty({N, H}, DType::F32);
  for (Tensor* t : {&b->sc, &b->alpha, &b->dalpha, &b->dsc}) *t = Tensor::empty({E, H}, DType::F32);
  for (Tensor* t : {&b->alpha_t, &b->dalpha_t}) *t = Tensor::empty({H, E}, DType::F32);
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
        for (int64_t j = 0; j < D; ++j) a += h[i * HD + hh * D + j] * ws[hh * D + j], c += h[i * HD + hh * D + j] * wd[hh * D + j];
        as[i * H + hh] = a, ad[i * H + hh] = c;
      }
    gat_scores_forward_cpu(B.sc.f32(), as, ad, d->v, H, 0.2f);
    segment_softmax_forward_cpu(B.alpha.f32(), B.sc.f32(), d->g.csr_indptr.i32(), N, H);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t hh = 0; hh < H; ++hh) B.alpha_t.f32()[hh * E + e] = B.alpha.f32()[e * H + hh];
    for (int64_t hh = 0; hh < H; ++hh)
      spmm_forward_cpu(B.y.f32() + hh * D, nullptr, h + hh * D, B.alpha_t.f32() + hh * E, d->v, D, HD, HD, Reduce::kSum);
    if (!bwd) return;
    const float* dy = B.y.f32();  // the output stands in for the incoming gradient
    for (int64_t hh = 0; hh < H; ++hh) {
      spmm_backward_x_cpu(B.dh.f32() + hh * D, dy + hh * D, nullptr, B.alpha_t.f32() + hh * E, d->v, D, HD, HD,
                          Reduce::kSum);
      spmm_backward_w_cpu(B.dalpha_t.f32() + hh * E, dy + hh * D, h + hh * D, nullptr, d->v, D, HD, HD, Reduce::kSum);
    }
    for (int64_t e = 0; e < E; ++e)
      for (int64_t hh = 0; hh < H; ++hh) B.dalpha.f32()[e * H + hh] = B.dalpha_t.f32()[hh * E + e];
    segment_softmax_backward_cpu(B.dsc.f32(), B.alpha.f32(), B.dalpha.f32(), d->g.csr_indptr.i32(), N, H);
    gat_scores_backward_cpu(B.das.f32(), B.dad.f32(), B.dsc.f32(), as, ad, d->v, H, 0.2f);
    float* dh = B.dh.f32();
    const float *das = B.das.f32(), *dad = B.dad.f32();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t hh = 0; hh < H; ++hh)
        for (int64_t j = 0; j < D; ++j) dh[i * HD + hh * D + j] += das[i * H + hh] * ws[hh * D + j] + dad[i * H + hh] * wd[hh * D + j];
    gemm_cpu(true, false, F, HD, N, 1.0f, B.x.f32(), F, dh, HD, 0.0f, B.dW.f32(), HD);
    gemm_cpu(false, true, N, F, HD, 1.0f, dh, HD, B.W.f32(), HD, 0.0f, B.dx.f32(), F);
  };
  gat_traffic(k, N, E, F, H, D, bwd);
  return k;
}

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
    L->gat = std::make_unique<nn::GATConv>(F, D, L->rng, nn::GatOptions{.heads = H, .add_self_loops = false, .bias = false});
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
    throw UsageError(msg.append(std::to_string(F)));
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

}  // namespace

std::vector<std::string> bench_kernel_names() {
  return {"gemm",       "spmm-sum",   "spmm-mean",        "spmm-max",        "segment-softmax",
          "gat-layer",  "sage-layer", "sage-layer-fused", "graph-attention", "instance-norm",
          "pool-sum",   "pool-mean",  "pool-max",         "embedding"};
}

KernelCase make_kernel_case(const std::string& name, const KernelShape& s) {
  if (s.cuda && (name == "segment-softmax" || name == "instance-norm"))
    throw UsageError("gnn bench kernel: " + name + " runs on the CPU only (--device cuda: gemm, spmm-sum, "
                     "spmm-mean, spmm-max, sage-layer, sage-layer-fused, gat-layer, graph-attention)");
  if (s.cuda && s.configs > 1 && (name == "sage-layer" || name == "gat-layer"))
    throw UsageError("gnn bench kernel: " + name + " on --device cuda does not take --configs");
  if (s.cuda && !cuda_available())
    throw UsageError("gnn bench kernel: --device cuda is not usable here: " + cuda_status());
  // Configs share a layer's weights: its GEMMs cover (N*C) x F. The fused SAGE kernel and the GAT
  // case take one config per row, so they refuse rather than time a (C*F)-wide dense layer.
  if (s.configs > 1 && (name == "sage-layer-fused" || name == "gat-layer" || name == "graph-attention"))
    throw UsageError("gnn bench kernel: " + name + " does not take --configs (sage-layer does: the composed kernels "
                     "on the node-major N x (C*F) layout)");
  if (name == "gemm") return gemm_case(s);
  if (name == "spmm-sum") return spmm_case(Reduce::kSum, s);
  if (name == "spmm-mean") return spmm_case(Reduce::kMean, s);
  if (name == "spmm-max") return spmm_case(Reduce::kMax, s);
  if (name == "segment-softmax") return softmax_case(s);
  if (name == "instance-norm") return instance_norm_case(s);
  if (name == "pool-sum") return pool_case(Reduce::kSum, s);
  if (name == "pool-mean") return pool_case(Reduce::kMean, s);
  if (name == "pool-max") return pool_case(Reduce::kMax, s);
  if (name == "embedding") return embedding_case(s);
  if (name == "gat-layer") return s.cuda ? gpu_layer_case(true, false, s) : gat_case(s);
  if (name == "sage-layer") return s.cuda ? gpu_layer_case(false, false, s) : sage_case(false, s);
  if (name == "sage-layer-fused") return s.cuda ? gpu_layer_case(false, true, s) : sage_case(true, s);
  if (name == "graph-attention") return attention_case(s);
  std::string all;
  for (const std::string& n : bench_kernel_names()) all += (all.empty() ? "" : ", ") + n;
  throw UsageError("gnn bench kernel: unknown kernel '" + name + "' (available: " + all + ")");
}

}  // namespace gnn::cli
