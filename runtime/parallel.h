// CPU threading: how many OpenMP threads the kernels use. 1 in a build without OpenMP.
#pragma once

namespace gnn {

int num_threads();
void set_num_threads(int n);  // n >= 1; throws gnn::Error otherwise
bool openmp_enabled();

}  // namespace gnn
