// gnn train --profile: where a training step's time goes. Per phase (building the batch, forward,
// loss, backward, the update: clipping, optimiser, finiteness check) and, inside the forward and
// backward, per op (autograd/var.h's op timing), as milliseconds a step and shares of the step; and the
// step's floor: the FLOPs of its GEMMs at this machine's GEMM peak, measured in the same process at
// the end (a square SGEMM on the run's threads, best of 5). The first step of the process is left out
// (its pages, caches and lazy set-up are cold), unless it is the only one. Host time: on a GPU the ops
// are queued, so the per-op times are launch times unless GNN_SYNC=1.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "autograd/var.h"
#include "io/json.h"

namespace gnn::train {

class StepProfile {
 public:
  void begin_step();  // starts the op timing and the GEMM FLOP count of this step
  void phase(const char* name, double seconds);
  void end_step(double step_seconds);
  Json json() const;  // measures the GEMM peak (once)
  std::string table() const;

 private:
  struct Totals {
    int64_t steps = 0;
    double step_s = 0;
    int64_t flops = 0;
    std::map<std::string, double> phases;
    std::map<std::string, ag::OpTime> ops;
  };
  const Totals& shown() const { return rest_.steps > 0 ? rest_ : first_; }

  Totals first_, rest_;  // the process's first step, and every later one
  int64_t flops_at_start_ = 0;
  mutable double peak_gflops_ = 0;
};

}  // namespace gnn::train
