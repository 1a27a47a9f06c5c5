// The differentiable ops. Each lives in its own file (autograd/op_<name>.cpp): argument checks, the
// kernel call, and the backward right below it. Values are f32 (the fast _cpu kernels) or f64 (the
// _ref templates, which gradient checks use); every op also runs on CUDA f32 tensors (the _cuda kernels
// and cuBLAS on the device's stream), all its tensor operands and the graph on one device, index arrays
// (graph_ptr, gather indices, masks) on the host. Graph ops take the Graph whose CSR rows are destination nodes
// (runtime/graph.h) and per-edge values in CSR order.
#pragma once
#include <vector>

#include "autograd/var.h"
#include "kernels/activation.h"
#include "kernels/spmm.h"
#include "runtime/graph.h"
#include "runtime/rng.h"

namespace gnn::ag {

// ---- arithmetic (op_arith.cpp) --------------------------------------------------------------------
Var add(const Var& a, const Var& b);  // same shapes
Var sub(const Var& a, const Var& b);
Var mul(const Var& a, const Var& b);  // elementwise
Var scale(const Var& x, double s);  // s x
Var scale_by(const Var& x, const Var& s);  // s x, s one element (GIN's learnable 1 + eps)
Var add_bias(const Var& x, const Var& b);  // x [R, F] + b [F]
Var sum(const Var& x);  // one element
Var mean(const Var& x);  // one element

// ---- matmul (op_matmul.cpp): op(a) op(b), 2-d ---------------------------------------------------------
Var matmul(const Var& a, const Var& b, bool trans_a = false, bool trans_b = false);
// a w + bias (bias [N] on every row): matmul then add_bias in one op, the same bits, one pass over y.
Var matmul_bias(const Var& a, const Var& w, const Var& bias);
// [a | b] w (+ bias, which may be undefined): concat_cols, matmul and add_bias in one op, the same bits on the
// host, the concatenation never built (a layer over [aggregate | root]). With `addend` ([rows, w's columns]),
// [a | b] w + bias + addend: then add's bits too (a NaN's payload aside), the sum formed in the product's
// store where gemm_adds_in_store says so (a layer's residual, GELU(norm(SAGE(x) + x)), then reaches the norm
// as one input); when the addend is b itself (the root) and b has no gradient yet, b's gradient
// dy w_b^T + dy comes out of one product.
Var matmul_cat(const Var& a, const Var& b, const Var& w, const Var& bias = Var(), const Var& addend = Var());

// ---- activation (op_activation.cpp) ------------------------------------------------------------------
Var activation(const Var& x, Act act, double slope = 0.01);
// act(x + b), x [R, F], b [F]: a dense layer's epilogue in one pass (one kernel forward; backward dx and
// db from one pass). Equal to activation(add_bias(x, b), act) without keeping x + b; Act::kNone is add_bias.
Var bias_act(const Var& x, const Var& b, Act act, double slope = 0.01);
// x * sigmoid(z + b) (x, z [R, F]; b [F] or undefined) in one pass each way: mul(x, bias_act(z, b, sigmoid)),
// the squeeze-and-excitation gate, with its bits.
Var gate(const Var& x, const Var& z, const Var& b);
// The whole squeeze-and-excitation block, x * sigmoid(relu(x w1 + b1) w2 + b2), x [R, F], w1 [F, H], w2 [H, F],
// b1 [H] and b2 [F] (either undefined: no bias), as one op on the host (kernels/squeeze_excite.h: x and dy
// read once, [R, H] kept, the [R, F] intermediates never written; its products and weight sums f32 FMA
// chains; under bf16 products, bf16 on AMX tiles (squeeze_excite_amx: F a multiple of 32) or on VDPBF16PS
// where the bf16 GEMM runs there (squeeze_excite_dpbf16)) where squeeze_excite_vectorised(F, H), and in f64
// (the reference); elsewhere, and on a GPU, the composed ops (matmul, bias_act, matmul, gate), the products
// as gemm_cpu or cuBLAS runs them.
Var squeeze_excite(const Var& x, const Var& w1, const Var& b1, const Var& w2, const Var& b2);
// The same block as those composed ops, on any device and dtype: what squeeze_excite runs where its kernel
// does not apply, and the yardstick its tests and bench case measure it against.
Var squeeze_excite_composed(const Var& x, const Var& w1, const Var& b1, const Var& w2, const Var& b2);
inline Var relu(const Var& x) { return activation(x, Act::kRelu); }
inline Var elu(const Var& x) { return activation(x, Act::kElu); }
inline Var gelu(const Var& x) { return activation(x, Act::kGelu); }

// ---- dropout (op_dropout.cpp): zero with probability p, scale the rest by 1 / (1 - p) ----------------
Var dropout(const Var& x, double p, Rng& rng, bool training);
// The same with one mask for the `configs` configs of node-major rows x [R, C*F]: the mask dropout draws over
// [R, F] for the same draw of rng, repeated for each config (the 6th place's masks), never built.
Var dropout_configs(const Var& x, double p, Rng& rng, bool training, int64_t configs);

// ---- columns (op_columns.cpp) -----------------------------------------------------------------------
Var concat_cols(const std::vector<Var>& xs);  // [R, F1 + F2 + ...]
Var concat_rows(const std::vector<Var>& xs);  // [R1 + R2 + ..., F]
Var slice_cols(const Var& x, int64_t begin, int64_t end);  // columns [begin, end)
Var slice_rows(const Var& x, int64_t begin, int64_t end);  // rows [begin, end)
Var head_mean(const Var& x, int64_t heads);  // [R, H*F] -> [R, F], mean over heads
Var gather_rows(const Var& x, const Tensor& index);  // y[i] = x[index[i]]; index i32, any order
Var head_dot(const Var& x, const Var& a);  // x [R, H*D], a [H, D] -> y[r, h] = <x[r, h*D:], a[h]>

// ---- devices (op_copy.cpp) -----------------------------------------------------------------------------
Var to_device(const Var& x, Device device);  // x itself when it is there; dx is copied back to x's device

// ---- config-batched layout (op_configs.cpp): [N, C*F] node-major, see the file's comment ------------
Var reshape(const Var& x, int64_t rows, int64_t cols);  // a view; [N, C*F] <-> [N*C, F]
// x [N, A], c [N, C*B] -> [N, C*(A+B)]; with base ([N, C*(A+B)]) the join + base in one pass, add's bits (a
// layer's config-independent part added to its per-config part without the join stored first)
Var join_configs(const Var& x, const Var& c, int64_t configs, const Var& base = Var());
Var keep_grad_rows(const Var& x, const Tensor& keep);  // identity; gradient only where keep (u8 [R])
// Dropout fused into an op's last pass: probability p in [0, 1) (0: none), `seed` one draw of the
// caller's Rng, which is what dropout(y, p, rng) draws (dropout_configs with configs_shared).
struct FusedDropout {
  double p = 0;
  uint64_t seed = 0;
  bool configs_shared = false;
};
// x [R, C*D] (node-major), beta [1] -> [R, C*2D]: per (r, c) act([x | x * softmax over the C configs
// of (beta x)] + residual), one pass forward and one backward (kernels/config_attention.h); residual
// [R, C*2D] optional. Equal to activation(add(concat, residual), act) without keeping the sum, and with
// `dropout` to dropout(that) (or dropout_configs) drawn from the same seed: the same bits.
Var config_attention(const Var& x, const Var& beta, int64_t configs, const Var& residual = Var(), Act act = Act::kNone,
                     FusedDropout dropout = {});
// config_attention(squeeze_excite(x's rows), beta, configs, residual, act, dropout) for x [N, C*F] (its
// [N*C, F] rows), as one op on the host where squeeze_excite_attention_fused(C, F, H)
// (kernels/squeeze_excite.h: neither the SE's output nor the attention's weights written, the backward
// recomputing both; the two ops' bits); elsewhere the two ops.
Var squeeze_excite_attention(const Var& x, const Var& w1, const Var& b1, const Var& w2, const Var& b2,
                             const Var& beta, int64_t configs, const Var& residual = Var(), Act act = Act::kNone,
                             FusedDropout dropout = {});

// ---- graph aggregation (op_spmm.cpp) ------------------------------------------------------------------
// y = reduce over each node's in-edges of w[p] * x[src(p)]. edge_weight: undefined (all 1), [E], or
// [E, H] with x [N, H*F] (one weight per head, as GAT's attention).
Var spmm(const Graph& g, const Var& x, Reduce op, const Var& edge_weight = Var());
// plus + spmm(g, x, op) in one op, plus [N, W] (GIN's x + the neighbours' sum): the aggregate's rows are
// added as they are formed, with add's bits, so the sum is never written and read back.
Var spmm_plus(const Graph& g, const Var& x, Reduce op, const Var& plus);

// ---- GAT (op_gat_scores.cpp, op_segment_softmax.cpp) ---------------------------------------------------
// s[p, h] = leaky_relu(a_src[src(p), h] + a_dst[v, h]); a_src, a_dst [N, H]; s [E, H] in CSR order.
Var gat_scores(const Graph& g, const Var& a_src, const Var& a_dst, double slope);
// Softmax over each node's in-edges, per column: scores [E, H] in CSR order.
Var segment_softmax(const Graph& g, const Var& scores);

// ---- row-wise (op_rowwise.cpp) -------------------------------------------------------------------------
Var softmax(const Var& x);
Var log_softmax(const Var& x);
Var l2_normalize(const Var& x, double eps = 1e-12);

// ---- norms and embeddings (op_layer_norm.cpp, op_instance_norm.cpp, op_embedding.cpp) ---------------
Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps = 1e-5);  // gamma, beta may be undefined
// Per graph and channel; graph_ptr i64 [G+1] over the rows of x. act(instance_norm(x + residual)) in one pass
// each way when residual (x's shape) or act is given, without keeping the sum or the norm's output. With
// `dropout`, dropout(that) in the same passes, the bits of ag::dropout drawn with its seed, or with
// dropout.configs_shared of dropout_configs over `configs` configs side by side in x's columns.
Var instance_norm(const Var& x, const Var& gamma, const Var& beta, const Tensor& graph_ptr, double eps = 1e-5,
                  const Var& residual = Var(), Act act = Act::kNone, FusedDropout dropout = {}, int64_t configs = 1);
