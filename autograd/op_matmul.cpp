// y = op(a) op(b), op = transpose or not (host, or cuBLAS for CUDA tensors).
//   da = dy op(b)^T (or its transpose when a is transposed), db = op(a)^T dy (likewise).
// y = a w + bias (matmul_bias): the same, and dbias = column sums of dy; on the host the bias is added in
// the GEMM's store, the bits of matmul and then add_bias in one pass over y.
// y = [a | b] w (+ bias) (+ addend) (matmul_cat): da = dy w_a^T, db = dy w_b^T straight into their gradients
// (when both want one, gemm_split: with bf16 products on the host one product that reads dy once, which also
// adds dy into b's when the addend is b, b holds no gradient yet and is not a), dw = [a | b]^T dy from the
// two parts in place; on the host the bits of concat_cols, matmul, add_bias and add (a NaN's payload aside).
#include "autograd/dispatch.h"
#include "autograd/ops.h"

namespace gnn::ag {

namespace {

// The gradients of y = op(a) op(b) from dy, into a and b (each only when it wants one).
template <class T>
void matmul_backward(const Tensor& dy, const GradRef& a, const GradRef& b, const Tensor& av, const Tensor& bv,
                     bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K) {
  const T* g = ptr<T>(dy);
  // a's gradient written into the one it holds, in the product's store (on the host, where that has
  // add_into's bits), in place only: a held gradient another Tensor shares is left to accumulate
  const bool in_store = !trans_a && dy.device().is_cpu() && a.requires_grad() && a.node()->grad.defined() &&
                        a.node()->grad.sole_owner() && gemm_beta_adds_after(M, K, N);
  if (in_store) {
    GradSum sum = grad_sum(a);  // (into is held itself)
    gemm_on<T>(dy, false, !trans_b, M, K, N, T(1), g, N, ptr<T>(bv), bv.size(1), T(1), ptr<T>(sum.into), K);
    set_grad_sum(a, std::move(sum.into));
  } else if (a.requires_grad()) {
    Tensor da = empty_like(dy, a.shape());
    // a [M, K]: da = dy op(b)^T;   a stored [K, M]: da = op(b) dy^T
    if (!trans_a) gemm_on<T>(dy, false, !trans_b, M, K, N, T(1), g, N, ptr<T>(bv), bv.size(1), T(0), ptr<T>(da), K);
    else gemm_on<T>(dy, trans_b, true, K, M, N, T(1), ptr<T>(bv), bv.size(1), g, N, T(0), ptr<T>(da), M);
    accumulate(a, da);
  }
  if (b.requires_grad()) {
    Tensor db = empty_like(dy, b.shape());
    // b [K, N]: db = op(a)^T dy;   b stored [N, K]: db = dy^T op(a)
    if (!trans_b) gemm_on<T>(dy, !trans_a, false, K, N, M, T(1), ptr<T>(av), av.size(1), g, N, T(0), ptr<T>(db), N);
    else gemm_on<T>(dy, true, trans_a, N, K, M, T(1), g, N, ptr<T>(av), av.size(1), T(0), ptr<T>(db), K);
    accumulate(b, db);
  }
}

}  // namespace

Var matmul(const Var& a, const Var& b, bool trans_a, bool trans_b) {
  check_arg_on("matmul", "a", a, 2, a.dtype(), a.value().device());
  check_arg_on("matmul", "b", b, 2, a.dtype(), a.value().device());
  const int64_t M = trans_a ? a.size(1) : a.size(0), K = trans_a ? a.size(0) : a.size(1);
  const int64_t Kb = trans_b ? b.size(1) : b.size(0), N = trans_b ? b.size(0) : b.size(1);
  GNN_CHECK(K == Kb, "matmul: inner sizes differ: ", trans_a ? "a^T " : "a ", a.shape().str(), " times ",
            trans_b ? "b^T " : "b ", b.shape().str());
  return dispatch_dev("matmul", a.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(a.value(), Shape{M, N});
    gemm_on<T>(y, trans_a, trans_b, M, N, K, T(1), ptr<T>(a.value()), a.size(1), ptr<T>(b.value()), b.size(1), T(0),
               ptr<T>(y), N);
    // Each value is read only for the other's gradient.
    const Tensor av = b.requires_grad() ? a.value() : Tensor(), bv = a.requires_grad() ? b.value() : Tensor();
    return record("matmul", y, {a, b}, [=, a = GradRef(a), b = GradRef(b)](const Tensor& dy) {
      matmul_backward<T>(dy, a, b, av, bv, trans_a, trans_b, M, N, K);
    });
  });
}

