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
    const char* v = std::getenv("GNN_SYNC");
    return v != nullptr && *v && std::string(v) != "0";  // (empty: as unset)
  }();
  return on;
}

}  // namespace gnn
