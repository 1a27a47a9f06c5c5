// Reductions over a row in a fixed order that vectorises: kLanes partial results, lane j the terms of
// columns j, j + kLanes, ... in order, then the lanes combined pairwise (halving). A single chain over
// the row (each add waiting on the last, and no vectors: the compiler may not reorder float adds) ran
// 3-9x torch's time on rows of 256 (layer norm, softmax; docs/benchmarks.md, the seventieth session).
// The references reduce in this order too, so the CPU kernels that run them per row keep their bits (the
// CUDA kernels reduce in their own orders).
#pragma once
#include <cstdint>

#include "base/common.h"

namespace gnn {

constexpr int kLanes = 16;

// op over term(0), ..., term(F - 1) in the lanes' order, each lane starting from init. The terms are formed
// kStage at a time by a plain loop (which vectorises a term as long as an exp: GCC left one formed inside
// the lanes' adds scalar), then taken into the lanes.
template <class Acc, class Term, class Op>
GNN_INLINE inline Acc lane_reduce(int64_t F, Acc init, Term term, Op op) {
  constexpr int64_t kStage = 256;
  static_assert(kStage % kLanes == 0, "a stage ends on a whole round of the lanes");
  Acc acc[kLanes], t[kStage];
  for (int j = 0; j < kLanes; ++j) acc[j] = init;
  for (int64_t f0 = 0; f0 < F; f0 += kStage) {
    const int64_t n = F - f0 < kStage ? F - f0 : kStage;
    for (int64_t i = 0; i < n; ++i) t[i] = term(f0 + i);
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j) acc[j] = op(acc[j], t[i + j]);
    for (int j = 0; i + j < n; ++j) acc[j] = op(acc[j], t[i + j]);
  }
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] = op(acc[j], acc[j + w]);
  return acc[0];
}

// The sum of term(0), ..., term(F - 1) in Acc (float, or double for the norms' long sums).
template <class Acc, class Term>
GNN_INLINE inline Acc lane_sum(int64_t F, Term term) {
  return lane_reduce<Acc>(F, Acc(0), term, [](Acc a, Acc b) GNN_INLINE { return a + b; });
}

}  // namespace gnn
