// The progress bar of gnn train: epoch, batch, running loss, configs/s and the time left, redrawn on
// one line of stderr (a terminal by default; --progress bar|lines).
#pragma once
#include <cstdint>
#include <string>

namespace gnn::train {

std::string fmt_duration(double seconds);  // "m:ss" or "h:mm:ss"; "?" when unknown

class Progress {
 public:
  explicit Progress(int mode);  // 1: a bar, 0: none, -1: a bar on a terminal
  void update(int64_t epoch, int64_t epochs, int64_t batch, int64_t batches, double loss, double cps, double eta) const;
  void end_line() const;

 private:
  bool bar_;
};

}  // namespace gnn::train
