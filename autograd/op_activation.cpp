// y = act(x);  dx = dy * act'(x)  (kernels/activation.h), on the host or the GPU
// y = act(x + b);  dx = dy * act'(x + b), db = column sums of dx  (bias_act: a dense layer's epilogue)
// y = x * sigmoid(z + b);  dx = dy s, dz = dy x s (1 - s), db = column sums of dz  (gate: the SE block's product)
// y = x * sigmoid(relu(x w1 + b1) w2 + b2)  (squeeze_excite: the whole SE block, kernels/squeeze_excite.h)
#include <tuple>
#include <utility>

#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/squeeze_excite.h"

namespace gnn::ag {
namespace {

constexpr Kernel act_forward_k = GNN_KERNEL(act_forward);
constexpr Kernel act_backward_k = GNN_KERNEL(act_backward);
// The CUDA forward can also keep x + b (nullptr here); its backward sums db through a workspace.
constexpr Kernel bias_act_forward_k{
    "bias_act_forward", [](auto... a) { bias_act_forward_ref(a...); }, [](auto... a) { bias_act_forward_cpu(a...); },
    [](const Tensor& on, auto* y, auto... a) { bias_act_forward_cuda(y, nullptr, a..., on.stream()); }};
constexpr Kernel bias_act_backward_k{
    "bias_act_backward", [](auto... a) { bias_act_backward_ref(a...); }, [](auto... a) { bias_act_backward_cpu(a...); },
    [](const Tensor& on, float* dx, float* db, const float* dy, const float* x, const float* b, int64_t R, int64_t F,
       Act act, float slope) {
      const Tensor ws = db ? column_sum_workspace_on(on, R, F) : Tensor();
      bias_act_backward_cuda(dx, db, dy, x, b, R, F, act, slope, ws.defined() ? ws.f32() : nullptr, on.stream());
    }};

constexpr Kernel gate_forward_k = GNN_KERNEL(gate_forward);
constexpr Kernel gate_backward_k{
    "gate_backward", [](auto... a) { gate_backward_ref(a...); }, [](auto... a) { gate_backward_cpu(a...); },
    [](const Tensor& on, float* dx, float* dz, float* db, const float* dy, const float* x, const float* z,
       const float* b, int64_t R, int64_t F) {
      const Tensor ws = db ? column_sum_workspace_on(on, R, F) : Tensor();
      gate_backward_cuda(dx, dz, db, dy, x, z, b, R, F, ws.defined() ? ws.f32() : nullptr, on.stream());
    }};

// Host only: squeeze_excite composes the GPU ops instead.
constexpr auto no_cuda = [](const Tensor& on, auto...) {
  GNN_FAIL("squeeze_excite: no CUDA kernel (on ", on.device().str(), " the op is matmul, bias_act and gate)");
};
constexpr Kernel squeeze_excite_forward_k{"squeeze_excite_forward",
                                          [](auto... a) { squeeze_excite_forward_ref(a...); },
                                          [](auto... a) { squeeze_excite_forward_cpu(a...); }, no_cuda};
constexpr Kernel squeeze_excite_backward_k{"squeeze_excite_backward",
                                           [](auto... a) { squeeze_excite_backward_ref(a...); },
                                           [](auto... a) { squeeze_excite_backward_cpu(a...); }, no_cuda};

}  // namespace

Var activation(const Var& x, Act act, double slope) {
  check_arg_on("activation", "x", x, -1, x.dtype(), x.device());
  return dispatch_dev("activation", x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), x.shape());
    run<T>(act_forward_k, y, ptr<T>(y), ptr<T>(x.value()), y.numel(), act, T(slope));
    return record("activation", y, {x}, [x, act, slope](const Tensor& dy) {
      Tensor dx = empty_like(dy, dy.shape());
      run<T>(act_backward_k, dx, ptr<T>(dx), ptr<T>(dy), ptr<T>(x.value()), dx.numel(), act, T(slope));
      accumulate(x, dx);
    });
  });
}

Var bias_act(const Var& x, const Var& b, Act act, double slope) {
  check_arg_on("bias_act", "x", x, 2, x.dtype(), x.device());
  check_arg_on("bias_act", "b", b, 1, x.dtype(), x.device());
  const int64_t R = x.size(0), F = x.size(1);
  GNN_CHECK(b.size(0) == F, "bias_act: b has ", b.size(0), " values for x with ", F, " columns");
  if (act == Act::kNone) return add_bias(x, b);  // the same values, and its dx is dy itself: no pass over x
  return dispatch_dev("bias_act", x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), x.shape());
    const T *xp = ptr<T>(x.value()), *bp = ptr<T>(b.value());
    run<T>(bias_act_forward_k, y, ptr<T>(y), xp, bp, R, F, act, T(slope));
    return record("bias_act", y, {x, b}, [x, b, act, slope, R, F](const Tensor& dy) {
      Tensor dx = empty_like(dy, x.shape());
      Tensor db = b.requires_grad() ? empty_like(dy, b.shape()) : Tensor();
      T* dbp = db.defined() ? ptr<T>(db) : nullptr;
      const T *g = ptr<T>(dy), *xp = ptr<T>(x.value()), *bp = ptr<T>(b.value());
      run<T>(bias_act_backward_k, dx, ptr<T>(dx), dbp, g, xp, bp, R, F, act, T(slope));
      if (x.requires_grad()) accumulate(x, dx);
      if (db.defined()) accumulate(b, db);
    });
  });
}

