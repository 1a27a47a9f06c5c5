#include "nn/loss.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "autograd/checks.h"
#include "autograd/ops.h"

namespace gnn::nn {

using ag::Var;

namespace {

// Host copies in double: losses are O(n) or O(pairs) against O(n F^2) layers, so clarity wins (GPU
// predictions are copied to the host, and their gradient back).
std::vector<double> values(const Tensor& t) { return t.on(Device::cpu()).astype(DType::F64).to_vector<double>(); }

void check_pred(const char* op, const Var& pred, const Tensor& target) {
  ag::check_arg_on(op, "pred", pred, -1, pred.dtype(), pred.device());
  GNN_CHECK(!target.is_cuda(), op, ": the target stays on the host, got ", target.desc());
  GNN_CHECK(pred.value().numel() == target.numel(), op, ": pred has ", pred.value().numel(), " values, target ",
            target.numel());
  for (double t : values(target)) GNN_CHECK(std::isfinite(t), op, ": target holds a non-finite value");
}

// A loss computed on the host in double: L and dL/dp for every prediction.
Var host_loss(const char* op, const Var& pred, double loss, std::vector<double> grad) {
  Tensor value = Tensor::full(Shape{}, loss, pred.dtype(), pred.device());
  return ag::record(op, value, {pred}, [pred = ag::GradRef(pred), grad = std::move(grad)](const Tensor& dy) {
    const double s = dy.item();
    Tensor g = Tensor::empty(pred.shape(), DType::F64);
    for (size_t i = 0; i < grad.size(); ++i) g.f64()[i] = grad[i] * s;
    ag::accumulate(pred, g.astype(pred.dtype()).on(pred.device()));
  });
}

std::vector<int64_t> groups(const char* op, const Tensor& group_ptr, int64_t n) {
  check_tensor(group_ptr, "group_ptr", DType::I64, 1);
  std::vector<int64_t> g = group_ptr.to_vector<int64_t>();
  GNN_CHECK(!g.empty() && g.front() == 0 && g.back() == n, op, ": group_ptr must run from 0 to ", n);
  for (size_t i = 0; i + 1 < g.size(); ++i) GNN_CHECK(g[i] <= g[i + 1], op, ": group_ptr decreases at group ", i);
  return g;
}

// Pairwise losses share the pair walk: f(d) with d = p_i - p_j for t_i > t_j, and f'(d).
template <class F, class DF>
Var pairwise(const char* op, const Var& pred, const Tensor& target, const Tensor& group_ptr, F f, DF df) {
  check_pred(op, pred, target);
  const std::vector<double> p = values(pred.value()), t = values(target);
  const std::vector<int64_t> g = groups(op, group_ptr, int64_t(p.size()));
  std::vector<double> grad(p.size(), 0.0);
  double loss = 0, pairs = 0;
  for (size_t k = 0; k + 1 < g.size(); ++k)
    for (int64_t i = g[k]; i < g[k + 1]; ++i)
      for (int64_t j = g[k]; j < g[k + 1]; ++j)
        if (t[size_t(i)] > t[size_t(j)]) {
          const double d = p[size_t(i)] - p[size_t(j)];
          loss += f(d), pairs += 1;
          grad[size_t(i)] += df(d), grad[size_t(j)] -= df(d);
        }
  if (pairs > 0) {
    loss /= pairs;
    for (double& v : grad) v /= pairs;
  }
  return host_loss(op, pred, loss, std::move(grad));
}

}  // namespace

Var cross_entropy(const Var& logits, const Tensor& labels, const Tensor& rows) {
  const Device dev = logits.device();
  ag::check_arg_on("cross_entropy", "logits", logits, 2, logits.dtype(), dev);
  check_tensor(labels, "labels", DType::I32, 1);
  GNN_CHECK(!labels.is_cuda() && !(rows.defined() && rows.is_cuda()),
            "cross_entropy: labels and rows stay on the host");
  const int64_t R = logits.size(0), C = logits.size(1);
  GNN_CHECK(labels.size(0) == R, "cross_entropy: ", labels.size(0), " labels for ", R, " rows of logits");
  std::vector<int32_t> idx;
  if (rows.defined()) {
    check_tensor(rows, "rows", DType::I32, 1);
    idx = rows.to_vector<int32_t>();
  } else {
    idx.resize(size_t(R));
    std::iota(idx.begin(), idx.end(), 0);
  }
  GNN_CHECK(!idx.empty(), "cross_entropy: no rows selected");
  const int32_t* lab = labels.i32();
  for (int32_t r : idx) {
    GNN_CHECK(r >= 0 && r < R, "cross_entropy: row ", r, " is outside the ", R, " rows of logits");
    GNN_CHECK(lab[r] >= 0 && lab[r] < C, "cross_entropy: label ", lab[r], " of row ", r, " is outside [0, ", C, ")");
  }
  // nll of the log-softmax: the log-softmax op carries its own backward; this entry picks the labels.
  // On a GPU the labels are picked on the host from a copy of the [R, C] log-probabilities, and the
  // gradient (a few values per selected row) is built there and copied back.
  const Var logp = ag::log_softmax(logits);
  return ag::dispatch_dev("cross_entropy", logp.value(), [&](auto t) {
    using T = decltype(t);
    const Tensor lp_host = logp.value().on(Device::cpu());
    const T* lp = ag::ptr<T>(lp_host);
    double loss = 0;
    for (int32_t r : idx) loss -= double(lp[int64_t(r) * C + lab[r]]);
    const double n = double(idx.size());
    return ag::record("cross_entropy", Tensor::full(Shape{}, loss / n, logp.dtype(), dev), {logp},
                      [logp, idx, labels, C, n, dev](const Tensor& dy) {
                        Tensor g = Tensor::zeros(logp.shape(), logp.dtype());
                        T* gp = ag::ptr<T>(g);
                        const T s = T(-dy.item() / n);
                        for (int32_t r : idx) gp[int64_t(r) * C + labels.i32()[r]] += s;
                        ag::accumulate(logp, g.on(dev));
                      });
  });
}

namespace {

// mean_i f(p_i, t_i) over predictions and targets; f returns {its value, its derivative in p_i}.
template <class F>
Var elementwise_loss(const char* name, const Var& pred, const Tensor& target, F f) {
  check_pred(name, pred, target);
  const std::vector<double> p = values(pred.value()), t = values(target);
  GNN_CHECK(!p.empty(), name, ": no values");
  std::vector<double> grad(p.size());
  double loss = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const auto [v, d] = f(p[i], t[i], i);
    loss += v, grad[i] = d / double(p.size());
  }
  return host_loss(name, pred, loss / double(p.size()), std::move(grad));
}

double sign(double x) { return double((x > 0) - (x < 0)); }

// log(e^a + e^b) for any a and b: a NaN stays NaN, -inf adds nothing, +inf gives +inf
double log_add_exp(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return a + b;
  const double hi = std::max(a, b), lo = std::min(a, b);
  if (lo == -INFINITY || hi == INFINITY) return hi;
  return hi + std::log1p(std::exp(lo - hi));
}

}  // namespace

