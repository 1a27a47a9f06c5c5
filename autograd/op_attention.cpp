// Multi-head self-attention among the nodes of each graph of a disjoint union. q, k, v, y: [N, H*D];
// graph g owns rows graph_ptr[g] .. graph_ptr[g+1]-1; head h owns columns h*D .. h*D+D-1.
//
// Full (per graph and head, n nodes):   S = Q K^T / sqrt(D),  P = softmax_rows(S),  Y = P V
//   dV = P^T dY;  dP = dY V^T;  dS = P * (dP - rowsum(P * dP));  dQ = dS K / sqrt(D);  dK = dS^T Q / sqrt(D)
//   Memory n^2 per head at a time; P is recomputed in the backward rather than kept for every graph.
// Linear (Katharopoulos et al. 2020), phi(x) = elu(x) + 1 > 0:
//   A = phi(Q), B = phi(K), KV = B^T V [D, D], z = B^T 1 [D];  Y = (A KV) / (A z)  (row-wise division)
//   with u = dY / den and c = -rowsum(dY * Y) / den:
//   dA = u KV^T + c z^T;  dKV = A^T u;  dz = A^T c;  dB = V dKV^T + 1 dz^T;  dV = B dKV
//   dQ = dA * phi'(Q), dK = dB * phi'(K). Cost and memory linear in n.
#include <cmath>
#include <vector>

#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/rowwise.h"

namespace gnn::ag {

namespace {

template <class T>
struct Block {  // one graph and head: pointers to its first element, row stride ld
  const T* q;
  const T* k;
  const T* v;
  int64_t n, D, ld;
};

template <class T>
void softmax_rows(T* y, const T* x, int64_t R, int64_t F) {
  if constexpr (std::is_same_v<T, float>) rowwise_forward_cpu(y, x, R, F, RowOp::kSoftmax, 0.f);
  else rowwise_forward_ref<T>(y, x, R, F, RowOp::kSoftmax, T(0));
}

template <class T>
void full_forward(const Block<T>& b, T* y, std::vector<T>& P) {
  const T scale = T(1) / std::sqrt(T(b.D));
  P.resize(size_t(b.n * b.n));
  gemm_t<T>(false, true, b.n, b.n, b.D, scale, b.q, b.ld, b.k, b.ld, T(0), P.data(), b.n);
  softmax_rows<T>(P.data(), P.data(), b.n, b.n);
  gemm_t<T>(false, false, b.n, b.D, b.n, T(1), P.data(), b.n, b.v, b.ld, T(0), y, b.ld);
}

template <class T>
void full_backward(const Block<T>& b, const T* dy, T* dq, T* dk, T* dv) {
  const T scale = T(1) / std::sqrt(T(b.D));
  const int64_t n = b.n;
  std::vector<T> P, dP(size_t(n * n)), dS(size_t(n * n)), y(size_t(n * b.ld));
  full_forward<T>(b, y.data(), P);  // recomputes P
  gemm_t<T>(true, false, n, b.D, n, T(1), P.data(), n, dy, b.ld, T(0), dv, b.ld);
  gemm_t<T>(false, true, n, n, b.D, T(1), dy, b.ld, b.v, b.ld, T(0), dP.data(), n);
  rowwise_backward_ref<T>(dS.data(), P.data(), dP.data(), P.data(), n, n, RowOp::kSoftmax, T(0));
  gemm_t<T>(false, false, n, b.D, n, scale, dS.data(), n, b.k, b.ld, T(0), dq, b.ld);
  gemm_t<T>(true, false, n, b.D, n, scale, dS.data(), n, b.q, b.ld, T(0), dk, b.ld);
}

template <class T>
T phi(T x) { return x > T(0) ? x + T(1) : std::exp(x); }
template <class T>
T dphi(T x) { return x > T(0) ? T(1) : std::exp(x); }

// A = phi(Q), B = phi(K) as contiguous [n, D]; KV [D, D]; z [D]; den [n]
template <class T>
struct LinearState {
  std::vector<T> A, B, KV, z, num, den;
};

template <class T>
void linear_forward(const Block<T>& b, T* y, LinearState<T>& s) {
  const int64_t n = b.n, D = b.D;
  s.A.resize(size_t(n * D)), s.B.resize(size_t(n * D)), s.KV.resize(size_t(D * D)), s.z.assign(size_t(D), T(0));
  s.num.resize(size_t(n * D)), s.den.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d) {
      s.A[size_t(i * D + d)] = phi(b.q[i * b.ld + d]);
      s.B[size_t(i * D + d)] = phi(b.k[i * b.ld + d]);
      s.z[size_t(d)] += s.B[size_t(i * D + d)];
    }
  gemm_t<T>(true, false, D, D, n, T(1), s.B.data(), D, b.v, b.ld, T(0), s.KV.data(), D);
  gemm_t<T>(false, false, n, D, D, T(1), s.A.data(), D, s.KV.data(), D, T(0), s.num.data(), D);
  for (int64_t i = 0; i < n; ++i) {
    T den = 0;
    for (int64_t d = 0; d < D; ++d) den += s.A[size_t(i * D + d)] * s.z[size_t(d)];
    s.den[size_t(i)] = den;
    for (int64_t d = 0; d < D; ++d) y[i * b.ld + d] = s.num[size_t(i * D + d)] / den;
  }
}

template <class T>
void linear_backward(const Block<T>& b, const T* dy, T* dq, T* dk, T* dv) {
  const int64_t n = b.n, D = b.D;
  LinearState<T> s;
  std::vector<T> y(size_t(n * b.ld));
  linear_forward<T>(b, y.data(), s);
  std::vector<T> u(size_t(n * D)), c(static_cast<size_t>(n)), dA(size_t(n * D)), dKV(size_t(D * D)), dz(size_t(D), T(0)),
      dB(size_t(n * D));
  for (int64_t i = 0; i < n; ++i) {
    T dot = 0;
    for (int64_t d = 0; d < D; ++d) {
      u[size_t(i * D + d)] = dy[i * b.ld + d] / s.den[size_t(i)];
      dot += dy[i * b.ld + d] * y[size_t(i * b.ld + d)];
    }
    c[size_t(i)] = -dot / s.den[size_t(i)];
  }
  gemm_t<T>(false, true, n, D, D, T(1), u.data(), D, s.KV.data(), D, T(0), dA.data(), D);
  gemm_t<T>(true, false, D, D, n, T(1), s.A.data(), D, u.data(), D, T(0), dKV.data(), D);
  gemm_t<T>(false, true, n, D, D, T(1), b.v, b.ld, dKV.data(), D, T(0), dB.data(), D);
  gemm_t<T>(false, false, n, D, D, T(1), s.B.data(), D, dKV.data(), D, T(0), dv, b.ld);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d) dz[size_t(d)] += s.A[size_t(i * D + d)] * c[size_t(i)];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d) {
      dq[i * b.ld + d] = (dA[size_t(i * D + d)] + c[size_t(i)] * s.z[size_t(d)]) * dphi(b.q[i * b.ld + d]);
      dk[i * b.ld + d] = (dB[size_t(i * D + d)] + dz[size_t(d)]) * dphi(b.k[i * b.ld + d]);
    }
}

}  // namespace

