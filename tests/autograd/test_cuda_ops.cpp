// Every autograd op with a CUDA path, run on the host and on the GPU from the same inputs: the values
// and every input's gradient must agree (the loss is <y, r> for a fixed random r, so each backward sees
// a dense, non-uniform upstream gradient), and a second GPU run must give the same bits (no atomics in
// any backward). Index arrays stay on the host, as the ops take them. Skipped without a GPU.
#include <cmath>
#include <cstring>
#include <functional>

#include "autograd/ops.h"
#include "kernels/graph_cases.h"
#include "nn/loss.h"
#include "runtime/cuda.h"
#include "testing.h"

using namespace gnn;

namespace {

using OpFn = std::function<ag::Var(const std::vector<ag::Var>&, const Graph&)>;

struct Run {
  std::vector<float> y;
  std::vector<std::vector<float>> grads;
};

Run run_op(Device dev, const std::vector<Tensor>& inputs, const Graph& host_graph, const OpFn& f) {
  std::vector<ag::Var> vars;
  for (const Tensor& t : inputs) vars.push_back(ag::Var::param(dev.is_cpu() ? t.clone() : t.to(dev)));
  const Graph g = dev.is_cpu() || host_graph.num_nodes == 0 ? host_graph : host_graph.to(dev);
  const ag::Var y = f(vars, g);
  REQUIRE(y.device() == dev);
  const Tensor r = Tensor::from_vector(testing::random_values<float>(static_cast<size_t>(y.value().numel()), 77),
                                       y.shape());
  ag::backward(ag::sum(ag::mul(y, ag::Var(r.on(dev)))));
  Run out;
  out.y = y.value().to_vector<float>();
  for (const ag::Var& v : vars) out.grads.push_back(v.has_grad() ? v.grad().to_vector<float>() : std::vector<float>());
  return out;
}

void close(const std::vector<float>& gpu, const std::vector<float>& cpu, const char* what) {
  CAPTURE(what);
  REQUIRE(gpu.size() == cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(gpu[i] - cpu[i]) <= 1e-4f * std::max(1.0f, std::fabs(cpu[i])));
  }
}

void check_op(const char* name, const std::vector<Tensor>& inputs, const OpFn& f, const Graph& graph = Graph()) {
  CAPTURE(name);
  const Run cpu = run_op(Device::cpu(), inputs, graph, f);
  const Run gpu = run_op(Device::cuda(0), inputs, graph, f), again = run_op(Device::cuda(0), inputs, graph, f);
  close(gpu.y, cpu.y, "value");
  REQUIRE(gpu.grads.size() == cpu.grads.size());
  for (size_t i = 0; i < cpu.grads.size(); ++i) close(gpu.grads[i], cpu.grads[i], "gradient");
  CHECK(std::memcmp(gpu.y.data(), again.y.data(), gpu.y.size() * sizeof(float)) == 0);
  for (size_t i = 0; i < gpu.grads.size(); ++i)
    CHECK(std::memcmp(gpu.grads[i].data(), again.grads[i].data(), gpu.grads[i].size() * sizeof(float)) == 0);
}

Tensor rand(Shape s, uint64_t seed) {
  return Tensor::from_vector(testing::random_values<float>(static_cast<size_t>(s.numel()), seed), s);
}

}  // namespace

