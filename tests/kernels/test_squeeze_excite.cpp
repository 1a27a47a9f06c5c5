// The squeeze-and-excitation block as one op (kernels/squeeze_excite.h): the reference by finite
// differences in f64, the float kernel (AVX-512 where it applies) against the reference computed in f64
// from the same values, its weight gradients the same bits for any thread count, the op against the four
// ops it replaces, the refusals, and on a GPU (the composed ops there) against the host.
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "autograd/device_check.h"
#include "autograd/gradcheck.h"
#include "kernels/gemm.h"
#include "kernels/squeeze_excite.h"
#include "runtime/parallel.h"
#include "testing.h"

using namespace gnn;
using namespace gnn::testing;

namespace {

// Every output of the float kernel: y, h, dx, dW1, db1, dW2, db2 (each filled with NaN first: what the kernel
// does not write stays NaN). bias: b1 and b2 given (else null); all: every gradient asked for (else dx, db1
// and dW2 only).
struct SeRun {
  std::vector<float> y, h, dx, dw1, db1, dw2, db2;
};

SeRun run_cpu(const std::vector<float>& x, const std::vector<float>& w1, const std::vector<float>& b1,
              const std::vector<float>& w2, const std::vector<float>& b2, const std::vector<float>& dy, int64_t R,
              int64_t F, int64_t H, bool bias = true, bool all = true) {
  auto nan = [](int64_t n) { return std::vector<float>(size_t(n), NAN); };
  SeRun o{nan(R * F), nan(R * H), nan(R * F), nan(F * H), nan(H), nan(H * F), nan(F)};
  const float *pb1 = bias ? b1.data() : nullptr, *pb2 = bias ? b2.data() : nullptr;
  squeeze_excite_forward_cpu(o.y.data(), o.h.data(), x.data(), w1.data(), pb1, w2.data(), pb2, R, F, H);
  squeeze_excite_backward_cpu(o.dx.data(), all ? o.dw1.data() : nullptr, o.db1.data(), o.dw2.data(),
                              all ? o.db2.data() : nullptr, dy.data(), x.data(), o.h.data(), w1.data(), w2.data(), pb2,
                              R, F, H);
  return o;
}

std::vector<double> wide(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// |got - want| within rel of the larger of |want| and the array's largest magnitude / 10 (a sum's terms
// cancel: its error is relative to the terms, not to the sum); a term left out or misplaced is off by far more
void check_close(const std::vector<float>& got, const std::vector<double>& want, double rel, const char* what) {
  CAPTURE(std::string(what));
  REQUIRE(got.size() == want.size());
  double big = 0;
  for (double w : want) big = std::max(big, std::fabs(w));
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(double(got[i]) - want[i]) <= rel * std::max(std::fabs(want[i]), big / 10));
  }
}

// A case's float inputs (random, seeded from seed .. seed + 5) and the f64 reference's outputs from them,
// the backward from h_back where given (else from the reference's own h)
struct SeCase {
  int64_t R, F, H;
  bool bias;
  std::vector<float> x, w1, b1, w2, b2, dy;
  SeCase(int64_t R_, int64_t F_, int64_t H_, bool bias_, uint64_t seed)
      : R(R_), F(F_), H(H_), bias(bias_), x(random_values<float>(size_t(R * F), seed)),
        w1(random_values<float>(size_t(F * H), seed + 1, -0.3f, 0.3f)), b1(random_values<float>(size_t(H), seed + 2)),
        w2(random_values<float>(size_t(H * F), seed + 3)), b2(random_values<float>(size_t(F), seed + 4)),
        dy(random_values<float>(size_t(R * F), seed + 5)) {}
  SeRun run(bool all = true) const { return run_cpu(x, w1, b1, w2, b2, dy, R, F, H, bias, all); }
};

struct SeWant {
  std::vector<double> y, h, dx, dw1, db1, dw2, db2;
};

