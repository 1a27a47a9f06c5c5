// emu/include/nccl.h: NCCL for a job of one rank. The all-reduce of one rank is its own input, queued on
// the stream as a device-to-device copy (or nothing, in place), so it is ordered with the kernels around
// it as NCCL's is.
#include <nccl.h>

#include <cstring>

struct ncclComm {
  int device = 0;
  size_t calls = 0;
};

ncclResult_t ncclGetVersion(int* version) {
  *version = 22800;  // the version of the headers it stands in for (2.28.0)
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, "gnn-emu", 7);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (nranks != 1 || rank != 0 || std::memcmp(id.internal, "gnn-emu", 7) != 0) return ncclInvalidUsage;
  *comm = new ncclComm;
  cudaGetDevice(&(*comm)->device);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (!comm) return ncclInvalidArgument;
  *async_error = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (!comm || op != ncclSum || (type != ncclFloat32 && type != ncclFloat64)) return ncclInvalidArgument;
  comm->calls += 1;
  if (send == recv || count == 0) return ncclSuccess;
  const size_t bytes = count * (type == ncclFloat32 ? 4 : 8);
  return cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, stream) == cudaSuccess ? ncclSuccess
                                                                                             : ncclUnhandledCudaError;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage (the emulator's NCCL has one rank)";
    default:
      return "NCCL error";
  }
}
