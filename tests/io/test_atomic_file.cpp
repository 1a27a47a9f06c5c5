// AtomicFile under interruption (io/atomic_file.h): a signal removes the temporaries in flight and ends
// the process as it would have; a cooperative scope records it for its work to stop at; a killed writer's
// temporaries are found; a write past `ulimit -f` is an error; temporaries of long names stay within a file
// name's 255 bytes. The signals are raised in a forked child, so that the
// test process itself is never ended.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/atomic_file.h"
#include "testing.h"

using namespace gnn;
using testing::TempDir;

namespace {

std::string text_of(const std::string& path) {
  const std::vector<uint8_t> b = testing::read_bytes(path);
  return std::string(b.begin(), b.end());
}

std::string numbered(const TempDir& t, int i) {
  char name[16];
  std::snprintf(name, sizeof name, "f%d", i);
  return t.file(name);
}

// The temporaries left in `dir` (names holding ".tmp-").
int temporaries(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    n += e.path().filename().string().find(".tmp-") != std::string::npos ? 1 : 0;
  return n;
}

// Runs `child` in a forked process and returns its wait status. The child ends with _exit(code), its
// return value, unless a signal ends it first.
template <class F>
int in_child(F child) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGXCPU}) ::signal(sig, SIG_DFL);  // (not doctest's crash report)
    const struct rlimit no_core { 0, 0 };  // (ending by SIGXCPU: no core file)
    ::setrlimit(RLIMIT_CORE, &no_core);
    int code = 99;
    try {
      code = child();
    } catch (...) {
      code = 98;
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

}  // namespace

TEST_CASE("atomic file: SIGTERM, SIGINT, SIGHUP and SIGXCPU remove the temporaries being written, end the process") {
  TempDir t;
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGXCPU}) {
    CAPTURE(sig);
    std::ofstream(t.file("old.csv")) << "old\n";
    const int status = in_child([&] {
      install_interrupt_handlers();
      AtomicFile a(t.file("old.csv")), b(t.file("new.csv"));
      a.write("half", 4), b.write("half", 4);
      if (temporaries(t.file("")) != 2) return 1;
      ::raise(sig);
      return 2;  // (not reached: the signal ends the child)
    });
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);
    CHECK(temporaries(t.file("")) == 0);
    CHECK(text_of(t.file("old.csv")) == "old\n");  // the old file stays whole
    CHECK_FALSE(std::filesystem::exists(t.file("new.csv")));
  }
}

TEST_CASE(
    "atomic file: a signal removes what RemovedOnSignal holds (files, then folders only while empty) and puts back "
    "what it kept") {
  namespace fs = std::filesystem;
  TempDir t;
  fs::create_directories(t.file("a/b/c/"));
  fs::create_directories(t.file("kept/d"));
  std::ofstream(t.file("kept/other")) << "theirs\n";
  const int status = in_child([&] {
    install_interrupt_handlers();
    RemovedOnSignal until_done;
    // The folder first: it goes after the file inside it, whatever the order they were given in.
    until_done.add_folder(t.file("a/b/c/"), 2);  // c, b and a; a trailing slash as a user may write it
    std::ofstream(t.file("a/b/c/lock")) << "1\n";
    until_done.add_file(t.file("a/b/c/lock"));
    until_done.add_folder(t.file("kept/d"), 1);  // d goes; kept holds another file and stays
    RemovedOnSignal disarmed;
    std::ofstream(t.file("landed")) << "whole\n";
    disarmed.add_file(t.file("landed"));
    disarmed.clear();
    // A file put back: the copy kept of what best.npz held goes back over the newer one (gnn train's epoch
    // files, when the checkpoint after them has not landed); a disarmed one stays as written.
    std::ofstream(t.file("best.npz")) << "old\n";
    fs::create_hard_link(t.file("best.npz"), t.file("best.npz.before.tmp-1"));
    until_done.add_put_back(t.file("best.npz.before.tmp-1"), t.file("best.npz"));
    write_file_atomic(t.file("best.npz"), "new\n");
    std::ofstream(t.file("swa.npz")) << "old\n";
    std::ofstream(t.file("swa.npz.before.tmp-1")) << "old\n";
    disarmed.add_put_back(t.file("swa.npz.before.tmp-1"), t.file("swa.npz"));
    write_file_atomic(t.file("swa.npz"), "new\n");
    disarmed.clear();
    // ... unless the file given as `until` was replaced (the epoch's model.npz landed): then the epoch's files
    // stay as written, the one it wrote first too.
    std::ofstream(t.file("model.npz")) << "epoch 1\n";
    std::ofstream(t.file("late.npz")) << "old\n";
    fs::create_hard_link(t.file("late.npz"), t.file("late.npz.before.tmp-1"));
    until_done.add_put_back(t.file("late.npz.before.tmp-1"), t.file("late.npz"), t.file("model.npz"));
    until_done.add_file(t.file("first.npz"), t.file("model.npz"));
    write_file_atomic(t.file("late.npz"), "new\n");
    write_file_atomic(t.file("first.npz"), "new\n");
    write_file_atomic(t.file("model.npz"), "epoch 2\n");
    std::ofstream(t.file("early.npz")) << "old\n";  // (its `until` there and not replaced: put back)
    std::ofstream(t.file("still.npz")) << "epoch 2\n";
    fs::create_hard_link(t.file("early.npz"), t.file("early.npz.before.tmp-1"));
    until_done.add_put_back(t.file("early.npz.before.tmp-1"), t.file("early.npz"), t.file("still.npz"));
    std::ofstream(t.file("same.npz")) << "old\n";  // (not rewritten yet: the copy's name goes, the file stays)
    fs::create_hard_link(t.file("same.npz"), t.file("same.npz.before.tmp-1"));
    until_done.add_put_back(t.file("same.npz.before.tmp-1"), t.file("same.npz"), t.file("still.npz"));
    until_done.add_file(t.file("fresh.npz"), t.file("next.npz"));
    write_file_atomic(t.file("early.npz"), "new\n");
    write_file_atomic(t.file("fresh.npz"), "new\n");
    ::raise(SIGTERM);
    return 2;
  });
  CHECK(WIFSIGNALED(status));
  CHECK_FALSE(fs::exists(t.file("a")));
  CHECK_FALSE(fs::exists(t.file("kept/d")));
  CHECK(text_of(t.file("kept/other")) == "theirs\n");
  CHECK(text_of(t.file("landed")) == "whole\n");
  CHECK(text_of(t.file("best.npz")) == "old\n");
  CHECK_FALSE(fs::exists(t.file("best.npz.before.tmp-1")));
  CHECK(text_of(t.file("swa.npz")) == "new\n");
  CHECK(text_of(t.file("late.npz")) == "new\n");
  CHECK(text_of(t.file("first.npz")) == "new\n");
  CHECK(text_of(t.file("early.npz")) == "old\n");
  CHECK(text_of(t.file("same.npz")) == "old\n");
  CHECK_FALSE(fs::exists(t.file("same.npz.before.tmp-1")));
  CHECK_FALSE(fs::exists(t.file("fresh.npz")));
}