Var mse_loss(const Var& pred, const Tensor& target) {
  return elementwise_loss("mse_loss", pred, target, [](double p, double t, size_t) {
    return std::pair{(p - t) * (p - t), 2 * (p - t)};
  });
}

Var mape_loss(const Var& pred, const Tensor& target, double target_scale) {
  return elementwise_loss("mape_loss", pred, target, [target_scale](double p, double t, size_t i) {
    t *= target_scale;
    GNN_CHECK(t != 0, "mape_loss: target ", i, " is 0 (relative error undefined)");
    return std::pair{std::fabs(p - t) / std::fabs(t), sign(p - t) / std::fabs(t)};
  });
}

Var log_mape_loss(const Var& log_pred, const Tensor& target) {
  return elementwise_loss("log_mape_loss", log_pred, target, [](double p, double t, size_t i) {
    GNN_CHECK(t > 0, "log_mape_loss: target ", i, " is ", t, " (a runtime must be positive)");
    // |exp(p) - t| / t = |r - 1| with r = exp(p - log t): no overflow for a prediction near its target
    const double r = std::exp(p - std::log(t));
    return std::pair{std::fabs(r - 1), sign(r - 1) * r};
  });
}

Var pairwise_hinge_loss(const Var& pred, const Tensor& target, const Tensor& group_ptr, double margin) {
  return pairwise(
      "pairwise_hinge_loss", pred, target, group_ptr,
      [margin](double d) { return margin - d <= 0 ? 0.0 : margin - d; },  // (a NaN stays NaN, as torch's clamp)
      [margin](double d) { return margin - d > 0 ? -1.0 : 0.0; });
}