Var embedding(const Var& table, const Tensor& index);  // index i32 in [0, rows of table)
// torch.nn.Embedding(max_norm=...)'s renormalisation, done before its lookup: every row of `table` that
// `index` looks up whose l2 norm exceeds max_norm is scaled in place to max_norm / (norm + 1e-7) of
// itself (kernels/embedding.h embedding_renorm_ref). Not recorded: torch renorms under no_grad, so the
// gradient reaches the renormalised rows as a plain lookup's does.
void embedding_renorm_(const Var& table, const Tensor& index, double max_norm);

// ---- standardisation (op_standardize.cpp) --------------------------------------------------------------
// y [R, F] = (x - mean) / (std + eps) per column, mean and std [F] trainable (kernels/standardize.h).
Var standardize(const Var& x, const Var& mean, const Var& std, double eps);

// ---- readout (op_pool.cpp): per graph of a disjoint union ---------------------------------------------
Var pool(const Var& x, const Tensor& graph_ptr, Reduce op);
// log sum exp over each graph's rows, per column (kernels/pooling.h): a sum of per-node costs in log space.
Var pool_logsumexp(const Var& x, const Tensor& graph_ptr);
// pool(x, mean) + pool(x, max) in one op (one pass over x each way): the bits of the two pools and add, the
// mean's backward first (kernels/pooling.h). [G, F].
Var pool_mean_max(const Var& x, const Tensor& graph_ptr);