TEST_CASE("atomic file: a committed file's temporary is not looked for again, nor one past the table's size") {
  TempDir t;
  const int status = in_child([&] {
    install_interrupt_handlers();
    for (int i = 0; i < 3; ++i) write_file_atomic(t.file("done.txt"), "done\n");
    std::vector<std::unique_ptr<AtomicFile>> open;  // more at once than the handler's table holds
    for (int i = 0; i < 70; ++i) open.push_back(std::make_unique<AtomicFile>(numbered(t, i)));
    ::raise(SIGTERM);
    return 2;
  });
  CHECK(WIFSIGNALED(status));
  CHECK(text_of(t.file("done.txt")) == "done\n");
  // 64 removed by the handler; the rest are a killed writer's, which remove_stale_temporaries clears
  CHECK(temporaries(t.file("")) == 6);
  int removed = 0;
  for (int i = 0; i < 70; ++i) removed += remove_stale_temporaries(numbered(t, i));
  CHECK(removed == 6);
  CHECK(temporaries(t.file("")) == 0);
}

TEST_CASE("atomic file: what a killed writer of a file left is removed, not a live writer's nor another file's") {
  TempDir t;
  const std::string out = t.file("out.csv");
  for (const std::string& f : {out, t.file("other.csv")}) {  // writers killed with SIGKILL: no handler runs
    const int status = in_child([&] {
      AtomicFile a(f);
      a.write("half", 4);
      ::raise(SIGKILL);
      return 2;
    });
    CHECK(WIFSIGNALED(status));
  }
  REQUIRE(temporaries(t.file("")) == 2);
  std::fflush(nullptr);
  const pid_t live = ::fork();  // a writer of the same file that still runs
  REQUIRE(live >= 0);
  if (live == 0) {
    try {
      AtomicFile a(out);
      a.write("half", 4);
      for (;;) ::pause();
    } catch (...) {
      ::_exit(1);
    }
  }
  struct Reaped {  // (on every way out: a child left pausing would hold the test's output open)
    pid_t pid;
    void now() {
      if (pid > 0) ::kill(pid, SIGKILL), ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
    ~Reaped() { now(); }
  } child{live};
  for (int i = 0; i < 10000 && temporaries(t.file("")) < 3; ++i) ::usleep(1000);
  REQUIRE(temporaries(t.file("")) == 3);
  const int removed = remove_stale_temporaries(out), after = temporaries(t.file(""));
  child.now();
  CHECK(removed == 1);
  CHECK(after == 2);  // the live writer's and other.csv's
  CHECK(remove_stale_temporaries(out) == 1);  // the live writer's, killed since
  CHECK(temporaries(t.file("")) == 1);  // other.csv's: its own writer's to remove
  // A caller that holds the lock every writer of them holds owns them: stale whatever the pid (a container's
  // process is pid 1 each time), here this process's own.
  std::ofstream(t.file("graph.npz.tmp-" + std::to_string(::getpid()))) << "staged\n";
  const auto graphs = [](const std::string& name) { return name == "graph.npz"; };
  CHECK(remove_stale_temporaries_in(t.file(""), graphs) == 0);
  CHECK(stale_temporaries_in(t.file(""), graphs, true).size() == 1);
  CHECK(remove_stale_temporaries_in(t.file(""), graphs, true) == 1);
}

TEST_CASE("atomic file: a write past ulimit -f fails naming the file, and leaves no temporary") {
  TempDir t;
  const int status = in_child([&] {
    install_interrupt_handlers();  // SIGXFSZ ignored: the write answers EFBIG
    const struct rlimit small { 4096, 4096 };
    if (::setrlimit(RLIMIT_FSIZE, &small) != 0) return 3;
    try {
      write_file_atomic(t.file("big.bin"), std::string(10000, 'x'));
    } catch (const Error& e) {
      return std::string(e.message()) == t.file("big.bin") + ": write failed (File too large)" ? 0 : 4;
    }
    return 5;
  });
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(temporaries(t.file("")) == 0);
  CHECK_FALSE(std::filesystem::exists(t.file("big.bin")));
}

TEST_CASE("atomic file: in a cooperative scope a signal is recorded for the work to stop at, a second one ends it") {
  TempDir t;
  int status = in_child([&] {
    install_interrupt_handlers();
    try {
      const CooperativeInterrupt scope;
      throw_if_interrupted();  // (nothing yet)
      AtomicFile f(t.file("x.npz"));
      ::raise(SIGTERM);
      if (temporaries(t.file("")) != 1) return 1;  // kept: the work removes what it wrote
      throw_if_interrupted();
      return 4;
    } catch (const InterruptedError& e) {  // (past the scope, as the CLI catches it)
      return e.signal() == SIGTERM && std::string(e.message()).find("interrupted") == 0 ? 0 : 3;
    }
  });
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(temporaries(t.file("")) == 0);  // the unwinding AtomicFile removed its own
  status = in_child([&] {
    install_interrupt_handlers();
    const CooperativeInterrupt scope;
    AtomicFile f(t.file("y.npz"));
    ::raise(SIGINT);
    ::raise(SIGINT);  // a second signal: no more waiting
    return 5;
  });
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGINT);
  CHECK(temporaries(t.file("")) == 0);
  // A signal after the work's last look: the scope's end ends the process, its work done.
  status = in_child([&] {
    install_interrupt_handlers();
    {
      const CooperativeInterrupt scope;
      ::raise(SIGHUP);
    }
    return 6;
  });
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGHUP);
}

