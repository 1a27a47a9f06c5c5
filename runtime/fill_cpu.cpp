#include <cstring>

#include "runtime/fill.h"

namespace gnn {

namespace {
template <class T>
void fill_typed(void* y, const void* value, int64_t n) {
  T v;
  std::memcpy(&v, value, sizeof(T));
  T* p = static_cast<T*>(y);
#pragma omp parallel for schedule(static) if (n > (int64_t(1) << 18))
  for (int64_t i = 0; i < n; ++i) p[i] = v;
}
}  // namespace

void fill_cpu(void* y, const void* value, size_t elem_size, int64_t n) {
  switch (elem_size) {
    case 1:
      fill_typed<uint8_t>(y, value, n);
      break;
    case 2:
      fill_typed<uint16_t>(y, value, n);
      break;
    case 4:
      fill_typed<uint32_t>(y, value, n);
      break;
    case 8:
      fill_typed<uint64_t>(y, value, n);
      break;
    default:
      break;  // callers pass dtype sizes only
  }
}

}  // namespace gnn