Var pairwise_logistic_loss(const Var& pred, const Tensor& target, const Tensor& group_ptr) {
  // log(1 + exp(-d)) computed without overflow; its derivative is -sigmoid(-d)
  return pairwise(
      "pairwise_logistic_loss", pred, target, group_ptr,
      [](double d) { return d > 0 ? std::log1p(std::exp(-d)) : -d + std::log1p(std::exp(d)); },
      [](double d) { return -1.0 / (1.0 + std::exp(d)); });
}

Var list_mle_loss(const Var& pred, const Tensor& target, const Tensor& group_ptr, double temperature,
                  bool slowest_first) {
  check_pred("list_mle_loss", pred, target);
  GNN_CHECK(temperature > 0, "list_mle_loss: temperature must be positive, got ", temperature);
  const std::vector<double> p = values(pred.value()), t = values(target);
  const std::vector<int64_t> g = groups("list_mle_loss", group_ptr, int64_t(p.size()));
  std::vector<double> grad(p.size(), 0.0);
  double loss = 0;
  int64_t used = 0;
  for (size_t k = 0; k + 1 < g.size(); ++k) {
    const int64_t b = g[k], n = g[k + 1] - b;
    if (n == 0) continue;
    ++used;
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), b);
    std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
      return slowest_first ? t[size_t(i)] > t[size_t(j)] : t[size_t(i)] < t[size_t(j)];
    });
    std::vector<double> u(static_cast<size_t>(n));
    const double s = slowest_first ? 1.0 : -1.0;  // u = s * pred / T
    for (int64_t r = 0; r < n; ++r) u[size_t(r)] = s * p[size_t(order[size_t(r)])] / temperature;
    // L_r = log sum_{l >= r} exp(u_l), from the end, each step against its own maximum: one maximum for the
    // whole group made a suffix far below it underflow to 0 (pred [0, 800] in order gave -inf, not 0)
    std::vector<double> L(static_cast<size_t>(n + 1), -INFINITY);
    for (int64_t r = n - 1; r >= 0; --r) L[size_t(r)] = log_add_exp(u[size_t(r)], L[size_t(r + 1)]);
    // dloss/du_r = -1 + sum_{r' <= r} exp(u_r - L_r') = -1 + exp(u_r - L_r) c_r, c_r = sum_{r' <= r} exp(L_r - L_r'):
    // L falls with r, so each term is at most 1 and c_r at most r + 1
    double c = 0;
    for (int64_t r = 0; r < n; ++r) {
      loss += L[size_t(r)] - u[size_t(r)];
      c = (r == 0 ? 0.0 : c * std::exp(L[size_t(r)] - L[size_t(r - 1)])) + 1.0;
      const double du = -1.0 + std::exp(u[size_t(r)] - L[size_t(r)]) * c;
      grad[size_t(order[size_t(r)])] = s * du / temperature;  // du/dp = s / T
    }
  }
  GNN_CHECK(used > 0, "list_mle_loss: every group is empty");
  for (double& v : grad) v /= double(used);
  return host_loss("list_mle_loss", pred, loss / double(used), std::move(grad));
}

}  // namespace gnn::nn