Var graph_attention(const Var& q, const Var& k, const Var& v, const Tensor& graph_ptr, int64_t heads, bool linear) {
  check_arg("graph_attention", "q", q, 2, q.dtype());
  check_arg("graph_attention", "k", k, 2, q.dtype());
  check_arg("graph_attention", "v", v, 2, q.dtype());
  GNN_CHECK(q.shape() == k.shape() && q.shape() == v.shape(), "graph_attention: q ", q.shape().str(), ", k ",
            k.shape().str(), " and v ", v.shape().str(), " must have one shape");
  const int64_t N = q.size(0), W = q.size(1);
  GNN_CHECK(heads >= 1 && W % heads == 0, "graph_attention: ", W, " columns do not split into ", heads, " heads");
  check_graph_ptr("graph_attention", graph_ptr, N);
  const int64_t D = W / heads, G = graph_ptr.size(0) - 1;
  return dispatch_real("graph_attention", q.value(), [&](auto t) {
    using T = decltype(t);
    auto block = [=](int64_t g, int64_t h) {
      const int64_t r = graph_ptr.i64()[g], off = r * W + h * D;
      return Block<T>{ptr<T>(q.value()) + off, ptr<T>(k.value()) + off, ptr<T>(v.value()) + off,
                      graph_ptr.i64()[g + 1] - r, D, W};
    };
    Tensor y = empty_like(q.value(), q.shape());
    std::vector<T> P;
    LinearState<T> s;
    for (int64_t g = 0; g < G; ++g)
      for (int64_t h = 0; h < heads; ++h) {
        const Block<T> b = block(g, h);
        T* yb = ptr<T>(y) + graph_ptr.i64()[g] * W + h * D;
        if (b.n == 0) continue;
        if (linear) linear_forward<T>(b, yb, s);
        else full_forward<T>(b, yb, P);
      }
    return record("graph_attention", y, {q, k, v}, [=](const Tensor& dy) {
      Tensor dq = empty_like(dy, q.shape()), dk = empty_like(dy, q.shape()), dv = empty_like(dy, q.shape());
      for (int64_t g = 0; g < G; ++g)
        for (int64_t h = 0; h < heads; ++h) {
          const Block<T> b = block(g, h);
          const int64_t off = graph_ptr.i64()[g] * W + h * D;
          if (b.n == 0) continue;
          if (linear) linear_backward<T>(b, ptr<T>(dy) + off, ptr<T>(dq) + off, ptr<T>(dk) + off, ptr<T>(dv) + off);
          else full_backward<T>(b, ptr<T>(dy) + off, ptr<T>(dq) + off, ptr<T>(dk) + off, ptr<T>(dv) + off);
        }
      accumulate(q, dq);
      accumulate(k, dk);
      accumulate(v, dv);
    });
  });
}

}  // namespace gnn::ag
