// CPU threading: how many OpenMP threads the kernels use. 1 in a build without OpenMP.
#pragma once

namespace gnn {

int num_threads();
void set_num_threads(int n);  // n >= 1; throws gnn::Error otherwise
bool openmp_enabled();
// Starts the threads of num_threads() now, or throws gnn::Error naming the count and the reason: libgomp
// itself would print one line and exit at the first parallel loop that could not start them.
void start_threads();

}  // namespace gnn
