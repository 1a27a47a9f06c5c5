// kernels/vmath.h against the f64 functions: the error in ULPs over the float range (every 4099th bit
// pattern of both signs, every 997th float of [-8, 8], every float near the formulas' switch points), the
// special values, and the same bits from a vectorised loop as from scalar calls.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "base/common.h"
#include "kernels/activation.h"
#include "kernels/vmath.h"
#include "testing.h"

using namespace gnn;

namespace {

enum class Fn { kExp, kExpm1, kLog, kErf, kTanh, kSigmoid };
constexpr Fn kAll[] = {Fn::kExp, Fn::kExpm1, Fn::kLog, Fn::kErf, Fn::kTanh, Fn::kSigmoid};

const char* fn_name(Fn f) {
  constexpr const char* names[] = {"exp", "expm1", "log", "erf", "tanh", "sigmoid"};
  return names[int(f)];
}

float bound(Fn f) {
  const vm::UlpBounds& b = vm::kVmathUlp;
  const float bounds[] = {b.exp, b.expm1, b.log, b.erf, b.tanh, b.sigmoid};
  return bounds[int(f)];
}

double reference(Fn f, float xf) {
  const double x = xf;
  switch (f) {
    case Fn::kExp:
      return std::exp(x);
    case Fn::kExpm1:
      return std::expm1(x);
    case Fn::kLog:
      return std::log(x);
    case Fn::kErf:
      return std::erf(x);
    case Fn::kTanh:
      return std::tanh(x);
    default:
      return 1.0 / (1.0 + std::exp(-x));
  }
}

// One call, kept out of line: the compiler's scalar code for the function.
[[gnu::noinline]] float scalar(Fn f, float x) {
  switch (f) {
    case Fn::kExp:
      return vm::exp(x);
    case Fn::kExpm1:
      return vm::expm1(x);
    case Fn::kLog:
      return vm::log(x);
    case Fn::kErf:
      return vm::erf(x);
    case Fn::kTanh:
      return vm::tanh(x);
    default:
      return vm::sigmoid(x);
  }
}

// Loops of calls, as the kernels write them: vectorised in the AVX2 clone.
GNN_CPU_CLONES void map_all(Fn f, float* y, const float* x, int64_t n) {
  switch (f) {
    case Fn::kExp:
      for (int64_t i = 0; i < n; ++i) y[i] = vm::exp(x[i]);
      break;
    case Fn::kExpm1:
      for (int64_t i = 0; i < n; ++i) y[i] = vm::expm1(x[i]);
      break;
    case Fn::kLog:
      for (int64_t i = 0; i < n; ++i) y[i] = vm::log(x[i]);
      break;
    case Fn::kErf:
      for (int64_t i = 0; i < n; ++i) y[i] = vm::erf(x[i]);
      break;
    case Fn::kTanh:
      for (int64_t i = 0; i < n; ++i) y[i] = vm::tanh(x[i]);
      break;
    default:
      for (int64_t i = 0; i < n; ++i) y[i] = vm::sigmoid(x[i]);
  }
}

// Error of y against the exact value r in units of the last place of r rounded to float (2^-149 for
// the denormals); infinite when y and r disagree on being finite or NaN.
double ulp_error(float y, double r) {
  if (std::isnan(r)) return std::isnan(y) ? 0 : INFINITY;
  const float rf = float(r);
  if (std::isinf(rf) || std::isinf(y)) return rf == y ? 0 : INFINITY;
  if (std::isnan(y)) return INFINITY;
  // the spacing of the floats in r's own binade (not rf's: r just below 2^k may round up to it)
  const double ulp = r == 0 ? std::ldexp(1.0, -149) : std::ldexp(1.0, std::max(std::ilogb(r), -126) - 23);
  return std::fabs(double(y) - r) / ulp;
}

std::vector<float> sample_floats() {
  std::vector<float> xs;
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 4099) xs.push_back(std::bit_cast<float>(uint32_t(b)));
  for (uint32_t b = 0; b <= std::bit_cast<uint32_t>(8.0f); b += 997)  // every 997th float of [-8, 8]
    xs.push_back(std::bit_cast<float>(b)), xs.push_back(-std::bit_cast<float>(b));
  // every float within 256 of each place where a formula switches or a result leaves the normal range
  for (float at : {0.0f, 0.625f, 1.0f, 4.0f, 0.34657359f, 16.98f, 17.68f, 88.7228394f, 87.3365447f, 103.972084f,
                   1.17549435e-38f, 0.70710678f, 1.41421356f, 2.0f, 1.5f, 6.0f}) {  // (1.5, 6: gelu_grad)
    for (float s : {at, -at}) {
      float x = s;
      for (int i = 0; i < 256; ++i) x = std::nextafter(x, -INFINITY);
      for (int i = 0; i < 512; ++i, x = std::nextafter(x, INFINITY)) xs.push_back(x);
    }
  }
  return xs;
}

}  // namespace