TEST_CASE("cuda ops: arithmetic, reductions, layer norm and column plumbing match the host, value and gradient") {
  GNN_SKIP_UNLESS_CUDA();
  const Tensor a = rand({37, 24}, 1), b = rand({37, 24}, 2), bias = rand({24}, 3), s = rand({1}, 4);
  check_op("add", {a, b}, [](auto& v, auto&) { return ag::add(v[0], v[1]); });
  check_op("sub", {a, b}, [](auto& v, auto&) { return ag::sub(v[0], v[1]); });
  check_op("mul", {a, b}, [](auto& v, auto&) { return ag::mul(v[0], v[1]); });
  check_op("scale", {a}, [](auto& v, auto&) { return ag::scale(v[0], -1.5); });
  check_op("scale_by", {a, s}, [](auto& v, auto&) { return ag::scale_by(v[0], v[1]); });
  check_op("add_bias", {a, bias}, [](auto& v, auto&) { return ag::add_bias(v[0], v[1]); });
  for (Act act : {Act::kNone, Act::kLeakyRelu, Act::kGelu})  // 37 rows: one slice; 9000: column sums in slices
    for (const Tensor& x : {a, rand({9000, 24}, 14)})
      check_op("bias_act", {x, bias}, [act](auto& v, auto&) { return ag::bias_act(v[0], v[1], act, 0.1); });
  check_op("mean", {rand({5000}, 5)}, [](auto& v, auto&) { return ag::reshape(ag::mean(v[0]), 1, 1); });
  check_op("layer_norm", {a, bias, rand({24}, 10)},
           [](auto& v, auto&) { return ag::layer_norm(v[0], v[1], v[2], 1e-5); });
  check_op("layer_norm without affine", {a}, [](auto& v, auto&) { return ag::layer_norm(v[0], ag::Var(), ag::Var()); });
  check_op("concat_cols", {a, rand({37, 5}, 6)}, [](auto& v, auto&) { return ag::concat_cols({v[0], v[1], v[0]}); });
  check_op("concat_rows", {a, rand({5, 24}, 6)}, [](auto& v, auto&) { return ag::concat_rows({v[0], v[1], v[0]}); });
  check_op("slice_cols", {a}, [](auto& v, auto&) { return ag::slice_cols(v[0], 3, 17); });
  check_op("head_mean", {a}, [](auto& v, auto&) { return ag::head_mean(v[0], 3); });
  check_op("head_dot", {a, rand({4, 6}, 7)}, [](auto& v, auto&) { return ag::head_dot(v[0], v[1]); });
  std::vector<int32_t> idx;
  for (int i = 0; i < 90; ++i) idx.push_back(int32_t((i * 13 + 5) % 37 % 11));  // repeats, rows never used
  const Tensor index = Tensor::from_vector(idx);
  check_op("gather_rows", {a}, [index](auto& v, auto&) { return ag::gather_rows(v[0], index); });
  check_op("reshape", {a}, [](auto& v, auto&) { return ag::reshape(ag::scale(v[0], 2.0), 37 * 3, 8); });
  check_op("join_configs", {rand({37, 7}, 8), rand({37, 4 * 5}, 9)},
           [](auto& v, auto&) { return ag::join_configs(v[0], v[1], 4); });
  std::vector<uint8_t> keep(37);
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = uint8_t(i % 3 != 1);
  const Tensor kt = Tensor::from_vector(keep);
  check_op("dropout", {a}, [](auto& v, auto&) {
    Rng r(5);  // the same draw on both devices: the same mask
    return ag::dropout(v[0], 0.3, r, true);
  });
  check_op("keep_grad_rows", {a}, [kt](auto& v, auto&) { return ag::scale(ag::keep_grad_rows(v[0], kt), 3.0); });
  check_op("keep_grad_rows, keep where x is", {a},
           [kt](auto& v, auto&) { return ag::scale(ag::keep_grad_rows(v[0], kt.on(v[0].device())), 3.0); });
  CHECK_THROWS_WITH_AS(ag::keep_grad_rows(ag::Var(a), kt.to(Device::cuda(0))),
                       doctest::Contains("keep must be u8 [37] on the host or on x's device (cpu)"), Error);
  check_op("to_device, there and back", {a, b}, [](auto& v, auto&) {  // the host's product, moved back
    const ag::Var host = ag::mul(ag::to_device(v[0], Device::cpu()), ag::to_device(v[1], Device::cpu()));
    return ag::to_device(host, v[0].device());
  });
}

TEST_CASE("cuda ops: pooling and instance norm per graph, with an empty graph, match the host") {
  GNN_SKIP_UNLESS_CUDA();
  const Tensor gp = Tensor::from_vector(std::vector<int64_t>{0, 9, 9, 40, 41, 70});  // graph 1 empty
  const Tensor x = rand({70, 40}, 11), gamma = rand({40}, 12), beta = rand({40}, 13);
  for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax})
    check_op("pool", {x}, [gp, op](auto& v, auto&) { return ag::pool(v[0], gp, op); });
  check_op("instance_norm", {x, gamma, beta},
           [gp](auto& v, auto&) { return ag::instance_norm(v[0], v[1], v[2], gp, 1e-5); });
}

TEST_CASE("cuda ops: GAT scores and the segment softmax match the host") {
  GNN_SKIP_UNLESS_CUDA();
  const Graph g = testing::random_graph(300, 2400, 31, true);
  const int64_t H = 4;
  const Tensor as = rand({300, H}, 32), ad = rand({300, H}, 33);
  check_op("gat_scores", {as, ad}, [](auto& v, const Graph& g) { return ag::gat_scores(g, v[0], v[1], 0.2); }, g);
  check_op("segment_softmax", {rand({2400, H}, 34)}, [](auto& v, const Graph& g) { return ag::segment_softmax(g, v[0]); },
           g);
}

