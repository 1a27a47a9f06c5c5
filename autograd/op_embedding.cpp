// Row gather y[i] = table[index[i]] and its scatter-add backward (kernels/norm_embed.h), also used as
// gather_rows. The indices are checked here, at the op boundary; the kernels trust them.
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/norm_embed.h"

namespace gnn::ag {

Var embedding(const Var& table, const Tensor& index) {
  check_arg("embedding", "table", table, 2, table.dtype());
  check_tensor(index, "embedding index", DType::I32, 1);
  const int64_t K = table.size(0), F = table.size(1), n = index.size(0);
  const int32_t* idx = index.i32();
  for (int64_t i = 0; i < n; ++i)
    GNN_CHECK(idx[i] >= 0 && idx[i] < K, "embedding: index[", i, "] = ", idx[i], " is outside the table's ", K, " rows");
  return dispatch_real("embedding", table.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(table.value(), Shape{n, F});
    if constexpr (std::is_same_v<T, float>) embedding_forward_cpu(ptr<T>(y), ptr<T>(table.value()), idx, n, F);
    else embedding_forward_ref<T>(ptr<T>(y), ptr<T>(table.value()), idx, n, F);
    return record("embedding", y, {table}, [table, index, n, K, F](const Tensor& dy) {
      Tensor dt = empty_like(dy, table.shape());
      if constexpr (std::is_same_v<T, float>) embedding_backward_cpu(ptr<T>(dt), ptr<T>(dy), index.i32(), n, K, F);
      else embedding_backward_ref<T>(ptr<T>(dt), ptr<T>(dy), index.i32(), n, K, F);
      accumulate(table, dt);
    });
  });
}

}  // namespace gnn::ag
