// The data-parallel side of gnn train (mpirun -np R; docs/scale-out.md). Every rank holds the same
// weights and builds its contiguous share of each step's global batch (dist::shard over the batch's
// graphs); a step's loss is the global batch's loss, so each rank weights its terms by its share of the
// global count they average over, and the gradients summed over the ranks are the one-process gradients.
//
// Per step, three sums over the ranks (dist/comm.h, each with the --comm-timeout):
//   1. the counts the loss terms divide by (groups, pairs or predictions), before the forward;
//   2. the step's sums: the loss, non-finite flags, configs trained, which parameters got a gradient;
//   3. the gradients of those parameters, in one flat f32 buffer on the parameters' device (NCCL on a
//      GPU, MPI on the host), skipped when a rank's loss was not finite (the step is then skipped or
//      stops on every rank alike). Each parameter's gradient becomes its slice of the summed buffer.
// Clipping, the optimiser and the checkpoint then see the same numbers on every rank.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "io/tpugraphs.h"
#include "nn/module.h"

namespace gnn::train {

// What every rank of a job must see alike, as (name, value) pairs in one order.
using RankFields = std::vector<std::pair<std::string, std::string>>;
// Every rank's fields against rank 0's (one allgather, named `what` in a timeout): the first that differs stops
// every rank alike with "rank R's NAME is X, rank 0's Y: HINT", before any rank computes on what it sees.
// `finer(name, rank 0's value, rank R's value, R)` may throw a more precise message first (the one flag of a
// JSON object that differs). A job of one checks nothing.
void check_ranks_agree(
    const RankFields& fields, const std::string& what, const std::string& hint,
    const std::function<void(const std::string&, const std::string&, const std::string&, int)>& finer = {});
// The files a rank reads, for check_ranks_agree: their count and a hash of their paths and sizes (a rank that
// sees other data under the same path, through another mount or a copy, reads other files or other sizes).
std::string files_fingerprint(const std::vector<DatasetFile>& files);

class DataParallel {
 public:
  explicit DataParallel(std::vector<nn::NamedParam> params);

  // The global counts of the loss terms (sums over the ranks of `local`).
  std::vector<double> sum_counts(std::vector<double> local, int64_t step);

  struct StepSums {
    double loss = 0;  // the global batch's loss (each rank's weighted share, summed)
    bool finite = true;  // every rank's loss was finite
    int64_t configs = 0;  // (graph, config) pairs of the global batch
    std::vector<int> culprits;  // ranks whose loss was not finite
  };
  // After the backward: the step's sums, then (all finite) the gradients summed into every rank's params.
  StepSums reduce(double local_loss, bool local_finite, int64_t local_configs, int64_t step);

  // Bytes each rank contributes to the sums of one step (the gradient buffer and the small sums).
  int64_t bytes_per_step() const { return bytes_per_step_; }
  // Seconds this rank spent in the sums over ranks, per step so far: the transfers plus the wait for the
  // slowest rank (a rank with more nodes in its share of a step finishes its backward later).
  double sync_seconds_per_step() const { return steps_ ? sync_seconds_ / double(steps_) : 0.0; }
  // Of which the gradient sum alone (the ranks are in step by then: this is the transfer).
  double grad_seconds_per_step() const { return steps_ ? grad_seconds_ / double(steps_) : 0.0; }

  // Stops with a message naming the rank when the ranks' weights differ (they must never: a fault in the
  // reduction, or ranks started with different flags).
  void check_same_weights(const std::string& when) const;

 private:
  std::vector<nn::NamedParam> params_;
  int64_t total_ = 0, bytes_per_step_ = 0, steps_ = 0;
  double sync_seconds_ = 0, grad_seconds_ = 0;
};

}  // namespace gnn::train
