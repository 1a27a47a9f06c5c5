// Multi-head self-attention among the nodes of each graph of a disjoint union. q, k, v, y: [N, H*D];
// graph g owns rows graph_ptr[g] .. graph_ptr[g+1]-1; head h owns columns h*D .. h*D+D-1.
//
// Full (per graph and head, n nodes):   S = Q K^T / sqrt(D) + B,  P = softmax_rows(S),  Y = P V
//   dV = P^T dY;  dP = dY V^T;  dS = P * (dP - rowsum(P * dP));  dQ = dS K / sqrt(D);  dK = dS^T Q / sqrt(D)
//   Memory n^2 per head at a time; P is recomputed in the backward rather than kept for every graph.
//   B is an optional constant additive bias [n, n] per graph, the same for every head (0 without one):
//   log w_ij turns the softmax's exp(s_ij) into w_ij exp(s_ij), a soft mask (the Harvard seed report's
//   attention weighs non-adjacent nodes 0.1). It takes the per-block path on the GPU too.
// Linear (Katharopoulos et al. 2020), phi(x) = elu(x) + 1 > 0:
//   A = phi(Q), B = phi(K), KV = B^T V [D, D], z = B^T 1 [D];  Y = (A KV) / (A z)  (row-wise division)
//   with u = dY / den and c = -rowsum(dY * Y) / den:
//   dA = u KV^T + c z^T;  dKV = A^T u;  dz = A^T c;  dB = V dKV^T + 1 dz^T;  dV = B dKV
//   dQ = dA * phi'(Q), dK = dB * phi'(K). Cost and memory linear in n.
// Both are written once over the device helpers (products through gemm_on, the row maps of
// kernels/attention.h, softmax from kernels/rowwise.h), so the same steps run on the host and, per
// graph and head, as cuBLAS products and small kernels on the GPU (about ten launches per block: a
// batch of many small graphs is launch-bound there). Scratch is one tensor per block where the input lives.
// Full attention on the GPU with heads of at most kFlashMaxD columns takes the fused kernels instead
// (kernels/attention.h): one launch forward and two backward for every graph and head, P never stored.
#include <cmath>

#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/attention.h"
#include "kernels/rowwise.h"

