#include "io/atomic_file.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <string_view>

#include "base/error.h"

namespace gnn {

namespace {

// The temporaries being written, for the signal handler (install_interrupt_handlers): a slot is free (0),
// being filled (1), armed (2) or taken by the handler (3, the process is ending). Atomics, stat, unlink,
// rename and rmdir are all the handler touches (async-signal-safe); it takes a slot before reading its path,
// so a path is never read while rewritten.
constexpr int kTempSlots = 64;
struct TempSlot {
  std::atomic<int> state{0};
  // 0: a file, unlinked; n > 0: a folder and n - 1 of its parents, each removed if empty; -1 (not a folder): a
  // file put back, renamed to `to`
  int folder_levels = 0;
  char path[4096], to[4096];
  // A file that, once replaced (another file, or one where there was none), disarms the slot: the work's
  // own last file has landed ("" for none)
  char witness[4096];
  bool witness_there = false;
  dev_t witness_dev = 0;
  ino_t witness_ino = 0;
};
TempSlot g_temps[kTempSlots];
std::atomic<int> g_cooperative{0}, g_interrupted{0};
void (*g_previous[NSIG])(int) = {};  // a handler that was there before (MPI's stop message): called after

int arm_temporary(const std::string& p, int folder_levels = 0, const std::string& to = "",
                  const std::string& witness = "") {
  if (p.size() >= sizeof g_temps[0].path || to.size() >= sizeof g_temps[0].to ||
      witness.size() >= sizeof g_temps[0].witness)
    return -1;
  for (int i = 0; i < kTempSlots; ++i) {
    int free = 0;
    if (g_temps[i].state.compare_exchange_strong(free, 1)) {
      TempSlot& t = g_temps[i];
      t.folder_levels = folder_levels;
      std::memcpy(t.path, p.c_str(), p.size() + 1);
      std::memcpy(t.to, to.c_str(), to.size() + 1);
      std::memcpy(t.witness, witness.c_str(), witness.size() + 1);
      struct stat st {};
      t.witness_there = !witness.empty() && ::stat(witness.c_str(), &st) == 0;
      t.witness_dev = st.st_dev, t.witness_ino = st.st_ino;
      g_temps[i].state.store(2);
      return i;
    }
  }
  return -1;  // (more at once than the table holds: this one is left to remove_stale_temporaries)
}
// The slot's witness as it was when armed (or none): async-signal-safe (stat), for the handler.
bool witness_unchanged(const TempSlot& t) {
  if (t.witness[0] == 0) return true;
  struct stat st {};
  const bool there = ::stat(t.witness, &st) == 0;
  return there == t.witness_there && (!there || (st.st_dev == t.witness_dev && st.st_ino == t.witness_ino));
}
void disarm_temporary(int slot) {
  if (slot < 0) return;
  int armed = 2;
  if (!g_temps[slot].state.compare_exchange_strong(armed, 0))
    for (;;) ::pause();  // the handler holds it: the process is ending
}

int64_t monotonic_ns() {  // (clock_gettime is async-signal-safe)
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}
std::atomic<int64_t> g_interrupted_at{0};  // when the recorded signal came

// A CPU-time limit is no crash, though SIGXCPU's default action dumps core: not dumpable, the process
// writes none (even through a core_pattern pipe, which RLIMIT_CORE does not stop). prctl is a plain system
// call here, as the handler needs.
void no_core_for(int sig) {
  if (sig == SIGXCPU) ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

// rmdir of `path` (a slot's buffer, cut here), then of its parents while they empty, `levels` in all:
// async-signal-safe (the handler's).
void remove_empty_folders(char* path, int levels) {
  for (size_t n = std::strlen(path); levels-- > 0 && n > 0;) {
    while (n > 1 && path[n - 1] == '/') path[--n] = 0;  // (a trailing slash)
    if (::rmdir(path) != 0) return;  // (not empty: something landed there)
    while (n > 0 && path[n - 1] != '/') --n;
    path[n] = 0;
  }
}

constexpr int64_t kDoubleNs = 250'000'000;  // the same signal again within this is its sender's double

void on_interrupt(int sig) {
  if (g_cooperative.load() > 0) {
    const int saved = errno;  // (the interrupted code goes on)
    const int64_t now = monotonic_ns();
    int none = 0;
    if (g_interrupted.load() == 0) {
      g_interrupted_at.store(now);
      if (g_interrupted.compare_exchange_strong(none, sig)) {  // (one thread says it: two may take the pair)
        // SIGPIPE is blocked here (sa_mask): a stderr whose reader has gone (`| tee` stopped by the same
        // Ctrl-C) must not end the process before its work is cleaned up. One it raised is taken back.
        static const char kSaid[] = "gnn: stopping at the next step or graph; signal again to stop at once\n";
        if (::write(STDERR_FILENO, kSaid, sizeof kSaid - 1) < 0 && errno == EPIPE) {
          sigset_t pipe_only;
          sigemptyset(&pipe_only);
          sigaddset(&pipe_only, SIGPIPE);
          const timespec zero{0, 0};
          ::sigtimedwait(&pipe_only, nullptr, &zero);
        }
        errno = saved;
        return;
      }
    }
    // The same signal again at once is its sender's double (timeout signals its child and the child's
    // process group), not a second signal.
    const bool same = sig == g_interrupted.load() && now - g_interrupted_at.load() < kDoubleNs;
    errno = saved;
    if (same) return;
  }
  bool taken[kTempSlots] = {};
  for (int i = 0; i < kTempSlots; ++i) {
    int armed = 2;
    taken[i] = g_temps[i].state.compare_exchange_strong(armed, 3);  // (taken: its fields are stable now)
  }
  // The temporaries first, so that a file still being written (the work's last, which another thread may be
  // about to rename into place) cannot land after the witnesses are looked at; then what a witness guards
  // (the work's last file landed: what it wrote stays); then the folders, once emptied.
  for (int pass = 0; pass < 3; ++pass)
    for (int i = 0; i < kTempSlots; ++i) {
      if (!taken[i]) continue;
      TempSlot& t = g_temps[i];
      const bool guarded = t.witness[0] != 0 || t.folder_levels < 0;
      if (pass == 0 && t.folder_levels == 0 && !guarded) {
        ::unlink(t.path);
      } else if (pass == 1 && guarded && witness_unchanged(t)) {
        if (t.folder_levels == 0) ::unlink(t.path);
        // (two names of one file: rename does nothing, and the copy's name goes)
        else if (::rename(t.path, t.to) == 0) ::unlink(t.path);
      } else if (pass == 2 && t.folder_levels > 0) {
        remove_empty_folders(t.path, t.folder_levels);
      }
    }
  // A handler that was there first (MPI's prints the rank's stop message), then the signal's own ending:
  // the temporaries are gone, so the process may not go on even where that handler would return.
  if (void (*previous)(int) = g_previous[sig]) previous(sig);
  no_core_for(sig);
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // (blocked in its own handler: it ends the process as this returns)
}

// The temporary's name beside `target`: target.tmp-PID. A name past 240 bytes is cut to 224 and marked
// with a hash of the whole, so that the temporary's stays within a file name's 255 bytes and two long
// names sharing a beginning keep apart (remove_stale_temporaries looks for the same prefix).
std::string temporary_prefix(const std::string& target) {
  namespace fs = std::filesystem;
  const fs::path p(target);
  std::string name = p.filename().string();
  if (name.size() > 240) {
    uint32_t h = 2166136261u;  // FNV-1a
    for (unsigned char c : name) h = (h ^ c) * 16777619u;
    char mark[16];
    std::snprintf(mark, sizeof mark, "-%08x", h);
    name = name.substr(0, 224) + mark;
  }
  return (p.parent_path() / name).string() + ".tmp-";
}

// Which of this process's standard output and error `st` is (1 or 2), or -1: /dev/stdout names fd 1
// through a link, whatever fd 1 is (a terminal, a pipe, a file the shell redirected to).
int standard_stream(const struct stat& st) {
  for (int fd : {1, 2}) {
    struct stat s {};
    if (::fstat(fd, &s) == 0 && s.st_dev == st.st_dev && s.st_ino == st.st_ino) return fd;
  }
  return -1;
}

// How `path` is written (the rule in atomic_file.h): returns true to write straight to it, with `stream`
// set when it is this process's stdout or stderr; false to replace `target`, the regular file it names.
bool resolve_output(const std::string& path, std::string& target, int& stream) {
  namespace fs = std::filesystem;
  struct stat ls {}, st {};
  std::error_code ec;
  target = path, stream = -1;
  if (::lstat(path.c_str(), &ls) != 0) {
    GNN_CHECK(errno == ENOENT, path, ": cannot write here (", std::strerror(errno), ")");
    return false;  // a new file
  }
  const bool is_link = S_ISLNK(ls.st_mode);
  if (is_link && ::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    const std::string to = fs::read_symlink(path, ec).string();
    GNN_FAIL(
        path, ": a symlink to ", to, ", which ",
        err == ENOENT ? std::string("does not exist") : std::string("cannot be followed (") + std::strerror(err) + ")",
        "; create the file it names, or write to its path directly");
  }
  if (!is_link) st = ls;
  GNN_CHECK(!S_ISDIR(st.st_mode), path, ": is a directory; name a file to write");
  stream = standard_stream(st);
  if (!S_ISREG(st.st_mode) || stream >= 0) return true;
  if (is_link) {
    target = fs::canonical(path, ec).string();
    GNN_CHECK(!ec, path, ": cannot resolve the symlink (", ec.message(), ")");
  }
  return false;
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  int stream = -1;
  direct_ = resolve_output(path_, target_, stream);
  if (direct_ && stream >= 0) {
    // Our own stdout or stderr: written through its descriptor, after what stdio holds, at its offset
    // (a file the shell redirected to is appended to, not overwritten from its start).
    std::fflush(stream == 1 ? stdout : stderr);
    fd_ = ::fcntl(stream, F_DUPFD_CLOEXEC, 3);
    GNN_CHECK(fd_ >= 0, path_, ": cannot write to standard ", stream == 1 ? "output" : "error", " (",
              std::strerror(errno), ")");
    return;
  }
  if (direct_) {
    // O_NONBLOCK: a FIFO with no reader fails with ENXIO instead of blocking; cleared at commit().
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    opened_ = true;
    GNN_CHECK(fd_ >= 0, path_, ": cannot open for writing (",
              errno == ENXIO ? "a FIFO with no reader" : std::strerror(errno), ")");
    return;
  }
  tmp_path_ = temporary_prefix(target_) + std::to_string(::getpid());
  slot_ = arm_temporary(tmp_path_);  // (before it exists: a signal between the two finds it)
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ >= 0) ::flock(fd_, LOCK_EX | LOCK_NB);  // (held while written: remove_stale_temporaries_in leaves it)
  if (fd_ < 0) {
    const int err = errno;
    disarm_temporary(slot_);
    slot_ = -1;
    GNN_FAIL(path_, ": cannot create ", tmp_path_, " (", std::strerror(err), ")");
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    if (!direct_) ::unlink(tmp_path_.c_str());
  }
  disarm_temporary(slot_);
}

namespace {

void write_all(int fd, const std::string& path, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0 && errno == EINTR) continue;
    GNN_CHECK(w > 0, path, ": write failed (", std::strerror(errno), ")");
    p += w, n -= size_t(w);
  }
}

}  // namespace