Var matmul_bias(const Var& a, const Var& w, const Var& bias) {
  const Device dev = a.value().device();
  check_arg_on("matmul_bias", "a", a, 2, a.dtype(), dev);
  check_arg_on("matmul_bias", "w", w, 2, a.dtype(), dev);
  check_arg_on("matmul_bias", "bias", bias, 1, a.dtype(), dev);
  const int64_t M = a.size(0), K = a.size(1), N = w.size(1);
  GNN_CHECK(w.size(0) == K, "matmul_bias: inner sizes differ: a ", a.shape().str(), " times w ", w.shape().str());
  GNN_CHECK(bias.size(0) == N, "matmul_bias: bias has ", bias.size(0), " values for ", N, " output columns");
  return dispatch_dev("matmul_bias", a.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(a.value(), Shape{M, N});
    run<T>(gemm_bias_k, y, false, false, M, N, K, ptr<T>(a.value()), K, ptr<T>(w.value()), N, ptr<T>(bias.value()),
           ptr<T>(y), N);
    const Tensor av = w.requires_grad() ? a.value() : Tensor(), wv = a.requires_grad() ? w.value() : Tensor();
    return record("matmul_bias", y, {a, w, bias},
                  [=, a = GradRef(a), w = GradRef(w), bias = GradRef(bias)](const Tensor& dy) {
                    if (bias.requires_grad()) {  // add_bias's backward
                      Tensor db = empty_like(dy, bias.shape());
                      column_sum_on<T>(db, ptr<T>(db), ptr<T>(dy), M, N);
                      accumulate(bias, db);
                    }
                    matmul_backward<T>(dy, a, w, av, wv, false, false, M, N, K);
                  });
  });
}