SeWant reference(const SeCase& c, const std::vector<float>* h_back = nullptr) {
  const auto [R, F, H] = std::tuple{c.R, c.F, c.H};
  SeWant o{std::vector<double>(size_t(R * F)), std::vector<double>(size_t(R * H)), std::vector<double>(size_t(R * F)),
           std::vector<double>(size_t(F * H)), std::vector<double>(size_t(H)),     std::vector<double>(size_t(H * F)),
           std::vector<double>(size_t(F))};
  const std::vector<double> xd = wide(c.x), w1d = wide(c.w1), b1d = wide(c.b1), w2d = wide(c.w2), b2d = wide(c.b2),
                            dyd = wide(c.dy);
  const double *pb1 = c.bias ? b1d.data() : nullptr, *pb2 = c.bias ? b2d.data() : nullptr;
  squeeze_excite_forward_ref(o.y.data(), o.h.data(), xd.data(), w1d.data(), pb1, w2d.data(), pb2, R, F, H);
  const std::vector<double> hb = h_back ? wide(*h_back) : o.h;
  squeeze_excite_backward_ref(o.dx.data(), o.dw1.data(), o.db1.data(), o.dw2.data(), o.db2.data(), dyd.data(),
                              xd.data(), hb.data(), w1d.data(), w2d.data(), pb2, R, F, H);
  return o;
}

void check_close(const SeRun& got, const SeWant& want, double rel) {
  check_close(got.y, want.y, rel, "y");
  check_close(got.h, want.h, rel, "h");
  check_close(got.dx, want.dx, rel, "dx");
  check_close(got.dw1, want.dw1, rel, "dW1");
  check_close(got.db1, want.db1, rel, "db1");
  check_close(got.dw2, want.dw2, rel, "dW2");
  check_close(got.db2, want.db2, rel, "db2");
}

void check_same(const SeRun& a, const SeRun& b) {
  CHECK(a.y == b.y);
  CHECK(a.h == b.h);
  CHECK(a.dx == b.dx);
  CHECK(a.dw1 == b.dw1);
  CHECK(a.db1 == b.db1);
  CHECK(a.dw2 == b.dw2);
  CHECK(a.db2 == b.db2);
}

// The op (or the composed ops) on fresh parameters holding in = {x, w1, b1, w2, b2}, back from dy: y, then
// the gradients of x, w1, b1, w2 and b2.
std::vector<std::vector<float>> run_op(bool op, const std::vector<Tensor>& in, const Tensor& dy) {
  std::vector<ag::Var> v;
  for (const Tensor& t : in) v.push_back(ag::Var::param(t.clone()));
  const ag::Var y = op ? ag::squeeze_excite(v[0], v[1], v[2], v[3], v[4])
                       : ag::squeeze_excite_composed(v[0], v[1], v[2], v[3], v[4]);
  std::vector<std::vector<float>> out{y.value().to_vector<float>()};
  ag::backward(y, dy);
  for (const ag::Var& p : v) out.push_back(p.grad().to_vector<float>());
  return out;
}

}  // namespace

TEST_CASE("squeeze_excite: the reference by finite differences, with and without biases") {
  const ag::Var x = rand_var({11, 6}, 41), w1 = rand_var({6, 3}, 42), b1 = rand_var({3}, 43), w2 = rand_var({3, 6}, 44),
                b2 = rand_var({6}, 45);
  check_grads({x, w1, b1, w2, b2}, [&] { return probe(ag::squeeze_excite(x, w1, b1, w2, b2)); });
  check_grads({x, w1, w2}, [&] { return probe(ag::squeeze_excite(x, w1, ag::Var(), w2, ag::Var())); });
  // rows past one chunk of the weight gradients' partial sums
  const ag::Var xl = rand_var({kSqueezeExciteChunk + 9, 4}, 46), w1l = rand_var({4, 2}, 47), w2l = rand_var({2, 4}, 48);
  check_grads({xl, w1l, w2l}, [&] { return probe(ag::squeeze_excite(xl, w1l, ag::Var(), w2l, ag::Var())); });
}

