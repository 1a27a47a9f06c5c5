#include "apps/train/blocks.h"

#include <cmath>

#include "kernels/gemm.h"

namespace gnn::train {

Tensor layout_dim_categories(const Tensor& node_feat) {
  constexpr int64_t kShape = 21, kLayout = 134, kDims = kNodeLayoutDims;
  GNN_CHECK(node_feat.dim() == 2 && node_feat.size(1) >= kLayout + kDims && node_feat.dtype() == DType::F32,
            "layout_dim_categories: node_feat must be f32 [N, 140], got ", node_feat.desc());
  const int64_t N = node_feat.size(0), F = node_feat.size(1);
  Tensor out = Tensor::zeros({N, kDims}, DType::I32);
  for (int64_t n = 0; n < N; ++n) {
    const float* f = node_feat.f32() + n * F;
    int64_t rank = 0;
    while (rank < kDims && f[kShape + rank] > 0) ++rank;
    for (int64_t k = 0; k < rank; ++k) {
      const float v = f[kLayout + k];
      if (v == std::floor(v) && v >= 0 && v <= 5) out.i32()[n * kDims + k] = int32_t(v) + 1;
    }
  }
  return out;
}

const GraphFeature kNodeLayout{"node_layout", GraphFeature::Rows::kPerNode, false,
                               [](const TpuGraph& raw) { return layout_dim_categories(raw.node_feat); }};

ag::Var node_input(const nn::Embedding& opcode_embedding, const Batch& b, const nn::Standardize* norm) {
  const ag::Var x = norm ? norm->forward(ag::Var(b.x)) : ag::Var(b.x);
  return ag::concat_cols({opcode_embedding.forward(b.opcode), x});
}

namespace {
// The standardisation of `features` columns started from mean and std; null when there are none.
std::unique_ptr<nn::Standardize> trainable_norm(const char* what, const std::vector<double>& mean,
                                                const std::vector<double>& std, int64_t features) {
  if (mean.empty()) return nullptr;
  GNN_CHECK(int64_t(mean.size()) == features, what, ": ", mean.size(), " means for ", features, " features");
  return std::make_unique<nn::Standardize>(mean, std, 1e-4);
}
}  // namespace

std::unique_ptr<nn::Standardize> node_norm(const ModelDims& d) {
  return trainable_norm("node_norm", d.node_mean, d.node_std, d.node_features);
}

std::unique_ptr<nn::Standardize> config_norm(const ModelDims& d) {
  return trainable_norm("config_norm", d.config_mean, d.config_std, d.config_features);
}

void offer_trainable(std::vector<HParamSpec>& specs, const std::string& flag) {
  HParamSpec* s = find_spec(specs, flag);
  GNN_CHECK(s, "offer_trainable: no ", flag, " flag");
  s->choices += "|trainable";
  s->help +=
      " | trainable: (x - mean) / (std + 1e-4) inside the model, with a mean and std per column that it "
      "trains, started from every row of the training graphs (the 6th place's)";
}

ConfigSage::ConfigSage(int64_t in, int64_t out, Rng& rng, Act act, bool l2_normalize)
    : lin_(2 * in, out, rng), act_(act), l2_(l2_normalize) {
  add_child("lin", &lin_);
}

ResGcnLayer::ResGcnLayer(int64_t dim, Rng& rng, Act act, bool residual)
    : lin_(dim, dim, rng, false, nn::Init::kGlorot), act_(act), residual_(residual) {
  add_child("lin", &lin_);
  bias = add_param("bias", Tensor::zeros({dim}, DType::F32));
}

LinearNormAct::LinearNormAct(int64_t in, int64_t out, Rng& rng, Act act, bool bias)
    : lin_(in, out, rng, bias), act_(act) {
  add_child("lin", &lin_);
}

ag::Var LinearNormAct::forward(const ag::Var& x, int64_t C, const Tensor& ptr) const {
  return norm_act(node_major(lin_.forward(per_config(x, C)), C), ptr);
}

ag::Var LinearNormAct::forward_joined(const ag::Var& node, const ag::Var& config, int64_t C, const Tensor& ptr,
                                      ag::FusedDropout dropout) const {
  return norm_act(lin_.forward_joined(node, config, C), ptr, dropout, C);
}

ag::Var LinearNormAct::norm_act(const ag::Var& y, const Tensor& ptr, ag::FusedDropout dropout, int64_t C) const {
  if (act_ == Act::kLeakyRelu) {
    GNN_CHECK(dropout.p == 0, "LinearNormAct: leaky_relu runs after the norm's op, so a dropout (p ", dropout.p,
              ") cannot be fused into the norm; apply it after the layer");
    return ag::activation(ag::instance_norm(y, ag::Var(), ag::Var(), ptr), act_);
  }
  return ag::instance_norm(y, ag::Var(), ag::Var(), ptr, 1e-5, ag::Var(), act_, dropout, C);  // one op each way
}

ag::Var config_shared_dropout(const Batch& b, const ag::Var& x, int64_t C, double p, bool training, uint64_t salt) {
  if (!training || p == 0) return x;
  GNN_CHECK(x.size(1) % C == 0, "config_shared_dropout: ", x.size(1), " columns are not ", C, " configs");
  // The mask batch_dropout would draw over [N, F] for this salt, applied to each config's F columns of a
  // row without building it (ag::dropout_configs).
  Rng rng = batch_rng(b, salt);
  return ag::dropout_configs(x, p, rng, true, C);
}

SlateHead::SlateHead(int64_t in, int64_t dim, Rng& rng)
    : a_(in, dim, rng, Act::kGelu), b_(dim, dim / 2, rng, Act::kGelu), out_(dim / 2, 1, rng) {
  add_child("late.0", &a_);
  add_child("late.1", &b_);
  add_child("predict", &out_);
}

ag::Var SlateHead::forward(const Batch& b, const ag::Var& pooled) const {
  return out_.forward(b_.forward(a_.forward(pooled, 1, b.group_ptr), 1, b.group_ptr));
}

ConsumerGat::ConsumerGat(int64_t in, int64_t heads, int64_t dim, Rng& rng) {
  weight_ = add_param("weight", nn::init_tensor(Shape{in, heads * dim}, nn::Init::kGlorot, in, heads * dim, rng));
  att_src_ = add_param("att_src", nn::init_tensor(Shape{heads, dim}, nn::Init::kGlorot, heads, dim, rng));
  att_dst_ = add_param("att_dst", nn::init_tensor(Shape{heads, dim}, nn::Init::kGlorot, heads, dim, rng));
  bias_ = add_param("bias", nn::init_tensor(Shape{heads * dim}, nn::Init::kZeros, in, heads * dim, rng));
}

ag::Var ConsumerGat::forward(const Batch& b, const ag::Var& x, int64_t C) const {
  const Graph& g = b.consumers_looped();
  const ag::Var z = ag::matmul(per_config(x, C), weight_);  // [N*C, H*D]
  // [N*C, H] -> [N, C*H]: config c's head h is head c*H + h of the graph ops
  const ag::Var a_src = node_major(ag::head_dot(z, att_src_), C), a_dst = node_major(ag::head_dot(z, att_dst_), C);
  const ag::Var alpha = ag::segment_softmax(g, ag::gat_scores(g, a_src, a_dst, 0.2));  // [E', C*H]
  const ag::Var y = ag::spmm(g, node_major(z, C), Reduce::kSum, alpha);  // [N, C*H*D]
  return node_major(ag::add_bias(per_config(y, C), bias_), C);
}

ConsumerSage::ConsumerSage(int64_t in, int64_t out, Rng& rng, bool product_first)
    : lin_(2 * in, out, rng), product_first_(product_first) {
  add_child("lin", &lin_);
}

ag::Var ConsumerSage::forward_product_first(const PlainPath& p, const ag::Var& x) const {
  const int64_t F = lin_.in_features() / 2, C = p.configs();
  // the weight's [W_agg; W_root] rows side by side, [F, 2 out], so one product gives both halves
  const ag::Var w = ag::concat_cols({ag::slice_rows(lin_.weight, 0, F), ag::slice_rows(lin_.weight, F, 2 * F)});
  const ag::Var q = ag::matmul(per_config(x, C), w);
  return ag::sage_combine(p.b.consumers(), node_major(q, C), C, lin_.bias);
}

ag::Var ConsumerSage::forward_residual_norm(const PlainPath& p, const ag::Var& x, Act act) const {
  const int64_t C = p.configs(), rows = x.size(0) * C;
  const bool in_product = !takes_product_first() && !x.value().is_cuda() && x.size(1) == C * lin_.out_features() &&
                          gemm_adds_in_store(rows, lin_.out_features(), lin_.in_features());
  if (!in_product) return node_norm_act(p.b, forward(p, x), x, act);
  // forward()'s aggregate-first form, with the residual (the root itself) as the product's addend
  const ag::Var agg = p.aggregate_mean(p.b.consumers(), p.b.consumers_mean(), x);
  const ag::Var root = per_config(x, C);
  const ag::Var s = node_major(ag::matmul_cat(per_config(agg, C), root, lin_.weight, lin_.bias, root), C);
  return node_norm_act(p.b, s, ag::Var(), act);
}

ChannelAttention::ChannelAttention(int64_t dim, int64_t reduction, Rng& rng)
    : squeeze_(dim, std::max<int64_t>(1, dim / reduction), rng),
      excite_(std::max<int64_t>(1, dim / reduction), dim, rng) {
  add_child("squeeze", &squeeze_);
  add_child("excite", &excite_);
}

ag::Var ChannelAttention::forward(const ag::Var& x, int64_t C) const {
  // rows * sigmoid(excite(squeeze(rows))): one op on the host where its vector kernel applies (its products
  // f32, or bf16 on AMX tiles or VDPBF16PS), else the composed products, bias_act and gate (ag::squeeze_excite
  // decides)
  return node_major(
      ag::squeeze_excite(per_config(x, C), squeeze_.weight, squeeze_.bias, excite_.weight, excite_.bias), C);
}

ag::Var ChannelAttention::forward_cross(const ag::Var& x, int64_t C, const CrossConfigAttention& cross,
                                        const ag::Var& residual, Act act, ag::FusedDropout dropout) const {
  return ag::squeeze_excite_attention(x, squeeze_.weight, squeeze_.bias, excite_.weight, excite_.bias, cross.beta, C,
                                      residual, act, dropout);
}

CrossConfigAttention::CrossConfigAttention(double b) {
  beta = add_param("beta", Tensor::full(Shape{1}, b, DType::F32));
}

ag::Var CrossConfigAttention::forward(const ag::Var& x, int64_t C, const ag::Var& residual, Act act,
                                      ag::FusedDropout dropout) const {
  return ag::config_attention(x, beta, C, residual, act, dropout);
}

Tensor config_graph(const Batch& b) {
  Tensor t = Tensor::empty({b.graphs * b.configs}, DType::I32);
  for (int64_t i = 0; i < t.numel(); ++i) t.i32()[i] = int32_t(i / b.configs);
  return t;
}

ag::Var configurable_rows(const Batch& b, const nn::SharedRows& x) {
  Tensor first = Tensor::empty({b.config_nodes.numel()}, DType::I32);
  for (int64_t k = 0; k < first.numel(); ++k) first.i32()[k] = int32_t(k);
  return ag::gather_rows(x.dep, first);
}

nn::SharedRows layout_input_shared(const nn::Embedding& opcode_embedding, const Batch& b) {
  return layout_input_shared(node_input(opcode_embedding, b), b);
}

nn::SharedRows layout_input_shared(const ag::Var& in, const Batch& b) {
  const int64_t B = b.node_config.size(1) / b.configs;
  const ag::Var zeros(Tensor::zeros({b.nodes, B}, DType::F32, b.x.device()));
  const Tensor& seeds = b.plan_seeds.defined() ? b.plan_seeds : b.config_nodes;  // a plan's D_0
  const ag::Var dep =
      ag::join_configs(ag::gather_rows(in, seeds), ag::gather_rows(ag::Var(b.node_config), seeds), b.configs);
  return {ag::concat_cols({in, zeros}), dep, 0, b.configs};
}

}  // namespace gnn::train
