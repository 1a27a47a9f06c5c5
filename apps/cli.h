// The gnn command line: each subcommand declares its positionals and flags once; parsing, --help
// and usage errors come from that declaration. Usage errors exit 2, gnn::Error exits 1, each as one
// line on stderr.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace gnn::cli {

struct Flag {
  std::string name;  // without the dashes: "nodes"
  std::string metavar;  // "N"; empty for a switch
  std::string help;
  std::string default_value;  // used when the flag is absent; "" with required=false means optional
  bool required = false;
  bool repeatable = false;  // may be given more than once (gnn eval --run A --run B); Args::all reads them
};

// --threads, which every command that computes takes: 1..kMaxThreads, set and its threads started
// (start_threads) before such a command runs. Without it OpenMP's own count runs (OMP_NUM_THREADS, else
// every core), which run() bounds the same way.
constexpr int kMaxThreads = 4096;
inline const Flag kThreadsFlag{"threads", "T", "CPU threads (default: all)"};
class Args;
// --device: the host, or a GPU when this build and machine have one: GPU 0, or under mpirun GPU (local
// rank mod GPUs on the node), so the ranks of a node share its GPUs out.
Device parse_device(const Args& a);

struct Positional {
  std::string name;  // "FILE"
  std::string help;
};

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Refuses (UsageError) an output flag's path when it names one of `inputs`, the files the command reads
// or the files of a run it reads (train::run_files): writing there would destroy them, as
// `gnn predict --out RUN/model.npz` would. Another spelling, a symlink or a hard link counts as the same. An
// empty path is refused too, and one that cannot be written (io/atomic_file.h's check_writable): said before
// the work, not after it. Then the temporaries a killed earlier writer of the path left are removed.
void check_output(const std::string& flag, const std::string& out, const std::vector<std::string>& inputs);
// Refuses (UsageError, naming --flag) a folder to write into that cannot be one: dir exists and is not a
// folder (or is a symlink to nothing), or its nearest existing ancestor is not a folder, lies on a kernel
// filesystem that holds no files (such as /proc) or may not be written by this process. Checked before
// anything is made.
void check_output_folder(const std::string& flag, const std::string& dir);
// The memory this process may use: the smallest of the machine's, its cgroup's limit (memory.max) and
// what is left under its `ulimit -v` and `ulimit -d`, in bytes; 0 when none can be read.
int64_t usable_memory_bytes();
// A size for a message: "1.8 GiB", "674.1 MiB", "195.3 KiB" (a nearly full disk must not read "0.0 GiB free").
std::string size_text(double bytes);

class Args {
 public:
  bool has(const std::string& flag) const;  // given on the command line (or a default exists)
  bool on(const std::string& flag) const;  // given on the command line (a switch, or a flag with its value)
  std::string str(const std::string& flag) const;  // value or default; UsageError when neither
  int64_t integer(const std::string& flag, int64_t min, int64_t max) const;
  double number(const std::string& flag) const;  // finite, plain decimal (base/parse.h)
  std::vector<std::string> list(const std::string& flag) const;  // comma-separated
  std::vector<std::string> all(const std::string& flag) const;  // a repeatable flag's values, in order
  const std::string& positional(size_t i) const { return positionals_.at(i); }
  const std::vector<std::string>& positionals() const { return positionals_; }
  const std::string& command() const { return command_; }  // "eval", as gnn's messages name it

 private:
  friend Args parse_args(const struct Command&, const std::vector<std::string>&);
  std::string command_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::string> defaults_;
  std::map<std::string, std::vector<std::string>> repeated_;
  std::vector<std::string> positionals_;
};

struct Command {
  std::string name;
  std::string summary;  // one line, for gnn --help
  std::vector<Positional> positionals;
  bool repeat_last = false;  // the last positional may be given more than once (gnn plot RUN [RUN...])
  std::vector<Flag> flags;
  std::string details;  // paragraphs after the flag list in gnn CMD --help
  std::function<int(const Args&)> run;
};

Args parse_args(const Command& cmd, const std::vector<std::string>& argv);  // argv after the command name
std::string command_help(const Command& cmd);
int run(const std::vector<Command>& commands, int argc, char** argv);
// "WHO error: out of memory: ...", with the lower of the address-space (ulimit -v) and data-segment
// (ulimit -d) limits when there is one; allocates nothing.
void print_out_of_memory(const char* who);

}  // namespace gnn::cli