TEST_CASE("squeeze_excite: the float kernel against the reference, the same bits on any thread count") {
  // F = 128 (the recipe's, whole groups of eight vectors), 48 (single vectors only) and 272 (both); rows
  // with tails of a 32-row block, an 8-row group and a chunk
  struct Case {
    int64_t R, F, H;
  };
  // the vector kernel runs wherever the products' ISA is AVX-512
  CHECK(squeeze_excite_vectorised(128, 16) == (gemm_isa() == GemmIsa::kAvx512));
  CHECK_FALSE(squeeze_excite_vectorised(20, 5));
  if (!squeeze_excite_vectorised(128, 16)) {
    MESSAGE("SKIP: the host kernel needs AVX-512 (this CPU's products run ", gemm_isa_name(gemm_isa()), ")");
    return;
  }
  for (const Case c : {Case{709, 128, 16}, Case{45, 48, 16}, Case{300, 272, 16}})
    for (bool bias : {true, false}) {
      CAPTURE(c.F);
      CAPTURE(bias);
      const SeCase k(c.R, c.F, c.H, bias, 51);
      const ThreadsRestored saved;
      set_num_threads(1);
      const SeRun one = k.run();
      check_close(one, reference(k), 2e-5);
      for (int threads : {2, 3}) {
        CAPTURE(threads);
        set_num_threads(threads);
        check_same(k.run(), one);
        // gradients not asked for are not written, and the others are the same bits
        const SeRun some = k.run(false);
        CHECK(std::all_of(some.dw1.begin(), some.dw1.end(), [](float v) { return std::isnan(v); }));
        CHECK(std::all_of(some.db2.begin(), some.db2.end(), [](float v) { return std::isnan(v); }));
        CHECK(some.dx == one.dx);
        CHECK(some.db1 == one.db1);
        CHECK(some.dw2 == one.dw2);
      }
    }
  // no rows: zero weight gradients, every one written
  const auto w1 = random_values<float>(128 * 16, 57), b1 = random_values<float>(16, 58),
             w2 = random_values<float>(16 * 128, 59), b2 = random_values<float>(128, 60);
  const SeRun none = run_cpu({}, w1, b1, w2, b2, {}, 0, 128, 16);
  for (const std::vector<float>* g : {&none.dw1, &none.db1, &none.dw2, &none.db2})
    CHECK(std::all_of(g->begin(), g->end(), [](float v) { return v == 0.0f; }));
}

TEST_CASE("squeeze_excite: a NaN in a row is NaN in its squeezed row, as relu(NaN) is in torch") {
  // rows of F = 128 (the vector kernel's width where it runs) and 48 (the reference's loops elsewhere)
  for (int64_t F : {int64_t(128), int64_t(48)}) {
    CAPTURE(F);
    const int64_t R = 37, H = 16;
    auto x = random_values<float>(size_t(R * F), 61);
    x[size_t(5 * F + 3)] = NAN;  // row 5
    const auto w1 = random_values<float>(size_t(F * H), 62), b1 = random_values<float>(size_t(H), 63),
               w2 = random_values<float>(size_t(H * F), 64), b2 = random_values<float>(size_t(F), 65),
               dy = random_values<float>(size_t(R * F), 66);
    const SeRun got = run_cpu(x, w1, b1, w2, b2, dy, R, F, H);
    std::vector<float> y(static_cast<size_t>(R * F)), h(static_cast<size_t>(R * H));
    squeeze_excite_forward_ref<float>(y.data(), h.data(), x.data(), w1.data(), b1.data(), w2.data(), b2.data(), R, F,
                                      H);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t m = 0; m < H; ++m) {
        CAPTURE(r);
        CHECK(std::isnan(got.h[size_t(r * H + m)]) == (r == 5));
        CHECK(std::isnan(h[size_t(r * H + m)]) == (r == 5));
      }
  }
}