struct Worst {
  double ulp = 0;
  float x = 0;
  int64_t n = 0;
  void add(Fn f, const std::vector<float>& xs, std::vector<float>& ys) {
    ys.resize(xs.size());
    map_all(f, ys.data(), xs.data(), int64_t(xs.size()));
    for (size_t i = 0; i < xs.size(); ++i) {
      const double e = ulp_error(ys[i], reference(f, xs[i]));
      if (!(e <= ulp)) ulp = e, x = xs[i];
    }
    n += int64_t(xs.size());
  }
};

TEST_CASE("vmath: within the stated ULP bound of the f64 function over the float range") {
  // GNN_VMATH_EXHAUSTIVE=1 checks every float instead (about 10 minutes a function on one core).
  const bool every = std::getenv("GNN_VMATH_EXHAUSTIVE") != nullptr;
  const std::vector<float> sample = every ? std::vector<float>{} : sample_floats();
  std::vector<float> xs, ys;
  for (Fn f : kAll) {
    Worst w;
    if (every) {
      for (uint64_t b0 = 0; b0 < (uint64_t(1) << 32); b0 += uint64_t(1) << 24) {
        xs.clear();
        for (uint64_t b = b0; b < b0 + (uint64_t(1) << 24); ++b) xs.push_back(std::bit_cast<float>(uint32_t(b)));
        w.add(f, xs, ys);
      }
    } else {
      w.add(f, sample, ys);
    }
    MESSAGE(std::string(fn_name(f)), ": max error ", w.ulp, " ULP at x = ", w.x, " over ", w.n, " floats");
    CHECK_MESSAGE(w.ulp <= bound(f), std::string(fn_name(f)), " at ", w.x);
  }
}

TEST_CASE("vmath: special values") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float den = std::numeric_limits<float>::denorm_min(), tiny = 1e-40f;
  for (Fn f : kAll) {
    CAPTURE(fn_name(f));
    CHECK(std::isnan(scalar(f, nan)));
    CHECK(std::isnan(scalar(f, -nan)));
  }
  CHECK(vm::exp(inf) == inf);
  CHECK(vm::exp(-inf) == 0.0f);
  CHECK(vm::exp(0.0f) == 1.0f);
  CHECK(vm::exp(-0.0f) == 1.0f);
  CHECK(vm::exp(88.7f) < inf);
  CHECK(vm::exp(88.73f) == inf);
  CHECK(vm::exp(-103.0f) > 0.0f);  // a denormal
  CHECK(vm::exp(-104.0f) == 0.0f);
  CHECK(vm::exp(den) == 1.0f);
  CHECK(vm::expm1(inf) == inf);
  CHECK(vm::expm1(-inf) == -1.0f);
  CHECK(vm::expm1(tiny) == tiny);
  CHECK(std::signbit(vm::expm1(-0.0f)));
  CHECK(vm::log(0.0f) == -inf);
  CHECK(vm::log(-0.0f) == -inf);
  CHECK(std::isnan(vm::log(-1.0f)));
  CHECK(std::isnan(vm::log(-inf)));
  CHECK(vm::log(inf) == inf);
  CHECK(vm::log(1.0f) == 0.0f);
  CHECK(vm::log(den) == float(std::log(double(den))));
  CHECK(vm::erf(inf) == 1.0f);
  CHECK(vm::erf(-inf) == -1.0f);
  CHECK(vm::erf(tiny) != 0.0f);
  CHECK(std::signbit(vm::erf(-0.0f)));
  CHECK(vm::tanh(inf) == 1.0f);
  CHECK(vm::tanh(-inf) == -1.0f);
  CHECK(vm::tanh(100.0f) == 1.0f);
  CHECK(vm::tanh(tiny) == tiny);
  CHECK(std::signbit(vm::tanh(-0.0f)));
  CHECK(vm::sigmoid(inf) == 1.0f);
  CHECK(vm::sigmoid(-inf) == 0.0f);
  CHECK(vm::sigmoid(0.0f) == 0.5f);
  CHECK(vm::sigmoid(-100.0f) > 0.0f);  // e^-100: a normal float, not 0
}

namespace {
// How many of ys (a vectorised loop's results over xs) differ in bits from the scalar call's, NaN
// matching any NaN.
template <class Scalar>
int64_t bits_differ(const std::vector<float>& xs, const std::vector<float>& ys, Scalar scalar) {
  int64_t differ = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float s = scalar(xs[i]);
    differ += std::memcmp(&s, &ys[i], sizeof s) != 0 && !(std::isnan(s) && std::isnan(ys[i]));
  }
  return differ;
}
}  // namespace

