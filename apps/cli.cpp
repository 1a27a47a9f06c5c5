#include "apps/cli.h"

#ifdef __linux__
#include <linux/magic.h>
#include <sys/resource.h>
#include <sys/vfs.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "base/error.h"
#include "base/parse.h"
#include "dist/comm.h"
#include "io/atomic_file.h"
#include "kernels/gemm.h"
#include "runtime/allocator.h"
#include "runtime/cuda.h"
#include "runtime/cuda_libs.h"
#include "runtime/parallel.h"

namespace gnn::cli {

void check_output(const std::string& flag, const std::string& out, const std::vector<std::string>& inputs) {
  if (out.empty()) throw UsageError("--" + flag + ": no file given");
  const std::string same = output_names_input(out, inputs);
  if (!same.empty())
    throw UsageError("--" + flag + " " + out + ": is " + same +
                     ", a file this command reads (or of the run it reads); writing it would destroy it: choose "
                     "another path");
  if (dist::world().rank != 0) return;  // (only rank 0 writes: another node may lack the folder)
  try {  // (before the work: a path that cannot be written is said now, not after it)
    check_writable(out);
  } catch (const Error& e) {
    throw UsageError("--" + flag + " " + e.message());
  }
  remove_stale_temporaries(out);  // what a killed earlier attempt left (kill -9 runs no handler)
}

void check_output_folder(const std::string& flag, const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string what = "--" + flag + " " + dir + ": ";
  if (dir.empty()) throw UsageError("--" + flag + ": no folder given");
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  if (ec) throw UsageError(what + ec.message());
  if (fs::is_symlink(fs::symlink_status(p, ec)) && !fs::exists(p, ec)) {
    const bool loop = ec == std::errc::too_many_symbolic_link_levels;
    throw UsageError(what + (loop ? "a symlink in a loop of symlinks (" : "a symlink to nothing (") +
                     fs::read_symlink(p, ec).string() + ")");
  }
  if (fs::exists(p, ec) && !fs::is_directory(p, ec)) throw UsageError(what + "exists and is not a folder");
  while (!p.empty() && p != p.root_path() && !fs::exists(p, ec)) p = p.parent_path();
  if (!fs::is_directory(p, ec))
    throw UsageError(what + p.string() + " is not a folder, so the folder cannot be made there");
#ifdef __linux__
  // (by type, not by an empty block count: ramfs holds files and counts no blocks)
  struct statfs st;
  if (::statfs(p.c_str(), &st) == 0)
    for (const auto kind : {PROC_SUPER_MAGIC, SYSFS_MAGIC, CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, DEBUGFS_MAGIC,
                            TRACEFS_MAGIC, SECURITYFS_MAGIC, DEVPTS_SUPER_MAGIC})
      if (st.f_type == decltype(st.f_type)(kind))
        throw UsageError(what + p.string() + " lies on a kernel filesystem that holds no files (such as /proc)");
#endif
  if (::access(p.c_str(), W_OK | X_OK) != 0)
    throw UsageError(what + "cannot write into " + p.string() + " (" + std::strerror(errno) + ")");
}

Device parse_device(const Args& a) {
  const std::string d = a.str("device");
  if (d == "cpu") return Device::cpu();
  if (d != "cuda") throw UsageError("--device must be cpu or cuda, got '" + d + "'");
  if (!cuda_available()) throw UsageError("--device cuda is not usable here: " + cuda_status());
#if GNN_WITH_CUDA && !GNN_CUDA_EMU
  // (said now, not at the first product after the data are loaded: every GPU product is cuBLAS's)
  if (const std::string why = cuda_library_error(CudaLibrary::kCublas); !why.empty())
    throw UsageError("--device cuda: cuBLAS cannot be loaded (" + why + ")");
#endif
  return Device::cuda(dist::world().local_rank % cuda_device_count());
}

bool Args::has(const std::string& flag) const { return values_.count(flag) || defaults_.count(flag); }
bool Args::on(const std::string& flag) const { return values_.count(flag) > 0; }

std::string Args::str(const std::string& flag) const {
  if (auto it = values_.find(flag); it != values_.end()) return it->second;
  if (auto it = defaults_.find(flag); it != defaults_.end()) return it->second;
  throw UsageError("gnn " + command_ + ": missing --" + flag);
}

int64_t Args::integer(const std::string& flag, int64_t min, int64_t max) const {
  const std::string s = str(flag);
  int64_t v = 0;
  // (a whole number past the 64-bit range is one out of the flag's range, not one that is no integer)
  const size_t sign = !s.empty() && s[0] == '-';
  const bool digits = s.size() > sign && s.find_first_not_of("0123456789", sign) == std::string::npos;
  if (!parse_int64(s, &v) && !digits)
    throw UsageError("gnn " + command_ + ": --" + flag + " expects an integer, got '" + s + "'");
  if (!parse_int64(s, &v) || v < min || v > max)
    throw UsageError("gnn " + command_ + ": --" + flag + " must be in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "], got " + s);
  return v;
}

double Args::number(const std::string& flag) const {
  const std::string s = str(flag);
  double v = 0;
  if (!parse_finite(s, &v))
    throw UsageError("gnn " + command_ + ": --" + flag + " expects a finite number, got '" + s + "'");
  return v;
}

std::vector<std::string> Args::all(const std::string& flag) const {
  if (auto it = repeated_.find(flag); it != repeated_.end()) return it->second;
  return has(flag) ? std::vector<std::string>{str(flag)} : std::vector<std::string>{};
}

std::vector<std::string> Args::list(const std::string& flag) const {
  std::vector<std::string> out;
  const std::string s = str(flag);
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = std::min(s.find(',', b), s.size());
    if (e == b)  // (a typo such as 0,1,,2 loses an item the user meant)
      throw UsageError("--" + flag + ": an empty item in '" + printable(s) +
                       "' (two commas together, or one at an end)");
    out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

Args parse_args(const Command& cmd, const std::vector<std::string>& argv) {
  Args a;
  a.command_ = cmd.name;
  for (const Flag& f : cmd.flags)
    if (!f.default_value.empty()) a.defaults_[f.name] = f.default_value;
  const std::string usage = "gnn " + cmd.name + ": ";
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& s = argv[i];
    if (s.size() > 2 && s.compare(0, 2, "--") == 0) {
      std::string name = s.substr(2), value;
      const size_t eq = name.find('=');
      const bool inline_value = eq != std::string::npos;
      if (inline_value) value = name.substr(eq + 1), name = name.substr(0, eq);
      const Flag* f = nullptr;
      for (const Flag& c : cmd.flags)
        if (c.name == name) f = &c;
      if (f == nullptr) throw UsageError(usage + "unknown flag --" + name + " (see gnn " + cmd.name + " --help)");
      if (f->metavar.empty()) {
        if (inline_value) throw UsageError(usage + "--" + name + " takes no value");
      } else if (!inline_value) {
        if (i + 1 == argv.size()) throw UsageError(usage + "--" + name + " needs a value (" + f->metavar + ")");
        value = argv[++i];
      }
      if (a.values_.count(name) && !f->repeatable) throw UsageError(usage + "--" + name + " given twice");
      if (f->repeatable) a.repeated_[name].push_back(value);
      if (!a.values_.count(name)) a.values_[name] = value;
    } else if (s.size() > 1 && s[0] == '-' && !(std::isdigit(static_cast<unsigned char>(s[1])))) {
      throw UsageError(usage + "unknown option '" + s + "' (flags are --name)");
    } else {
      a.positionals_.push_back(s);
    }
  }
  const size_t n = cmd.positionals.size();
  if (cmd.repeat_last ? a.positionals_.size() < n : a.positionals_.size() != n) {
    std::string want;
    for (const Positional& p : cmd.positionals) want += " " + p.name;
    if (cmd.repeat_last) want += " [" + cmd.positionals.back().name + "...]";
    throw UsageError(usage + "expected" + (want.empty() ? " no arguments" : want) + ", got " +
                     std::to_string(a.positionals_.size()) + " argument(s)");
  }
  for (const Flag& f : cmd.flags)
    if (f.required && !a.values_.count(f.name)) throw UsageError(usage + "missing --" + f.name);
  return a;
}

std::string command_help(const Command& cmd) {
  std::string s = "usage: gnn " + cmd.name;
  for (const Positional& p : cmd.positionals) s += " " + p.name;
  if (cmd.repeat_last && !cmd.positionals.empty()) s += " [" + cmd.positionals.back().name + "...]";
  for (const Flag& f : cmd.flags) {
    const std::string one = "--" + f.name + (f.metavar.empty() ? "" : " " + f.metavar);
    s += (f.required ? " " + one : " [" + one + "]") + (f.repeatable ? "..." : "");
  }
  s += "\n\n" + cmd.summary + "\n";
  if (!cmd.positionals.empty() || !cmd.flags.empty()) s += "\n";
  auto row = [&](const std::string& left, std::string help) {
    s += "  " + left + std::string(left.size() < 24 ? 24 - left.size() : 1, ' ') + help + "\n";
  };
  for (const Positional& p : cmd.positionals) row(p.name, p.help);
  for (const Flag& f : cmd.flags)
    row("--" + f.name + (f.metavar.empty() ? "" : " " + f.metavar),
        f.help + (f.default_value.empty() ? "" : " (default " + f.default_value + ")"));
  row("--help", "show this help");
  if (!cmd.details.empty()) s += "\n" + cmd.details + (cmd.details.back() == '\n' ? "" : "\n");
  return s;
}

namespace {
std::string overview(const std::vector<Command>& commands) {
  std::string s = "gnn " GNN_VERSION
                  ": a from-scratch C++20 / CUDA graph-neural-network engine\n\n"
                  "usage: gnn COMMAND [ARGS] [--FLAGS]\n\ncommands:\n";
  for (const Command& c : commands)
    s += "  " + c.name + std::string(12 - std::min<size_t>(c.name.size(), 11), ' ') + c.summary + "\n";
  s += "\n`gnn COMMAND --help` (or `gnn help COMMAND`) lists every flag of a command. `gnn --version` prints the "
       "version.\n";
  return s;
}
}  // namespace

namespace {

// What limits the memory a refused allocation asked for: the address space (ulimit -v), the data segment
// (ulimit -d), or the machine's; written into `out` without allocating.
void memory_limits(char* out, size_t n) {
  rlimit as{}, data{};
  bool a = ::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY;
  const bool d = ::getrlimit(RLIMIT_DATA, &data) == 0 && data.rlim_cur != RLIM_INFINITY;
  if (a && d && data.rlim_cur < as.rlim_cur) a = false;  // (both set: the lower one)
  if (a || d)
    std::snprintf(out, n, "this process's %s is limited to %llu MiB (ulimit %s)", a ? "address space" : "data segment",
                  (unsigned long long)((a ? as.rlim_cur : data.rlim_cur) >> 20), a ? "-v" : "-d");
  else std::snprintf(out, n, "the machine's memory, or a cgroup's limit, is used up");
}

// Whether a command computes: those take --threads.
bool takes_threads(const Command& cmd) {
  return std::any_of(cmd.flags.begin(), cmd.flags.end(), [](const Flag& f) { return f.name == kThreadsFlag.name; });
}

// The environment's switches, as a flag's value is checked: one gnn cannot run with is a usage error
// before anything runs.
void check_environment(const Command& cmd, const Args& a) {
  // (libgomp crashes starting 100,000 threads: a count --threads would refuse is refused here too,
  // unless --threads replaces it)
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env && num_threads() > kMaxThreads && !a.on("threads"))
    throw UsageError("OMP_NUM_THREADS=" + std::string(env) + ": more than the " + std::to_string(kMaxThreads) +
                     " threads gnn runs; set it lower" + (takes_threads(cmd) ? ", or pass --threads T" : ""));
  for (const auto& [name, means] : {std::pair{"GNN_HOST_CACHE", "0 turns the host cache off, 1 keeps it on"},
                                    std::pair{"GNN_SYNC", "1 synchronises after every CUDA launch, 0 does not"},
                                    std::pair{"GNN_TF32", "1 gives cuBLAS's TF32 products, 0 full f32"}}) {
    const char* env = std::getenv(name);
    if (env && *env && std::string(env) != "0" && std::string(env) != "1")
      throw UsageError(std::string(name) + "=" + env + ": expected 0 or 1 (" + means + ")");
  }
  if (const char* isa = std::getenv("GNN_GEMM_ISA"); isa && *isa) try {  // a kernel unknown or one this CPU cannot run
      (void)gemm_isa();
    } catch (const Error& e) {
      throw UsageError(e.message());
    }
}

int run_command(const std::vector<Command>& commands, int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fputs(overview(commands).c_str(), stderr);
    return 2;
  }
  auto find = [&](const std::string& name) -> const Command* {
    for (const Command& c : commands)
      if (c.name == name) return &c;
    return nullptr;
  };
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    if (args.size() == 1) {
      std::fputs(overview(commands).c_str(), stdout);
      return 0;
    }
    const Command* named = find(args[1]);
    if (named && args.size() == 2) {  // gnn help COMMAND: that command's help
      std::fputs(command_help(*named).c_str(), stdout);
      return 0;
    }
    if (!named)
      std::fprintf(stderr, "gnn %s: unknown command '%s' (see gnn --help)\n", args[0].c_str(),
                   printable(args[1]).c_str());
    else
      std::fprintf(stderr, "gnn %s: expected nothing or one command's name after it, got '%s' (see gnn --help)\n",
                   args[0].c_str(), printable(args[2]).c_str());
    return 2;
  }
  if (args[0] == "--version") {
    if (args.size() > 1) {
      std::fprintf(stderr, "gnn --version: takes nothing after it, got '%s'\n", printable(args[1]).c_str());
      return 2;
    }
    std::printf("gnn %s\n", GNN_VERSION);
    return 0;
  }
  const Command* cmd = find(args[0]);
  if (cmd == nullptr) {
    std::fprintf(stderr, "gnn: unknown command '%s' (see gnn --help)\n", printable(args[0]).c_str());
    return 2;
  }
  args.erase(args.begin());
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(command_help(*cmd).c_str(), stdout);
      return 0;
    }
  }
  // Under mpirun, the rank that failed: "gnn train: rank 1 of 2: error: ..."
  const std::string who = "gnn " + cmd->name + ": " + dist::rank_prefix();
  try {
    const Args a = parse_args(*cmd, args);
    check_environment(*cmd, a);
    if (takes_threads(*cmd)) {  // (a command that computes: its threads started now, or named)
      if (a.on("threads")) set_num_threads(int(a.integer("threads", 1, kMaxThreads)));
      start_threads();
    }
    return cmd->run(a);
  } catch (const InterruptedError& e) {  // (said; run() then ends the process by the signal)
    std::fprintf(stderr, "%s%s\n", who.c_str(), printable(e.message()).c_str());
    return 128 + e.signal();
  } catch (const UsageError& e) {
    const std::string m = printable(e.what());
    std::fprintf(stderr, "%s%s%s\n", dist::rank_prefix().c_str(),
                 m.rfind("gnn ", 0) == 0 ? "" : ("gnn " + cmd->name + ": ").c_str(), m.c_str());
    return 2;
  } catch (const MemoryLimitError& e) {  // (train words its own: here eval's, predict's, bench's...)
    char limits[160];
    memory_limits(limits, sizeof limits);
    std::fprintf(stderr, "%serror: %s; %s\n", who.c_str(), printable(e.message()).c_str(), limits);
    return 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "%serror: %s\n", who.c_str(), printable(e.what()).c_str());
    return 1;
  } catch (const std::bad_alloc&) {
    print_out_of_memory(who.c_str());
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {  // (its what() is the library's "filesystem error: ...")
    if (e.path1().empty()) std::fprintf(stderr, "%serror: %s\n", who.c_str(), printable(e.what()).c_str());
    else
      std::fprintf(stderr, "%serror: %s: %s\n", who.c_str(), printable(e.path1().string()).c_str(),
                   e.code().message().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%serror: %s\n", who.c_str(), printable(e.what()).c_str());
    return 1;
  }
}

}  // namespace