namespace gnn::ag {

namespace {

template <class T>
struct Block {  // one graph and head: pointers to its first element, row stride ld
  const T* q;
  const T* k;
  const T* v;
  int64_t n, D, ld;
  const T* bias = nullptr;  // [n, n] or none
};

// Where `on` lives: the float kernels (CUDA or CPU), or the double references.
constexpr Kernel rowwise_forward_k = GNN_KERNEL(rowwise_forward);
constexpr Kernel rowwise_backward_k = GNN_KERNEL(rowwise_backward);
template <class T>
void softmax_on(const Tensor& on, T* y, const T* x, int64_t R, int64_t F) {
  run<T>(rowwise_forward_k, on, y, x, R, F, RowOp::kSoftmax, T(0));
}
template <class T>
void softmax_backward_on(const Tensor& on, T* dx, const T* y, const T* dy, int64_t R, int64_t F) {
  run<T>(rowwise_backward_k, on, dx, y, dy, y, R, F, RowOp::kSoftmax, T(0));
}
// KERNEL: GNN_KERNEL for the two maps with an exponential (their CPU versions run in the ISA clones),
// GNN_HOST_KERNEL (the template in float too) for the others.
#define GNN_ROW_MAP_ON(name, KERNEL, params, args) \
  template <class T>                               \
  void name##_on(const Tensor& on, params) {       \
    run<T>(KERNEL, on, args);                      \
  }
#define GNN_P(...) __VA_ARGS__
GNN_ROW_MAP_ON(phi_rows, GNN_KERNEL(phi_rows), GNN_P(T* a, const T* q, int64_t n, int64_t D, int64_t ld),
               GNN_P(a, q, n, D, ld))
GNN_ROW_MAP_ON(div_rows, GNN_HOST_KERNEL(div_rows, div_rows_cuda),
               GNN_P(T* y, int64_t ld, const T* num, const T* den, int64_t n, int64_t D), GNN_P(y, ld, num, den, n, D))
GNN_ROW_MAP_ON(coef_rows, GNN_HOST_KERNEL(coef_rows, coef_rows_cuda),
               GNN_P(T* u, T* c, const T* dy, int64_t ld, const T* y, const T* den, int64_t n, int64_t D),
               GNN_P(u, c, dy, ld, y, den, n, D))
GNN_ROW_MAP_ON(dphi_rows, GNN_KERNEL(dphi_rows),
               GNN_P(T* dq, int64_t ld, const T* da, const T* q, int64_t n, int64_t D), GNN_P(dq, ld, da, q, n, D))
#undef GNN_P
#undef GNN_ROW_MAP_ON

// Scratch for one block, carved from one tensor on `on`'s device.
template <class T>
struct Scratch {
  Tensor buf;
  int64_t used = 0;
  Scratch(const Tensor& on, int64_t total) : buf(empty_like(on, Shape{total})) {}
  T* take(int64_t n) {
    T* p = ptr<T>(buf) + used;
    used += n;
    return p;
  }
};

// P = softmax_rows(Q K^T / sqrt(D)), through S
template <class T>
void full_probs(const Tensor& on, const Block<T>& b, T* S, T* P) {
  const T scale = T(1) / std::sqrt(T(b.D));
  gemm_on<T>(on, false, true, b.n, b.n, b.D, scale, b.q, b.ld, b.k, b.ld, T(0), S, b.n);
  if (b.bias) add_on<T>(on, S, S, b.bias, b.n * b.n);
  softmax_on<T>(on, P, S, b.n, b.n);
}

template <class T>
void full_block(const Tensor& on, const Block<T>& b, T* y) {
  Scratch<T> s(on, 2 * b.n * b.n);
  T *S = s.take(b.n * b.n), *P = s.take(b.n * b.n);
  full_probs<T>(on, b, S, P);
  gemm_on<T>(on, false, false, b.n, b.D, b.n, T(1), P, b.n, b.v, b.ld, T(0), y, b.ld);
}

template <class T>
void full_backward(const Tensor& on, const Block<T>& b, const T* dy, T* dq, T* dk, T* dv) {
  const T scale = T(1) / std::sqrt(T(b.D));
  const int64_t n = b.n;
  Scratch<T> s(on, 3 * n * n);
  T *S = s.take(n * n), *P = s.take(n * n), *dP = s.take(n * n);
  full_probs<T>(on, b, S, P);  // recomputed rather than kept for every graph
  gemm_on<T>(on, true, false, n, b.D, n, T(1), P, n, dy, b.ld, T(0), dv, b.ld);
  gemm_on<T>(on, false, true, n, n, b.D, T(1), dy, b.ld, b.v, b.ld, T(0), dP, n);
  T* dS = S;  // S is spent
  softmax_backward_on<T>(on, dS, P, dP, n, n);
  gemm_on<T>(on, false, false, n, b.D, n, scale, dS, n, b.k, b.ld, T(0), dq, b.ld);
  gemm_on<T>(on, true, false, n, b.D, n, scale, dS, n, b.q, b.ld, T(0), dk, b.ld);
}

// A = phi(Q), B = phi(K) as contiguous [n, D]; KV [D, D]; z [D]; num [n, D]; den [n]
template <class T>
struct LinearState {
  T *A, *B, *KV, *z, *num, *den;
  static int64_t size(int64_t n, int64_t D) { return 3 * n * D + D * D + D + n; }
  explicit LinearState(Scratch<T>& s, int64_t n, int64_t D)
      : A(s.take(n * D)), B(s.take(n * D)), KV(s.take(D * D)), z(s.take(D)), num(s.take(n * D)), den(s.take(n)) {}
};

// y with row stride ldy
template <class T>
void linear_forward(const Tensor& on, const Block<T>& b, T* y, int64_t ldy, const LinearState<T>& s) {
  const int64_t n = b.n, D = b.D;
  phi_rows_on<T>(on, s.A, b.q, n, D, b.ld);
  phi_rows_on<T>(on, s.B, b.k, n, D, b.ld);
  column_sum_on<T>(on, s.z, s.B, n, D);
  gemm_on<T>(on, true, false, D, D, n, T(1), s.B, D, b.v, b.ld, T(0), s.KV, D);
  gemm_on<T>(on, false, false, n, D, D, T(1), s.A, D, s.KV, D, T(0), s.num, D);
  gemm_on<T>(on, false, false, n, 1, D, T(1), s.A, D, s.z, 1, T(0), s.den, 1);  // den = A z
  div_rows_on<T>(on, y, ldy, s.num, s.den, n, D);
}

template <class T>
void linear_block(const Tensor& on, const Block<T>& b, T* y) {
  Scratch<T> s(on, LinearState<T>::size(b.n, b.D));
  linear_forward<T>(on, b, y, b.ld, LinearState<T>(s, b.n, b.D));
}

template <class T>
void linear_backward(const Tensor& on, const Block<T>& b, const T* dy, T* dq, T* dk, T* dv) {
  const int64_t n = b.n, D = b.D;
  Scratch<T> sc(on, LinearState<T>::size(n, D) + 4 * n * D + 2 * D * D + D + n);
  const LinearState<T> s(sc, n, D);
  T *y = sc.take(n * D), *u = sc.take(n * D), *dA = sc.take(n * D), *dB = sc.take(n * D);
  T *dKV = sc.take(D * D), *dz = sc.take(D), *c = sc.take(n);
  linear_forward<T>(on, b, y, D, s);
  coef_rows_on<T>(on, u, c, dy, b.ld, y, s.den, n, D);
  gemm_on<T>(on, false, true, n, D, D, T(1), u, D, s.KV, D, T(0), dA, D);  // dA = u KV^T
  gemm_on<T>(on, false, false, n, D, 1, T(1), c, 1, s.z, D, T(1), dA, D);  //    + c z^T
  gemm_on<T>(on, true, false, D, D, n, T(1), s.A, D, u, D, T(0), dKV, D);  // dKV = A^T u
  gemm_on<T>(on, true, false, D, 1, n, T(1), s.A, D, c, 1, T(0), dz, 1);  // dz = A^T c
  gemm_on<T>(on, false, true, n, D, D, T(1), b.v, b.ld, dKV, D, T(0), dB, D);  // dB = V dKV^T
  add_row_on<T>(on, dB, dB, dz, n, D);  //    + 1 dz^T
  gemm_on<T>(on, false, false, n, D, D, T(1), s.B, D, dKV, D, T(0), dv, b.ld);  // dV = B dKV
  dphi_rows_on<T>(on, dq, b.ld, dA, b.q, n, D);
  dphi_rows_on<T>(on, dk, b.ld, dB, b.k, n, D);
}

// The fused form: the tile table goes to the device with the launch (a queued copy), lse stays for the
// backward, which recomputes P from it.
Var flash_attention(const Var& q, const Var& k, const Var& v, const Tensor& graph_ptr, int64_t H) {
  const int64_t N = q.size(0), D = q.size(1) / H;
  const std::vector<int64_t> table = flash_tiles(graph_ptr.i64(), graph_ptr.size(0) - 1);
  const int64_t T = int64_t(table.size()) / 3;
  const Tensor tiles = T > 0 ? Tensor::from_vector(table, q.device()) : Tensor();
  const int64_t* tp = T > 0 ? tiles.data_as<int64_t>() : nullptr;
  Tensor y = empty_like(q.value(), q.shape()), lse = empty_like(q.value(), Shape{N, H});
  if constexpr (kWithCuda)
    flash_attention_forward_cuda(ptr<float>(y), ptr<float>(lse), ptr<float>(q.value()), ptr<float>(k.value()),
                                 ptr<float>(v.value()), tp, T, H, D, y.stream());
  return record("graph_attention", y, {q, k, v}, [=](const Tensor& dy) {
    Tensor dq = empty_like(dy, q.shape()), dk = empty_like(dy, q.shape()), dv = empty_like(dy, q.shape());
    Tensor delta = empty_like(dy, Shape{N, H});
    if constexpr (kWithCuda)
      flash_attention_backward_cuda(ptr<float>(dq), ptr<float>(dk), ptr<float>(dv), ptr<float>(delta), ptr<float>(dy),
                                    ptr<float>(y), ptr<float>(lse), ptr<float>(q.value()), ptr<float>(k.value()),
                                    ptr<float>(v.value()), tp, T, H, D, dy.stream());
    (void)tiles;  // kept alive with the closure for the backward's launches
    accumulate(q, dq);
    accumulate(k, dk);
    accumulate(v, dv);
  });
}

}  // namespace

