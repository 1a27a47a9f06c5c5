// Segment training that computes only what its backward reads (layout-resmodel, --segment-backward rows).
//
// With --segment S the official layout baseline lets the gradient through a random range of S rows of
// each graph alone, at every layer's output (tpu_graphs layout training). Cutting the gradient there
// (`segment` in blocks.h, --segment-backward mask) still runs the forward and the backward on every row and
// keeps every row's activations on the tape. SegmentPass gives the same gradient from two passes:
//
//   1. the whole batch, without a tape: at every layer's output it keeps the values of H, the rows outside
//      the segment that a segment row reads in the next layer (its neighbours in the GCN graph), and at the
//      readout the sums over the rows outside the segment and H;
//   2. the batch's segment view (Batch::segment_view: the segment rows and H alone, each segment row
//      aggregating at its whole-graph weights), on the tape, with H's rows replaced by the kept values at
//      every layer's output (so they pass no gradient, as the cut does) and the kept sums added to its own.
//
// A segment row's value in pass 2 is its value in the whole batch: it reads the segment's rows, computed
// the same way, and H's, put in place. The tape holds |S| + |H| rows per layer instead of N, and the
// backward runs on them alone; pass 1 costs one forward over the batch without storing it.
#pragma once
#include <vector>

#include "apps/train/data.h"

namespace gnn::train {

class SegmentPass {
 public:
  explicit SegmentPass(const Batch& b);  // b: a batch with a segment (keep_grad)
  const Batch& view() const { return view_; }
  void replay() { replaying_ = true, next_ = 0; }  // after pass 1, before pass 2

  // A layer's output, in the same order in both passes: plain [rows, C*F] or config-shared.
  ag::Var cut(const ag::Var& x);
  nn::SharedRows cut(const nn::SharePlan& plan, const nn::SharedRows& x);
  // Per (graph, config) sums [G*C, F] at the last level, over every row of each graph or over its
  // configurable rows; `b` is the batch the pass runs on (the whole one, then the view).
  ag::Var sum(const Batch& b, const ag::Var& x);
  ag::Var sum(const Batch& b, const nn::SharePlan& plan, const nn::SharedRows& x);
  ag::Var configurable_sum(const Batch& b, const ag::Var& x);
  ag::Var configurable_sum(const Batch& b, const nn::SharedRows& x);
  // A sum [G*C, F] over each graph's whole size: the mean pool.
  ag::Var mean(const ag::Var& sum) const;

 private:
  ag::Var keep_or_add(const ag::Var& view_sum, const ag::Var& outside_sum);
  Batch::SegmentRows rows_;  // (before view_, which its constructor fills in)
  Batch view_;
  int64_t graphs_, configs_;
  bool replaying_ = false;
  size_t next_ = 0;
  std::vector<Tensor> kept_;  // pass 1's values, in call order
};

// A model's forward with segment training through the segment's rows: run(b, nullptr) when b has no
// segment, gradients are off, or `rows` is false (--segment-backward mask: the cuts of blocks.h); else
// run(b, &pass) untaped, then run(pass.view(), &pass) taped, whose result it returns. `run` stands the
// pass's cut in for each layer output's cut and its sums for the readout's pools.
template <class Run>
ag::Var forward_segment_rows(const Batch& b, bool rows, Run&& run) {
  if (!rows || !b.keep_grad.defined() || !ag::grad_enabled()) return run(b, nullptr);
  SegmentPass pass(b);
  {
    ag::NoGrad untaped;
    run(b, &pass);
  }
  pass.replay();
  return run(pass.view(), &pass);
}

}  // namespace gnn::train