// ---- fused SAGE (op_sage.cpp): act([mean_{j->i} x_j | x_i] W + b), W [2F, O] ----------------------------
Var sage_fused(const Graph& g, const Var& x, const Var& W, const Var& b, Act act, double slope = 0.01);
// The mean after a narrowing layer's product (kernels/sage.h, sage_combine): q [N, C*2O], each config's 2O
// values [x W_agg | x W_root] of its row; y [N, C*O] = mean over g's in-edges of the first halves + the row's
// own second half + b (b [O] or undefined). [mean x | x] W + b with the product taken first.
Var sage_combine(const Graph& g, const Var& q, int64_t configs, const Var& b = Var());

// ---- self-attention over the nodes of each graph (op_attention.cpp) ----------------------------------
// q, k, v [N, H*D]; graph_ptr i64 [G+1]. Full: softmax(q k^T / sqrt(D)) v within each graph and head.
// Linear: phi(q) (phi(k)^T v) / (phi(q) phi(k)^T 1) with phi = elu + 1, linear in the graph's size.
// bias (full only; a constant): added to every head's scores before the softmax, each graph's [n, n]
// block in turn, flat [sum n_g^2] of q's dtype (on the host or q's device).
Var graph_attention(const Var& q, const Var& k, const Var& v, const Tensor& graph_ptr, int64_t heads, bool linear,
                    const Tensor& bias = Tensor());

}  // namespace gnn::ag