void AtomicFile::write(const void* data, size_t n) {
  GNN_CHECK(fd_ >= 0, path_, ": write after commit");
  if (direct_) held_.append(static_cast<const char*>(data), n);
  else write_all(fd_, path_, static_cast<const char*>(data), n);
  size_ += uint64_t(n);
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t n) {
  GNN_CHECK(fd_ >= 0 && offset + n <= size_, path_, ": patch of bytes ", offset, "..", offset + n, " outside ", size_,
            " written");
  if (direct_) {
    std::memcpy(held_.data() + offset, data, n);
    return;
  }
  GNN_CHECK(::pwrite(fd_, data, n, off_t(offset)) == ssize_t(n), path_, ": write failed (", std::strerror(errno), ")");
}

void AtomicFile::commit() {
  GNN_CHECK(fd_ >= 0, path_, ": committed twice");
  if (direct_) {
    // (only a descriptor opened here: a dup of stdout shares its flags with whoever else holds it)
    if (opened_) ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
    const int fd = fd_;
    fd_ = -1;
    // A pipe or FIFO whose reader has gone answers EPIPE, an error line, rather than SIGPIPE killing
    // the process: the signal is blocked for this write, and one it raised is taken back.
    sigset_t pipe_only, before;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_only, &before);
    const auto restore = [&] {
      const timespec none{0, 0};
      while (::sigtimedwait(&pipe_only, nullptr, &none) > 0) {
      }
      ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
    };
    try {
      write_all(fd, path_, held_.data(), held_.size());
    } catch (...) {
      restore();
      ::close(fd);
      throw;
    }
    restore();
    GNN_CHECK(::close(fd) == 0 || errno == EINTR, path_, ": write failed (", std::strerror(errno), ")");
    held_.clear();
    return;
  }
  GNN_CHECK(::fsync(fd_) == 0, path_, ": fsync failed (", std::strerror(errno), ")");
  // renamed while still open, so still locked: another host's sweep never finds it unheld
  const bool moved = ::rename(tmp_path_.c_str(), target_.c_str()) == 0;
  const int err = errno;
  if (!moved) ::unlink(tmp_path_.c_str());
  ::close(fd_);
  fd_ = -1;
  disarm_temporary(slot_);  // (after the rename: a signal before it still finds the temporary to remove)
  slot_ = -1;
  GNN_CHECK(moved, path_, ": cannot move the finished file into place (", std::strerror(err), ")");
}

