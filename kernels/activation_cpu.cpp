// Activations over all threads; one switch per call, not per element, so each loop is a plain map.
#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "kernels/activation.h"
#include "kernels/cpu_parts.h"
#include "kernels/elementwise.h"

namespace gnn {

const char* act_name(Act a) {
  switch (a) {
    case Act::kRelu:
      return "relu";
    case Act::kLeakyRelu:
      return "leaky_relu";
    case Act::kElu:
      return "elu";
    case Act::kGelu:
      return "gelu";
    case Act::kSigmoid:
      return "sigmoid";
    case Act::kTanh:
      return "tanh";
    default:
      return "none";
  }
}

Act parse_act(const char* name) {
  for (Act a : {Act::kNone, Act::kRelu, Act::kLeakyRelu, Act::kElu, Act::kGelu, Act::kSigmoid, Act::kTanh})
    if (std::strcmp(name, act_name(a)) == 0) return a;
  GNN_FAIL("unknown activation '", name, "' (none, relu, leaky_relu, elu, gelu, sigmoid, tanh)");
}

namespace {

// Each thread's part runs through a cloned function (kernels/cpu_parts.h says why).
GNN_CPU_CLONES void act_forward_part(float* __restrict y, const float* __restrict x, int64_t n, Act a, float slope) {
  dispatch_act(a, [&](auto A) GNN_INLINE {
    for (int64_t i = 0; i < n; ++i) y[i] = act_value(decltype(A)::value, x[i], slope);
  });
}

GNN_CPU_CLONES void act_backward_part(float* __restrict dx, const float* __restrict dy, const float* __restrict x,
                                      int64_t n, Act a, float slope) {
  dispatch_act(a, [&](auto A) GNN_INLINE {
    for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * act_derivative(decltype(A)::value, x[i], slope);
  });
}

// rows [0, R) of a [R, F] block, bias b (or none) added before the activation
GNN_CPU_CLONES void bias_act_forward_part(float* __restrict y, const float* __restrict x, const float* __restrict b,
                                          int64_t R, int64_t F, Act a, float slope) {
  dispatch_act(a, [&](auto A) GNN_INLINE {
    for (int64_t r = 0; r < R; ++r)
      for (int64_t f = 0; f < F; ++f)
        y[r * F + f] = act_value(decltype(A)::value, x[r * F + f] + (b ? b[f] : 0.0f), slope);
  });
}

GNN_CPU_CLONES void bias_act_backward_part(float* __restrict dx, const float* __restrict dy, const float* __restrict x,
                                           const float* __restrict b, int64_t R, int64_t F, Act a, float slope) {
  dispatch_act(a, [&](auto A) GNN_INLINE {
    for (int64_t r = 0; r < R; ++r)
      for (int64_t f = 0; f < F; ++f)
        dx[r * F + f] = dy[r * F + f] * act_derivative(decltype(A)::value, x[r * F + f] + (b ? b[f] : 0.0f), slope);
  });
}

GNN_CPU_CLONES void gate_forward_part(float* __restrict y, const float* __restrict x, const float* __restrict z,
                                      const float* __restrict b, int64_t R, int64_t F) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t f = 0; f < F; ++f)
      y[r * F + f] = x[r * F + f] * act_value(Act::kSigmoid, z[r * F + f] + (b ? b[f] : 0.0f), 0.0f);
}

// The sigmoid once per value: s' = s (1 - s) is act_derivative's formula, so the bits are its.
GNN_CPU_CLONES void gate_backward_part(float* __restrict dx, float* __restrict dz, const float* __restrict dy,
                                       const float* __restrict x, const float* __restrict z, const float* __restrict b,
                                       int64_t R, int64_t F) {
  for (int64_t r = 0; r < R; ++r) {
    const int64_t o = r * F;
    for (int64_t f = 0; f < F; ++f) {
      const float s = act_value(Act::kSigmoid, z[o + f] + (b ? b[f] : 0.0f), 0.0f);
      dx[o + f] = dy[o + f] * s;
      dz[o + f] = dy[o + f] * x[o + f] * (s * (1.0f - s));
    }
  }
}

}  // namespace

void gate_forward_cpu(float* y, const float* x, const float* z, const float* b, int64_t R, int64_t F) {
  over_threads(R, 32768 / std::max<int64_t>(F, 1),
               [&](int64_t r0, int64_t r1) { gate_forward_part(y + r0 * F, x + r0 * F, z + r0 * F, b, r1 - r0, F); });
}

void gate_backward_cpu(float* dx, float* dz, float* db, const float* dy, const float* x, const float* z, const float* b,
                       int64_t R, int64_t F) {
  auto rows = [&](int64_t r0, int64_t r1) {
    gate_backward_part(dx + r0 * F, dz + r0 * F, dy + r0 * F, x + r0 * F, z + r0 * F, b, r1 - r0, F);
  };
  if (!db) return over_threads(R, 32768 / std::max<int64_t>(F, 1), rows);
  column_sum_of(db, R, F, false, [&](int64_t r0, int64_t r1, float* part) {
    rows(r0, r1);
    column_rows_cpu(part, dz + r0 * F, r1 - r0, F);
  });
}

void act_forward_cpu(float* y, const float* x, int64_t n, Act a, float slope) {
  over_threads(n, 32768, [&](int64_t b, int64_t e) { act_forward_part(y + b, x + b, e - b, a, slope); });
}

void act_backward_cpu(float* dx, const float* dy, const float* x, int64_t n, Act a, float slope) {
  over_threads(n, 32768, [&](int64_t b, int64_t e) { act_backward_part(dx + b, dy + b, x + b, e - b, a, slope); });
}

void bias_act_forward_cpu(float* y, const float* x, const float* b, int64_t R, int64_t F, Act a, float slope) {
  over_threads(R, 32768 / std::max<int64_t>(F, 1),
               [&](int64_t r0, int64_t r1) { bias_act_forward_part(y + r0 * F, x + r0 * F, b, r1 - r0, F, a, slope); });
}

void bias_act_backward_cpu(float* dx, float* db, const float* dy, const float* x, const float* b, int64_t R, int64_t F,
                           Act a, float slope) {
  auto rows = [&](int64_t r0, int64_t r1) {
    bias_act_backward_part(dx + r0 * F, dy + r0 * F, x + r0 * F, b, r1 - r0, F, a, slope);
  };
  if (!db) return over_threads(R, 32768 / std::max<int64_t>(F, 1), rows);
  column_sum_of(db, R, F, false, [&](int64_t r0, int64_t r1, float* part) {
    rows(r0, r1);
    column_rows_cpu(part, dx + r0 * F, r1 - r0, F);
  });
}

}  // namespace gnn
