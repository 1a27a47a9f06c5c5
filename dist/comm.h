// Data-parallel processes: MPI starts them and sums host buffers; NCCL sums GPU buffers, bootstrapped
// over MPI. A process not started by an MPI launcher is a job of one rank and never calls MPI, so a
// build with MPI behaves as one without it until `mpirun -np R` starts it (docs/scale-out.md).
//
//   dist::init(&argc, &argv);                 // main(): joins the MPI job when mpirun started us
//   dist::allreduce_sum(buf, n, "step 7");    // every rank ends with the sum, the same bits everywhere
//   dist::finalize();
//
// Determinism: a sum over ranks is left to MPI_Iallreduce / ncclAllReduce, whose algorithm (and so the
// order of the additions) is chosen from the message size and the number of ranks alone, never from
// timing (MPI 4.0, section 6.9.1, asks implementations for exactly that; Open MPI's and NCCL's do it),
// and float addition is commutative, so every rank gets the same bits and two runs with the same rank
// count get the same bits. The tests check both.
//
// Failure: every collective waits at most timeout() seconds (--comm-timeout) for the others. A rank
// that died (kill -9) or hangs leaves the rest waiting; past the timeout the waiting rank says which
// collective and how long, and aborts the whole job (MPI_Abort) instead of hanging. An error on one
// rank (a corrupt file) ends the job the same way, through abort() in main.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace gnn::dist {

struct World {
  int rank = 0, size = 1;  // this process among all of the job
  int local_rank = 0, local_size = 1;  // among the job's processes on this machine (GPU choice)
};

// Joins the MPI job when an MPI launcher (Open MPI, PMIx, MPICH's Hydra) started this process, else
// sets up a world of one. Safe to call once per process; finalize() at exit.
void init(int* argc, char*** argv);
void finalize();
const World& world();
inline bool distributed() { return world().size > 1; }
// "rank 1 of 4: " in a job of several ranks, "" alone: the prefix of messages that only one rank prints.
std::string rank_prefix();
// One line for gnn info: the backends this build has (MPI with its library version, NCCL), and the world.
std::string backends();
bool built_with_mpi();
bool built_with_nccl();

double timeout();  // seconds a collective waits for the other ranks (default 300)
void set_timeout(double seconds);

// What this rank prints if the launcher stops it (mpirun sends SIGTERM to the others when a rank dies,
// before it can say anything itself): where the run stands, so the user knows what --resume continues
// from. A job of one installs nothing.
void set_stop_message(const std::string& text);
// How such a message starts: the launcher stops every rank alike, whether mpirun itself got a signal (Ctrl-C)
// or a rank ended first.
inline constexpr const char* kStoppedByLauncher =
    "stopped by the launcher (mpirun was interrupted, or another rank ended first: its message, or mpirun's, "
    "says which)";

// Ends every rank of the job with this exit code (alone: std::exit).
[[noreturn]] void abort(int code);

// Sums in place over the ranks; `what` names the collective in a timeout message ("the gradients of
// step 12"). Every rank must call it with the same n, in the same order as the others.
void allreduce_sum(double* data, int64_t n, const std::string& what);
void allreduce_sum(float* data, int64_t n, const std::string& what);
// A host or GPU tensor (f32 or f64, contiguous), summed in place: on a GPU with NCCL through NCCL on the
// device's stream, otherwise through the host with MPI.
void allreduce_sum(Tensor& t, const std::string& what);
// Before the first GPU sum: with NCCL and several ranks, checks that this node has a GPU per rank of
// it (NCCL refuses two ranks on one GPU) and creates the communicator, so a problem shows at the start
// rather than inside the first step. (Creating it is not under the timeout.) Nothing otherwise.
void prepare_gpu(int device);
// Every rank's string, in rank order, on every rank.
std::vector<std::string> allgather(const std::string& mine, const std::string& what);
// Rank `root`'s bytes on every rank (the others' `data` is replaced).
void broadcast(std::string& data, int root, const std::string& what);
void barrier(const std::string& what);

// The contiguous share [begin, end) of n items that rank r of R takes: the first n % R ranks one more.
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
Range shard(int64_t n, int rank, int size);

}  // namespace gnn::dist
