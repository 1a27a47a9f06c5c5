// Per-column standardisation with trainable statistics (kernels/standardize.h):
//   y = (x - mean) / (std + eps);  dx = dy / (std + eps);  dmean = -sum_r dy / (std + eps);
//   dstd = -sum_r dy y / (std + eps)
// The 6th place TpuGraphs solution's in-forward standardisation of the node (and tile config) features,
// with mean and std parameters started from the training graphs' statistics.
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/standardize.h"

namespace gnn::ag {
namespace {

constexpr auto standardize_host = [](auto... a) { standardize_ref(a...); };
constexpr auto standardize_backward_host = [](auto... a) { standardize_backward_ref(a...); };
constexpr Kernel standardize_k = GNN_HOST_KERNEL(standardize_host, standardize_cuda);
constexpr Kernel standardize_backward_k = GNN_HOST_KERNEL(standardize_backward_host, standardize_backward_cuda);

}  // namespace

Var standardize(const Var& x, const Var& mean, const Var& std, double eps) {
  const Device dev = x.device();
  check_arg_on("standardize", "x", x, 2, x.dtype(), dev);
  check_arg_on("standardize", "mean", mean, 1, x.dtype(), dev);
  check_arg_on("standardize", "std", std, 1, x.dtype(), dev);
  const int64_t R = x.size(0), F = x.size(1);
  GNN_CHECK(mean.size(0) == F && std.size(0) == F, "standardize: mean has ", mean.size(0), " and std ", std.size(0),
            " values for x with ", F, " columns");
  GNN_CHECK(std::isfinite(eps) && eps >= 0, "standardize: eps must be finite and >= 0, got ", eps);
  return dispatch_dev("standardize", x.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(x.value(), x.shape());
    run<T>(standardize_k, y, ptr<T>(y), ptr<T>(x.value()), ptr<T>(mean.value()), ptr<T>(std.value()), T(eps), R, F);
    return record("standardize", y, {x, mean, std},
                  [x = GradRef(x), mean = GradRef(mean), std, y, eps, R, F](const Tensor& dy) {
                    const bool want_x = x.requires_grad(), want_stats = mean.requires_grad() || std.requires_grad();
                    if (!want_x && !want_stats) return;
                    Tensor dx = want_x ? empty_like(dy, dy.shape()) : Tensor();
                    Tensor dmean = empty_like(dy, Shape{F}), dstd = empty_like(dy, Shape{F});
                    run<T>(standardize_backward_k, dy, want_x ? ptr<T>(dx) : static_cast<T*>(nullptr), ptr<T>(dmean),
                           ptr<T>(dstd), ptr<T>(dy), ptr<T>(y), ptr<T>(std.value()), T(eps), R, F);
                    if (want_x) accumulate(x, dx);
                    if (mean.requires_grad()) accumulate(mean, dmean);
                    if (std.requires_grad()) accumulate(std, dstd);
                  });
  });
}

}  // namespace gnn::ag