TEST_CASE("atomic file: a signal the process was started ignoring stays ignored") {
  const int status = in_child([] {
    ::signal(SIGHUP, SIG_IGN);  // as nohup starts it
    install_interrupt_handlers();
    ::raise(SIGHUP);
    return 0;
  });
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("atomic file: a name of up to 255 bytes is written, its temporary's name cut to fit") {
  TempDir t;
  const std::string name = t.file(std::string(255, 'n'));
  write_file_atomic(name, "long\n");
  CHECK(text_of(name) == "long\n");
  CHECK(temporaries(t.file("")) == 0);
  // two such names that share their first 240 bytes, written at once, keep apart
  const std::string other = t.file(std::string(254, 'n') + "o");
  {
    AtomicFile a(name), b(other);
    a.write("a\n", 2), b.write("b\n", 2);
    a.commit(), b.commit();
  }
  CHECK(text_of(name) == "a\n");
  CHECK(text_of(other) == "b\n");
  // a writer killed outright (no handler runs) leaves its temporary, found again by the same prefix
  const int status = in_child([&] {
    AtomicFile f(name);
    ::raise(SIGKILL);
    return 2;
  });
  CHECK(WIFSIGNALED(status));
  CHECK(temporaries(t.file("")) == 1);
  CHECK(remove_stale_temporaries(other) == 0);
  CHECK(remove_stale_temporaries(name) == 1);
  CHECK(temporaries(t.file("")) == 0);
  CHECK_THROWS_WITH_AS(check_writable(t.file("no/such/folder/f.csv")), doctest::Contains("cannot write into"), Error);
  CHECK_THROWS_WITH_AS(check_writable(t.file("")), doctest::Contains("is a directory"), Error);
  CHECK_NOTHROW(check_writable(t.file("fresh.csv")));
  CHECK_NOTHROW(check_writable("/dev/null"));
}
