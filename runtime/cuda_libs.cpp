// cuBLAS, cuSPARSE and NCCL, opened on first use instead of at start.
//
// Linked the usual way, these three map about 1 GB of shared objects (cuBLASLt alone is 517 MB) and
// apply half a million relocations in every process, GPU or not: `gnn --version` took 0.1 s and 263 MB
// of resident memory, `import gnn` 255 MB, and under `ulimit -v 1000000` the loader refused to start the
// binary at all. The CPU path never calls them. So libgnn links only the CUDA runtime, and each function
// it calls from these libraries is defined here with the header's own signature (the compiler checks
// each against the header's declaration): the first call opens the library with dlopen, looks the symbol
// up once, and forwards. A library that cannot be opened is a gnn::Error naming it and the loader's
// reason, at the first GPU product, SpMM or all-reduce that needs it.
//
// A call to a function not forwarded here fails to link with "undefined reference": add its forwarder.
// The emulator build (emu/) defines these functions itself and does not compile this file.
#include "runtime/cuda_libs.h"

#include <cublas_v2.h>
#include <cusparse.h>
#include <dlfcn.h>
#if GNN_WITH_NCCL
#include <nccl.h>
#endif

#include <mutex>
#include <string>

#include "base/error.h"

#define GNN_STR2(x) #x
#define GNN_STR(x) GNN_STR2(x)

namespace gnn {
namespace {

struct Library {
  const char* label;  // for messages: "cuBLAS"
  const char* soname;  // "libcublas.so.13", from the headers built against
  const char* folder;  // where CMake found the toolkit's libraries: tried when the loader's search fails
  std::once_flag once;
  void* handle = nullptr;
  std::string error;  // the loader's reason, when handle is null
};

Library& opened(Library& lib) {
  std::call_once(lib.once, [&] {
    lib.handle = dlopen(lib.soname, RTLD_NOW | RTLD_LOCAL);
    if (lib.handle) return;
    const char* first = dlerror();
    lib.error = first ? first : "dlopen failed";
    if (lib.folder[0]) {
      const std::string path = std::string(lib.folder) + "/" + lib.soname;
      lib.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      const char* second = lib.handle ? nullptr : dlerror();
      if (lib.handle) lib.error.clear();
      else if (second && lib.error.find(second) == std::string::npos) lib.error += "; " + std::string(second);
    }
  });
  return lib;
}

Library g_cublas{"cuBLAS", "libcublas.so." GNN_STR(CUBLAS_VER_MAJOR), GNN_CUBLAS_DIR, {}, nullptr, {}};
Library g_cusparse{"cuSPARSE", "libcusparse.so." GNN_STR(CUSPARSE_VER_MAJOR), GNN_CUSPARSE_DIR, {}, nullptr, {}};
#if GNN_WITH_NCCL
Library g_nccl{"NCCL", "libnccl.so." GNN_STR(NCCL_MAJOR), GNN_NCCL_DIR, {}, nullptr, {}};
#endif

template <class Fn>
struct ReturnOf;
template <class R, class... A>
struct ReturnOf<R (*)(A...)> {
  using type = R;
};

template <class Fn>
Fn symbol(Library& lib, const char* name) {
  opened(lib);
  GNN_CHECK(lib.handle, lib.label, " could not be loaded (", lib.error, "): the CUDA path needs ", lib.soname,
            "; put its folder on LD_LIBRARY_PATH");
  void* p = dlsym(lib.handle, name);
  GNN_CHECK(p, lib.label, " (", lib.soname, ") has no function ", name, ": a different version than gnn was built for");
  return reinterpret_cast<Fn>(p);
}

}  // namespace

std::string cuda_library_error(CudaLibrary which) {
  switch (which) {
    case CudaLibrary::kCublas:
      return opened(g_cublas).error;
    case CudaLibrary::kCusparse:
      return opened(g_cusparse).error;
    case CudaLibrary::kNccl:
#if GNN_WITH_NCCL
      return opened(g_nccl).error;
#else
      return "built without NCCL";
#endif
  }
  return "unknown library";
}

}  // namespace gnn

