// The optimiser updates, per element, shared by the host and the GPU.
// One Adam / AdamW update of n parameters, with the moments kept in double:
//   g' = g + wd w (Adam, L2 in the gradient)   or   w' = w (1 - lr wd) (AdamW, decoupled)
//   m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2;  w = w' - lr (m / c1) / (sqrt(v / c2) + eps)
// with c1 = 1 - b1^t and c2 = 1 - b2^t for the parameter's step t. nn::Adam runs the reference on the
// host; the CUDA version is the fused device update (one pass over w, g, m, v).
#pragma once
#include <cmath>

#include "kernels/common.h"

namespace gnn {

struct AdamStep {
  double lr, b1, b2, eps, weight_decay, c1, c2;
  bool decoupled;
};

// One element, host or device: returns the new weight and updates its moments in place.
GNN_HD inline double adam_element(double wi, double gi, double& m, double& v, const AdamStep& s) {
  if (s.decoupled) wi *= 1 - s.lr * s.weight_decay;
  else gi += s.weight_decay * wi;
  m = s.b1 * m + (1 - s.b1) * gi;
  v = s.b2 * v + (1 - s.b2) * gi * gi;
  return wi - s.lr * (m / s.c1) / (std::sqrt(v / s.c2) + s.eps);
}

template <class T>
void adam_update_ref(T* w, const T* grad, double* m, double* v, int64_t n, const AdamStep& s) {
  for (int64_t i = 0; i < n; ++i) w[i] = T(adam_element(double(w[i]), double(grad[i]), m[i], v[i], s));
}

void adam_update_cuda(float* w, const float* grad, double* m, double* v, int64_t n, const AdamStep& s, Stream stream);

// One SGD update (torch.optim.SGD, dampening 0): d = g + wd w; with momentum, buf = first ? d : mu buf + d
// and d = buf (buf in double, null without momentum); w -= lr d.
struct SgdStep {
  double lr, momentum, weight_decay;
  bool first;
};

GNN_HD inline double sgd_element(double wi, double gi, double* buf, const SgdStep& s) {
  double d = gi + s.weight_decay * wi;
  if (buf) d = *buf = s.first ? d : s.momentum * *buf + d;
  return wi - s.lr * d;
}

template <class T>
void sgd_update_ref(T* w, const T* grad, double* buf, int64_t n, const SgdStep& s) {
  for (int64_t i = 0; i < n; ++i) w[i] = T(sgd_element(double(w[i]), double(grad[i]), buf ? buf + i : nullptr, s));
}

void sgd_update_cuda(float* w, const float* grad, double* buf, int64_t n, const SgdStep& s, Stream stream);

}  // namespace gnn
