// Row gather y[i] = table[index[i]] and its scatter-add backward (kernels/embedding.h), also used as
// gather_rows. The indices are checked here, at the op boundary, on the host; the kernels trust them.
// On a GPU the index is copied there for the forward, and the backward's ordered inverse of it and its
// chunk table (built on the host, where the index is) for the gradient: no atomics, the same bits as
// the CPU.
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/embedding.h"

namespace gnn::ag {

Var embedding(const Var& table, const Tensor& index) {
  check_arg_on("embedding", "table", table, 2, table.dtype(), table.device());
  check_tensor(index, "embedding index", DType::I32, 1);
  GNN_CHECK(!index.is_cuda(), "embedding: the index must be on the host (it is checked there), got ", index.desc());
  const int64_t K = table.size(0), F = table.size(1), n = index.size(0);
  const int32_t* idx = index.i32();
  for (int64_t i = 0; i < n; ++i)
    GNN_CHECK(idx[i] >= 0 && idx[i] < K, "embedding: index[", i, "] = ", idx[i], " is outside the table's ", K,
              " rows");
  return dispatch_dev("embedding", table.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(table.value(), Shape{n, F});
    if (y.is_cuda()) {
      const Tensor di = index.to(y.device());
      if constexpr (std::is_same_v<T, float> && kWithCuda)
        embedding_forward_cuda(ptr<T>(y), ptr<T>(table.value()), di.i32(), n, F, y.stream());
    } else if constexpr (std::is_same_v<T, float>) {
      embedding_forward_cpu(ptr<T>(y), ptr<T>(table.value()), idx, n, F);
    } else {
      embedding_forward_ref<T>(ptr<T>(y), ptr<T>(table.value()), idx, n, F);
    }
    return record("embedding", y, {table}, [table = GradRef(table), index, n, K, F](const Tensor& dy) {
      Tensor dt = empty_like(dy, table.shape());
      if (dy.is_cuda()) {
        Tensor p = Tensor::empty(Shape{K + 1}, DType::I64), uses = Tensor::empty(Shape{n}, DType::I64),
               chunk_ptr = Tensor::empty(Shape{K + 1}, DType::I64);
        const int64_t chunks = embedding_inverse(index.i32(), n, K, p.i64(), uses.i64(), chunk_ptr.i64());
        const std::vector<Tensor> d = Tensor::to_packed({p, uses, chunk_ptr}, dy.device());  // one transfer
        const Tensor ws = empty_like(dy, Shape{chunks * F});  // the chunks' sums
        if constexpr (std::is_same_v<T, float> && kWithCuda)
          embedding_backward_cuda(ptr<T>(dt), ptr<T>(dy), d[0].i64(), d[1].i64(), d[2].i64(), chunks, K, F, ptr<T>(ws),
                                  dy.stream());
      } else if constexpr (std::is_same_v<T, float>) {
        embedding_backward_cpu(ptr<T>(dt), ptr<T>(dy), index.i32(), n, K, F);
      } else {
        embedding_backward_ref<T>(ptr<T>(dt), ptr<T>(dy), index.i32(), n, K, F);
      }
      accumulate(table, dt);
    });
  });
}

}  // namespace gnn::ag