void print_out_of_memory(const char* who) {
  char limits[160];
  memory_limits(limits, sizeof limits);
  std::fprintf(stderr, "%serror: out of memory: an allocation failed; %s\n", who, limits);
}

int run(const std::vector<Command>& commands, int argc, char** argv) {
  int rc = run_command(commands, argc, argv);
  // A signal a cooperative scope recorded (the command stopped by it, or failing otherwise at the time,
  // its error said): the process ends by it, as its sender expects
  if (const int sig = recorded_interrupt(); sig && rc != 0) {
    end_by_signal(sig);
    rc = 128 + sig;
  }
  // What a command printed and the system did not take (a full disk, /dev/full) is lost output: not a success
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (flushed && !std::ferror(stdout)) return rc;
  std::fprintf(stderr, "gnn%s%s: %serror: writing the standard output failed%s%s%s: some of the output is lost\n",
               argc > 1 ? " " : "", argc > 1 ? printable(argv[1]).c_str() : "", dist::rank_prefix().c_str(),
               err ? " (" : "", err ? std::strerror(err) : "", err ? ")" : "");
  return rc != 0 ? rc : 1;
}

std::string size_text(double bytes) {
  char buf[64];
  const double kib = bytes / 1024, mib = kib / 1024, gib = mib / 1024;
  if (gib >= 1) std::snprintf(buf, sizeof buf, "%.1f GiB", gib);
  else if (mib >= 1) std::snprintf(buf, sizeof buf, "%.1f MiB", mib);
  else std::snprintf(buf, sizeof buf, "%.1f KiB", kib);
  return buf;
}