TEST_CASE("squeeze_excite: the op is the four ops it replaces, and refuses shapes that do not fit") {
  // f32 products: the composed block's products in f32 as the op's
  const PrecisionRestored precision(GemmPrecision::kF32);
  const std::vector<Tensor> in{rand({300, 128}, 61), rand({128, 16}, 62), rand({16}, 63), rand({16, 128}, 64),
                                rand({128}, 65)};
  const Tensor dy = rand({300, 128}, 66);
  const auto f = run_op(true, in, dy), c = run_op(false, in, dy);
  const char* names[] = {"y", "dx", "dW1", "db1", "dW2", "db2"};
  for (size_t k = 0; k < f.size(); ++k) check_close(f[k], wide(c[k]), 1e-4, names[k]);
  // where the host kernel does not apply (20 channels squeezed to 5) the op is the composed ops, bit for
  // bit, and the kernel itself refuses
  const std::vector<Tensor> in5{rand({77, 20}, 67), rand({20, 5}, 68), rand({5}, 69), rand({5, 20}, 70),
                                 rand({20}, 71)};
  const Tensor dy5 = rand({77, 20}, 72);
  CHECK(run_op(true, in5, dy5) == run_op(false, in5, dy5));
  std::vector<float> y5(77 * 20), h5(77 * 5);
  CHECK_THROWS_WITH_AS(squeeze_excite_forward_cpu(y5.data(), h5.data(), in5[0].f32(), in5[1].f32(), in5[2].f32(),
                                                  in5[3].f32(), in5[4].f32(), 77, 20, 5),
                       doctest::Contains("squeeze_excite: no host kernel for 20 channels squeezed to 5"), Error);
  // refusals, naming what does not fit
  const ag::Var x = rand_var({9, 6}, 1), w1 = rand_var({6, 3}, 2), w2 = rand_var({3, 6}, 3);
  CHECK_THROWS_WITH_AS(ag::squeeze_excite(x, rand_var({5, 3}, 4), ag::Var(), w2, ag::Var()),
                       doctest::Contains("squeeze_excite: w1 f64[5, 3]"), Error);
  CHECK_THROWS_WITH_AS(ag::squeeze_excite(x, w1, ag::Var(), rand_var({3, 5}, 4), ag::Var()),
                       doctest::Contains("are not [6, H] and [H, 6] for x f64[9, 6]"), Error);
  CHECK_THROWS_WITH_AS(ag::squeeze_excite(x, w1, rand_var({4}, 5), w2, ag::Var()),
                       doctest::Contains("squeeze_excite: b1 has 4 values, not 3"), Error);
  CHECK_THROWS_WITH_AS(ag::squeeze_excite(x, w1, ag::Var(), w2, rand_var({3}, 6)),
                       doctest::Contains("squeeze_excite: b2 has 3 values, not 6"), Error);
}

