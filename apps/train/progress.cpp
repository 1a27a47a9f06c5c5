#include "apps/train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace gnn::train {

std::string fmt_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  const int64_t t = int64_t(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(t / 3600), (long long)(t / 60 % 60),
                  (long long)(t % 60));
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", (long long)(t / 60), (long long)(t % 60));
  return buf;
}

Progress::Progress(int mode) : bar_(mode == 1 || (mode < 0 && ::isatty(::fileno(stderr)))) {}

void Progress::update(int64_t epoch, int64_t epochs, int64_t batch, int64_t batches, double loss, double cps,
                      double eta) const {
  if (!bar_) return;
  const int width = 24, done = int(double(width) * double(batch) / double(std::max<int64_t>(1, batches)));
  std::fprintf(stderr, "\repoch %lld/%lld [%s%s] %lld/%lld  loss %.4f  %.0f configs/s  ETA %s   ", (long long)epoch,
               (long long)epochs, std::string(size_t(done), '#').c_str(),
               std::string(size_t(width - done), '.').c_str(), (long long)batch, (long long)batches, loss, cps,
               fmt_duration(eta).c_str());
  std::fflush(stderr);
}

void Progress::end_line() const {
  if (bar_) std::fprintf(stderr, "\n");
}

}  // namespace gnn::train