Var gate(const Var& x, const Var& z, const Var& b) {
  check_arg_on("gate", "x", x, 2, x.dtype(), x.device());
  check_arg_on("gate", "z", z, 2, x.dtype(), x.device());
  GNN_CHECK(z.shape() == x.shape(), "gate: z ", z.value().desc(), " is not x's ", x.shape().str());
  const int64_t R = x.size(0), F = x.size(1);
  if (b.defined()) {
    check_arg_on("gate", "b", b, 1, x.dtype(), x.device());
    GNN_CHECK(b.size(0) == F, "gate: b has ", b.size(0), " values for x with ", F, " columns");
  }
  return dispatch_dev("gate", x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), x.shape());
    run<T>(gate_forward_k, y, ptr<T>(y), ptr<T>(x.value()), ptr<T>(z.value()), ptr_or_null<T>(b), R, F);
    return record("gate", y, {x, z, b}, [x, z, b, R, F](const Tensor& dy) {
      Tensor dx = empty_like(dy, x.shape()), dz = empty_like(dy, z.shape());
      Tensor db = b.requires_grad() ? empty_like(dy, b.shape()) : Tensor();
      run<T>(gate_backward_k, dy, ptr<T>(dx), ptr<T>(dz), db.defined() ? ptr<T>(db) : nullptr, ptr<T>(dy),
             ptr<T>(x.value()), ptr<T>(z.value()), ptr_or_null<T>(b), R, F);
      accumulate(x, dx);
      if (db.defined()) accumulate(b, db);
      accumulate(z, dz);
    });
  });
}

Var squeeze_excite_composed(const Var& x, const Var& w1, const Var& b1, const Var& w2, const Var& b2) {
  const Var z = matmul(x, w1);
  const Var h = b1.defined() ? bias_act(z, b1, Act::kRelu) : activation(z, Act::kRelu);
  return gate(x, matmul(h, w2), b2);
}

namespace {

// The SE block's weights for F channels (x, its rows of F, named in the errors): H, the squeezed width.
int64_t check_squeeze_excite(const char* op, const Var& x, int64_t F, const Var& w1, const Var& b1, const Var& w2,
                             const Var& b2) {
  check_arg_on(op, "w1", w1, 2, x.dtype(), x.device());
  check_arg_on(op, "w2", w2, 2, x.dtype(), x.device());
  const int64_t H = w1.size(1);
  GNN_CHECK(w1.size(0) == F && w2.size(0) == H && w2.size(1) == F, op, ": w1 ", w1.value().desc(), " and w2 ",
            w2.value().desc(), " are not [", F, ", H] and [H, ", F, "] for x ", x.value().desc());
  for (const auto& [name, b, n] : {std::tuple{"b1", &b1, H}, std::tuple{"b2", &b2, F}}) {
    if (!b->defined()) continue;
    check_arg_on(op, name, *b, 1, x.dtype(), x.device());
    GNN_CHECK(b->size(0) == n, op, ": ", name, " has ", b->size(0), " values, not ", n);
  }
  return H;
}

}  // namespace

Var squeeze_excite(const Var& x, const Var& w1, const Var& b1, const Var& w2, const Var& b2) {
  check_arg_on("squeeze_excite", "x", x, 2, x.dtype(), x.device());
  const int64_t R = x.size(0), F = x.size(1), H = check_squeeze_excite("squeeze_excite", x, F, w1, b1, w2, b2);
  // a GPU, or float where the host kernel does not apply: the composed ops
  if (x.value().is_cuda() || (x.dtype() == DType::F32 && !squeeze_excite_vectorised(F, H)))
    return squeeze_excite_composed(x, w1, b1, w2, b2);
  return dispatch_dev("squeeze_excite", x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), x.shape()), h = empty_like(x.value(), Shape{R, H});
    run<T>(squeeze_excite_forward_k, y, ptr<T>(y), ptr<T>(h), ptr<T>(x.value()), ptr<T>(w1.value()),
           ptr_or_null<T>(b1), ptr<T>(w2.value()), ptr_or_null<T>(b2), R, F, H);
    return record("squeeze_excite", y, {x, w1, b1, w2, b2}, [x, w1, b1, w2, b2, h, R, F, H](const Tensor& dy) {
      auto grad_of = [&](const Var& v) { return v.requires_grad() ? empty_like(dy, v.shape()) : Tensor(); };
      auto p = [](Tensor& g) { return g.defined() ? ptr<T>(g) : nullptr; };
      Tensor dx = grad_of(x), dw1 = grad_of(w1), db1 = grad_of(b1), dw2 = grad_of(w2), db2 = grad_of(b2);
      run<T>(squeeze_excite_backward_k, dy, p(dx), p(dw1), p(db1), p(dw2), p(db2), ptr<T>(dy), ptr<T>(x.value()),
             ptr<T>(h), ptr<T>(w1.value()), ptr<T>(w2.value()), ptr_or_null<T>(b2), R, F, H);
      for (const auto& [v, g] : {std::pair{&x, &dx}, std::pair{&w1, &dw1}, std::pair{&b1, &db1}, std::pair{&w2, &dw2},
                                 std::pair{&b2, &db2}})
        if (g->defined()) accumulate(*v, *g);
    });
  });
}

