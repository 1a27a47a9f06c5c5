#include "runtime/parallel.h"

#include "base/error.h"

#ifdef GNN_WITH_OPENMP
#include <omp.h>
#endif

namespace gnn {

#ifdef GNN_WITH_OPENMP
int num_threads() { return omp_get_max_threads(); }
void set_num_threads(int n) {
  GNN_CHECK(n >= 1, "thread count must be at least 1, got ", n);
  omp_set_num_threads(n);
}
bool openmp_enabled() { return true; }
#else
int num_threads() { return 1; }
void set_num_threads(int n) { GNN_CHECK(n >= 1, "thread count must be at least 1, got ", n); }
bool openmp_enabled() { return false; }
#endif

}  // namespace gnn
