// Moving a value between devices:
//   to:  y = x on `device`;  dx = dy copied back to x's device
// A loss computed on the host (nn/loss.cpp) takes the host copy of a GPU prediction, so the loss
// value and the seed of the backward live on the host and reading them never waits for the device;
// the gradient goes back in one queued upload.
#include "autograd/dispatch.h"
#include "autograd/ops.h"

namespace gnn::ag {

Var to_device(const Var& x, Device device) {
  GNN_CHECK(x.defined(), "to_device: x is an undefined Var");
  if (x.device() == device) return x;
  return record("to_device", x.value().to(device), {x},
                [x = GradRef(x)](const Tensor& dy) { accumulate(x, dy.to(x.device())); });
}

}  // namespace gnn::ag