void check_writable(const std::string& path) {
  namespace fs = std::filesystem;
  std::string target;
  int stream = -1;
  if (resolve_output(path, target, stream)) return;  // a device, a FIFO or a stream: opened when written
  const fs::path dir = fs::path(target).parent_path().empty() ? fs::path(".") : fs::path(target).parent_path();
  GNN_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, path, ": cannot write into ", dir.string(), " (",
            std::strerror(errno), ")");
}

void write_file_atomic(const std::string& path, const std::string& text) {
  AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

std::string output_names_input(const std::string& out, const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path o = fs::weakly_canonical(out, ec);
  const bool out_exists = fs::exists(out, ec);
  for (const std::string& in : inputs) {
    if (out_exists && fs::exists(in, ec) && fs::equivalent(out, in, ec)) return in;  // links, hard links too
    if (!o.empty() && o == fs::weakly_canonical(in, ec)) return in;  // another spelling, or not made yet
  }
  return "";
}

std::vector<std::string> stale_temporaries_in(const std::string& dir, const std::function<bool(const std::string&)>& of,
                                              bool owned) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> out;
  constexpr std::string_view kMark = ".tmp-";
  for (fs::directory_iterator it(dir.empty() ? "." : dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t at = name.rfind(kMark);
    if (at == std::string::npos || at == 0) continue;
    const std::string pid = name.substr(at + kMark.size());
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
    if (!of(name.substr(0, at))) continue;
    std::error_code st;
    if (!it->is_regular_file(st) || it->is_symlink(st)) continue;  // (not a FIFO, device or link so named)
    if (owned) {
      out.push_back(it->path().string());
      continue;
    }
    if (::kill(pid_t(std::stol(pid)), 0) == 0 || errno == EPERM) continue;  // its writer still runs
    // A writer in another PID namespace or on another host holds a lock on it: kept. (A shared lock: it
    // conflicts with the writer's exclusive one, and NFS grants it on a read-only descriptor.)
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    ::close(fd);
    if (!held) out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

int remove_stale_temporaries_in(const std::string& dir, const std::function<bool(const std::string&)>& of, bool owned) {
  int removed = 0;
  for (const std::string& f : stale_temporaries_in(dir, of, owned)) {
    std::error_code rm;
    removed += std::filesystem::remove(f, rm) ? 1 : 0;
  }
  return removed;
}

int remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  std::string target;  // (where AtomicFile writes them: beside the file a symlink names)
  int stream = -1;
  try {
    if (resolve_output(path, target, stream)) return 0;  // written straight to: no temporary
  } catch (const Error&) {
    return 0;  // (a path that cannot be written: its writer says why)
  }
  const fs::path p(target);
  // (the name as temporary_prefix writes it: long names cut and marked with a hash)
  const std::string prefix = fs::path(temporary_prefix(target)).filename().string();
  const std::string own = prefix.substr(0, prefix.size() - 5);  // without ".tmp-"
  return remove_stale_temporaries_in(p.parent_path().string(), [&](const std::string& name) { return name == own; });
}

void install_interrupt_handlers() {
  // SIGXCPU: a soft CPU-time limit below the hard one (`ulimit -St`, a batch scheduler's), sent each second
  // past it until the hard one's SIGKILL (plain `ulimit -t` sets both, so SIGKILL comes at once)
  constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGXCPU};
  for (int sig : kSignals) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0 || (old.sa_flags & SA_SIGINFO)) continue;  // (another's: kept)
    if (old.sa_handler == SIG_IGN || old.sa_handler == on_interrupt) continue;  // (nohup's SIGHUP stays off)
    if (old.sa_handler != SIG_DFL) g_previous[sig] = old.sa_handler;
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sa.sa_flags = SA_RESTART;  // (a cooperative scope's reads and writes go on until it stops itself)
    sigemptyset(&sa.sa_mask);  // (one of them at a time)
    for (int s : kSignals) sigaddset(&sa.sa_mask, s);
    sigaddset(&sa.sa_mask, SIGPIPE);  // (the acknowledgement's write: on_interrupt)
    ::sigaction(sig, &sa, nullptr);
  }
  // A write past `ulimit -f` raises SIGXFSZ, which ends the process unannounced, its temporary left; ignored,
  // the write fails with EFBIG instead and is reported and cleaned up like any other failed write.
  struct sigaction old {};
  if (::sigaction(SIGXFSZ, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL)
    ::signal(SIGXFSZ, SIG_IGN);
}

