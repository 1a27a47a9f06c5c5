// libFuzzer target for the TpuGraphs loader: any bytes, opened as an .npz archive (NpzReader) and
// loaded as a tile or layout graph with every schema and value check (load_tpugraph), with and without
// the runtimes required. The only acceptable outcomes are a graph or a gnn::Error; crashes, leaks, hangs
// and sanitizer reports are bugs. Seeds: small valid files in tests/data/tpugraphs_seeds. Members are
// capped at 64 MiB, as in fuzz_npz.cpp.
#include <cstdint>
#include <memory>
#include <vector>

#include "io/npz.h"
#include "io/tpugraphs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gnn;
  auto src = std::make_shared<MemorySource>("fuzz.npz", std::vector<uint8_t>(data, data + size));
  ZipLimits limits;
  limits.max_member_bytes = uint64_t(64) << 20;
  for (bool require_runtimes : {true, false}) {
    try {
      const NpzReader npz(src, limits);
      const TpuGraph g = load_tpugraph(npz, {.require_runtimes = require_runtimes});
      // What the pipeline reads next must hold for any graph that loaded.
      if (g.num_nodes() < 1) __builtin_trap();
      for (int64_t i = 0; i < g.num_nodes(); ++i)
        if (g.node_opcode.i32()[i] < 0 || g.node_opcode.i32()[i] >= kOpcodes) __builtin_trap();
      if (g.has_runtimes())
        for (int64_t c = 0; c < g.num_configs(); ++c) (void)g.target(c);
    } catch (const Error&) {}
  }
  return 0;
}
