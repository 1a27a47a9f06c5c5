// Row gather y[i] = table[index[i]] and its scatter-add backward (kernels/embedding.h), also used as
// gather_rows. The indices are checked here, at the op boundary, on the host; the kernels trust them.
// On a GPU the index is copied there for the forward, and the backward's ordered inverse of it and its
// chunk table (built on the host, where the index is) for the gradient: no atomics, the same bits as
// the CPU.
#include <cmath>
#include <string>
#include <vector>

#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "kernels/embedding.h"

namespace gnn::ag {
namespace {

// The index stays on the host, where the op checks it: the CUDA forward reads a device copy, the CUDA
// backward an ordered inverse of it built on the host (no atomics, the CPU's bits).
constexpr Kernel embedding_forward_k{
    "embedding_forward",
    [](auto* y, auto* table, const Tensor& index, int64_t n, int64_t F) {
      embedding_forward_ref(y, table, index.i32(), n, F);
    },
    [](float* y, const float* table, const Tensor& index, int64_t n, int64_t F) {
      embedding_forward_cpu(y, table, index.i32(), n, F);
    },
    [](const Tensor& on, float* y, const float* table, const Tensor& index, int64_t n, int64_t F) {
      const Tensor di = index.to(on.device());
      embedding_forward_cuda(y, table, di.i32(), n, F, on.stream());
    }};
constexpr Kernel embedding_backward_k{
    "embedding_backward", [](auto... a) { embedding_backward_ref(a...); },
    [](auto... a) { embedding_backward_cpu(a...); },
    [](const Tensor& on, float* dtable, const float* dy, const int32_t* index, int64_t n, int64_t K, int64_t F) {
      Tensor p = Tensor::empty(Shape{K + 1}, DType::I64), uses = Tensor::empty(Shape{n}, DType::I64),
             chunk_ptr = Tensor::empty(Shape{K + 1}, DType::I64);
      const int64_t chunks = embedding_inverse(index, n, K, p.i64(), uses.i64(), chunk_ptr.i64());
      const std::vector<Tensor> d = Tensor::to_packed({p, uses, chunk_ptr}, on.device());  // one transfer
      const Tensor ws = empty_like(on, Shape{chunks * F});  // the chunks' sums
      embedding_backward_cuda(dtable, dy, d[0].i64(), d[1].i64(), d[2].i64(), chunks, K, F, ws.f32(), on.stream());
    }};

// The rows stay listed on the host, where the index is; the CUDA version reads a device copy. The host
// version is one template for float and double.
constexpr auto embedding_renorm_host = [](auto* table, const Tensor& rows, int64_t U, int64_t F, double max_norm) {
  embedding_renorm_ref(table, rows.i32(), U, F, max_norm);
};
constexpr Kernel embedding_renorm_k{
    "embedding_renorm", embedding_renorm_host, embedding_renorm_host,
    [](const Tensor& on, float* table, const Tensor& rows, int64_t U, int64_t F, double max_norm) {
      const Tensor dr = rows.to(on.device());
      embedding_renorm_cuda(table, dr.i32(), U, F, max_norm, on.stream());
    }};

// The checks a lookup's table and index get, for `op`: the table 2-d, the index i32 [n] on the host
// (where it is checked), every entry one of the table's rows.
void check_lookup(const char* op, const Var& table, const Tensor& index) {
  check_arg_on(op, "table", table, 2, table.dtype(), table.device());
  check_tensor(index, (std::string(op) + " index").c_str(), DType::I32, 1);
  GNN_CHECK(!index.is_cuda(), op, ": the index must be on the host (it is checked there), got ", index.desc());
  const int64_t K = table.size(0), n = index.size(0);
  const int32_t* idx = index.i32();
  for (int64_t i = 0; i < n; ++i)
    GNN_CHECK(idx[i] >= 0 && idx[i] < K, op, ": index[", i, "] = ", idx[i], " is outside the table's ", K, " rows");
}

}  // namespace

void embedding_renorm_(const Var& table, const Tensor& index, double max_norm) {
  check_lookup("embedding_renorm_", table, index);
  GNN_CHECK(std::isfinite(max_norm) && max_norm > 0, "embedding_renorm_: max_norm must be positive and finite, got ",
            max_norm);
  const int64_t K = table.size(0), F = table.size(1), n = index.size(0);
  const int32_t* idx = index.i32();
  std::vector<char> used(static_cast<size_t>(K), 0);
  for (int64_t i = 0; i < n; ++i) used[size_t(idx[i])] = 1;
  std::vector<int32_t> rows;  // distinct, increasing, as torch sorts its indices first
  for (int64_t k = 0; k < K; ++k)
    if (used[size_t(k)]) rows.push_back(int32_t(k));
  if (rows.empty()) return;
  const Tensor r = Tensor::from_vector(rows);
  dispatch_dev("embedding_renorm_", table.value(), [&](auto t) {
    using T = decltype(t);
    run<T>(embedding_renorm_k, table.value(), ptr<T>(table.value()), r, int64_t(rows.size()), F, max_norm);
    return 0;
  });
}

Var embedding(const Var& table, const Tensor& index) {
  check_lookup("embedding", table, index);
  const int64_t K = table.size(0), F = table.size(1), n = index.size(0);
  return dispatch_dev("embedding", table.value(), [&](auto t) {
    using T = decltype(t);
    Tensor y = empty_like(table.value(), Shape{n, F});
    run<T>(embedding_forward_k, y, ptr<T>(y), ptr<T>(table.value()), index, n, F);
    return record("embedding", y, {table}, [table = GradRef(table), index, n, K, F](const Tensor& dy) {
      Tensor dt = empty_like(dy, table.shape());
      run<T>(embedding_backward_k, dy, ptr<T>(dt), ptr<T>(dy), index.i32(), n, K, F);
      accumulate(table, dt);
    });
  });
}

}  // namespace gnn::ag
