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

Var squeeze_excite(const Var& x, const Var& w1, const Var& b1, const Var& w2, const Var& b2) {
  check_arg_on("squeeze_excite", "x", x, 2, x.dtype(), x.device());
  check_arg_on("squeeze_excite", "w1", w1, 2, x.dtype(), x.device());
  check_arg_on("squeeze_excite", "w2", w2, 2, x.dtype(), x.device());
  const int64_t R = x.size(0), F = x.size(1), H = w1.size(1);
  GNN_CHECK(w1.size(0) == F && w2.size(0) == H && w2.size(1) == F, "squeeze_excite: w1 ", w1.value().desc(),
            " and w2 ", w2.value().desc(), " are not [", F, ", H] and [H, ", F, "] for x ", x.value().desc());
  for (const auto& [name, b, n] : {std::tuple{"b1", &b1, H}, std::tuple{"b2", &b2, F}}) {
    if (!b->defined()) continue;
    check_arg_on("squeeze_excite", name, *b, 1, x.dtype(), x.device());
    GNN_CHECK(b->size(0) == n, "squeeze_excite: ", name, " has ", b->size(0), " values, not ", n);
  }
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

}  // namespace gnn::ag
