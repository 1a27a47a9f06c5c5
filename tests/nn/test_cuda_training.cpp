// Training on the GPU: a two-layer GCN (dropout, matmul, weighted SpMM, bias, relu, log-softmax,
// cross-entropy, Adam) run on the host and on the device from the same seed. The GPU's loss curve must
// follow the host's (dropout masks are the same counter-based hash on both, so only summation order differs),
// and two GPU runs must end with bitwise-identical weights. Skipped with the reason without a GPU.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "autograd/ops.h"
#include "kernels/graph_cases.h"
#include "nn/conv.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "runtime/cuda.h"
#include "testing.h"

using namespace gnn;

namespace {

struct GcnRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> weights;  // every parameter after the last step, on the host
};

class TwoLayerGcn : public nn::Module {
 public:
  TwoLayerGcn(int64_t F, int64_t H, int64_t C, Rng& rng) : c1_(F, H, rng), c2_(H, C, rng), drop_(0.5, rng) {
    add_child("conv1", &c1_);
    add_child("conv2", &c2_);
    add_child("dropout", &drop_);
  }
  ag::Var forward(const Graph& g, const ag::Var& x) {
    return c2_.forward(g, drop_.forward(ag::relu(c1_.forward(g, drop_.forward(x)))));
  }

 private:
  nn::GCNConv c1_, c2_;
  nn::Dropout drop_;
};

GcnRun train_gcn(Device dev, int steps) {
  const int64_t N = 600, F = 40, H = 16, C = 5;
  const Graph host_graph = testing::random_graph(N, 3000, 21, true);
  const auto xv = testing::random_values<float>(static_cast<size_t>(N * F), 5);
  std::vector<int32_t> labels(static_cast<size_t>(N)), train;
  for (int64_t i = 0; i < N; ++i) {
    labels[size_t(i)] = int32_t((i * 7 + 3) % C);
    if (i % 3 == 0) train.push_back(int32_t(i));
  }
  const Tensor lab = Tensor::from_vector(labels), rows = Tensor::from_vector(train);
  Rng rng(42);
  TwoLayerGcn m(F, H, C, rng);
  nn::move_parameters(m, dev);
  nn::Adam adam(nn::one_group(m.parameters(), 5e-4), 0.01);
  const Graph g = host_graph.on(dev);
  const ag::Var x(Tensor::from_vector(xv, Shape{N, F}).to(dev));
  GcnRun out;
  m.train();
  for (int s = 0; s < steps; ++s) {
    adam.zero_grad();
    ag::Var loss = nn::cross_entropy(m.forward(g, x), lab, rows);
    out.losses.push_back(loss.value().item());
    ag::backward(loss);
    adam.step();
  }
  for (const nn::NamedParam& p : m.parameters()) out.weights.push_back(p.var.value().to_vector<float>());
  return out;
}

}  // namespace

TEST_CASE("cuda training: a GCN on the GPU follows the host's loss curve, and two GPU runs give the same bits") {
  GNN_SKIP_UNLESS_CUDA();
  const int steps = 60;
  const GcnRun cpu = train_gcn(Device::cpu(), steps);
  const GcnRun gpu1 = train_gcn(Device::cuda(0), steps), gpu2 = train_gcn(Device::cuda(0), steps);
  REQUIRE(cpu.losses.size() == gpu1.losses.size());
  CHECK(cpu.losses.back() < 0.9 * cpu.losses.front());  // it learns
  for (size_t s = 0; s < cpu.losses.size(); ++s) {
    CAPTURE(s);
    CHECK(std::fabs(gpu1.losses[s] - cpu.losses[s]) <= 1e-3 * std::max(1.0, std::fabs(cpu.losses[s])));
  }
  CHECK(gpu1.losses == gpu2.losses);
  REQUIRE(gpu1.weights.size() == gpu2.weights.size());
  for (size_t i = 0; i < gpu1.weights.size(); ++i) {
    CAPTURE(i);
    REQUIRE(gpu1.weights[i].size() == gpu2.weights[i].size());
    CHECK(std::memcmp(gpu1.weights[i].data(), gpu2.weights[i].data(), gpu1.weights[i].size() * sizeof(float)) == 0);
  }
}