TEST_CASE("vmath: a vectorised loop gives the bits of scalar calls") {
#if defined(__x86_64__) && defined(__GNUC__)
  if (!__builtin_cpu_supports("x86-64-v3"))
    MESSAGE("this CPU is not x86-64-v3 (AVX2 with FMA): the loop runs as the baseline clone");
#endif
  const std::vector<float> xs = sample_floats();
  std::vector<float> ys(xs.size());
  for (Fn f : kAll) {
    map_all(f, ys.data(), xs.data(), int64_t(xs.size()));
    const int64_t differ = bits_differ(xs, ys, [f](float x) { return scalar(f, x); });
    CHECK_MESSAGE(differ == 0, std::string(fn_name(f)), ": ", differ, " results differ from the scalar call");
  }
}

namespace {
GNN_CPU_CLONES void map_gelu_derivative(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = act_derivative<float>(Act::kGelu, x[i], 0.0f);
}
}  // namespace

TEST_CASE("vmath: GELU's derivative (vm::gelu_grad's two polynomials) vectorised gives the scalar bits") {
  const std::vector<float> xs = sample_floats();
  std::vector<float> ys(xs.size());
  map_gelu_derivative(ys.data(), xs.data(), int64_t(xs.size()));
  const int64_t differ = bits_differ(xs, ys, [](float x) { return act_derivative<float>(Act::kGelu, x, 0.0f); });
  CHECK_MESSAGE(differ == 0, differ, " of ", xs.size(), " differ from the scalar call");
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(std::isnan(act_derivative<float>(Act::kGelu, std::numeric_limits<float>::quiet_NaN(), 0.0f)));
  CHECK(act_derivative<float>(Act::kGelu, -30.0f, 0.0f) == 0.0f);  // e^(-450): 0, as is Phi
  CHECK(act_derivative<float>(Act::kGelu, 30.0f, 0.0f) == 1.0f);
  CHECK(act_derivative<float>(Act::kGelu, -inf, 0.0f) == 0.0f);
  CHECK(act_derivative<float>(Act::kGelu, inf, 0.0f) == 1.0f);
  CHECK(act_derivative<float>(Act::kGelu, 0.0f, 0.0f) == 0.5f);
  CHECK(act_derivative<float>(Act::kGelu, -0.0f, 0.0f) == 0.5f);
  CHECK(act_derivative<float>(Act::kGelu, 1e-40f, 0.0f) == 0.5f);  // a denormal
}

TEST_CASE("vmath: GELU and its derivative in float within a few units of 2^-24 of the f64 functions") {
  // GELU from erf; its derivative from vm::gelu_grad's two polynomials, whose absolute error is stated
  // as 2.5 x 2^-24 (2.24 measured over every float). Every 37th float of [-12, 12], and every float
  // within 64 of the derivative's switch points (|x| = 1.5 and 6); GELU's error relative to max(1, |x|).
  std::vector<float> xs;
  for (uint32_t b = 0; b <= std::bit_cast<uint32_t>(12.0f); b += 37) xs.push_back(std::bit_cast<float>(b));
  for (const float edge : {1.5f, 6.0f})
    for (int k = -64; k <= 64; ++k) xs.push_back(std::bit_cast<float>(std::bit_cast<uint32_t>(edge) + uint32_t(k)));
  double worst_f = 0, worst_d = 0;
  float at_f = 0, at_d = 0;
  for (const float xp : xs)
    for (const float x : {xp, -xp}) {
      const double xd = x, cdf = 0.5 * (1.0 + std::erf(xd / std::sqrt(2.0)));
      const double gelu = xd * cdf, grad = cdf + xd * std::exp(-0.5 * xd * xd) / std::sqrt(2.0 * M_PI);
      const double ef = std::fabs(act_value<float>(Act::kGelu, x, 0.0f) - gelu) / std::max(1.0, std::fabs(xd));
      const double ed = std::fabs(act_derivative<float>(Act::kGelu, x, 0.0f) - grad);
      if (ef > worst_f) worst_f = ef, at_f = x;
      if (ed > worst_d) worst_d = ed, at_d = x;
    }
  const double unit = std::ldexp(1.0, -24);
  MESSAGE("GELU: ", worst_f / unit, " x 2^-24 at ", at_f, "; its derivative: ", worst_d / unit, " x 2^-24 at ", at_d);
  CHECK(worst_f <= 4 * unit);
  CHECK(worst_d <= 2.5 * unit);
}