TEST_CASE("squeeze_excite: under bf16 products, the products in bf16 (AMX tiles or VDPBF16PS), the same bits on any "
          "thread count") {
  if (!gemm_bf16_supported() || !squeeze_excite_vectorised(128, 16)) {
    MESSAGE("SKIP: the SE block's bf16 products need AVX-512 products and AVX512-BF16");
    return;
  }
  // AMX tiles where the bf16 GEMM runs on them, else VDPBF16PS (GNN_BF16_KERNEL=avx512bf16 runs the latter
  // on an AMX machine)
  const bool amx = gemm_bf16_kernel() == Bf16Kernel::kAmx;
  CAPTURE(amx);
  CHECK_FALSE(squeeze_excite_amx(128));  // f32 products: FMA chains
  CHECK_FALSE(squeeze_excite_dpbf16(128));
  const PrecisionRestored precision(GemmPrecision::kBf16);
  CHECK(squeeze_excite_amx(128) == amx);
  CHECK(squeeze_excite_dpbf16(128) == !amx);
  CHECK(squeeze_excite_amx(96) == amx);
  CHECK_FALSE(squeeze_excite_amx(48));  // a tile's 32 k: F % 32
  CHECK(squeeze_excite_dpbf16(48) == !amx);  // VDPBF16PS: k in pairs
  // F = 128 (the recipe's) and 96 (and 48 on VDPBF16PS: no whole group of eight column vectors); rows with a
  // tail of a 32-row block (5, 29, 29: an odd last row, paired with zeros) and of a chunk
  for (const int64_t F : {128, 96, 48}) {
    if (F == 48 && amx) continue;
    for (bool bias : {true, false}) {
      CAPTURE(F);
      CAPTURE(bias);
      // every case past the kernels' OpenMP threshold (R F > 65536)
      const SeCase k(F == 128 ? 709 : F == 96 ? 701 : 1501, F, 16, bias, 151);
      const ThreadsRestored saved;
      set_num_threads(1);
      const SeRun one = k.run();
      // bf16 operands (8 bits of mantissa): within a few hundredths of the f64 reference (3e-2 at worst here),
      // where the f32 kernel is within 2e-5; a product left in f32 would pass this but not the check after it.
      // The reference's backward from the kernel's own h: where bf16 moves an h across 0, the ReLU's mask
      // moves a whole row of the input's gradient.
      check_close(one, reference(k, &one.h), 5e-2);
      {
        const PrecisionRestored f32(GemmPrecision::kF32);
        const SeRun fma = k.run();
        CHECK(fma.h != one.h);
        CHECK(fma.y != one.y);
        CHECK(fma.dx != one.dx);
        CHECK(fma.dw1 != one.dw1);  // the weight gradients' sums over rows in bf16 too
        CHECK(fma.dw2 != one.dw2);
      }
      set_gemm_cpu_precision(GemmPrecision::kBf16);  // the scope above left f32
      for (int threads : {2, 3}) {
        CAPTURE(threads);
        set_num_threads(threads);
        check_same(k.run(), one);
      }
    }
  }
  // the op against the composed ops with bf16 products: the same operands rounded and summed in bf16. On AMX
  // y and dx are the same bits (on the development VM's AMX, though the kernel starts its C tiles from b2
  // or dy s where the GEMM adds its bias after the tiles); on VDPBF16PS each row's chain is the bf16 GEMM's
  // and the bias is added after, as the composed ops add it. The weight gradients' sums over rows are bf16
  // products in both, summed a block at a time in the op, in the GEMM's blocks and split-K chunks in the
  // composed form: the same up to f32 summation (the f32 biases' sums, column sums in both, alike up to
  // their order). 301 rows: a last block of 13, whose odd row a weight sum must not drop (1 / 301 of it)
  const std::vector<Tensor> in{rand({301, 128}, 161), rand({128, 16}, 162), rand({16}, 163), rand({16, 128}, 164),
                                rand({128}, 165)};
  const Tensor dy = rand({301, 128}, 166);
  const auto f = run_op(true, in, dy), c = run_op(false, in, dy);
  const char* names[] = {"y", "dx", "dW1", "db1", "dW2", "db2"};
  for (size_t k = 0; k < f.size(); ++k) check_close(f[k], wide(c[k]), k < 2 ? 0 : 1e-4, names[k]);
}

namespace {

// squeeze_excite_attention (or the two ops it replaces) on fresh parameters holding in = {x [N, C*F], w1, b1,
// w2, b2, beta, residual (or undefined)}, back from dy: y, then every input's gradient.
std::vector<std::vector<float>> run_attention(bool op, const std::vector<Tensor>& in, const Tensor& dy, int64_t C,
                                              Act act, ag::FusedDropout drop) {
  std::vector<ag::Var> v;
  for (const Tensor& t : in) v.push_back(t.defined() ? ag::Var::param(t.clone()) : ag::Var());
  const int64_t N = in[0].size(0), F = in[0].size(1) / C;
  const ag::Var y =
      op ? ag::squeeze_excite_attention(v[0], v[1], v[2], v[3], v[4], v[5], C, v[6], act, drop)
         : ag::config_attention(ag::reshape(ag::squeeze_excite(ag::reshape(v[0], N * C, F), v[1], v[2], v[3], v[4]),
                                            N, C * F),
                                v[5], C, v[6], act, drop);
  std::vector<std::vector<float>> out{y.value().to_vector<float>()};
  ag::backward(y, dy);
  for (const ag::Var& p : v)
    if (p.defined()) out.push_back(p.grad().to_vector<float>());
  return out;
}

}  // namespace

