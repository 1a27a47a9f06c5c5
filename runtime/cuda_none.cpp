// runtime/cuda.h in a build without CUDA: nothing is available, and asking for a device says why.
#include "base/error.h"
#include "runtime/cuda.h"

namespace gnn {
namespace {
[[noreturn]] void no_cuda() { GNN_FAIL("this build of gnn has no CUDA support (configure with nvcc on PATH)"); }
}  // namespace

bool cuda_available() { return false; }
std::string cuda_status() { return "built without CUDA"; }
int cuda_device_count() { return 0; }
void* cuda_alloc(size_t, int) { no_cuda(); }
void cuda_free(void*, int) { no_cuda(); }
MemoryStats cuda_memory_stats(int) { no_cuda(); }
MemoryStats cuda_graph_memory_stats(int) { no_cuda(); }
void cuda_empty_cache(int) { no_cuda(); }
void cuda_reset_peak(int) { no_cuda(); }
Stream cuda_stream(int) { no_cuda(); }
BlasHandle cuda_blas(int) { no_cuda(); }
void* cuda_sparse(int) { no_cuda(); }
void cuda_synchronize(int) { no_cuda(); }
void cuda_copy(void*, Device, const void*, Device, size_t) { no_cuda(); }
void cuda_upload(void*, int, const void*, size_t) { no_cuda(); }
void cuda_upload(void*, int, const std::vector<UploadPiece>&) { no_cuda(); }
MemoryStats cuda_pinned_stats() { no_cuda(); }
void cuda_set_device(int) { no_cuda(); }
int cuda_current_device() { no_cuda(); }
void* cuda_alloc_async(size_t, int, Stream) { no_cuda(); }
void cuda_free_async(void*, int, Stream) { no_cuda(); }
void cuda_copy_2d_on(void*, size_t, const void*, size_t, size_t, size_t, int, Stream) { no_cuda(); }
void cuda_download_on(void*, const void*, size_t, int, Stream) { no_cuda(); }
void* cuda_malloc_unpooled(size_t, int) { no_cuda(); }
void cuda_free_unpooled(void*, int) { no_cuda(); }
void cuda_device_synchronize(int) { no_cuda(); }
Stream cuda_stream_create(int) { no_cuda(); }
void cuda_stream_destroy(Stream, int) { no_cuda(); }
void cuda_stream_synchronize(Stream, int) { no_cuda(); }
int64_t cuda_host_waits() { return 0; }  // never waited: there is no device
CudaGraph::CudaGraph(int, const std::function<void()>&, Uploads) : device_(0) { no_cuda(); }
CudaGraph::~CudaGraph() = default;
void CudaGraph::replay() { no_cuda(); }
double cuda_time_ms(int, const std::function<void()>&) { no_cuda(); }

}  // namespace gnn