Var graph_attention(const Var& q, const Var& k, const Var& v, const Tensor& graph_ptr, int64_t heads, bool linear,
                    const Tensor& bias_in) {
  check_arg_on("graph_attention", "q", q, 2, q.dtype(), q.device());
  check_arg_on("graph_attention", "k", k, 2, q.dtype(), q.device());
  check_arg_on("graph_attention", "v", v, 2, q.dtype(), q.device());
  GNN_CHECK(q.shape() == k.shape() && q.shape() == v.shape(), "graph_attention: q ", q.shape().str(), ", k ",
            k.shape().str(), " and v ", v.shape().str(), " must have one shape");
  const int64_t N = q.size(0), W = q.size(1);
  GNN_CHECK(heads >= 1 && W % heads == 0, "graph_attention: ", W, " columns do not split into ", heads, " heads");
  check_graph_ptr("graph_attention", graph_ptr, N);
  const int64_t D = W / heads, G = graph_ptr.size(0) - 1;
  // The bias's blocks: graph g's [n_g, n_g] at bias_off[g].
  std::vector<int64_t> bias_off{0};
  for (int64_t g = 0; g < G; ++g) {
    const int64_t n = graph_ptr.i64()[g + 1] - graph_ptr.i64()[g];
    bias_off.push_back(bias_off.back() + n * n);
  }
  Tensor bias;
  if (bias_in.defined()) {
    GNN_CHECK(!linear, "graph_attention: a bias needs the full attention, not the linear one");
    GNN_CHECK(bias_in.dtype() == q.dtype() && bias_in.dim() == 1 && bias_in.size(0) == bias_off.back(),
              "graph_attention: bias must be ", dtype_name(q.dtype()), " [", bias_off.back(),
              "] (each graph's n x n block in turn), got ", bias_in.desc());
    bias = bias_in.device() == q.device() ? bias_in : bias_in.to(q.device());
  }
  return dispatch_dev("graph_attention", q.value(), [&](auto t) {
    using T = decltype(t);
    if (q.value().is_cuda() && !linear && D <= kFlashMaxD && !bias.defined())
      return flash_attention(q, k, v, graph_ptr, heads);
    auto block = [=](int64_t g, int64_t h) {
      const int64_t r = graph_ptr.i64()[g], off = r * W + h * D;
      return Block<T>{ptr<T>(q.value()) + off,
                      ptr<T>(k.value()) + off,
                      ptr<T>(v.value()) + off,
                      graph_ptr.i64()[g + 1] - r,
                      D,
                      W,
                      bias.defined() ? ptr<T>(bias) + bias_off[size_t(g)] : nullptr};
    };
    Tensor y = empty_like(q.value(), q.shape());
    for (int64_t g = 0; g < G; ++g)
      for (int64_t h = 0; h < heads; ++h) {
        const Block<T> b = block(g, h);
        T* yb = ptr<T>(y) + graph_ptr.i64()[g] * W + h * D;
        if (b.n == 0) continue;
        if (linear) linear_block<T>(y, b, yb);
        else full_block<T>(y, b, yb);
      }
    return record("graph_attention", y, {q, k, v}, [=](const Tensor& dy) {
      Tensor dq = empty_like(dy, q.shape()), dk = empty_like(dy, q.shape()), dv = empty_like(dy, q.shape());
      for (int64_t g = 0; g < G; ++g)
        for (int64_t h = 0; h < heads; ++h) {
          const Block<T> b = block(g, h);
          const int64_t off = graph_ptr.i64()[g] * W + h * D;
          if (b.n == 0) continue;
          if (linear) linear_backward<T>(dy, b, ptr<T>(dy) + off, ptr<T>(dq) + off, ptr<T>(dk) + off, ptr<T>(dv) + off);
          else full_backward<T>(dy, b, ptr<T>(dy) + off, ptr<T>(dq) + off, ptr<T>(dk) + off, ptr<T>(dv) + off);
        }
      accumulate(q, dq);
      accumulate(k, dk);
      accumulate(v, dv);
    });
  });
}

}  // namespace gnn::ag
