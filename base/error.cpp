#include "base/error.h"

#include <cstdlib>

namespace gnn::detail {

void throw_error(const char* file, int line, std::string message) {
  throw Error(std::move(message), str_cat(file, ":", line));
}

}  // namespace gnn::detail

namespace gnn {

// Declared in base/cuda_check.h; plain C++ so that the check's header needs nothing but the toolkit.
bool cuda_sync_after_launch() {
  static const bool on = [] {
    const std::string v = std::getenv("GNN_SYNC") ? std::getenv("GNN_SYNC") : "";
    GNN_CHECK(v.empty() || v == "0" || v == "1", "GNN_SYNC=", v, ": expected 1 (synchronise after every launch) or 0");
    return v == "1";
  }();
  return on;
}

}  // namespace gnn
