#include "runtime/error.h"

namespace gnn::detail {

void throw_error(const char* file, int line, std::string message) {
  throw Error(std::move(message), str_cat(file, ":", line));
}

}  // namespace gnn::detail
