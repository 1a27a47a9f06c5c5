// The op cases (bench/op_cases.h): one entry per autograd op and variant, each building its inputs at an
// OpSize and applying its op. Rows are node-major [N, C*F] where the recipes run the op that way.
#include "bench/op_cases.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/ops.h"
#include "runtime/random_graph.h"
#include "runtime/rng.h"

namespace gnn::cli {

namespace {

using ag::Var;
using Vars = std::vector<Var>;

// f64 [rows, cols] uniform in [lo, hi], from the seed.
Tensor values(int64_t rows, int64_t cols, uint64_t seed, double lo = -1, double hi = 1) {
  Rng rng(seed * 0x9E3779B97F4A7C15ull + 7);
  Tensor t = Tensor::empty({rows, cols}, DType::F64);
  for (int64_t i = 0; i < t.numel(); ++i) t.f64()[i] = lo + (hi - lo) * rng.uniform();
  return t;
}
Tensor row(int64_t cols, uint64_t seed) { return values(1, cols, seed).reshape({cols}); }

// The per-graph row ranges of N rows in graphs of S (the last one shorter): i64 [G+1].
Tensor graph_ptr(int64_t N, int64_t S) {
  std::vector<int64_t> p;
  for (int64_t r = 0; r < N; r += std::max<int64_t>(1, S)) p.push_back(r);
  p.push_back(N);
  return Tensor::from_vector(p);
}

int64_t width(const OpSize& s) { return s.features * s.configs; }  // a node-major row
int64_t rows(const OpSize& s) { return s.nodes * s.configs; }  // one row per (node, config)
Graph graph(const OpSize& s) { return tpugraphs_like_graph(s.nodes, s.edges, s.seed); }

// Inputs of a row-wise op: x [N*C, F] (and more [N*C, F] or [F] operands after it).
OpInputs rows_of(const OpSize& s, int n_full, int n_row = 0) {
  OpInputs in;
  for (int i = 0; i < n_full; ++i) in.vars.push_back(values(rows(s), s.features, s.seed + uint64_t(i)));
  for (int i = 0; i < n_row; ++i) in.vars.push_back(row(s.features, s.seed + 10 + uint64_t(i)));
  return in;
}
// Inputs of a graph op on node-major x [N, C*F].
OpInputs on_graph(const OpSize& s) {
  OpInputs in;
  in.graph = graph(s);
  in.vars.push_back(values(s.nodes, width(s), s.seed));
  return in;
}
// Inputs of a per-graph op on node-major x [N, C*F] with graph_ptr.
OpInputs per_graph(const OpSize& s, int n_full = 1) {
  OpInputs in;
  for (int i = 0; i < n_full; ++i) in.vars.push_back(values(s.nodes, width(s), s.seed + uint64_t(i)));
  in.index.push_back(graph_ptr(s.nodes, s.graph_nodes));
  return in;
}
OpInputs matmul_inputs(const OpSize& s, bool ta, bool tb) {
  const int64_t M = rows(s), K = s.features, N = s.features + 3;
  OpInputs in;
  in.vars.push_back(ta ? values(K, M, s.seed) : values(M, K, s.seed));
  in.vars.push_back(tb ? values(N, K, s.seed + 1) : values(K, N, s.seed + 1));
  return in;
}

// The squeeze-and-excitation block's: x [N*C, F], w1 [F, H], b1 [H], w2 [H, F], b2 [F], H = F / 8 (the 1st
// place's ChannelAttention squeezes 128 channels to 16).
OpInputs squeeze_excite_inputs(const OpSize& s) {
  const int64_t F = s.features, H = std::max<int64_t>(1, F / 8);
  OpInputs in;
  in.vars = {values(rows(s), F, s.seed), values(F, H, s.seed + 1), row(H, s.seed + 2), values(H, F, s.seed + 3),
             row(F, s.seed + 4)};
  return in;
}

// squeeze_excite_inputs' weights for x [N, C*F] (node-major, C configs), then beta [1] and the residual
// [N, C*2F] of the 1st place's block.
OpInputs squeeze_excite_attention_inputs(const OpSize& s) {
  OpInputs in = squeeze_excite_inputs(s);
  in.vars[0] = values(s.nodes, width(s), s.seed);
  in.vars.push_back(values(1, 1, s.seed + 5, 0.5, 1.5).reshape({1}));
  in.vars.push_back(values(s.nodes, 2 * width(s), s.seed + 6));
  in.configs = s.configs;
  return in;
}

constexpr int64_t kHeads = 2;

// q, k, v [N, H*F], H heads of F, attending within each graph.
OpInputs attention_inputs(const OpSize& s) {
  OpInputs in = per_graph(s, 0);
  for (uint64_t i = 0; i < 3; ++i) in.vars.push_back(values(s.nodes, kHeads * s.features, s.seed + i));
  return in;
}

#define GNN_ACT_CASE(NAME, ACT)                                                                     \
  OpCase {                                                                                          \
    "activation-" NAME, [](const OpSize& s) { return rows_of(s, 1); },                              \
        [](const Vars& x, const Graph&, const OpInputs&) { return ag::activation(x[0], ACT, 0.2); } \
  }

// (built on first use, inside op_cases(): gnn_bench lists the cases from static initialisers of its own)
std::vector<OpCase> all_op_cases() {
  return {
      // ---- arithmetic, products ----
      {"add", [](const OpSize& s) { return rows_of(s, 2); },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::add(x[0], x[1]); }},
      {"sub", [](const OpSize& s) { return rows_of(s, 2); },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::sub(x[0], x[1]); }},
      {"scale", [](const OpSize& s) { return rows_of(s, 1); },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::scale(x[0], -1.5); }},
      {"sum", [](const OpSize& s) { return rows_of(s, 1); },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::sum(x[0]); }},
      {"mean", [](const OpSize& s) { return rows_of(s, 1); },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::mean(x[0]); }},
      {"mul", [](const OpSize& s) { return rows_of(s, 2); },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::mul(x[0], x[1]); }},
      {"add-bias", [](const OpSize& s) { return rows_of(s, 1, 1); },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::add_bias(x[0], x[1]); }},
      {"scale-by",
       [](const OpSize& s) {
         OpInputs in = rows_of(s, 1);
         in.vars.push_back(values(1, 1, s.seed + 5).reshape({1}));
         return in;
       },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::scale_by(x[0], x[1]); }},
      {"matmul", [](const OpSize& s) { return matmul_inputs(s, false, false); },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::matmul(x[0], x[1]); }},
      {"matmul-ta", [](const OpSize& s) { return matmul_inputs(s, true, false); },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::matmul(x[0], x[1], true, false); }},
      {"matmul-tb", [](const OpSize& s) { return matmul_inputs(s, false, true); },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::matmul(x[0], x[1], false, true); }},
      {"matmul-bias",
       [](const OpSize& s) {
         OpInputs in = matmul_inputs(s, false, false);
         in.vars.push_back(row(s.features + 3, s.seed + 2));
         return in;
       },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::matmul_bias(x[0], x[1], x[2]); }},
      {"matmul-cat",  // [a | b] w + bias, a [R, F], b [R, F + 1]
       [](const OpSize& s) {
         OpInputs in;
         in.vars = {values(rows(s), s.features, s.seed), values(rows(s), s.features + 1, s.seed + 1),
                    values(2 * s.features + 1, s.features + 2, s.seed + 2), row(s.features + 2, s.seed + 3)};
         return in;
       },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::matmul_cat(x[0], x[1], x[2], x[3]); }},
      {"matmul-cat-residual",  // [a | b] w + bias + b, a [R, F], b [R, F + 1] (a layer's residual on its root)
       [](const OpSize& s) {
         OpInputs in;
         in.vars = {values(rows(s), s.features, s.seed), values(rows(s), s.features + 1, s.seed + 1),
                    values(2 * s.features + 1, s.features + 1, s.seed + 2), row(s.features + 1, s.seed + 3)};
         return in;
       },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::matmul_cat(x[0], x[1], x[2], x[3], x[1]); }},
      // ---- activations and the dense layer's epilogues ----
      GNN_ACT_CASE("relu", Act::kRelu),
      GNN_ACT_CASE("leaky-relu", Act::kLeakyRelu),
      GNN_ACT_CASE("elu", Act::kElu),
      GNN_ACT_CASE("gelu", Act::kGelu),
      GNN_ACT_CASE("sigmoid", Act::kSigmoid),
      GNN_ACT_CASE("tanh", Act::kTanh),
      {"bias-act-gelu", [](const OpSize& s) { return rows_of(s, 1, 1); },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::bias_act(x[0], x[1], Act::kGelu); }},
      {"gate", [](const OpSize& s) { return rows_of(s, 2, 1); },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::gate(x[0], x[1], x[2]); }},
      {"squeeze-excite",  // the whole SE block, x [R, F] squeezed to F / 8 (the 1st place's ChannelAttention)
       [](const OpSize& s) { return squeeze_excite_inputs(s); },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::squeeze_excite(x[0], x[1], x[2], x[3], x[4]); }},
      {"squeeze-excite-composed",  // the same block as the four ops it replaces (matmul, bias_act, matmul, gate)
       [](const OpSize& s) { return squeeze_excite_inputs(s); },
       [](const Vars& x, const Graph&, const OpInputs&) {
         return ag::squeeze_excite_composed(x[0], x[1], x[2], x[3], x[4]);
       }},
      {"dropout", [](const OpSize& s) { return rows_of(s, 1); },
       [](const Vars& x, const Graph&, const OpInputs&) {
         Rng rng(17);  // the same mask at every call
         return ag::dropout(x[0], 0.3, rng, true);
       }},
      {"dropout-configs",  // one mask for the C configs of a row
       [](const OpSize& s) {
         OpInputs in;
         in.vars.push_back(values(s.nodes, width(s), s.seed));
         in.configs = s.configs;
         return in;
       },
       [](const Vars& x, const Graph&, const OpInputs& in) {
         Rng rng(17);
         return ag::dropout_configs(x[0], 0.3, rng, true, in.configs);
       }},
      // ---- columns and rows ----
      {"concat-cols", [](const OpSize& s) { return rows_of(s, 2); },
       [](const Vars& x, const Graph&, const OpInputs&) {
         return ag::concat_cols({x[0], x[1]});
       }},
      {"concat-rows", [](const OpSize& s) { return rows_of(s, 2); },
       [](const Vars& x, const Graph&, const OpInputs&) {
         return ag::concat_rows({x[0], x[1]});
       }},
      {"slice-cols",
       [](const OpSize& s) {
         GNN_CHECK(s.features >= 3, "op:slice-cols drops the first and last column: it needs --features 3 or more");
         return rows_of(s, 1);
       },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::slice_cols(x[0], 1, x[0].size(1) - 1); }},
      {"slice-rows",
       [](const OpSize& s) {
         GNN_CHECK(rows(s) >= 6, "op:slice-rows drops 2 rows before and 3 after: it needs --nodes x --configs >= 6");
         return rows_of(s, 1);
       },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::slice_rows(x[0], 2, x[0].size(0) - 3); }},
      {"gather-rows",  // every third row, reversed, some twice
       [](const OpSize& s) {
         OpInputs in = rows_of(s, 1);
         std::vector<int32_t> idx;
         for (int64_t r = rows(s) - 1; r >= 0; r -= 3) idx.push_back(int32_t(r)), idx.push_back(int32_t(r / 2));
         in.index.push_back(Tensor::from_vector(idx));
         return in;
       },
       [](const Vars& x, const Graph&, const OpInputs& in) { return ag::gather_rows(x[0], in.index[0]); }},
      {"head-mean",
       [](const OpSize& s) {
         OpInputs in;
         in.vars.push_back(values(rows(s), kHeads * s.features, s.seed));
         return in;
       },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::head_mean(x[0], kHeads); }},
      {"head-dot",
       [](const OpSize& s) {
         OpInputs in;
         in.vars = {values(rows(s), kHeads * s.features, s.seed), values(kHeads, s.features, s.seed + 1)};
         return in;
       },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::head_dot(x[0], x[1]); }},
      {"join-configs",  // x [N, F] beside each of the C configs' c [N, C*3]
       [](const OpSize& s) {
         OpInputs in;
         in.vars = {values(s.nodes, s.features, s.seed), values(s.nodes, s.configs * 3, s.seed + 1)};
         in.configs = s.configs;
         return in;
       },
       [](const Vars& x, const Graph&, const OpInputs& in) { return ag::join_configs(x[0], x[1], in.configs); }},
      {"join-configs-base",  // the same + base [N, C*(F+3)] in one pass (an early-join layer's two parts)
       [](const OpSize& s) {
         OpInputs in;
         in.vars = {values(s.nodes, s.features, s.seed), values(s.nodes, s.configs * 3, s.seed + 1),
                    values(s.nodes, s.configs * (s.features + 3), s.seed + 2)};
         in.configs = s.configs;
         return in;
       },
       [](const Vars& x, const Graph&, const OpInputs& in) { return ag::join_configs(x[0], x[1], in.configs, x[2]); }},
      // ---- message passing ----
      {"spmm-sum", [](const OpSize& s) { return on_graph(s); },
       [](const Vars& x, const Graph& g, const OpInputs&) { return ag::spmm(g, x[0], Reduce::kSum); }},
      {"spmm-mean", [](const OpSize& s) { return on_graph(s); },
       [](const Vars& x, const Graph& g, const OpInputs&) { return ag::spmm(g, x[0], Reduce::kMean); }},
      {"spmm-max", [](const OpSize& s) { return on_graph(s); },
       [](const Vars& x, const Graph& g, const OpInputs&) { return ag::spmm(g, x[0], Reduce::kMax); }},
      {"spmm-plus",  // x + the neighbours' sum (GIN's self term), one op
       [](const OpSize& s) { return on_graph(s); },
       [](const Vars& x, const Graph& g, const OpInputs&) { return ag::spmm_plus(g, x[0], Reduce::kSum, x[0]); }},
      {"spmm-plus-max",  // another Var plus the neighbours' max
       [](const OpSize& s) {
         OpInputs in = on_graph(s);
         in.vars.push_back(values(s.nodes, width(s), s.seed + 1));
         return in;
       },
       [](const Vars& x, const Graph& g, const OpInputs&) { return ag::spmm_plus(g, x[0], Reduce::kMax, x[1]); }},
      {"spmm-weighted",  // a weight per edge [E]
       [](const OpSize& s) {
         OpInputs in = on_graph(s);
         in.vars.push_back(values(in.graph.num_edges, 1, s.seed + 1).reshape({in.graph.num_edges}));
         return in;
       },
       [](const Vars& x, const Graph& g, const OpInputs&) { return ag::spmm(g, x[0], Reduce::kSum, x[1]); }},
      {"spmm-heads",  // a weight per edge and head [E, H] on x [N, H*F] (GAT's aggregation)
       [](const OpSize& s) {
         OpInputs in;
         in.graph = graph(s);
         in.vars = {values(s.nodes, kHeads * s.features, s.seed), values(in.graph.num_edges, kHeads, s.seed + 1)};
         return in;
       },
       [](const Vars& x, const Graph& g, const OpInputs&) { return ag::spmm(g, x[0], Reduce::kSum, x[1]); }},
      {"gat-scores",
       [](const OpSize& s) {
         OpInputs in;
         in.graph = graph(s);
         in.vars = {values(s.nodes, kHeads, s.seed), values(s.nodes, kHeads, s.seed + 1)};
         return in;
       },
       [](const Vars& x, const Graph& g, const OpInputs&) { return ag::gat_scores(g, x[0], x[1], 0.2); }},
      {"segment-softmax",
       [](const OpSize& s) {
         OpInputs in;
         in.graph = graph(s);
         in.vars.push_back(values(in.graph.num_edges, kHeads, s.seed, -2, 2));
         return in;
       },
       [](const Vars& x, const Graph& g, const OpInputs&) { return ag::segment_softmax(g, x[0]); }},
      {"sage-fused",  // gelu([mean_j x_j | x_i] W + b), one config per row
       [](const OpSize& s) {
         OpInputs in;
         in.graph = graph(s);
         in.vars = {values(s.nodes, s.features, s.seed), values(2 * s.features, s.features + 1, s.seed + 1),
                    row(s.features + 1, s.seed + 2)};
         return in;
       },
       [](const Vars& x, const Graph& g, const OpInputs&) { return ag::sage_fused(g, x[0], x[1], x[2], Act::kGelu); }},
      {"sage-combine",  // a narrowing SAGE layer's mean after its product: q [N, C*2F], b [F] -> [N, C*F]
       [](const OpSize& s) {
         OpInputs in;
         in.graph = graph(s);
         in.vars = {values(s.nodes, 2 * width(s), s.seed), row(s.features, s.seed + 1)};
         return in;
       },
       [](const Vars& x, const Graph& g, const OpInputs&) {
         return ag::sage_combine(g, x[0], x[0].size(1) / (2 * x[1].size(0)), x[1]);
       }},
      // ---- row-wise ----
      {"softmax", [](const OpSize& s) { return rows_of(s, 1); },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::softmax(x[0]); }},
      {"log-softmax", [](const OpSize& s) { return rows_of(s, 1); },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::log_softmax(x[0]); }},
      {"l2-normalize", [](const OpSize& s) { return rows_of(s, 1); },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::l2_normalize(x[0]); }},
      {"layer-norm", [](const OpSize& s) { return rows_of(s, 1, 2); },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::layer_norm(x[0], x[1], x[2]); }},
      {"standardize",  // x, mean [F], std [F] in [0.5, 1.5)
       [](const OpSize& s) {
         OpInputs in = rows_of(s, 1, 2);
         Tensor& sd = in.vars[2];
         for (int64_t i = 0; i < sd.numel(); ++i) sd.f64()[i] = std::fabs(sd.f64()[i]) + 0.5;
         return in;
       },
       [](const Vars& x, const Graph&, const OpInputs&) { return ag::standardize(x[0], x[1], x[2], 1e-4); }},
      // ---- per graph ----
      {"instance-norm",  // with gamma and beta [C*F]
       [](const OpSize& s) {
         OpInputs in = per_graph(s);
         in.vars.push_back(row(width(s), s.seed + 3)), in.vars.push_back(row(width(s), s.seed + 4));
         return in;
       },
       [](const Vars& x, const Graph&, const OpInputs& in) {
         return ag::instance_norm(x[0], x[1], x[2], in.index[0]);
       }},
      {"instance-norm-residual-gelu", [](const OpSize& s) { return per_graph(s, 2); },
       [](const Vars& x, const Graph&, const OpInputs& in) {
         return ag::instance_norm(x[0], Var(), Var(), in.index[0], 1e-5, x[1], Act::kGelu);
       }},
      {"instance-norm-gelu-dropout",  // the 6th place's first layer: its dropout (p 0.2, one mask for a node's
                                      // configs) in the norm's passes
       [](const OpSize& s) {
         OpInputs in = per_graph(s);
         in.configs = s.configs;
         return in;
       },
       [](const Vars& x, const Graph&, const OpInputs& in) {
         return ag::instance_norm(x[0], Var(), Var(), in.index[0], 1e-5, Var(), Act::kGelu, {0.2, 97, true},
                                  in.configs);
       }},
      {"pool-sum", [](const OpSize& s) { return per_graph(s); },
       [](const Vars& x, const Graph&, const OpInputs& in) { return ag::pool(x[0], in.index[0], Reduce::kSum); }},
      {"pool-mean", [](const OpSize& s) { return per_graph(s); },
       [](const Vars& x, const Graph&, const OpInputs& in) { return ag::pool(x[0], in.index[0], Reduce::kMean); }},
      {"pool-max", [](const OpSize& s) { return per_graph(s); },
       [](const Vars& x, const Graph&, const OpInputs& in) { return ag::pool(x[0], in.index[0], Reduce::kMax); }},
      {"pool-mean-max", [](const OpSize& s) { return per_graph(s); },
       [](const Vars& x, const Graph&, const OpInputs& in) { return ag::pool_mean_max(x[0], in.index[0]); }},
      {"pool-logsumexp", [](const OpSize& s) { return per_graph(s); },
       [](const Vars& x, const Graph&, const OpInputs& in) { return ag::pool_logsumexp(x[0], in.index[0]); }},
      {"graph-attention", attention_inputs,
       [](const Vars& x, const Graph&, const OpInputs& in) {
         return ag::graph_attention(x[0], x[1], x[2], in.index[0], kHeads, false);
       }},
      {"graph-attention-linear", attention_inputs,
       [](const Vars& x, const Graph&, const OpInputs& in) {
         return ag::graph_attention(x[0], x[1], x[2], in.index[0], kHeads, true);
       }},
      // ---- across the configs of a row ----
      {"config-attention",  // x [N, C*F], beta [1]
       [](const OpSize& s) {
         OpInputs in;
         in.vars = {values(s.nodes, width(s), s.seed), values(1, 1, s.seed + 1, 0.5, 1.5).reshape({1})};
         in.configs = s.configs;
         return in;
       },
       [](const Vars& x, const Graph&, const OpInputs& in) { return ag::config_attention(x[0], x[1], in.configs); }},
      {"config-attention-residual-gelu",  // + residual [N, C*2F], then GELU
       [](const OpSize& s) {
         OpInputs in;
         in.vars = {values(s.nodes, width(s), s.seed), values(1, 1, s.seed + 1, 0.5, 1.5).reshape({1}),
                    values(s.nodes, 2 * width(s), s.seed + 2)};
         in.configs = s.configs;
         return in;
       },
       [](const Vars& x, const Graph&, const OpInputs& in) {
         return ag::config_attention(x[0], x[1], in.configs, x[2], Act::kGelu);
       }},
      // The 1st place's block, SE over x [N, C*F]'s rows, the attention, + res, GELU: fused where
      // squeeze_excite_attention_fused says (H = F / 8 must be 16: F = 128, the recipe's, on AVX-512; at other
      // F, as the op-case test's 5, the two ops), and as the two ops it fuses
      {"squeeze-excite-attention", [](const OpSize& s) { return squeeze_excite_attention_inputs(s); },
       [](const Vars& x, const Graph&, const OpInputs& in) {
         return ag::squeeze_excite_attention(x[0], x[1], x[2], x[3], x[4], x[5], in.configs, x[6], Act::kGelu);
       }},
      {"squeeze-excite-attention-composed",  // squeeze-excite, then config-attention
       [](const OpSize& s) { return squeeze_excite_attention_inputs(s); },
       [](const Vars& x, const Graph&, const OpInputs& in) {
         const int64_t N = x[0].size(0), C = in.configs, F = x[0].size(1) / C;
         const ag::Var se = ag::squeeze_excite(ag::reshape(x[0], N * C, F), x[1], x[2], x[3], x[4]);
         return ag::config_attention(ag::reshape(se, N, C * F), x[5], C, x[6], Act::kGelu);
       }},
      // ---- lookups ----
      {"embedding",  // a [V, F] table read at N ids (repeats included)
       [](const OpSize& s) {
         OpInputs in;
         const int64_t V = std::max<int64_t>(2, s.nodes / 4);
         in.vars.push_back(values(V, s.features, s.seed));
         std::vector<int32_t> ids;
         for (int64_t n = 0; n < s.nodes; ++n) ids.push_back(int32_t((n * 7 + 3) % V));
         in.index.push_back(Tensor::from_vector(ids));
         return in;
       },
       [](const Vars& x, const Graph&, const OpInputs& in) { return ag::embedding(x[0], in.index[0]); }},
  };
}

#undef GNN_ACT_CASE

}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = all_op_cases();
  return cases;
}

OpOperands op_operands(const OpInputs& in, DType dtype, Device device) {
  OpOperands o;
  for (const Tensor& t : in.vars) o.vars.push_back(ag::Var::param(t.astype(dtype).to(device)));
  o.graph = in.graph.num_nodes > 0 && !device.is_cpu() ? in.graph.to(device) : in.graph;
  return o;
}

}  // namespace gnn::cli
