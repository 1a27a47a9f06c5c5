// gnn info: how this binary was built and what it can use here.
#include <zlib.h>

#include <cstdio>

#include "apps/commands.h"
#include "dist/comm.h"
#include "io/json.h"
#include "runtime/allocator.h"
#include "runtime/cuda.h"
#include "runtime/parallel.h"

namespace gnn::cli {

Command info_command() {
  Command c;
  c.name = "info";
  c.summary = "build configuration, CPU threads, CUDA devices and memory statistics";
  c.flags = {{"json", "", "print one JSON object"}};
  c.run = [](const Args& a) {
    const MemoryStats host = host_memory_stats();
    Json j = Json::object();
    j.set("version", GNN_VERSION);
    j.set("cuda_built", kWithCuda);
    j.set("cuda", cuda_status());
    j.set("openmp", openmp_enabled());
    j.set("threads", num_threads());
    j.set("zlib", zlibVersion());
    j.set("mpi_built", dist::built_with_mpi());
    j.set("nccl_built", dist::built_with_nccl());
    j.set("distributed", dist::backends());
    j.set("host_current_bytes", host.current_bytes);
    j.set("host_peak_bytes", host.peak_bytes);
    j.set("host_reserved_bytes", host.reserved_bytes);
    j.set("host_cached_bytes", host.cached_bytes);
    j.set("host_reused_allocations", host.reused_allocations);
    if (cuda_available()) {
      const MemoryStats dev = cuda_memory_stats(0);
      j.set("cuda0_current_bytes", dev.current_bytes);
      j.set("cuda0_peak_bytes", dev.peak_bytes);
      j.set("cuda0_reserved_bytes", dev.reserved_bytes);
    }
    if (a.on("json")) {
      std::printf("%s\n", j.dump().c_str());
      return 0;
    }
    for (const auto& [k, v] : j.items())
      std::printf("%-22s %s\n", k.c_str(), v.type() == Json::Type::String ? v.as_string().c_str() : v.dump().c_str());
    return 0;
  };
  return c;
}

}  // namespace gnn::cli
