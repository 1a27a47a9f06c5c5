// CUDA graphs of a training step on the GPU (gnn train --cuda-graphs N): where a batch repeats with the
// same structure (one program, C fresh configs per step: the full-graph training), the forward
// and the backward are captured once each and replayed, so a step of a few hundred small kernels costs
// two graph launches instead of one host launch per kernel.
//
// A step from graphs:
//   copy the batch's float inputs (Batch::float_inputs) into the entry's device batch
//   replay the forward graph                 -> pred, at the address the capture gave it
//   pred to the host (wait 1), the loss and its gradient dpred there (a tape scope of its own), f64 as
//   in the eager step; dpred up into the entry's fixed buffer (queued)
//   replay the backward graph                -> every parameter's gradient, at fixed addresses, handed
//                                               back to the parameters
// The clipping (wait 2: it reads the gradient norm) and the optimiser then run as in the eager step, so
// the host waits per step stay at two. The kernels, their order and their inputs are the eager step's,
// so a run with graphs gives the same bits as one without (tested on the emulator).
//
// Which batches: a batch is known by its structure: graph ids, sizes, every index array (opcode, graph
// ranges, edges, configurable nodes, the recipe-only features that are not float inputs) compared byte for
// byte, and the shapes of its float inputs.
// Uploads a captured forward makes from the host (index arrays an op copies up per call) are snapshots
// (runtime/cuda.h, CudaGraph::Uploads::kSnapshot), right because that structure is the same on every
// replay. A batch is captured on its third sight: the first runs eagerly, the second eagerly on the
// entry's own device batch (its graphs and plans came prepared with the host batch), the third captures. The
// first N structures seen are kept (each holds its device batch and its graphs' memory); batches of any
// other structure run eagerly. (Evicting instead would thrash when more than N structures take turns.)
// Only a model that says its forward reads nothing else (RankModel::replayable: no dropout or noise, no
// config indices or values read on the host) and a whole-graph batch are taken: a batch with a segment
// (a graph larger than --segment) runs eagerly, as segment_view reads the configs on the host and the
// segment moves every step. A capture that fails (an op that waits for the device) runs the eager step,
// and that structure is not tried again.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "apps/train/recipe.h"
#include "runtime/cuda.h"

namespace gnn::train {

class StepGraphs {
 public:
  StepGraphs(int64_t capacity, Device device);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  struct Step {
    double loss = 0;  // as the eager step's loss.value().item()
    ag::Var pred;  // the prediction, on the host
  };
  // The host loss of a host prediction: what the eager step computes from the device prediction.
  using LossFn = std::function<ag::Var(const ag::Var& pred)>;
  // One step's forward, loss and (when the loss is finite) backward of `host` from graphs: nullptr, with
  // `out` filled and the parameters' gradients set. Otherwise the step runs eagerly on the device batch
  // returned (the entry's own, whose buffers the capture will read, or host moved to the device), valid
  // until the next call.
  const Batch* run(RankModel& model, const std::vector<nn::NamedParam>& params, const Batch& host, const LossFn& loss,
                   Step& out);

  int64_t captured() const { return captured_; }  // forward and backward pairs captured
  int64_t replayed() const { return replayed_; }  // steps run from graphs
  int64_t failed() const { return failed_; }  // structures whose capture failed (they run eagerly)

 private:
  struct Structure;
  struct Entry;
  Entry* find(const Batch& host);
  Entry* add(const Batch& host);
  bool capture(Entry& e, RankModel& model, const std::vector<nn::NamedParam>& params, const LossFn& loss, Step& out);
  void replay(Entry& e, const std::vector<nn::NamedParam>& params, const LossFn& loss, Step& out);

  int64_t capacity_;
  Device device_;
  std::vector<std::unique_ptr<Entry>> entries_;  // oldest first
  Batch scratch_;  // the device batch of an eager step outside the entries
  int64_t captured_ = 0, replayed_ = 0, failed_ = 0;
};

}  // namespace gnn::train