void RemovedOnSignal::add_file(const std::string& path, const std::string& until) {
  if (const int slot = arm_temporary(path, 0, "", until); slot >= 0) slots_.push_back(slot);
}
void RemovedOnSignal::add_put_back(const std::string& copy, const std::string& path, const std::string& until) {
  if (const int slot = arm_temporary(copy, -1, path, until); slot >= 0) slots_.push_back(slot);
}
void RemovedOnSignal::add_folder(const std::string& path, int parents) {
  if (const int slot = arm_temporary(path, 1 + parents); slot >= 0) slots_.push_back(slot);
}
void RemovedOnSignal::clear() {
  for (int slot : slots_) disarm_temporary(slot);
  slots_.clear();
}

CooperativeInterrupt::CooperativeInterrupt() { ++g_cooperative; }
CooperativeInterrupt::~CooperativeInterrupt() {
  // A signal that came after the scope's last look ends the process now, its work done (one that stopped
  // the work is the CLI's to re-raise, once it has said so).
  if (--g_cooperative == 0 && std::uncaught_exceptions() == 0)
    if (const int sig = g_interrupted.load()) ::raise(sig);
}

InterruptedError::InterruptedError(int sig, const std::string& then)
    : Error(std::string("interrupted (") + ::strsignal(sig) + ")" + (then.empty() ? "" : "; " + then), "signal"),
      signal_(sig) {}

int recorded_interrupt() { return g_interrupted.load(); }

void end_by_signal(int sig) {
  std::fflush(nullptr);
  no_core_for(sig);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void throw_if_interrupted(const std::string& then) {
  if (const int sig = g_interrupted.load()) throw InterruptedError(sig, then);
}

}  // namespace gnn