TEST_CASE("squeeze_excite_attention: the SE block and the cross-config attention after it, the two ops' bits") {
  CHECK(squeeze_excite_attention_fused(64, 128, 16) == squeeze_excite_vectorised(128, 16));
  CHECK_FALSE(squeeze_excite_attention_fused(48, 128, 16));  // nodes across the weight gradients' chunks
  CHECK_FALSE(squeeze_excite_attention_fused(2048, 128, 16));  // six [C, F] buffers a thread: too large
  CHECK_FALSE(squeeze_excite_attention_fused(64, 20, 5));
  if (!squeeze_excite_vectorised(128, 16))
    MESSAGE("the host kernel needs AVX-512 (this CPU's products run ", gemm_isa_name(gemm_isa()),
            "): the op is the two ops here, which this checks");
  // C = 64 (the recipe's: four nodes a chunk; at F = 128 past the kernels' OpenMP threshold, so that 2 and
  // 3 threads run), 16 (a node less than a block), 32 (a node one block), 512 (two chunks a node), 48 (not
  // fused: the two ops), 2048 (past kSqueezeExciteAttentionMaxConfigs: the two ops) and 1 (a node a row; on
  // VDPBF16PS the two ops); the residual, activation and both dropout masks as the recipe runs them
  struct Case {
    int64_t N, C, F;
  };
  const ThreadsRestored saved;
  // and with bf16 products, which put the SE's row products and weight sums on AMX tiles or VDPBF16PS
  // (F = 128, 32). On tiles C = 16, a node less than a block, is then the two ops (a tile sums a whole
  // block's rows); on VDPBF16PS C = 1, whose blocks would pair each node's row with zeros where the SE op
  // pairs two nodes' rows
  const bool bf16 = gemm_bf16_supported() && squeeze_excite_vectorised(128, 16);
  const bool amx = bf16 && gemm_bf16_kernel() == Bf16Kernel::kAmx;
  if (bf16) {
    const PrecisionRestored products(GemmPrecision::kBf16);
    const int64_t unfused = amx ? 16 : 1;
    CAPTURE(amx);
    CHECK(squeeze_excite_attention_fused(64, 128, 16));
    CHECK(squeeze_excite_attention_fused(16, 128, 16) == !amx);
    CHECK_FALSE(squeeze_excite_attention_fused(unfused, 128, 16));
    // a graph fused under f32 products whose backward runs after the precision became bf16: the kernel
    // takes the shape it was given (bf16 products then, whose sums are not the two ops' bits), no refusal
    set_gemm_cpu_precision(GemmPrecision::kF32);
    std::vector<ag::Var> v;
    for (const Tensor& t : {rand({40, unfused * 128}, 71), rand({128, 16}, 72), rand({16}, 73), rand({16, 128}, 74),
                            rand({128}, 75), Tensor::full(Shape{1}, 1.7, DType::F32)})
      v.push_back(ag::Var::param(t));
    const ag::Var y =
        ag::squeeze_excite_attention(v[0], v[1], v[2], v[3], v[4], v[5], unfused, ag::Var(), Act::kGelu, {});
    set_gemm_cpu_precision(GemmPrecision::kBf16);
    CHECK_NOTHROW(ag::backward(y, rand({40, unfused * 2 * 128}, 76)));
    CHECK(v[1].grad().defined());
  }
  for (const GemmPrecision precision : {GemmPrecision::kF32, GemmPrecision::kBf16}) {
    if (precision == GemmPrecision::kBf16 && !bf16) {
      MESSAGE("SKIP: the bf16 half needs AVX-512 products and AVX512-BF16");
      continue;
    }
    const PrecisionRestored products(precision);
    for (const Case c : {Case{9, 64, 48}, Case{9, 64, 128}, Case{150, 16, 16}, Case{3, 512, 32}, Case{7, 48, 32},
                         Case{1, 2048, 16}, Case{150, 16, 32}, Case{40, 32, 128}, Case{301, 1, 32}})
      for (int variant = 0; variant < 4; ++variant) {
        const auto [N, C, F] = c;
        CAPTURE(gemm_precision_name(precision));
        CAPTURE(C);
        CAPTURE(variant);
        const bool res = variant != 0, bias = variant != 3;
        const Act act = variant == 0 ? Act::kGelu : variant == 1 ? Act::kNone : Act::kGelu;
        const ag::FusedDropout drop{variant >= 2 ? 0.3 : 0.0, 99, variant == 2};
        const std::vector<Tensor> in{rand({N, C * F}, 81),
                                     rand({F, 16}, 82),
                                     bias ? rand({16}, 83) : Tensor(),
                                     rand({16, F}, 84),
                                     bias ? rand({F}, 85) : Tensor(),
                                     Tensor::full(Shape{1}, 1.7, DType::F32),
                                     res ? rand({N, C * 2 * F}, 86) : Tensor()};
        const Tensor dy = rand({N, C * 2 * F}, 87);
        set_num_threads(1);
        const auto composed = run_attention(false, in, dy, C, act, drop);
        for (int threads : {1, 2, 3}) {
          CAPTURE(threads);
          set_num_threads(threads);
          const auto fused = run_attention(true, in, dy, C, act, drop);
          REQUIRE(fused.size() == composed.size());
          for (size_t k = 0; k < fused.size(); ++k) {
            CAPTURE(k);  // y, then the gradients of x, w1, (b1,) w2, (b2,) beta, (residual)
            CHECK(fused[k] == composed[k]);
          }
        }
      }
  }
  // the kernel refuses what it does not take; the op names what does not fit
  const Tensor x = rand({2, 48 * 32}, 88), w1 = rand({32, 16}, 89), w2 = rand({16, 32}, 90), beta = rand({1}, 91);
  std::vector<float> y(2 * 48 * 64), h(2 * 48 * 16);
  CHECK_THROWS_WITH_AS(squeeze_excite_attention_forward_cpu(y.data(), h.data(), x.f32(), w1.f32(), nullptr, w2.f32(),
                                                            nullptr, nullptr, 2, 48, 32, 16, beta.f32(), Act::kNone,
                                                            {}),
                       doctest::Contains("squeeze_excite_attention: no host kernel for 48 configs of 32 channels"),
                       Error);
  const ag::Var xv = ag::Var(rand({2, 64 * 32}, 92)), w1v(w1), w2v(w2), bv(beta);
  CHECK_THROWS_WITH_AS(ag::squeeze_excite_attention(xv, w1v, ag::Var(), w2v, ag::Var(), bv, 5),
                       doctest::Contains("squeeze_excite_attention: f32[2, 2048] on cpu is not [N, C*F] for C = 5"),
                       Error);
  CHECK_THROWS_WITH_AS(ag::squeeze_excite_attention(xv, ag::Var(rand({31, 16}, 93)), ag::Var(), w2v, ag::Var(), bv, 64),
                       doctest::Contains("squeeze_excite_attention: w1 f32[31, 16]"), Error);
  CHECK_THROWS_WITH_AS(ag::squeeze_excite_attention(xv, w1v, ag::Var(), w2v, ag::Var(), bv, 64,
                                                    ag::Var(rand({2, 64 * 32}, 94)), Act::kGelu),
                       doctest::Contains("residual f32[2, 2048] on cpu is not the output's [2, 4096]"), Error);
  CHECK_THROWS_WITH_AS(ag::squeeze_excite_attention(xv, w1v, ag::Var(), w2v, ag::Var(), ag::Var(rand({2}, 95)), 64),
                       doctest::Contains("beta must have one element"), Error);
}

