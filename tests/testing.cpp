#include "testing.h"

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "dist/comm.h"
#include "io/npz.h"
#include "io/synth.h"

namespace gnn::testing {

namespace {
std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
}  // namespace

namespace {
CommandResult run_shell(const std::string& prefix, const std::string& args) {
  TempDir tmp;
  const std::string out = tmp.file("out"), err = tmp.file("err");
  const std::string cmd = prefix + std::string(GNN_CLI_PATH) + " " + args + " >" + out + " 2>" + err + " </dev/null";
  const int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}
}  // namespace

CommandResult run_gnn(const std::string& args) { return run_shell("", args); }

CommandResult run_gnn_env(const std::string& env, const std::string& args) { return run_shell(env + " ", args); }

CommandResult run_gnn_limited(const std::string& args, int limit_s) {
  return run_shell("timeout " + std::to_string(limit_s) + " ", args);
}

CommandResult run_gnn_mpi(int ranks, const std::string& args, const std::string& env, int limit_s) {
  const std::string root = ::geteuid() == 0 ? "--allow-run-as-root " : "";
  return run_shell(env + " timeout " + std::to_string(limit_s) + " mpirun " + root + "--oversubscribe -np " +
                       std::to_string(ranks) + " ",
                   args);
}

std::string mpi_missing() {
  if (!dist::built_with_mpi()) return "this build has no MPI (scripts/setup.sh installs Open MPI)";
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) return "no mpirun on PATH";
  return "";
}

std::string tile_and_layout(const std::string& dir, SynthPart tile, SynthPart layout) {
  for (const auto& [kind, part] : {std::pair{"tile", tile}, std::pair{"layout", layout}}) {
    synth::DatasetOptions o;
    o.collection = kind, o.graphs = part.graphs, o.nodes = part.nodes, o.configs = part.configs, o.seed = part.seed;
    synth::write_dataset(dir, o);
  }
  return dir;
}

std::map<std::string, Tensor> checkpoint_weights(const std::string& checkpoint) {
  NpzReader r(checkpoint);
  std::vector<std::string> keys;
  for (const std::string& k : r.keys())
    if (k.rfind("params/", 0) == 0 || k.rfind("optim/", 0) == 0) keys.push_back(k);
  return r.load_keys(keys);
}

bool same_bits(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, t] : a) {
    auto it = b.find(k);
    if (it == b.end() || !same_bytes(t, it->second)) return false;
  }
  return true;
}

std::string python_with_numpy() {
  for (const char* py : {"python3", "/usr/bin/python3"}) {
    const std::string cmd = std::string(py) + " -c 'import numpy' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

}  // namespace gnn::testing