int64_t usable_memory_bytes() {
  int64_t bytes = int64_t(::sysconf(_SC_PHYS_PAGES)) * int64_t(::sysconf(_SC_PAGESIZE));
  if (bytes <= 0) bytes = 0;  // sysconf could not tell
  if (std::ifstream cg("/sys/fs/cgroup/memory.max"); cg) {
    std::string v;
    if (cg >> v && !v.empty() && v.size() < 19 && v.find_first_not_of("0123456789") == std::string::npos) {
      const int64_t limit = std::stoll(v);
      bytes = bytes ? std::min(bytes, limit) : limit;
    }
  }
  // `ulimit -v` and `ulimit -d`: past them an allocation fails, whatever the machine has. What is left of
  // each: the limit less the address space (statm's size) or the data (its data) already taken.
  int64_t size = 0, resident = 0, shared = 0, text = 0, lib = 0, data = 0;
  if (std::ifstream statm("/proc/self/statm"); !(statm >> size >> resident >> shared >> text >> lib >> data))
    size = data = 0;
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  for (const auto& [resource, taken] : {std::pair{RLIMIT_AS, size * page}, std::pair{RLIMIT_DATA, data * page}}) {
    struct rlimit r {};
    if (::getrlimit(resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY || r.rlim_cur > uint64_t(INT64_MAX)) continue;
    const int64_t left = std::max<int64_t>(int64_t(r.rlim_cur) - taken, 1);
    bytes = bytes ? std::min(bytes, left) : left;
  }
  return bytes;
}

}  // namespace gnn::cli
