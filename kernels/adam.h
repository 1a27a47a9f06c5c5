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

}  // namespace gnn