TEST_CASE("cuda ops: squeeze_excite_attention (the two ops on a GPU) matches the host, value and gradient") {
  GNN_SKIP_UNLESS_CUDA();
  const Tensor x = rand({5, 64 * 32}, 96), w1 = rand({32, 16}, 97), b1 = rand({16}, 98), w2 = rand({16, 32}, 99),
               b2 = rand({32}, 100), beta = Tensor::full(Shape{1}, 1.5, DType::F32), res = rand({5, 64 * 64}, 101);
  check_op("squeeze_excite_attention", {x, w1, b1, w2, b2, beta, res}, [](auto& v, auto&) {
    return ag::squeeze_excite_attention(v[0], v[1], v[2], v[3], v[4], v[5], 64, v[6], Act::kGelu);
  });
}

TEST_CASE("cuda ops: squeeze_excite (the composed ops on a GPU) matches the host, value and gradient") {
  GNN_SKIP_UNLESS_CUDA();
  const Tensor x = rand({77, 32}, 71), w1 = rand({32, 16}, 72), b1 = rand({16}, 73), w2 = rand({16, 32}, 74),
               b2 = rand({32}, 75);
  check_op("squeeze_excite", {x, w1, b1, w2, b2},
           [](auto& v, auto&) { return ag::squeeze_excite(v[0], v[1], v[2], v[3], v[4]); });
}