// The forwarders: each resolves its symbol on its first call (a thread-safe local static). Hidden: the
// Python module and other shared objects built on libgnn do not export them under cuBLAS's own names.
#define GNN_FORWARD(lib, name, params, args)                                                          \
  extern "C" __attribute__((visibility("hidden"))) gnn::ReturnOf<decltype(&name)>::type name params { \
    static const auto fn = gnn::symbol<decltype(&name)>(gnn::lib, #name);                             \
    return fn args;                                                                                   \
  }

// clang-format off
GNN_FORWARD(g_cublas, cublasCreate_v2, (cublasHandle_t* h), (h))
GNN_FORWARD(g_cublas, cublasSetMathMode, (cublasHandle_t h, cublasMath_t mode), (h, mode))
GNN_FORWARD(g_cublas, cublasSetStream_v2, (cublasHandle_t h, cudaStream_t s), (h, s))
GNN_FORWARD(g_cublas, cublasSetWorkspace_v2, (cublasHandle_t h, void* w, size_t bytes), (h, w, bytes))
GNN_FORWARD(g_cublas, cublasSgemm_v2,
            (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
             const float* a, int lda, const float* b, int ldb, const float* beta, float* c, int ldc),
            (h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))

GNN_FORWARD(g_cusparse, cusparseCreate, (cusparseHandle_t* h), (h))
GNN_FORWARD(g_cusparse, cusparseGetErrorString, (cusparseStatus_t st), (st))
GNN_FORWARD(g_cusparse, cusparseSetStream, (cusparseHandle_t h, cudaStream_t s), (h, s))
GNN_FORWARD(g_cusparse, cusparseCreateConstCsr,
            (cusparseConstSpMatDescr_t* d, int64_t rows, int64_t cols, int64_t nnz, const void* offsets,
             const void* columns, const void* values, cusparseIndexType_t offsets_type,
             cusparseIndexType_t columns_type, cusparseIndexBase_t base, cudaDataType value_type),
            (d, rows, cols, nnz, offsets, columns, values, offsets_type, columns_type, base, value_type))
GNN_FORWARD(g_cusparse, cusparseCreateDnMat,
            (cusparseDnMatDescr_t* d, int64_t rows, int64_t cols, int64_t ld, void* values, cudaDataType type,
             cusparseOrder_t order),
            (d, rows, cols, ld, values, type, order))
GNN_FORWARD(g_cusparse, cusparseCreateConstDnMat,
            (cusparseConstDnMatDescr_t* d, int64_t rows, int64_t cols, int64_t ld, const void* values,
             cudaDataType type, cusparseOrder_t order),
            (d, rows, cols, ld, values, type, order))
GNN_FORWARD(g_cusparse, cusparseDestroyDnMat, (cusparseConstDnMatDescr_t d), (d))
GNN_FORWARD(g_cusparse, cusparseDestroySpMat, (cusparseConstSpMatDescr_t d), (d))
GNN_FORWARD(g_cusparse, cusparseSpMM_bufferSize,
            (cusparseHandle_t h, cusparseOperation_t op_a, cusparseOperation_t op_b, const void* alpha,
             cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b, const void* beta, cusparseDnMatDescr_t c,
             cudaDataType compute, cusparseSpMMAlg_t alg, size_t* bytes),
            (h, op_a, op_b, alpha, a, b, beta, c, compute, alg, bytes))
GNN_FORWARD(g_cusparse, cusparseSpMM_preprocess,
            (cusparseHandle_t h, cusparseOperation_t op_a, cusparseOperation_t op_b, const void* alpha,
             cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b, const void* beta, cusparseDnMatDescr_t c,
             cudaDataType compute, cusparseSpMMAlg_t alg, void* buffer),
            (h, op_a, op_b, alpha, a, b, beta, c, compute, alg, buffer))
GNN_FORWARD(g_cusparse, cusparseSpMM,
            (cusparseHandle_t h, cusparseOperation_t op_a, cusparseOperation_t op_b, const void* alpha,
             cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b, const void* beta, cusparseDnMatDescr_t c,
             cudaDataType compute, cusparseSpMMAlg_t alg, void* buffer),
            (h, op_a, op_b, alpha, a, b, beta, c, compute, alg, buffer))

#if GNN_WITH_NCCL
GNN_FORWARD(g_nccl, ncclGetVersion, (int* version), (version))
GNN_FORWARD(g_nccl, ncclGetErrorString, (ncclResult_t rc), (rc))
GNN_FORWARD(g_nccl, ncclGetUniqueId, (ncclUniqueId* id), (id))
GNN_FORWARD(g_nccl, ncclCommInitRank, (ncclComm_t* comm, int ranks, ncclUniqueId id, int rank),
            (comm, ranks, id, rank))
GNN_FORWARD(g_nccl, ncclCommDestroy, (ncclComm_t comm), (comm))
GNN_FORWARD(g_nccl, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* async), (comm, async))
GNN_FORWARD(g_nccl, ncclAllReduce,
            (const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
             cudaStream_t stream),
            (send, recv, count, type, op, comm, stream))
#endif
// clang-format on