TEST_CASE("cuda training: ops name a CUDA operand they cannot take, and mixed devices") {
  GNN_SKIP_UNLESS_CUDA();
  const Device gpu = Device::cuda(0);
  const ag::Var a(Tensor::full({4, 3}, 1.0, DType::F32, gpu)), b_host(Tensor::full({3, 2}, 1.0, DType::F32));
  CHECK_THROWS_WITH_AS(ag::matmul(a, b_host), doctest::Contains("matmul: b must be on cuda:0"), Error);
  const ag::Var Wd(Tensor::full({6, 2}, 1.0, DType::F32, gpu));
  CHECK_THROWS_WITH_AS(ag::sage_fused(testing::random_graph(4, 6, 1), a, Wd, ag::Var(), Act::kRelu),
                       doctest::Contains("the graph is on cpu"), Error);
  const ag::Var a64(Tensor::full({4, 3}, 1.0, DType::F64, gpu));
  CHECK_THROWS_WITH_AS(ag::relu(a64), doctest::Contains("CUDA tensors must be f32"), Error);
  // a graph on the device with host features
  const Graph dg = testing::random_graph(4, 6, 1).to(gpu);
  const ag::Var xh(Tensor::full({4, 3}, 1.0, DType::F32)), Wh(Tensor::full({6, 2}, 1.0, DType::F32));
  CHECK_THROWS_WITH_AS(ag::sage_fused(dg, xh, Wh, ag::Var(), Act::kRelu), doctest::Contains("the graph is on cuda:0"),
                       Error);
}

TEST_CASE("cuda training: gradient clipping, gradient scaling, Adam and SGD over many parameters match the host") {
  GNN_SKIP_UNLESS_CUDA();
  // Parameter sizes around the many-tensor chunk (8192 elements), a scalar, and an empty one.
  const std::vector<int64_t> sizes = {1, 128, 8191, 8193, 0, 40000};
  auto make = [&](Device dev) {
    std::vector<nn::NamedParam> ps;
    for (size_t k = 0; k < sizes.size(); ++k) {
      const auto w = testing::random_values<float>(size_t(sizes[k]), 50 + uint32_t(k));
      std::string name = "p";
      name += std::to_string(k);  // (operator+ on a literal trips GCC 12's -Wrestrict false positive)
      ps.push_back({name, ag::Var::param(Tensor::from_vector(w).to(dev))});
    }
    return ps;
  };
  auto set_grads = [&](const std::vector<nn::NamedParam>& ps, int step) {
    for (size_t k = 0; k < ps.size(); ++k) {
      const auto g =
          testing::random_values<float>(size_t(sizes[k]), 90 + uint32_t(k) + 10 * uint32_t(step), -3.0f, 3.0f);
      ps[k].var.set_grad(Tensor::from_vector(g).to(ps[k].var.device()));
    }
  };
  for (bool sgd : {false, true}) {
    CAPTURE(sgd);
    std::vector<std::vector<nn::NamedParam>> runs = {make(Device::cpu()), make(Device::cuda(0))};
    std::vector<std::unique_ptr<nn::Optimizer>> opts;
    for (const auto& ps : runs) {
      if (sgd) opts.push_back(std::make_unique<nn::SGD>(nn::one_group(ps, 1e-3), 0.05, 0.9));
      else opts.push_back(std::make_unique<nn::Adam>(nn::one_group(ps, 1e-3), 0.01, true));
    }
    for (int step = 0; step < 3; ++step) {
      std::vector<double> norms;
      for (size_t r = 0; r < 2; ++r) {
        set_grads(runs[r], step);
        opts[r]->scale_grads(0.5);
        norms.push_back(nn::clip_grad_norm(runs[r], 10.0));  // well below the norm: every gradient is scaled
        opts[r]->step();
      }
      CHECK(norms[0] > 10.0);
      CHECK(norms[1] == doctest::Approx(norms[0]).epsilon(1e-12));
    }
    for (size_t k = 0; k < sizes.size(); ++k) {
      CAPTURE(k);
      CHECK(runs[1][k].var.device() == Device::cuda(0));
      GNN_CHECK_CLOSE(runs[1][k].var.value().to_vector<float>(), runs[0][k].var.value().to_vector<float>(), 1e-6, 1e-6);
    }
  }
  // SWA of GPU parameters: snapshots go to the host, the average comes back to the device
  {
    std::vector<nn::NamedParam> ps = make(Device::cuda(0));
    nn::Swa swa(2);
    for (float v : {1.f, 2.f, 4.f}) {
      for (const auto& p : ps) p.var.set_value(Tensor::full(p.var.value().shape(), v, DType::F32, Device::cuda(0)));
      swa.snapshot(ps);
    }
    swa.apply(ps);
    CHECK(ps[3].var.device() == Device::cuda(0));
    CHECK(ps[3].var.value().to_vector<float>() == std::vector<float>(size_t(sizes[3]), 3.f));
  }
  // A GPU parameter with its gradient on the host is named
  std::vector<nn::NamedParam> bad = make(Device::cuda(0));
  bad[2].var.set_grad(Tensor::zeros(Shape{sizes[2]}, DType::F32));
  CHECK_THROWS_WITH_AS(nn::clip_grad_norm(bad, 1.0),
                       doctest::Contains("p2 on the GPU must be f32 with its gradient there"), Error);
}
