// The standard graph cases every graph kernel is tested on: no nodes, isolated nodes, one node with a
// self-loop, sizes around 8, 32 and 64 (+-1), a power-law degree graph, and a hub whose 10k in-edges
// dwarf any block size. Seeds are fixed; each case carries its name for CAPTURE.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "autograd/dispatch.h"
#include "fd_check.h"
#include "kernels/spmm.h"
#include "runtime/graph.h"

namespace gnn::testing {

struct GraphCase {
  std::string name;
  Graph graph;
};

inline Graph random_graph(int64_t n, int64_t e, uint32_t seed, bool power_law = false) {
  std::mt19937 rng(seed);
  std::vector<int64_t> src(static_cast<size_t>(e)), dst(static_cast<size_t>(e));
  for (int64_t i = 0; i < e; ++i) {
    src[size_t(i)] = int64_t(rng() % uint32_t(n));
    // power law: destination ids drawn as n * u^3 pile up on the low ids
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    dst[size_t(i)] =
        power_law ? std::min<int64_t>(n - 1, int64_t(double(n) * u * u * u)) : int64_t(rng() % uint32_t(n));
  }
  return Graph::from_edges(src.data(), dst.data(), e, n);
}

inline std::vector<GraphCase> standard_graph_cases(uint32_t seed, bool with_hub = true) {
  std::vector<GraphCase> out;
  out.push_back({"empty", Graph::from_edges(nullptr, nullptr, 0, 0)});
  out.push_back({"isolated_nodes", Graph::from_edges(nullptr, nullptr, 0, 5)});
  const int64_t self[] = {0};
  out.push_back({"one_node_self_loop", Graph::from_edges(self, self, 1, 1)});
  for (int64_t n : {7, 8, 9, 31, 32, 33, 63, 64, 65})
    out.push_back({"random_" + std::to_string(n), random_graph(n, 2 * n, seed + uint32_t(n))});
  out.push_back({"power_law_1000", random_graph(1000, 3000, seed, true)});
  if (with_hub) {
    const int64_t n = 10001;
    std::vector<int64_t> src(10000), dst(10000, 0);
    for (int64_t i = 0; i < 10000; ++i) src[size_t(i)] = 1 + i;
    out.push_back({"hub_10k", Graph::from_edges(src.data(), dst.data(), 10000, n)});
  }
  return out;
}

using ag::csr_view;

template <class T>
std::vector<T> random_values(size_t n, uint32_t seed, T lo = T(-1), T hi = T(1)) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d{double(lo), double(hi)};
  std::vector<T> v(n);
  for (T& x : v) x = T(d(rng));
  return v;
}

// torch's amax of the terms term(0 .. n-1), with the term the kernels' max keeps: NaN at the first NaN term
// where any is NaN, else the first of the largest; {0, -1} for no terms. Written apart from the kernels'
// rule (max_takes), as the expectation they are checked against.
struct AmaxFirst {
  float value;
  int64_t arg;
};
template <class Term>
AmaxFirst amax_first(int64_t n, Term term) {
  if (n == 0) return {0.0f, -1};
  for (int64_t i = 0; i < n; ++i)
    if (std::isnan(term(i))) return {NAN, i};
  AmaxFirst best{term(0), 0};
  for (int64_t i = 1; i < n; ++i)
    if (term(i) > best.value) best = {term(i), i};
  return best;
}

// Where a max test puts NaNs in column f of a segment of n terms (seed s tells segments apart): none for f % 3
// == 2, one for f % 3 == 0, two for f % 3 == 1, anywhere in the segment but never only at its start.
inline std::vector<int64_t> nan_terms(int64_t f, int64_t n, int64_t s) {
  if (f % 3 == 2 || n < 2) return {};
  const int64_t a = 1 + (f * 131 + s * 17) % (n - 1), b = (f * 53 + s * 7) % n;
  return f % 3 == 0 ? std::vector<int64_t>{a} : std::vector<int64_t>{a, b};
}

// Largest violation of |got - want| <= atol + rtol |want|, with the first bad index for the message.
struct Mismatch {
  double excess = 0;
  int64_t index = -1;
  double got = 0, want = 0;
};

template <class A, class B>
Mismatch compare(const std::vector<A>& got, const std::vector<B>& want, double atol = 1e-5, double rtol = 1e-4) {
  Mismatch m;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = double(got[i]), w = double(want[i]);
    const double err = std::fabs(g - w) - (atol + rtol * std::fabs(w));
    if (!(err <= 0) && m.index < 0) m = {err, int64_t(i), g, w};
  }
  return m;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

#define GNN_CHECK_CLOSE(GOT_, WANT_, ...)                                                                    \
  do {                                                                                                       \
    const auto gnn_m_ = ::gnn::testing::compare(GOT_, WANT_, ##__VA_ARGS__);                                 \
    CHECK_MESSAGE(gnn_m_.index < 0,                                                                          \
                  "first bad index " << gnn_m_.index << ": got " << gnn_m_.got << ", want " << gnn_m_.want); \
  } while (0)

}  // namespace gnn::testing