Var matmul_cat(const Var& a, const Var& b, const Var& w, const Var& bias, const Var& addend) {
  const Device dev = a.value().device();
  check_arg_on("matmul_cat", "a", a, 2, a.dtype(), dev);
  check_arg_on("matmul_cat", "b", b, 2, a.dtype(), dev);
  check_arg_on("matmul_cat", "w", w, 2, a.dtype(), dev);
  if (bias.defined()) check_arg_on("matmul_cat", "bias", bias, 1, a.dtype(), dev);
  if (addend.defined()) check_arg_on("matmul_cat", "addend", addend, 2, a.dtype(), dev);
  const int64_t M = a.size(0), K1 = a.size(1), K2 = b.size(1), N = w.size(1);
  GNN_CHECK(b.size(0) == M, "matmul_cat: a ", a.shape().str(), " and b ", b.shape().str(), " differ in rows");
  GNN_CHECK(w.size(0) == K1 + K2, "matmul_cat: w ", w.shape().str(), " does not take [a | b] of ", K1 + K2, " columns");
  GNN_CHECK(!bias.defined() || bias.size(0) == N, "matmul_cat: bias has ", bias.size(0), " values for ", N,
            " output columns");
  GNN_CHECK(!addend.defined() || addend.shape() == Shape({M, N}), "matmul_cat: addend ", addend.shape().str(),
            " is not the output's [", M, ", ", N, "]");
  return dispatch_dev("matmul_cat", a.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(a.value(), Shape{M, N});
    const T* bp = bias.defined() ? ptr<T>(bias.value()) : nullptr;
    if (addend.defined())
      run<T>(gemm_cat_add_k, y, M, N, K1 + K2, ptr<T>(a.value()), K1, ptr<T>(b.value()), K2, K1, ptr<T>(w.value()), N,
             bp, ptr<T>(addend.value()), N, ptr<T>(y), N);
    else
      run<T>(gemm_cat_k, y, false, M, N, K1 + K2, ptr<T>(a.value()), K1, ptr<T>(b.value()), K2, K1, ptr<T>(w.value()),
             N, bp, ptr<T>(y), N);
    const bool want_w = w.requires_grad(), want_ab = a.requires_grad() || b.requires_grad();
    const Tensor av = want_w ? a.value() : Tensor(), bv = want_w ? b.value() : Tensor();
    const Tensor wv = want_ab ? w.value() : Tensor();
    std::vector<Var> inputs{a, b, w};
    if (bias.defined()) inputs.push_back(bias);
    if (addend.defined()) inputs.push_back(addend);
    return record("matmul_cat", y, inputs,
                  [=, a = GradRef(a), b = GradRef(b), w = GradRef(w), bias = GradRef(bias),
                   r = GradRef(addend)](const Tensor& dy) {
                    const T* g = ptr<T>(dy);
                    // The addend's gradient is dy, which the composed add's backward hands it before any of
                    // matmul_cat's. Where the addend is b and b holds no gradient yet (and is not a), b's whole
                    // gradient dy w_b^T + dy comes out of d[a | b]'s product instead: the same sum of the same
                    // two terms (IEEE addition commutes; only a NaN's payload may differ), in one store.
                    const bool both = a.requires_grad() && b.requires_grad();
                    const bool r_into_b = both && r.requires_grad() && r.node() == b.node() && a.node() != b.node() &&
                                          !b.node()->grad.defined();
                    if (r.requires_grad() && !r_into_b) accumulate(r, dy);  // add's backward: dy itself
                    if (bias.requires_grad()) {  // add_bias's backward
                      Tensor db = empty_like(dy, bias.shape());
                      column_sum_on<T>(db, ptr<T>(db), g, M, N);
                      accumulate(bias, db);
                    }
                    if (w.requires_grad()) {
                      Tensor dw = empty_like(dy, w.shape());
                      run<T>(gemm_cat_k, dy, true, K1 + K2, N, M, ptr<T>(av), K1, ptr<T>(bv), K2, K1, g, N,
                             static_cast<const T*>(nullptr), ptr<T>(dw), N);
                      accumulate(w, dw);
                    }
                    // d[a | b] = dy w^T, each part's columns straight into its own gradient; when both want
                    // theirs, gemm_split (with bf16 products on the host one product that reads dy once, the bits
                    // of the two), with dy added in the store of b's part where r_into_b.
                    if (both) {
                      Tensor da = empty_like(dy, a.shape()), db = empty_like(dy, b.shape());
                      run<T>(gemm_split_k, dy, false, true, M, K1 + K2, N, g, N, ptr<T>(wv), N, ptr<T>(da), K1,
                             ptr<T>(db), K2, K1, r_into_b ? g : static_cast<const T*>(nullptr), N);
                      accumulate(a, da);
                      accumulate(b, db);
                      return;
                    }
                    if (a.requires_grad()) {
                      Tensor da = empty_like(dy, a.shape());
                      gemm_on<T>(dy, false, true, M, K1, N, T(1), g, N, ptr<T>(wv), N, T(0), ptr<T>(da), K1);
                      accumulate(a, da);
                    }
                    if (b.requires_grad()) {
                      Tensor db = empty_like(dy, b.shape());
                      gemm_on<T>(dy, false, true, M, K2, N, T(1), g, N, ptr<T>(wv) + K1 * N, N, T(0), ptr<T>(db), K2);
                      accumulate(b, db);
                    }
                  });
  });
}

}  // namespace gnn::ag