Var squeeze_excite_attention(const Var& x, const Var& w1, const Var& b1, const Var& w2, const Var& b2,
                              const Var& beta, int64_t configs, const Var& residual, Act act, FusedDropout dropout) {
  const char* op = "squeeze_excite_attention";
  check_arg_on(op, "x", x, 2, x.dtype(), x.device());
  GNN_CHECK(configs >= 1 && x.size(1) % configs == 0, op, ": ", x.value().desc(), " is not [N, C*F] for C = ", configs);
  const int64_t N = x.size(0), C = configs, F = x.size(1) / C, H = check_squeeze_excite(op, x, F, w1, b1, w2, b2);
  // a GPU, f64, or a shape the host kernel does not take: the two ops (which check the rest)
  if (x.value().is_cuda() || x.dtype() != DType::F32 || !squeeze_excite_attention_fused(C, F, H))
    return config_attention(reshape(squeeze_excite(reshape(x, N * C, F), w1, b1, w2, b2), N, C * F), beta, C,
                            residual, act, dropout);
  check_arg_on(op, "beta", beta, 1, x.dtype(), x.device());
  GNN_CHECK(beta.value().numel() == 1, op, ": beta must have one element, got ", beta.value().desc());
  GNN_CHECK(act != Act::kLeakyRelu, op, ": the fused activation takes no slope; apply leaky_relu after it");
  GNN_CHECK(dropout.p >= 0 && dropout.p < 1, op, ": dropout p must lie in [0, 1), got ", dropout.p);
  if (residual.defined()) {
    check_arg_on(op, "residual", residual, 2, x.dtype(), x.device());
    GNN_CHECK(residual.size(0) == N && residual.size(1) == C * 2 * F, op, ": residual ", residual.value().desc(),
              " is not the output's [", N, ", ", C * 2 * F, "]");
  }
  auto value = [](const Var& v) { return v.defined() ? v.value() : Tensor(); };
  auto f = [](const Tensor& t) { return t.defined() ? t.f32() : nullptr; };
  const Tensor xv = x.value(), w1v = w1.value(), w2v = w2.value(), b2v = value(b2), bv = beta.value();
  const Tensor rv = value(residual);
  Tensor y = empty_like(xv, Shape{N, C * 2 * F}), h = empty_like(xv, Shape{N * C, H});
  const RowsDropout<float> drop = rows_dropout<float>(dropout, C);
  squeeze_excite_attention_forward_cpu(y.f32(), h.f32(), xv.f32(), w1v.f32(), f(value(b1)), w2v.f32(),
                                       f(b2v), f(rv), N, C, F, H, bv.f32(), act, drop);
  const Tensor keep_res = act != Act::kNone ? rv : Tensor();  // read only to recompute the activation's input
  return record(op, y, {x, w1, b1, w2, b2, beta, residual},
                [xv, w1v, w2v, b2v, bv, h, keep_res, x = GradRef(x), w1 = GradRef(w1), b1 = GradRef(b1),
                 w2 = GradRef(w2), b2 = GradRef(b2), beta = GradRef(beta), residual = GradRef(residual), N, C, F, H,
                 act, drop, f](const Tensor& dy) {
                  auto grad_of = [&](const GradRef& v) {
                    return v.requires_grad() ? empty_like(dy, v.shape()) : Tensor();
                  };
                  Tensor dx = grad_of(x), dw1 = grad_of(w1), db1 = grad_of(b1), dw2 = grad_of(w2), db2 = grad_of(b2),
                         dbeta = grad_of(beta);
                  // without an activation or dropout the residual's gradient is dy itself
                  const bool same = act == Act::kNone && !drop.mask.on;
                  Tensor dres = residual.requires_grad() && !same ? empty_like(dy, dy.shape()) : Tensor();
                  squeeze_excite_attention_backward_cpu(f(dx), f(dres), f(dbeta), f(dw1), f(db1), f(dw2), f(db2),
                                                        dy.f32(), xv.f32(), h.f32(), f(keep_res), w1v.f32(),
                                                        w2v.f32(), f(b2v), N, C, F, H, bv.f32(), act, drop);
                  for (const auto& [v, g] : {std::pair{&x, &dx}, std::pair{&w1, &dw1}, std::pair{&b1, &db1},
                                             std::pair{&w2, &dw2}, std::pair{&b2, &db2}, std::pair{&beta, &dbeta},
                                             std::pair{&residual, &dres}})
                    if (g->defined()) accumulate(*v, *g);
                  if (same) accumulate(residual, dy);
                });
}

}  // namespace gnn::ag
