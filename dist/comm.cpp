// dist/comm.h over MPI (GNN_WITH_MPI) and NCCL (GNN_WITH_NCCL); without MPI a world of one.
#include "dist/comm.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "base/error.h"
#include "runtime/cuda.h"

#ifndef GNN_WITH_MPI
#define GNN_WITH_MPI 0
#endif
#ifndef GNN_WITH_NCCL
#define GNN_WITH_NCCL 0
#endif
#if GNN_WITH_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only: the MPI-2 C++ bindings are gone from MPI 3 and warn under gcc 12
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif
#if GNN_WITH_NCCL
#include <nccl.h>

#include "base/cuda_check.h"
#include "runtime/cuda_libs.h"
#endif

namespace gnn::dist {

namespace {

World g_world;
[[maybe_unused]] bool g_mpi = false;  // MPI_Init was called (and finalize owes MPI_Finalize)
double g_timeout = 300;

using Clock = std::chrono::steady_clock;

// The stop message: two buffers, the one not being read is rewritten, then published.
char g_stop[2][1024];
std::atomic<int> g_stop_at{-1};

extern "C" void on_terminate(int sig) {
  const int at = g_stop_at.load();
  if (at >= 0) {
    const ssize_t ignored = ::write(2, g_stop[at], std::strlen(g_stop[at]));
    (void)ignored;
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

[[noreturn]] void timed_out(const std::string& what) {
  std::fprintf(stderr,
               "gnn: %sno answer from every other rank in %s within %g s (--comm-timeout): a rank has died or "
               "hangs; stopping the job\n",
               rank_prefix().c_str(), what.c_str(), g_timeout);
  std::fflush(stderr);
  abort(1);
}

// Polls `done` until it answers true or the timeout passes: spinning for the first 200 microseconds
// (a collective between busy ranks usually completes in that time), then sleeping 50 microseconds
// between polls so that a rank waiting for a slower one leaves the core to it.
template <class F>
void wait_for(F done, const std::string& what) {
  const auto start = Clock::now();
  for (int64_t polls = 0;; ++polls) {
    if (done()) return;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > g_timeout) timed_out(what);
    if (waited > 2e-4) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

#if GNN_WITH_MPI
void mpi_check(int rc, const char* call, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  GNN_FAIL(rank_prefix(), call, " failed in ", what, ": ", std::string(text, size_t(len)));
}

void wait_request(MPI_Request& req, const std::string& what) {
  wait_for(
      [&] {
        int flag = 0;
        mpi_check(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), "MPI_Test", what);
        return flag != 0;
      },
      what);
}

template <class T>
void mpi_allreduce(T* data, int64_t n, MPI_Datatype type, const std::string& what) {
  // MPI counts are int: sum in pieces of at most 2^30 values.
  for (int64_t at = 0; at < n; at += int64_t(1) << 30) {
    const int count = int(std::min<int64_t>(n - at, int64_t(1) << 30));
    MPI_Request req;
    mpi_check(MPI_Iallreduce(MPI_IN_PLACE, data + at, count, type, MPI_SUM, MPI_COMM_WORLD, &req), "MPI_Iallreduce",
              what);
    wait_request(req, what);
  }
}

// The launchers' environment: Open MPI's mpirun, PMIx (Open MPI 5, Slurm's srun), MPICH's Hydra.
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"})
    if (std::getenv(v)) return true;
  return false;
}
#endif

#if GNN_WITH_NCCL
void nccl_check(ncclResult_t rc, const char* call) {
  GNN_CHECK(rc == ncclSuccess, rank_prefix(), call, " failed: ", ncclGetErrorString(rc));
}

// One NCCL communicator per job, over the GPU of this rank (made on the first GPU all-reduce).
struct Nccl {
  ncclComm_t comm = nullptr;
  int device = -1;
  cudaEvent_t done = nullptr;
};
Nccl g_nccl;

Nccl& nccl_for(int device) {
  if (g_nccl.comm) {
    GNN_CHECK(g_nccl.device == device, rank_prefix(), "NCCL: this rank reduces on GPU ", g_nccl.device,
              ", asked for GPU ", device);
    return g_nccl;
  }
  ncclUniqueId id;
  if (g_world.rank == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::string bytes(reinterpret_cast<const char*>(&id), sizeof id);
  broadcast(bytes, 0, "the NCCL bootstrap");
  std::memcpy(&id, bytes.data(), sizeof id);
  GNN_CUDA_CHECK(cudaSetDevice(device));
  nccl_check(ncclCommInitRank(&g_nccl.comm, g_world.size, id, g_world.rank), "ncclCommInitRank");
  GNN_CUDA_CHECK(cudaEventCreateWithFlags(&g_nccl.done, cudaEventDisableTiming));
  g_nccl.device = device;
  return g_nccl;
}

void nccl_allreduce(Tensor& t, const std::string& what) {
  Nccl& n = nccl_for(t.device().index);
  const cudaStream_t stream = cuda_stream(t.device().index);
  const ncclDataType_t type = t.dtype() == DType::F32 ? ncclFloat32 : ncclFloat64;
  nccl_check(ncclAllReduce(t.data(), t.data(), size_t(t.numel()), type, ncclSum, n.comm, stream), "ncclAllReduce");
  // Wait for it here, with the timeout: a dead peer would otherwise hang the next read-back for ever.
  GNN_CUDA_CHECK(cudaEventRecord(n.done, stream));
  wait_for(
      [&] {
        const cudaError_t q = cudaEventQuery(n.done);
        if (q == cudaSuccess) return true;
        GNN_CHECK(q == cudaErrorNotReady, rank_prefix(), "NCCL all-reduce of ", what, ": ", cudaGetErrorString(q));
        cudaGetLastError();  // "not ready" is a status, not an error for the next launch check to report
        ncclResult_t async = ncclSuccess;
        nccl_check(ncclCommGetAsyncError(n.comm, &async), "ncclCommGetAsyncError");
        nccl_check(async, "ncclAllReduce");
#if GNN_CUDA_EMU
        GNN_CUDA_CHECK(cudaEventSynchronize(n.done));  // the emulator runs queued work only when waited for
#endif
        return false;
      },
      what);
}
#endif

}  // namespace

void init(int* argc, char*** argv) {
#if GNN_WITH_MPI
  if (g_mpi || !launched_by_mpi()) return;
  int provided = 0;
  // Only the main thread talks to MPI (the batch prefetch thread never does).
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "gnn: MPI_Init_thread failed\n");
    std::exit(1);
  }
  g_mpi = true;
  if (provided < MPI_THREAD_FUNNELED) {
    std::fprintf(stderr, "gnn: this MPI library gives thread level %d, below MPI_THREAD_FUNNELED\n", provided);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm local;
  const bool ok =
      MPI_Comm_rank(MPI_COMM_WORLD, &g_world.rank) == MPI_SUCCESS &&
      MPI_Comm_size(MPI_COMM_WORLD, &g_world.size) == MPI_SUCCESS &&
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_world.rank, MPI_INFO_NULL, &local) == MPI_SUCCESS &&
      MPI_Comm_rank(local, &g_world.local_rank) == MPI_SUCCESS &&
      MPI_Comm_size(local, &g_world.local_size) == MPI_SUCCESS && MPI_Comm_free(&local) == MPI_SUCCESS;
  if (!ok) {
    std::fprintf(stderr, "gnn: MPI could not say this process's rank and node\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (g_world.size > 1) {
    set_stop_message("gnn: " + rank_prefix() + kStoppedByLauncher + "\n");
    std::signal(SIGTERM, on_terminate);
  }
#else
  (void)argc, (void)argv;
#endif
}

void finalize() {
#if GNN_WITH_NCCL
  if (g_nccl.comm) {
    ncclCommDestroy(g_nccl.comm);
    cudaEventDestroy(g_nccl.done);
    g_nccl = Nccl{};
  }
#endif
#if GNN_WITH_MPI
  if (g_mpi) MPI_Finalize();
  g_mpi = false;
#endif
}

const World& world() { return g_world; }

std::string rank_prefix() {
  if (g_world.size <= 1) return "";
  return "rank " + std::to_string(g_world.rank) + " of " + std::to_string(g_world.size) + ": ";
}

bool built_with_mpi() { return GNN_WITH_MPI; }
bool built_with_nccl() { return GNN_WITH_NCCL; }

std::string backends() {
  std::string s;
#if GNN_WITH_MPI
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string v(version, size_t(len));
  v = v.substr(0, v.find_first_of(",\n"));
  s = "MPI (" + v + ")";
#else
  s = "MPI off (built without it: scripts/setup.sh installs Open MPI)";
#endif
#if GNN_WITH_NCCL
#if GNN_CUDA_EMU
  const std::string why;
#else
  const std::string why = cuda_library_error(CudaLibrary::kNccl);  // opens it, as ncclGetVersion would
#endif
  int nv = 0;
  if (why.empty()) ncclGetVersion(&nv);
  s += why.empty() ? ", NCCL " + std::to_string(nv / 10000) + "." + std::to_string(nv / 100 % 100) + "." +
                         std::to_string(nv % 100)
                   : ", NCCL not loadable (" + why + ")";
#else
  s += ", NCCL off";
#endif
  s += "; this process: rank " + std::to_string(g_world.rank) + " of " + std::to_string(g_world.size);
  return s;
}

void set_stop_message(const std::string& text) {
  if (g_world.size <= 1) return;
  const int next = g_stop_at.load() == 0 ? 1 : 0;
  std::snprintf(g_stop[next], sizeof g_stop[next], "%s", text.c_str());
  g_stop_at.store(next);
}

double timeout() { return g_timeout; }
void set_timeout(double seconds) {
  GNN_CHECK(seconds > 0, "--comm-timeout must be positive, got ", seconds);
  g_timeout = seconds;
}

void abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
#if GNN_WITH_MPI
  if (g_mpi && g_world.size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

namespace {
template <class T>
void host_allreduce(T* data, int64_t n, const std::string& what) {
  if (g_world.size <= 1 || n == 0) return;
#if GNN_WITH_MPI
  mpi_allreduce(data, n, sizeof(T) == 8 ? MPI_DOUBLE : MPI_FLOAT, what);
#else
  (void)data, (void)what;
#endif
}
}  // namespace

void allreduce_sum(double* data, int64_t n, const std::string& what) { host_allreduce(data, n, what); }
void allreduce_sum(float* data, int64_t n, const std::string& what) { host_allreduce(data, n, what); }

void allreduce_sum(Tensor& t, const std::string& what) {
  GNN_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64, "dist::allreduce_sum: ", what, ": f32 or f64, got ",
            dtype_name(t.dtype()));
#if GNN_WITH_NCCL
  // One rank goes through NCCL too when asked to (GNN_NCCL_ALONE=1, the tests' check of this path on a
  // machine with one GPU); otherwise a world of one has nothing to add.
  const bool alone = std::getenv("GNN_NCCL_ALONE") != nullptr;
  if (t.is_cuda() && (g_world.size > 1 || alone)) {
    GNN_CHECK(g_world.size == 1 || g_mpi, "NCCL needs the MPI job to bootstrap it");
    nccl_allreduce(t, what);
    return;
  }
#endif
  if (g_world.size <= 1) return;
  if (t.is_cuda()) {  // no NCCL: through the host
    Tensor host = t.on(Device::cpu());
    allreduce_sum(host, what);
    t.copy_from(host);
    return;
  }
  if (t.dtype() == DType::F32) allreduce_sum(t.f32(), t.numel(), what);
  else allreduce_sum(t.f64(), t.numel(), what);
}

void prepare_gpu(int device) {
#if GNN_WITH_NCCL
  if (g_world.size <= 1) return;
  const int gpus = cuda_device_count();
  GNN_CHECK(g_world.local_size <= gpus, rank_prefix(), g_world.local_size, " ranks share this node's ", gpus,
            " GPU(s), and NCCL needs one GPU per rank: start at most ", gpus,
            " rank(s) per node (mpirun --map-by "
            "ppr:",
            gpus, ":node), or train with --device cpu");
  nccl_for(device);
#else
  (void)device;
#endif
}

std::vector<std::string> allgather(const std::string& mine, const std::string& what) {
  if (g_world.size <= 1) return {mine};
#if GNN_WITH_MPI
  const int R = g_world.size;
  std::vector<int64_t> sizes(static_cast<size_t>(R), 0);
  sizes[size_t(g_world.rank)] = int64_t(mine.size());
  {
    std::vector<double> d(sizes.begin(), sizes.end());
    allreduce_sum(d.data(), R, what);  // sizes below 2^53 add exactly
    for (int r = 0; r < R; ++r) sizes[size_t(r)] = int64_t(d[size_t(r)]);
  }
  std::vector<int> counts(static_cast<size_t>(R)), displs(static_cast<size_t>(R));
  int64_t total = 0;
  for (int r = 0; r < R; ++r) {
    GNN_CHECK(sizes[size_t(r)] < (int64_t(1) << 31) && total < (int64_t(1) << 31), "dist::allgather: ", what,
              ": more than 2 GiB");
    counts[size_t(r)] = int(sizes[size_t(r)]), displs[size_t(r)] = int(total), total += sizes[size_t(r)];
  }
  std::string all(size_t(total), '\0');
  MPI_Request req;
  mpi_check(MPI_Iallgatherv(mine.data(), int(mine.size()), MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE,
                            MPI_COMM_WORLD, &req),
            "MPI_Iallgatherv", what);
  wait_request(req, what);
  std::vector<std::string> out;
  for (int r = 0; r < R; ++r) out.push_back(all.substr(size_t(displs[size_t(r)]), size_t(counts[size_t(r)])));
  return out;
#else
  (void)what;
  return {mine};
#endif
}

void broadcast(std::string& data, int root, const std::string& what) {
  if (g_world.size <= 1) return;
#if GNN_WITH_MPI
  double n = g_world.rank == root ? double(data.size()) : 0;
  allreduce_sum(&n, 1, what);
  data.resize(size_t(n));
  GNN_CHECK(n < double(int64_t(1) << 31), "dist::broadcast: ", what, ": more than 2 GiB");
  MPI_Request req;
  mpi_check(MPI_Ibcast(data.data(), int(n), MPI_BYTE, root, MPI_COMM_WORLD, &req), "MPI_Ibcast", what);
  wait_request(req, what);
#else
  (void)data, (void)root, (void)what;
#endif
}

void barrier(const std::string& what) {
  if (g_world.size <= 1) return;
#if GNN_WITH_MPI
  MPI_Request req;
  mpi_check(MPI_Ibarrier(MPI_COMM_WORLD, &req), "MPI_Ibarrier", what);
  wait_request(req, what);
#else
  (void)what;
#endif
}

Range shard(int64_t n, int rank, int size) {
  GNN_CHECK(size >= 1 && rank >= 0 && rank < size && n >= 0, "dist::shard: rank ", rank, " of ", size, ", ", n,
            " items");
  const int64_t base = n / size, extra = n % size;
  Range r;
  r.begin = rank * base + std::min<int64_t>(rank, extra);
  r.end = r.begin + base + (rank < extra ? 1 : 0);
  return r;
}

}  // namespace gnn::dist