TEST_CASE("cuda ops: spmm with per-head weights [E, H] (GAT's aggregation) matches the host on the standard graphs") {
  GNN_SKIP_UNLESS_CUDA();
  // sum and mean run every head in one launch on the GPU (4 columns a vector when a head's width allows),
  // max one launch per head; the hub's 10k entries take the split-row path
  for (const testing::GraphCase& c : testing::standard_graph_cases(61)) {
    CAPTURE(c.name);
    const int64_t N = c.graph.num_nodes, E = c.graph.num_edges;
    if (N == 0) continue;  // run_op keeps a graph of no nodes on the host
    for (auto [H, F] : {std::pair<int64_t, int64_t>{4, 8}, {3, 5}, {2, 1}}) {
      CAPTURE(H);
      CAPTURE(F);
      for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax})
        check_op("spmm per head", {rand({N, H * F}, 62), rand({E, H}, 63)},
                 [op](auto& v, const Graph& g) { return ag::spmm(g, v[0], op, v[1]); }, c.graph);
    }
  }
}

TEST_CASE("cuda ops: spmm on a bipartite graph (config sharing's row blocks) matches the host") {
  GNN_SKIP_UNLESS_CUDA();
  std::vector<int64_t> src, dst;  // 500 sources into 120 destinations, some of each with no edge
  for (int64_t e = 0; e < 3000; ++e) src.push_back((e * 7919) % 480), dst.push_back((e * 104729) % 110);
  const Graph g = Graph::from_bipartite_edges(src.data(), dst.data(), int64_t(src.size()), 500, 120);
  for (Reduce op : {Reduce::kSum, Reduce::kMean, Reduce::kMax})
    check_op("bipartite spmm", {rand({500, 48}, 64), rand({3000}, 65)},
             [op](auto& v, const Graph& g) { return ag::spmm(g, v[0], op, v[1]); }, g);
}

TEST_CASE("cuda ops: fused SAGE (training and inference) matches the host") {
  GNN_SKIP_UNLESS_CUDA();
  const Graph g = testing::random_graph(300, 2400, 35, true);
  const Tensor x = rand({300, 24}, 36), W = rand({48, 20}, 37), b = rand({20}, 38);
  for (Act act : {Act::kRelu, Act::kGelu, Act::kNone}) {
    CAPTURE(act_name(act));
    check_op("sage_fused", {x, W, b}, [act](auto& v, const Graph& g) { return ag::sage_fused(g, v[0], v[1], v[2], act); },
             g);
  }
  check_op("sage_fused without bias", {x, W},
           [](auto& v, const Graph& g) { return ag::sage_fused(g, v[0], v[1], ag::Var(), Act::kLeakyRelu, 0.2); }, g);
  // inference (no gradient recorded) gives the training forward's bits
  const Device gpu = Device::cuda(0);
  const Graph dg = g.to(gpu);
  const ag::Var xd(x.to(gpu)), Wp = ag::Var::param(W.to(gpu)), bp = ag::Var::param(b.to(gpu));
  const std::vector<float> train_y = ag::sage_fused(dg, xd, Wp, bp, Act::kRelu).value().to_vector<float>();
  ag::clear_tape();
  std::vector<float> infer_y;
  {
    ag::NoGrad off;
    infer_y = ag::sage_fused(dg, xd, Wp, bp, Act::kRelu).value().to_vector<float>();
  }
  CHECK(std::memcmp(train_y.data(), infer_y.data(), train_y.size() * sizeof(float)) == 0);
}

