// A file written under a temporary name beside its destination and renamed into place by commit(),
// after fsync: readers see the old file or the whole new one, never half of it. Destroying an
// uncommitted AtomicFile removes the temporary.
//
// What the path names decides how it is written (the rule every output of gnn follows):
//   - nothing yet, or a regular file: the temporary and the rename, as above;
//   - a symlink to a regular file: followed; the file it names is replaced the same way and the link
//     stays a link (a symlink to nothing is refused: gnn does not guess where its target should be);
//   - this process's standard output or error, by whatever name (/dev/stdout, /proc/self/fd/1, the
//     file the shell redirected it to): written through that descriptor, after what was printed;
//   - anything else that is neither a regular file nor a directory (a device such as /dev/null, a
//     FIFO, a terminal): written straight to, once, at commit(), never replaced; a FIFO with no reader
//     is refused rather than waited on;
//   - a directory: refused.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"

namespace gnn {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);  // appends
  void write_at(uint64_t offset, const void* data, size_t n);  // patches bytes already written
  uint64_t size() const { return size_; }
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, target_, tmp_path_;  // target_: the regular file that the rename replaces
  int fd_ = -1;
  bool opened_ = false;  // fd_ was opened here (not a dup of stdout or stderr)
  bool direct_ = false;  // a device, a FIFO or a standard stream: the bytes are held here, written at commit()
  std::string held_;
  uint64_t size_ = 0;
  int slot_ = -1;  // its temporary's place in the table the interrupt handler removes from
};

// Whether an AtomicFile could write `path` (by the rule above: the folder it lands in exists and takes
// files), checked before the work whose result it holds; throws naming the path.
void check_writable(const std::string& path);

// Writes `text` to path through an AtomicFile: the old file or the whole new one, never half.
void write_file_atomic(const std::string& path, const std::string& text);

// The rule's other half: an output may not be a file the same command reads. Returns the first of
// `inputs` that `out` names (the same path spelled otherwise, through a symlink, or a hard link to the
// same file), or "" when it names none.
std::string output_names_input(const std::string& out, const std::vector<std::string>& inputs);

// Removes the temporaries `path.tmp-PID` that a killed writer left beside `path` (or beside the file a
// symlink `path` names, where AtomicFile writes them): a process killed with SIGKILL runs no destructor.
// Kept: those whose PID is alive in this PID namespace, and those their writer holds locked (AtomicFile
// locks its temporary until it is renamed: a writer on another host, NFS included, or in another PID
// namespace). On a filesystem without flock only the PID tells. Only regular files are removed. Returns
// how many it removed.
int remove_stale_temporaries(const std::string& path);
// The same for every regular file in `dir` whose name is `NAME.tmp-PID` with of(NAME) true (synth's
// graphs). owned: the caller holds a lock that every writer of these files holds, so each is stale whatever
// its pid says (a container's process is pid 1 each time). A folder that cannot be read removes nothing.
int remove_stale_temporaries_in(const std::string& dir, const std::function<bool(const std::string&)>& of,
                                bool owned = false);
// Those files themselves, sorted, none removed.
std::vector<std::string> stale_temporaries_in(const std::string& dir, const std::function<bool(const std::string&)>& of,
                                              bool owned = false);

// Interruption: SIGINT, SIGTERM, SIGHUP and SIGXCPU. After install_interrupt_handlers() (the CLI's main calls it;
// a signal the process was started ignoring, as under nohup, stays ignored) such a signal removes the
// temporaries of the AtomicFiles being written, then ends the process as the signal would have: no
// `path.tmp-PID` is left behind. Within a CooperativeInterrupt scope the first such signal is only
// recorded, and the scope's own work stops at its next throw_if_interrupted() with an InterruptedError,
// so that it can remove what it has written (gnn synth: a dataset whole or not at all); the CLI then ends
// the process by the same signal; the first says so on stderr. A second signal ends it at once (the same
// one within 250 ms is taken for its sender's double: `timeout` signals its child and its group). SIGXFSZ (a write
// past `ulimit -f`) is ignored, so that such a write fails with EFBIG and is reported like any failed write.
void install_interrupt_handlers();
// What a signal that ends the process removes besides the temporaries, while the guard lives: for work
// whose first files have not landed yet (a new run's lock file and the folders made for it). A file is
// unlinked; a folder is removed, with `parents` of the folders above it, only while empty (rmdir), after
// every file; a file put back (add_put_back: a copy kept of what `path` held) is renamed over `path`. A
// file given as `until` disarms the entry once it is replaced (it lands as another file, or where there
// was none): the work's last file, whose landing makes the rest of its files stay. Holds as many as the
// temporaries' table has room for; past that, one is left to the next run.
class RemovedOnSignal {
 public:
  RemovedOnSignal() = default;
  ~RemovedOnSignal() { clear(); }
  RemovedOnSignal(const RemovedOnSignal&) = delete;
  RemovedOnSignal& operator=(const RemovedOnSignal&) = delete;
  void add_file(const std::string& path, const std::string& until = "");
  void add_put_back(const std::string& copy, const std::string& path, const std::string& until = "");
  void add_folder(const std::string& path, int parents = 0);
  void clear();  // removes nothing: the work's files have landed, or it ends without a signal

 private:
  std::vector<int> slots_;
};
class CooperativeInterrupt {
 public:
  CooperativeInterrupt();
  ~CooperativeInterrupt();
  CooperativeInterrupt(const CooperativeInterrupt&) = delete;
  CooperativeInterrupt& operator=(const CooperativeInterrupt&) = delete;
};
class InterruptedError : public Error {
 public:
  explicit InterruptedError(int sig, const std::string& then = "");  // "interrupted (Terminated); <then>"
  int signal() const { return signal_; }

 private:
  int signal_;
};
void throw_if_interrupted(const std::string& then = "");  // InterruptedError(signal, then) once one came
// The signal a cooperative scope recorded, 0 if none: one its error must not hide. Never reset: a process
// that was asked to stop stays so (a caller running several commands in one process would need a reset).
int recorded_interrupt();
void end_by_signal(int sig);  // flushes stdio and ends the process by `sig` (no core file for SIGXCPU)

}  // namespace gnn
