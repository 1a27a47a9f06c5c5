// Helpers shared by the tests: fixture and shared-data paths, skips with a printed reason, a scratch
// directory, seeded random data, and running the gnn CLI.
#pragma once
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/gemm.h"
#include "runtime/cuda.h"
#include "runtime/parallel.h"
#include "runtime/tensor.h"

namespace gnn::testing {

namespace fs = std::filesystem;

inline std::string source_path(const std::string& rel) { return std::string(GNN_SOURCE_DIR) + "/" + rel; }
inline std::string fixture(const std::string& name) { return source_path("tests/data/npz/" + name); }

// ../shared/data beside the clone: present on the development machines and in CI, absent elsewhere.
inline std::string shared_data(const std::string& rel) {
  const char* env = std::getenv("GNN_SHARED_DATA");
  return std::string(env ? env : GNN_SHARED_DATA_DIR) + "/" + rel;
}

// The last line of a command's output (trailing newlines ignored): where gnn prints its JSON summary.
inline std::string last_line(const std::string& s) {
  const size_t end = s.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const size_t begin = s.rfind('\n', end), first = begin == std::string::npos ? 0 : begin + 1;
  return s.substr(first, end - first + 1);
}

// A text file's lines, without their newlines.
inline std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) out.push_back(line);
  return out;
}

// Prints why a test does nothing here; the caller returns right after.
inline void skip(const std::string& why) {
  std::printf("SKIP: %s\n", why.c_str());
  std::fflush(stdout);
}

#define GNN_SKIP_UNLESS_CUDA()                                                    \
  do {                                                                            \
    if (!::gnn::cuda_available()) {                                               \
      ::gnn::testing::skip("needs a CUDA device (" + ::gnn::cuda_status() + ")"); \
      return;                                                                     \
    }                                                                             \
  } while (0)

// The thread count it found, set again when it leaves scope (after a failed REQUIRE too): tests that
// compare one thread against several set the count freely in between.
class ThreadsRestored {
 public:
  ThreadsRestored() : count(num_threads()) {}
  ~ThreadsRestored() { set_num_threads(count); }
  ThreadsRestored(const ThreadsRestored&) = delete;
  ThreadsRestored& operator=(const ThreadsRestored&) = delete;
  const int count;
};

// The process's product precision (set_gemm_cpu_precision) back to f32 when it leaves scope, after a failed
// REQUIRE too; given a precision, it sets that one first. Tests that train or multiply in bf16 leave the
// next test the default.
class PrecisionRestored {
 public:
  PrecisionRestored() = default;
  explicit PrecisionRestored(GemmPrecision p) { set_gemm_cpu_precision(p); }
  ~PrecisionRestored() { set_gemm_cpu_precision(GemmPrecision::kF32); }
  PrecisionRestored(const PrecisionRestored&) = delete;
  PrecisionRestored& operator=(const PrecisionRestored&) = delete;
};

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("gnn_test_" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::vector<uint8_t> out;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    int c;
    while ((c = std::fgetc(f)) != EOF) out.push_back(uint8_t(c));
    std::fclose(f);
  }
  return out;
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

// Byte equality of two tensors' data (empty tensors have no data pointer, which memcmp may not see).
inline bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && (a.nbytes() == 0 || std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
}

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs `gnn ARGS` (the CLI built beside the tests) and captures stdout, stderr and the exit code.
CommandResult run_gnn(const std::string& args);
// The same with environment variables set for it: ENV is "NAME=value [NAME=value ...]".
CommandResult run_gnn_env(const std::string& env, const std::string& args);

// The same, killed after `limit_s` seconds (exit code 124): for what must not hang.
CommandResult run_gnn_limited(const std::string& args, int limit_s);

// Runs `mpirun -np RANKS gnn ARGS` (oversubscribed, as root where the tests run as root), killed after
// `limit_s` seconds (exit code 124) so that a hang fails the test instead of stopping the suite.
CommandResult run_gnn_mpi(int ranks, const std::string& args, const std::string& env = "", int limit_s = 180);
// Why `gnn` cannot run under mpirun here ("" when it can): the build has no MPI, or there is no mpirun.
std::string mpi_missing();

// A generated TpuGraphs tree under dir (gnn synth): tile kernels (graphs per split, configs each) and
// layout programs (graphs per split, nodes, configs each), each collection from its own seed; returns dir.
struct SynthPart {
  int64_t graphs, nodes, configs;  // nodes: 0 for the generator's default
  uint64_t seed;
};
std::string tile_and_layout(const std::string& dir, SynthPart tile, SynthPart layout);

// The weights and optimiser state (params/ and optim/ arrays) of a checkpoint, and their bitwise equality.
std::map<std::string, Tensor> checkpoint_weights(const std::string& checkpoint);
bool same_bits(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b);

// The python3 that has numpy (the pyenv one or Debian's /usr/bin/python3), or "" when none has.
std::string python_with_numpy();

}  // namespace gnn::testing
