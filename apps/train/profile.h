// gnn train --profile: where a training step's time goes. Per phase (building the batch, forward,
// loss, backward, the update: clipping, optimiser, finiteness check) and, inside the forward and
// backward, per op (autograd/var.h's op timing), as milliseconds a step and shares of the step; and the
// step's floor: the FLOPs of its GEMMs at this machine's GEMM peak, measured in the same process at
// the end (a square SGEMM on the run's threads, best of 5; on a GPU, cuBLAS's SGEMM on the device, the
// best rate of sizes 256, 1024 and 4096, best of 3 each, timed by CUDA events). The first step of the
// process is left out (its pages, caches and lazy set-up are cold), unless it is the only one. On a GPU
// every op and phase is waited for before its time is read (autograd/var.h), so the times are the
// kernels' and the step runs slower than an unprofiled one: read the shares.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "autograd/var.h"
#include "io/json.h"
#include "runtime/dtype.h"

namespace gnn::train {

class StepProfile {
 public:
  explicit StepProfile(Device device = Device::cpu()) : device_(device) {}
  void wait() const;  // on a GPU, until the work queued so far is done; call before reading the clock
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
  int64_t flops() const;  // the GEMM FLOPs so far on the run's device
  Device device_;
  int64_t flops_at_start_ = 0;
  mutable int64_t peak_n_ = 0;  // the peak's GEMM size
  mutable double peak_gflops_ = 0;
};

}  // namespace gnn::train