TEST_CASE("cuda ops: graph self-attention, full and linear, with empty and single-node graphs, matches the host") {
  GNN_SKIP_UNLESS_CUDA();
  // graph 1 empty, graph 2 one node, graph 3 two query tiles of 32, graph 4 a short last tile (230 rows)
  const Tensor gp = Tensor::from_vector(std::vector<int64_t>{0, 5, 5, 6, 70, 300});
  // Head widths: 4 and 32 (the fused kernel's first size), 33 and 64 (its second), 72 (cuBLAS per block)
  for (auto [W, heads] : {std::pair<int64_t, int64_t>{12, 3}, {64, 2}, {66, 2}, {64, 1}, {72, 1}}) {
    CAPTURE(W);
    CAPTURE(heads);
    const Tensor q = rand({300, W}, 51), k = rand({300, W}, 52), v = rand({300, W}, 53);
    for (bool linear : {false, true}) {
      CAPTURE(linear);
      check_op("graph_attention", {q, k, v}, [gp, heads, linear](auto& x, auto&) {
        return ag::graph_attention(x[0], x[1], x[2], gp, heads, linear);
      });
    }
  }
  // A score bias (the blocks of 0, 0, 1, 64 and 230 nodes) takes the per-block path whatever the width.
  std::vector<float> bias;
  for (int64_t n : {5, 0, 1, 64, 230})
    for (int64_t i = 0; i < n * n; ++i) bias.push_back(i % 7 == 3 ? std::log(0.1f) : 0.f);
  const Tensor bt = Tensor::from_vector(bias);
  check_op("graph_attention with a bias", {rand({300, 12}, 54), rand({300, 12}, 55), rand({300, 12}, 56)},
           [gp, bt](auto& x, auto&) { return ag::graph_attention(x[0], x[1], x[2], gp, 3, false, bt); });
}

TEST_CASE("cuda ops: the ranking losses take GPU predictions and return their gradient there") {
  GNN_SKIP_UNLESS_CUDA();
  const Tensor target = Tensor::from_vector(testing::random_values<double>(40, 41, 1.0, 10.0));
  const Tensor groups = Tensor::from_vector(std::vector<int64_t>{0, 10, 20, 30, 40});
  check_op("list_mle_loss", {rand({40, 1}, 42)}, [target, groups](auto& v, auto&) {
    return ag::reshape(nn::list_mle_loss(v[0], target, groups, 10.0), 1, 1);
  });
  check_op("mse_loss", {rand({40, 1}, 43)},
           [target](auto& v, auto&) { return ag::reshape(nn::mse_loss(v[0], target), 1, 1); });
  // As the trainer runs them: on the host copy of the prediction, the loss a host value
  const ag::Var pred = ag::Var::param(rand({40, 1}, 44).to(Device::cuda(0)));
  const ag::Var loss = nn::list_mle_loss(ag::to_device(pred, Device::cpu()), target, groups, 10.0);
  CHECK(loss.device() == Device::cpu());
  ag::backward(loss);
  REQUIRE(pred.has_grad());
  CHECK(pred.grad().device() == Device::cuda(0));
  const ag::Var host_pred = ag::Var::param(pred.value().to(Device::cpu()));
  ag::backward(nn::list_mle_loss(host_pred, target, groups, 10.0));
  const std::vector<float> got = pred.grad().to_vector<float>(), want = host_pred.grad().to_vector<float>();
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == want[i]);
}

TEST_CASE("cuda ops: scale_by, sum and mean only queue device work: forward and backward replay as a CUDA graph") {
  GNN_SKIP_UNLESS_CUDA();
  const Device gpu = Device::cuda(0);
  Tensor x = rand({37, 24}, 51).to(gpu);
  const Tensor s = rand({1}, 52).to(gpu);
  Tensor loss, dx, ds;  // the step's outputs: a capture keeps them in the graph's pool, each replay rewrites them
  auto step = [&] {
    const ag::Var xv = ag::Var::param(x), sv = ag::Var::param(s);
    const ag::Var l = ag::add(ag::mean(ag::scale_by(xv, sv)), ag::scale(ag::sum(xv), 0.25));
    ag::backward(l);
    loss = l.value(), dx = xv.grad(), ds = sv.grad();
  };
  auto host = [](const Tensor& t) { return t.to_vector<float>(); };
  step();  // eager: the reference, and cuBLAS and the caches set up outside the capture
  const auto want_loss = host(loss), want_dx = host(dx), want_ds = host(ds);
  // A readback of s or of a partial sum inside the capture would make it fail (a host copy is not a
  // stream operation that a graph can hold).
  CudaGraph graph(0, step);
  graph.replay();
  CHECK(host(loss) == want_loss);
  CHECK(host(dx) == want_dx);
  CHECK(host(ds) == want_ds);
  x.copy_from(rand({37, 24}, 53));  // new inputs in the captured buffer: the replay follows them
  graph.replay();
  const auto got_loss = host(loss), got_ds = host(ds);
  step();
  CHECK(got_loss == host(loss));
  CHECK(got_ds == host(ds));
}
