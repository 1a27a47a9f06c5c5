// Everything around the data files: special files where a file is read, output paths that are links
// or devices, outputs that would destroy the run a command reads, two writers of one run, weights that
// stop being finite, checkpoints whose fields lie, a --steps stop inside an epoch, and the side files
// (eval_indices, submissions). Each case runs the CLI as a user would, so a hang is a time-out (exit
// 124) and a crash an exit code, never the suite's own end.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "apps/checkpoint.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/npz.h"
#include "io/synth.h"
#include "io/tpugraphs.h"
#include "testing.h"

using namespace gnn;
using testing::last_line;
using testing::run_gnn;
using testing::run_gnn_limited;
using testing::TempDir;

namespace fs = std::filesystem;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Six tile kernels per split (three batches of two per epoch) and two layout programs per split.
struct Data {
  TempDir dir;
  std::string root = testing::tile_and_layout(dir.file("data"), {6, 0, 30, 4}, {2, 60, 12, 5});
};
const std::string& data() {
  static Data d;
  return d.root;
}

// A trained tile-mlp run (2 epochs) in dir/name, its model.npz and best.npz in place.
std::string trained_run(const TempDir& t, const std::string& name, const std::string& extra = "") {
  const std::string run = t.file(name);
  const auto r = run_gnn("train --model tile-mlp --data " + data() + " --out " + run + " --epochs 2 --batch-graphs 2 " +
                         "--progress lines " + extra);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  return run;
}

}  // namespace

TEST_CASE("run files: a FIFO where a file is read is refused at once, never waited on") {
  TempDir t;
  const std::string fifo = t.file("x.npz");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  auto r = run_gnn_limited("inspect " + fifo, 20);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.err, fifo + ": not a regular file (a FIFO)"));

  // A FIFO named model.npz in a run being resumed.
  const std::string run = trained_run(t, "run");
  fs::remove(run + "/model.npz");
  REQUIRE(::mkfifo((run + "/model.npz").c_str(), 0644) == 0);
  r = run_gnn_limited("train --out " + run + " --resume --epochs 3", 20);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.err, "model.npz: not a regular file (a FIFO)"));

  // A FIFO .npz in a split folder.
  fs::copy(data(), t.file("data"), fs::copy_options::recursive);
  REQUIRE(::mkfifo(t.file("data/npz/tile/xla/train/zz.npz").c_str(), 0644) == 0);
  r = run_gnn_limited("train --model tile-mlp --data " + t.file("data") + " --out " + t.file("r2") + " --epochs 1", 20);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.err, "zz.npz: not a regular file (a FIFO)"));
  // eval_indices and a submission that are FIFOs
  REQUIRE(fs::create_directory(t.file("ei")));
  REQUIRE(::mkfifo(t.file("ei/xla_default.json").c_str(), 0644) == 0);
  REQUIRE(::mkfifo(t.file("sub.csv").c_str(), 0644) == 0);
  r = run_gnn_limited("score --submission " + t.file("sub.csv") + " --data " + data(), 20);
  CHECK(r.exit_code == 1);
  CHECK(contains(r.err, "sub.csv: not a regular file (a FIFO)"));
  CHECK_THROWS_WITH_AS(load_eval_indices(t.file("ei/xla_default.json")),
                       doctest::Contains("not a regular file (a FIFO)"), Error);
}

TEST_CASE("run files: gnn synth --configs 1 writes one-config graphs without corrupting the heap") {
  TempDir t;
  for (const char* kind : {"tile", "layout"}) {
    CAPTURE(kind);
    const std::string out = t.file(kind);
    auto r = run_gnn_limited(
        std::string("synth --collection ") + kind + " --out " + out + " --graphs 1 --nodes 20 --configs 1 --seed 4",
        60);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const auto files = walk_dataset(out);
    REQUIRE(files.size() == 3);
    CHECK(load_tpugraph(files[0].path).num_configs() == 1);
    // Training needs two configs to rank: one line naming the file.
    r = run_gnn(std::string("train --model ") + kind + "-mlp --data " + out + " --out " +
                t.file(std::string("r") + kind));
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(contains(r.err, "synth_train_0000.npz: 1 config"), r.err);
  }
}

TEST_CASE("run files: an output that is a symlink or a special file is written through, never replaced") {
  TempDir t;
  // A symlink to a regular file: the file is replaced, the link stays a link.
  write_file_atomic(t.file("real.txt"), "old");
  fs::create_symlink("real.txt", t.file("link.txt"));
  write_file_atomic(t.file("link.txt"), "new");
  CHECK(fs::is_symlink(t.file("link.txt")));
  CHECK(slurp(t.file("real.txt")) == "new");
  // A FIFO with a reader: the bytes go down it and it stays a FIFO.
  const std::string fifo = t.file("out.fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(reader >= 0);
  write_file_atomic(fifo, "through the pipe");
  char buf[64] = {};
  const ssize_t got = ::read(reader, buf, sizeof buf);
  ::close(reader);
  CHECK(std::string(buf, size_t(std::max<ssize_t>(got, 0))) == "through the pipe");
  struct stat st {};
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  // A FIFO with no reader is refused at once; a symlink to nothing and a directory are refused.
  CHECK_THROWS_WITH_AS(write_file_atomic(fifo, "x"), doctest::Contains("a FIFO with no reader"), Error);
  fs::create_symlink("missing.txt", t.file("dangling.txt"));
  CHECK_THROWS_WITH_AS(write_file_atomic(t.file("dangling.txt"), "x"), doctest::Contains("which does not exist"),
                       Error);
  CHECK_FALSE(fs::exists(t.file("missing.txt")));
  CHECK_THROWS_WITH_AS(write_file_atomic(t.file(""), "x"), doctest::Contains("is a directory"), Error);
  // The CLI's outputs go through the same writer.
  const std::string run = trained_run(t, "run");
  fs::create_symlink("real.csv", t.file("sub.csv"));
  write_file_atomic(t.file("real.csv"), "");
  auto r = run_gnn("predict --run " + run + " --data " + data() + " --out " + t.file("sub.csv"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(fs::is_symlink(t.file("sub.csv")));
  CHECK(slurp(t.file("real.csv")).rfind("ID,TopConfigs\n", 0) == 0);
  // The process's own stdout by path, as /dev/stdout names it (here a file the test reads): written
  // through. (/proc/self/fd/1 rather than /dev/stdout itself, so that a regression renames nothing
  // over this machine's /dev.)
  r = run_gnn("predict --run " + run + " --data " + data() + " --out /proc/self/fd/1");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.rfind("ID,TopConfigs\ntile:xla:", 0) == 0);
}

TEST_CASE("run files: no output may name a file of the run it reads") {
  TempDir t;
  const std::string run = trained_run(t, "run");
  const std::vector<uint8_t> model = testing::read_bytes(run + "/model.npz"),
                             best = testing::read_bytes(run + "/best.npz");
  fs::create_hard_link(run + "/model.npz", t.file("hard.npz"));
  fs::create_symlink(run + "/best.npz", t.file("soft.npz"));
  const std::string on = " --run " + run + " --data " + data();
  for (const std::string& args :
       {"predict" + on + " --out " + run + "/model.npz", "predict" + on + " --out " + run + "/./best.npz",
        "predict" + on + " --out " + t.file("hard.npz"), "predict" + on + " --out " + t.file("soft.npz"),
        "predict" + on + " --out " + t.file("x.csv") + " --runtimes " + run + "/model.npz",
        "eval" + on + " --per-graph " + run + "/best.npz", "eval" + on + " --per-graph " + run + "/metrics.jsonl",
        "predict" + on + " --out " + data() + "/npz/tile/xla/test/synth_test_0000.npz",
        "plot " + run + " --out " + run + "/model.npz"}) {
    CAPTURE(args);
    const auto r = run_gnn(args);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, "a file this command reads"));
  }
  CHECK(testing::read_bytes(run + "/model.npz") == model);
  CHECK(testing::read_bytes(run + "/best.npz") == best);
  // A score's per-graph file may not be the submission it reads.
  auto r = run_gnn("predict" + on + " --split valid --out " + t.file("sub.csv"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = run_gnn("score --submission " + t.file("sub.csv") + " --data " + data() + " --per-graph " + t.file("sub.csv"));
  CHECK(r.exit_code == 2);
  CHECK(slurp(t.file("sub.csv")).rfind("ID,TopConfigs\n", 0) == 0);
  // An output that cannot be written is said before anything is scored, and the other output is left as it
  // was (predict wrote --out, then failed on --runtimes).
  std::ofstream(t.file("keep.csv")) << "old\n";
  for (const std::string& bad : {t.file("no/such/dir/rt.csv"), t.file("")}) {
    CAPTURE(bad);
    r = run_gnn("predict" + on + " --out " + t.file("keep.csv") + " --runtimes " + bad);
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE((contains(r.err, "--runtimes " + bad + ": cannot write into") ||
                   contains(r.err, "--runtimes " + bad + ": is a directory")),
                  r.err);
    CHECK(slurp(t.file("keep.csv")) == "old\n");
  }
  r = run_gnn("eval" + on + " --per-graph " + t.file("no/such/dir/g.jsonl"));
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(contains(r.err, "--per-graph " + t.file("no/such/dir/g.jsonl") + ": cannot write into"), r.err);
  // The run still resumes.
  r = run_gnn("train --out " + run + " --resume --epochs 3");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
}

TEST_CASE(
    "run files: a second writer of a run is refused with the first one's pid, and a killed one's lock is taken over") {
  TempDir t;
  const std::string run = t.file("run");
  const std::string train = std::string(GNN_CLI_PATH) + " train --model tile-mlp --data " + data() + " --out " + run +
                            " --epochs 3 --batch-graphs 2 --progress lines";
  // The first writer checkpoints step 1 and then stops answering, holding the run (timeout ends it
  // should this test stop early).
  REQUIRE(std::system(
              ("timeout 300 " + train + " --checkpoint-minutes 0 --stall-after-steps 1 >/dev/null 2>&1 &").c_str()) ==
          0);
  std::string pid;
  for (int i = 0; i < 600 && pid.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::string text = slurp(run + "/lock");
    if (!text.empty() && text.back() == '\n') pid = text.substr(0, text.size() - 1);
  }
  REQUIRE(!pid.empty());
  // Killed at whatever point this test stops, should it stop early.
  struct Kill {
    pid_t pid;
    ~Kill() {
      if (pid > 0) ::kill(pid, SIGKILL);
    }
  } kill_first{pid_t(std::stol(pid))};
  // It holds the lock from before its first step; wait for step 1's checkpoint, which the resume reads.
  for (int i = 0; i < 600 && !fs::exists(run + "/model.npz"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(fs::exists(run + "/model.npz"));
  for (const char* second : {"", " --resume"}) {
    CAPTURE(second);
    const auto r = run_gnn("train --model tile-mlp --data " + data() + " --out " + run + " --epochs 3" + second);
    CHECK(r.exit_code == 1);
    CHECK(contains(r.err, "another gnn train (pid " + pid + ") is writing this run"));
  }
  // Killed with SIGKILL, it leaves its lock file behind; the kernel dropped the lock, so a resume goes on.
  REQUIRE(::kill(kill_first.pid, SIGKILL) == 0);
  kill_first.pid = 0;
  for (int i = 0; i < 200 && ::kill(pid_t(std::stol(pid)), 0) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(fs::exists(run + "/lock"));
  // A lock file replaced by a symbolic link: not followed, and said as such.
  fs::rename(run + "/lock", t.file("elsewhere"));
  fs::create_symlink(t.file("elsewhere"), run + "/lock");
  auto r = run_gnn("train --out " + run + " --resume --progress lines");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, run + "/lock is a symbolic link, which train does not follow"), r.err);
  fs::remove(run + "/lock");
  // A file named lock that holds more than a pid is not a gnn train lock: kept, and the run refused.
  std::ofstream(run + "/lock") << "notes\n";
  r = run_gnn("train --out " + run + " --resume --progress lines");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, "holds a file named lock that is not a gnn train lock"), r.err);
  CHECK(slurp(run + "/lock") == "notes\n");
  // Zeros where the pid was (a crash of the machine kept the file's size, not what was written): a lock.
  {
    std::ofstream zeros(run + "/lock", std::ios::binary | std::ios::trunc);
    zeros.write("\0\0\0\0\0\0", 6);
  }
  r = run_gnn("train --out " + run + " --resume --progress lines");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK(Json::parse(last_line(r.out))["epochs"].as_int() == 3);
}

TEST_CASE("run files: a new run ended by a signal before its first checkpoint leaves no lock or folder") {
  TempDir t;
  fs::create_directories(t.file("empty"));
  // Into folders it makes (two levels), and into an empty folder that was there: after step 1 of an epoch of
  // three it stops answering (sleeps), with no model.npz yet (mid-epoch checkpoints every 10 minutes).
  for (const std::string& run : {t.file("made/run"), t.file("empty")}) {
    CAPTURE(run);
    const std::string train = std::string(GNN_CLI_PATH) + " train --model tile-mlp --data " + data() + " --out " + run +
                              " --epochs 3 --batch-graphs 2 --progress lines --stall-after-steps 1";
    const std::string err = t.file("err");  // (killed once it says it stalls: armed by then)
    REQUIRE(std::system(("timeout 300 " + train + " >/dev/null 2>" + err + " &").c_str()) == 0);
    std::string pid;
    for (int i = 0; i < 600 && (pid.empty() || !contains(slurp(err), "stalling after step 1")); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const std::string text = slurp(run + "/lock");
      if (!text.empty() && text.back() == '\n') pid = text.substr(0, text.size() - 1);
    }
    REQUIRE(!pid.empty());
    REQUIRE_MESSAGE(contains(slurp(err), "stalling after step 1"), slurp(err));
    const pid_t p = pid_t(std::stol(pid));
    REQUIRE(::kill(p, SIGTERM) == 0);
    for (int i = 0; i < 600 && ::kill(p, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE(::kill(p, 0) != 0);
    CHECK_FALSE(fs::exists(run + "/model.npz"));
    CHECK_FALSE(fs::exists(run + "/lock"));
  }
  CHECK_FALSE(fs::exists(t.file("made")));  // the run's folder and the parent it made
  CHECK(fs::is_directory(t.file("empty")));  // the folder it was given stays, empty
  CHECK(fs::is_empty(t.file("empty")));
}

TEST_CASE("run files: a resume reads best.npz back, and an output folder that cannot be one is refused") {
  TempDir t;
  const std::string run = trained_run(t, "run");
  // best.npz damaged after it was written: a resume that would keep it (no better validation) says so.
  std::vector<uint8_t> best = testing::read_bytes(run + "/best.npz");
  const std::vector<uint8_t> model = testing::read_bytes(run + "/model.npz");
  best.resize(best.size() / 2);
  {
    std::ofstream f(run + "/best.npz", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(best.data()), std::streamsize(best.size()));
  }
  auto r = run_gnn("train --out " + run + " --resume --epochs 3");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, "--resume: " + run + "/best.npz: "), r.err);
  CHECK(contains(r.err, "remove it to resume without it"));
  CHECK(testing::read_bytes(run + "/model.npz") == model);  // nothing written
  // Another run's best.npz in its place (a sound file of other weights): loaded as eval loads it, and refused.
  const std::string other = trained_run(t, "other", "--hidden 8");
  fs::copy_file(other + "/best.npz", run + "/best.npz", fs::copy_options::overwrite_existing);
  r = run_gnn("train --out " + run + " --resume --epochs 3");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, "--resume: " + run + "/best.npz: "), r.err);
  CHECK_MESSAGE(contains(r.err, "holds the weights of another model than model.npz's: parameter "), r.err);
  CHECK(testing::read_bytes(run + "/model.npz") == model);
  fs::remove(run + "/best.npz");
  fs::copy_file(other + "/best.npz", run + "/swa.npz");  // and as swa.npz
  r = run_gnn("train --out " + run + " --resume --epochs 3");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, "--resume: " + run + "/swa.npz: holds the weights of another model"), r.err);
  CHECK(contains(r.err, "when it next averages the weights"));
  fs::remove(run + "/swa.npz");
  // The same model and widths from another run: its seed, its preprocessing (fitted on other graphs) or a
  // hyper-parameter a resume keeps tell it apart, whichever file of the two was replaced.
  const std::vector<std::pair<std::string, std::string>> others = {
      {"--seed 2", "its seed is 2, model.npz's 1"},
      {"--max-graphs 5", "its preprocessing (fitted on the training graphs when the run started) differs in '"},
      {"--lr 0.01", "--lr is 0.01 there, "}};
  for (size_t i = 0; i < others.size(); ++i) {
    const std::string &flags = others[i].first, &says = others[i].second;
    CAPTURE(flags);
    char name[16];
    std::snprintf(name, sizeof name, "other%zu", i);
    fs::copy_file(trained_run(t, name, flags) + "/best.npz", run + "/best.npz", fs::copy_options::overwrite_existing);
    r = run_gnn("train --out " + run + " --resume --epochs 3");
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(contains(r.err, "--resume: " + run + "/best.npz: is not of the run model.npz holds: " + says), r.err);
    CHECK(testing::read_bytes(run + "/model.npz") == model);
    // ... and eval, which scores best.npz by default, refuses it too (it scored it as the run's before), as
    // predict refuses it as swa.npz
    r = run_gnn("eval --run " + run + " --data " + data());
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(
        contains(r.err, "--checkpoint auto: " + run + "/best.npz: is not of the run model.npz holds: " + says), r.err);
    CHECK(contains(r.err, "; score --checkpoint last, or remove it"));
    fs::copy_file(run + "/best.npz", run + "/swa.npz", fs::copy_options::overwrite_existing);
    r = run_gnn("predict --run " + run + " --data " + data() + " --checkpoint swa --out " + t.file("p.csv"));
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(contains(r.err, "--checkpoint swa: " + run + "/swa.npz: is not of the run model.npz holds: " + says),
                  r.err);
    CHECK_FALSE(fs::exists(t.file("p.csv")));
    fs::remove(run + "/swa.npz");
  }
  fs::remove(run + "/best.npz");
  // A best.npz copied over model.npz: its weights are the run's, its optimiser state is not there.
  fs::copy_file(trained_run(t, "weights_only") + "/best.npz", run + "/model.npz", fs::copy_options::overwrite_existing);
  r = run_gnn("train --out " + run + " --resume --epochs 3");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, run + "/model.npz: holds weights only, no optimiser state, as best.npz and swa.npz do"),
                r.err);
  {
    std::ofstream f(run + "/model.npz", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(model.data()), std::streamsize(model.size()));
  }
  r = run_gnn("train --out " + run + " --resume --epochs 3");
  CHECK_MESSAGE(r.exit_code == 0, r.err);

  // --out of train, synth and demo: a file, under a file, on /proc; refused before anything is made.
  const std::string file = t.file("afile");
  std::ofstream(file) << "mine\n";
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"train --model tile-mlp --data " + data() + " --out " + file,
            "--out " + file + ": exists and is not a folder"},
           {"synth --collection tile --graphs 1 --out " + file + "/sub",
            " is not a folder, so the folder cannot be made"},
           {"synth --collection tile --graphs 1 --out /proc/gnn-x",
            "/proc lies on a kernel filesystem that holds no files"},
           {"demo --out " + file, "--out " + file + ": exists and is not a folder"}}) {
    CAPTURE(args);
    r = run_gnn(args);
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(contains(r.err, says), r.err);
  }
  CHECK(slurp(file) == "mine\n");
  // The demo replaces its own data/ and runs/: a folder of the user's is refused, nothing in it removed.
  fs::create_directories(t.file("mine/data"));
  std::ofstream(t.file("mine/data/notes.txt")) << "mine\n";
  r = run_gnn("demo --tile-graphs 2 --layout-graphs 2 --tile-epochs 1 --layout-epochs 1 --seeds 1 --out " +
              t.file("mine"));
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(contains(r.err, "a folder with files in it that no earlier demo made"), r.err);
  CHECK(slurp(t.file("mine/data/notes.txt")) == "mine\n");
  CHECK_FALSE(fs::exists(t.file("mine/.gnn-demo")));
  // A run folder inside the data's tree (a split folder, by another spelling too, or one not made yet): its files
  // would be read as graphs, or its folder hide them. Refused before anything is written there.
  const std::string dd = t.file("dd");
  synth::DatasetOptions tiles;
  tiles.collection = "tile", tiles.graphs = 3, tiles.configs = 10, tiles.seed = 4, tiles.splits = {"train", "valid"};
  synth::write_dataset(dd, tiles);
  // A flat collection folder (graphs without split folders), and a split folder given as --data.
  const std::string flat = t.file("flat/tile/xla");
  fs::create_directories(flat);
  for (const auto& f : fs::directory_iterator(dd + "/npz/tile/xla/train")) fs::copy(f.path(), flat);
  const std::vector<std::pair<std::string, std::string>> inside = {
      {dd, dd + "/npz/tile/xla/valid"},
      {dd, dd + "/npz/tile/xla/train/../valid/"},
      {dd, dd + "/npz/tile/xla/test"},  // (not made yet)
      {dd, dd + "/npz/layout/xla/default"},  // (where a collection would be found)
      {dd + "/npz/tile/xla/train", dd + "/npz/tile/xla/valid"},  // (a sibling of the split given)
      {t.file("flat"), flat + "/valid/run"}};  // (a split folder would hide the flat folder's graphs)
  for (const auto& data_and_out : inside) {
    const std::string &d = data_and_out.first, &out = data_and_out.second;
    CAPTURE(out);
    r = run_gnn("train --model tile-mlp --data " + d + " --epochs 1 --out " + out);
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(contains(r.err, "--out " + out + ": lies inside "), r.err);
    CHECK_MESSAGE(contains(r.err, ", where --data's graphs are read"), r.err);
  }
  CHECK(walk_dataset(dd).size() == 6);
  CHECK(walk_dataset(t.file("flat")).size() == 9);  // (every split: the flat folder's 3 graphs serve each)
  CHECK_FALSE(fs::exists(dd + "/npz/tile/xla/test"));
  CHECK_FALSE(fs::exists(flat + "/valid"));
  for (const auto& f : fs::recursive_directory_iterator(dd))
    CHECK_MESSAGE(!contains(f.path().string(), "lock"), f.path());
  // Beside the graphs, in folders the reader does not look into: a run as any other.
  for (const std::string& out : {dd + "/npz/runs/a", dd + "/npz/tile/xla/runs/a"}) {
    CAPTURE(out);
    r = run_gnn("train --model tile-mlp --data " + dd + " --epochs 1 --out " + out);
    CHECK_MESSAGE(r.exit_code == 0, r.err);
  }
  CHECK(walk_dataset(dd).size() == 6);
  // A symlink loop as --out is said to be one.
  fs::create_symlink(t.file("loop_b"), t.file("loop_a"));
  fs::create_symlink(t.file("loop_a"), t.file("loop_b"));
  r = run_gnn("train --model tile-mlp --data " + data() + " --out " + t.file("loop_a"));
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(contains(r.err, "a symlink in a loop of symlinks"), r.err);
}

TEST_CASE("run files: a layout graph without configurable nodes trains, and deduplicated to one config says so") {
  // Every config of such a graph sets nothing, so all score alike. Its per-node recipe inputs have no rows;
  // the bug was a row size read from the batch's first graph, so this needs the bare graph first: seed 1's
  // first batch holds a_bare, then b_plain (as a --memory-limit error listing the step's graphs shows).
  TempDir t;
  const std::string split = t.file("d/npz/layout/xla/default/train");
  fs::create_directories(split);
  auto plain = synth::make_graph(true, 60, 6, 1, true, 0.15), bare = synth::make_graph(true, 60, 6, 2, true, 0.15);
  for (auto& [k, v] : bare) {
    if (k == "node_config_ids") v = Tensor::zeros({0}, DType::I64);
    if (k == "node_config_feat") v = Tensor::zeros({6, 0, 18}, DType::F32);
  }
  save_npz(split + "/a_bare.npz", bare);
  save_npz(split + "/b_plain.npz", plain);
  const std::string base = "train --model layout-tgraph --data " + t.file("d") + " --epochs 1 --configs 4 " +
                           "--batch-graphs 2 --progress lines --out ";
  auto r = run_gnn(base + t.file("run") + " --dedup off");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  r = run_gnn(base + t.file("run2"));
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, split + "/a_bare.npz: 1 config after --dedup on (which keeps one"), r.err);
}

TEST_CASE("run files: weights that stop being finite stop the run before anything is written") {
  TempDir t;
  for (const char* extra : {"", " --skip-nonfinite"}) {
    CAPTURE(extra);
    const std::string run = t.file(std::string("run") + (extra[0] ? "_skip" : ""));
    const auto r =
        run_gnn("train --model tile-mlp --data " + data() + " --out " + run + " --epochs 2 --lr 1e300" + extra);
    CHECK(r.exit_code == 1);
    CHECK(contains(r.err, "non-finite weights after the update of step 1: parameter '"));
    CHECK_FALSE(fs::exists(run + "/model.npz"));
    CHECK_FALSE(fs::exists(run + "/best.npz"));
  }
}

namespace {

// A copy of a run whose model.npz had `edit` applied to its arrays.
std::string damaged_run(const TempDir& t, const std::string& from, const std::string& name,
                        const std::function<void(std::map<std::string, Tensor>&)>& edit) {
  const std::string run = t.file(name);
  fs::copy(from, run, fs::copy_options::recursive);
  fs::remove(run + "/lock");
  std::map<std::string, Tensor> a = NpzReader(run + "/model.npz").load_all();
  edit(a);
  save_npz(run + "/model.npz", {a.begin(), a.end()});
  return run;
}

// A tile-mlp run of one epoch with --swa 1 in t's "good", and a copy of it as `name` whose best score is the
// least a score can be, so that its epoch 2 certainly writes best.npz again.
std::string lowered_run(const TempDir& t, const std::string& name) {
  const std::string good = t.file("good");
  const auto r =
      run_gnn("train --model tile-mlp --data " + data() + " --out " + good + " --epochs 1 --swa 1 --progress lines");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  return damaged_run(t, good, name, [](std::map<std::string, Tensor>& a) { a["state/best_score"] = f64_tensor(-1.0); });
}

std::string first_key(const std::map<std::string, Tensor>& a, const std::string& prefix, const std::string& suffix) {
  for (const auto& [k, v] : a)
    if (k.rfind(prefix, 0) == 0 && k.size() >= suffix.size() &&
        k.compare(k.size() - suffix.size(), suffix.size(), suffix) == 0)
      return k;
  FAIL("no key ", prefix, "...", suffix);
  return "";
}

}  // namespace

TEST_CASE("run files: every checkpoint field is validated before a resume, eval or predict trusts it") {
  TempDir t;
  const std::string good = trained_run(t, "good");
  using Arrays = std::map<std::string, Tensor>;
  const std::vector<std::tuple<std::string, std::function<void(Arrays&)>, std::string>> cases = {
      {"negative epoch", [](Arrays& a) { a["state/epoch"] = Tensor::from_vector(std::vector<int64_t>{-4}); },
       "'state/epoch' is -4"},
      {"an epoch past --epochs' bound",
       [](Arrays& a) { a["state/epoch"] = Tensor::from_vector(std::vector<int64_t>{int64_t(1e12)}); },
       "'state/epoch' is 1000000000000, not in 0..1000000"},
      {"a negative step budget",
       [](Arrays& a) { a["meta/steps"] = Tensor::from_vector(std::vector<int64_t>{-1}); },
       "'meta/steps' is -1, not in 0.."},
      {"a run of 10^12 epochs",
       [](Arrays& a) { a["meta/epochs"] = Tensor::from_vector(std::vector<int64_t>{int64_t(1e12)}); },
       "'meta/epochs' is 1000000000000, not in 1..1000000"},
      {"batch past the epoch", [](Arrays& a) { a["state/batch"] = Tensor::from_vector(std::vector<int64_t>{3}); },
       "'state/batch' 3 is past the 3 batches"},
      {"a missing Adam moment", [](Arrays& a) { a.erase(first_key(a, "optim/", ".exp_avg")); }, ".exp_avg' is missing"},
      {"a parameter's whole Adam state missing",
       [](Arrays& a) {
         const std::string k = first_key(a, "optim/", ".exp_avg");
         const std::string p = k.substr(0, k.size() - 8);
         a.erase(p + ".exp_avg"), a.erase(p + ".exp_avg_sq"), a.erase(p + ".step");
       },
       "'moments' says"},
      {"a negative second moment",
       [](Arrays& a) {
         Tensor& v = a[first_key(a, "optim/", ".exp_avg_sq")];
         v = v.astype(DType::F64).clone();
         v.f64()[0] = -1;
       },
       "holds a negative value"},
      {"NaN in the preprocessing",
       [](Arrays& a) { a["prep/log_offset"] = Tensor::from_vector(std::vector<double>{NAN}); },
       "'prep/log_offset' holds a non-finite value"},
      {"a best score without a best epoch",
       [](Arrays& a) { a["state/best_epoch"] = Tensor::from_vector(std::vector<int64_t>{0}); }, "'state/best_score'"},
      // Named as the checkpoint's, not as a flag the user never gave nor by a layer's sizes.
      {"a hyper-parameter out of its range",
       [](Arrays& a) {
         std::string h = tensor_text(a, "meta/hparams", "");
         const size_t at = h.find("\"hidden\": \"");
         REQUIRE(at != std::string::npos);
         h.replace(at + 11, h.find('"', at + 11) - (at + 11), "-5");
         a["meta/hparams"] = text_tensor(h);
       },
       "meta/hparams: hidden: expected an integer in [1, 65536], got '-5'; the checkpoint is damaged"},
      {"another recipe's name", [](Arrays& a) { a["meta/recipe"] = text_tensor("tile-gat-6th"); },
       "meta/hparams: pool: not a hyper-parameter of tile-gat-6th"},
      {"a recipe this build lacks", [](Arrays& a) { a["meta/recipe"] = text_tensor("tile-nope"); },
       "'meta/recipe' is 'tile-nope', a recipe this build does not have"},
      {"a NUL in the recipe's name", [](Arrays& a) { a["meta/recipe"] = text_tensor(std::string("tile-mlp\0x", 10)); },
       "'meta/recipe' holds a NUL byte at 8"},
      {"node features of a width no file has",
       [](Arrays& a) { a["prep/node/in_features"] = Tensor::from_vector(std::vector<int64_t>{999}); },
       "'prep/node/in_features' is 999, not the 140 columns of TpuGraphs files"},
      // what only a resume reads
      {"a NUL in the dataset's path",
       [](Arrays& a) { a["meta/data"] = text_tensor(tensor_text(a, "meta/data", "") + std::string("\0junk", 5)); },
       "'meta/data' holds a NUL byte"},
      {"the dataset's path as a number",
       [](Arrays& a) { a["meta/data"] = Tensor::from_vector(std::vector<double>{1}); },
       "'meta/data' is f64[1] on cpu, not the text (uint8 bytes) gnn writes there"},
      {"a negative seed", [](Arrays& a) { a["meta/seed"] = Tensor::from_vector(std::vector<int64_t>{-5}); },
       "'meta/seed' is -5, not in 0.."},
      {"a kept column past the features",
       [](Arrays& a) {
         Tensor& k = a["prep/node/keep"];
         k = k.clone();
         k.i32()[0] = 500;
       },
       "transform 'prep/node/' keeps column 500; the checkpoint is damaged"},
  };
  for (const auto& [what, edit, message] : cases) {
    CAPTURE(what);
    const std::string run = damaged_run(t, good, "bad", edit);
    const std::vector<uint8_t> before = testing::read_bytes(run + "/model.npz");
    const std::string metrics = slurp(run + "/metrics.jsonl");
    const auto r = run_gnn("train --out " + run + " --resume --epochs 4");
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(contains(r.err, run + "/model.npz: "), r.err);
    CHECK_MESSAGE(contains(r.err, message), r.err);
    const bool eval_reads = !contains(message, "meta/data") && !contains(message, "meta/seed");
    if (eval_reads && (contains(message, "meta/") || contains(message, "prep/"))) {  // eval reads it the same way
      const auto e = run_gnn("eval --run " + run + " --checkpoint last --data " + data());
      CHECK(e.exit_code == 1);
      CHECK_MESSAGE((contains(e.err, run + "/model.npz: ") && contains(e.err, message)), e.err);
    }
    CHECK(testing::read_bytes(run + "/model.npz") == before);
    CHECK(slurp(run + "/metrics.jsonl") == metrics);
    fs::remove_all(run);
  }
  // predict reads the preprocessing too: NaN there is refused, not written out as scores.
  const std::string run = damaged_run(
      t, good, "nanprep", [](Arrays& a) { a["prep/log_offset"] = Tensor::from_vector(std::vector<double>{NAN}); });
  const auto r = run_gnn("predict --run " + run + " --checkpoint last --data " + data() + " --out " + t.file("p.csv"));
  CHECK(r.exit_code == 1);
  CHECK(contains(r.err, "holds a non-finite value"));
  CHECK_FALSE(fs::exists(t.file("p.csv")));
}

TEST_CASE("run files: SWA's stored snapshots are checked against their count, and a run is never shortened") {
  TempDir t;
  const std::string good = trained_run(t, "good", "--swa 2 --lr 1e-3");  // 2 epochs: 2 snapshots
  using Arrays = std::map<std::string, Tensor>;
  const auto count = [](int64_t n) { return [n](Arrays& a) { a["swa/count"] = Tensor::from_vector(std::vector{n}); }; };
  const std::vector<std::tuple<std::string, std::function<void(Arrays&)>, std::string>> cases = {
      {"a count of -1", count(-1), "swa/count -1 does not match the 2 snapshots stored"},
      {"a count of 1 beside 2 snapshots", count(1), "swa/count 1 does not match the 2 snapshots stored"},
      {"a count past the snapshots", count(100), "swa/count 100 does not match the 2 snapshots stored"},
      {"more snapshots than epochs",
       [](Arrays& a) {
         std::vector<std::pair<std::string, Tensor>> third;
         for (const auto& [k, v] : a)
           if (k.rfind("swa/1/", 0) == 0) third.emplace_back("swa/2/" + k.substr(6), v);
         a.insert(third.begin(), third.end());
         a["swa/count"] = Tensor::from_vector(std::vector<int64_t>{3});
       },
       "swa/count 3: SWA snapshots stored after 2 epochs"},
      {"the count erased", [](Arrays& a) { a.erase("swa/count"); }, "swa/count (missing) does not match"},
      {"a count of two values",
       [](Arrays& a) { a["swa/count"] = Tensor::from_vector(std::vector<int64_t>{2, 2}); }, "swa/count i64[2]"},
      {"NaN in a snapshot",
       [](Arrays& a) {
         Tensor& v = a[first_key(a, "swa/1/", "")];
         v = v.clone();
         v.f64()[0] = NAN;
       },
       "holds a non-finite value"},
  };
  for (const auto& [what, edit, message] : cases) {
    CAPTURE(what);
    const std::string run = damaged_run(t, good, "bad", edit);
    const std::vector<uint8_t> before = testing::read_bytes(run + "/model.npz");
    const auto r = run_gnn("train --out " + run + " --resume --epochs 3");
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE((contains(r.err, run + "/model.npz: ") && contains(r.err, message)), r.err);
    CHECK(testing::read_bytes(run + "/model.npz") == before);
    fs::remove_all(run);
  }
  // A run is not made shorter than it has trained (it would keep its weights and claim the shorter length);
  // the same number written another way is the run's own value, not a change.
  const std::vector<uint8_t> before = testing::read_bytes(good + "/model.npz");
  auto r = run_gnn("train --out " + good + " --resume --epochs 1");
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(contains(r.err, "--epochs 1: the run in " + good + " has already trained 2 epochs"), r.err);
  r = run_gnn("train --out " + good + " --resume --steps 1");
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(contains(r.err, "--steps 1: the run in " + good + " has already trained"), r.err);
  CHECK(testing::read_bytes(good + "/model.npz") == before);
  r = run_gnn("train --out " + good + " --resume --epochs 2 --lr 0.001");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  r = run_gnn("train --out " + good + " --resume --epochs 2 --swa 2.0");  // an integer flag's 2.0 is no integer
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(contains(r.err, "--swa 2.0: the run in " + good + " was started with 2"), r.err);
  // The run's own length is checked too (here a damaged one; an older gnn's records none and 10 is assumed).
  const std::string shorter = damaged_run(t, good, "shorter", [](Arrays& a) {
    a["meta/epochs"] = Tensor::from_vector(std::vector<int64_t>{1});
  });
  r = run_gnn("train --out " + shorter + " --resume");
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(contains(r.err, "--epochs 1 (the length it records): the run in " + shorter), r.err);
  r = run_gnn("train --out " + good + " --resume --epochs 2 --lr 0.002");
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(contains(r.err, "--lr 0.002: the run in " + good + " was started with 1e-3"), r.err);
  // A limit of less than one byte is refused, not read as 0 (no limit).
  r = run_gnn("train --model tile-mlp --data " + data() + " --out " + t.file("m") + " --epochs 1 --memory-limit 0.5");
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(contains(r.err, "--memory-limit 0.5: less than one byte"), r.err);
  for (const char* limit : {"0x10", "+1G", "' 1G'"}) {  // plain decimal, as every number flag
    CAPTURE(limit);
    r = run_gnn("train --model tile-mlp --data " + data() + " --out " + t.file("m") + " --epochs 1 --memory-limit " +
                limit);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, "--memory-limit: expected bytes"));
  }
  CHECK_FALSE(fs::exists(t.file("m")));
  // A resume under limits too small for it, wherever each bites (the model, the checkpoint's weights or
  // Adam's moments, a step): the phase and --memory-limit are named (Adam's moments' load was reported as
  // the file's own error, "model.npz: an allocation of ...").
  const std::string probe = t.file("probe");
  fs::copy(good, probe, fs::copy_options::recursive);
  int refused = 0;
  for (double kib = 16; kib < double(1 << 20); kib *= 1.25) {
    const std::string limit = std::to_string(int64_t(kib)) + "K";
    CAPTURE(limit);
    r = run_gnn("train --out " + probe + " --resume --epochs 3 --memory-limit " + limit);
    if (r.exit_code == 0) break;
    ++refused;
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(contains(r.err, "does not fit in the memory limit of "), r.err);
    CHECK_MESSAGE(contains(r.err, "(--memory-limit)"), r.err);
  }
  CHECK(r.exit_code == 0);
  CHECK(refused > 0);
}

TEST_CASE("run files: a run whose model.npz is gone is not trained over, and a lost best.npz is written again") {
  TempDir t;
  const std::string run = trained_run(t, "run");  // two epochs: metrics.jsonl logs both
  fs::remove(run + "/model.npz");
  const std::string metrics = slurp(run + "/metrics.jsonl");
  const std::vector<uint8_t> best = testing::read_bytes(run + "/best.npz");
  for (const char* resume : {"", " --resume"}) {
    CAPTURE(resume);
    const auto r = run_gnn("train --model tile-mlp --data " + data() + " --out " + run + " --epochs 2" + resume);
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(contains(r.err, "--out " + run + ": has no model.npz but holds an earlier run's " + run +
                                      "/metrics.jsonl (2 epochs)"),
                  r.err);
    CHECK(slurp(run + "/metrics.jsonl") == metrics);
    CHECK(testing::read_bytes(run + "/best.npz") == best);
  }
  fs::remove(run + "/metrics.jsonl");  // best.npz alone: by its own epoch (1 here, 2 in its place)
  auto edit = [&](int64_t epoch) {
    std::map<std::string, Tensor> a = NpzReader(run + "/best.npz").load_all();
    a["state/epoch"] = Tensor::from_vector(std::vector<int64_t>{epoch});
    save_npz(run + "/best.npz", {a.begin(), a.end()});
  };
  edit(2);
  auto r = run_gnn("train --model tile-mlp --data " + data() + " --out " + run + " --epochs 2 --resume");
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(contains(r.err, "holds an earlier run's " + run + "/best.npz (epoch 2)"), r.err);
  // What an interrupted first epoch leaves before its model.npz (best.npz, its metrics line) is replaced.
  edit(1);
  {
    std::ofstream f(run + "/metrics.jsonl");
    f << metrics.substr(0, metrics.find('\n') + 1);
  }
  r = run_gnn("train --model tile-mlp --data " + data() + " --out " + run + " --epochs 2 --resume --progress lines");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  const std::string again = slurp(run + "/metrics.jsonl");  // a new run's two epochs
  CHECK(std::count(again.begin(), again.end(), '\n') == 2);
  CHECK(Json::parse(last_line(again))["epoch"].as_int() == 2);

  // A checkpoint that does not land (here past a file size limit, as on a full disk) takes its epoch's
  // metrics line back: the log does not run ahead of the run.
  const std::string logged = slurp(run + "/metrics.jsonl");
  const std::vector<uint8_t> model = testing::read_bytes(run + "/model.npz");
  const std::string limit = std::to_string(model.size() / 2048);  // KiB: best.npz (no Adam state) fits
  r = testing::run_gnn_env("ulimit -f " + limit + "; trap '' XFSZ;", "train --out " + run + " --resume --epochs 3");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, "model.npz"), r.err);
  CHECK(slurp(run + "/metrics.jsonl") == logged);
  CHECK(testing::read_bytes(run + "/model.npz") == model);

  // best.npz removed (as the refusal of a damaged one suggests): said, and the run goes on as it would have
  const Json before = Json::parse(last_line(slurp(run + "/metrics.jsonl")));
  fs::remove(run + "/best.npz");
  r = run_gnn("train --out " + run + " --resume --epochs 3 --progress lines");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK_MESSAGE(contains(r.err, run + "/best.npz is missing: the weights of the best validation so far (epoch "),
                r.err);
  CHECK(Json::parse(last_line(slurp(run + "/metrics.jsonl")))["epoch"].as_int() == before["epoch"].as_int() + 1);
}

TEST_CASE("run files: a checkpoint that does not land puts back the best.npz and swa.npz its epoch wrote") {
  if (std::system("command -v prlimit >/dev/null 2>&1") != 0) return testing::skip("no prlimit (util-linux)");
  TempDir t;
  const std::string run = lowered_run(t, "run");
  const std::vector<uint8_t> best = testing::read_bytes(run + "/best.npz"), swa = testing::read_bytes(run + "/swa.npz"),
                             model = testing::read_bytes(run + "/model.npz");
  const std::string limit = std::to_string(model.size() / 2048);  // KiB: best.npz and swa.npz fit, model.npz not
  auto r =
      testing::run_gnn_env("ulimit -f " + limit + "; trap '' XFSZ;", "train --out " + run + " --resume --epochs 2");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, "model.npz"), r.err);
  CHECK(testing::read_bytes(run + "/model.npz") == model);
  CHECK(testing::read_bytes(run + "/best.npz") == best);  // (written by epoch 2, then put back)
  CHECK(testing::read_bytes(run + "/swa.npz") == swa);
  for (const auto& f : fs::directory_iterator(run)) CHECK_MESSAGE(!contains(f.path().string(), ".tmp-"), f.path());
  // Without the limit the epoch lands, and with it its best.npz.
  r = run_gnn("train --out " + run + " --resume --epochs 2 --progress lines");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(testing::read_bytes(run + "/best.npz") != best);
  CHECK(Json::parse(last_line(r.out))["best_epoch"].as_int() == 2);
  const auto no_temporaries = [&] {
    for (const auto& f : fs::directory_iterator(run)) CHECK_MESSAGE(!contains(f.path().string(), ".tmp-"), f.path());
  };
  // A limit under which best.npz's own write fails (its kept link and the file one file then): put back too.
  const std::vector<uint8_t> best2 = testing::read_bytes(run + "/best.npz"),
                             swa2 = testing::read_bytes(run + "/swa.npz");
  const std::string lower =
      damaged_run(t, run, "lower", [](std::map<std::string, Tensor>& a) { a["state/best_score"] = f64_tensor(-1.0); });
  r = testing::run_gnn_env("ulimit -f " + std::to_string(best2.size() / 2048) + "; trap '' XFSZ;",
                           "train --out " + lower + " --resume --epochs 3");
  CHECK(r.exit_code == 1);
  CHECK(testing::read_bytes(lower + "/best.npz") == best2);
  CHECK(testing::read_bytes(lower + "/swa.npz") == swa2);
  for (const auto& f : fs::directory_iterator(lower)) CHECK_MESSAGE(!contains(f.path().string(), ".tmp-"), f.path());
  // A process killed (--kill-after-steps: SIGKILL) once its epoch's files all landed leaves none kept.
  const int64_t steps = Json::parse(last_line(slurp(run + "/metrics.jsonl")))["step"].as_int();
  r = run_gnn("train --out " + run + " --resume --epochs 3 --kill-after-steps " + std::to_string(steps / 2 * 3));
  CHECK(r.exit_code != 0);
  CHECK(Json::parse(last_line(slurp(run + "/metrics.jsonl")))["epoch"].as_int() == 3);
  no_temporaries();
}

TEST_CASE("run files: a run killed between an epoch's best.npz and its model.npz is put back on resume") {
  TempDir t;
  // The next epoch's best.npz and swa.npz (epoch 2 writes both).
  const std::string good = t.file("good"), next = lowered_run(t, "next");
  auto r = run_gnn("train --out " + next + " --resume --epochs 2 --progress lines");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::vector<uint8_t> best = testing::read_bytes(good + "/best.npz"),
                             swa = testing::read_bytes(good + "/swa.npz");
  REQUIRE(testing::read_bytes(next + "/best.npz") != best);
  REQUIRE(testing::read_bytes(next + "/swa.npz") != swa);
  // What SIGKILL leaves between the files of epoch 2: model.npz at epoch 1, best.npz and swa.npz at epoch 2,
  // and the files they replaced kept as temporaries of the killed process (whatever its pid: a live one too,
  // as in a container where gnn is pid 1 each time).
  const auto killed = [&](const std::string& name, const std::string& pid) {
    const std::string run = t.file(name);
    fs::copy(good, run, fs::copy_options::recursive);
    fs::remove(run + "/lock");
    for (const char* f : {"/best.npz", "/swa.npz"}) {
      if (!pid.empty()) fs::rename(run + f, run + f + ".before.tmp-" + pid);
      fs::copy_file(next + f, run + f, fs::copy_options::overwrite_existing);
    }
    return run;
  };
  for (const std::string& pid : {std::string("999999999"), std::to_string(::getpid())}) {
    CAPTURE(pid);
    const std::string run = killed("killed" + pid, pid);
    // eval refuses the newer file, naming the way out, and scores --checkpoint last
    r = run_gnn("eval --run " + run + " --data " + data());
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(contains(r.err, run + "/best.npz: it holds the best of epoch 2, model.npz's best is epoch 1: "
                                        "written by an epoch whose model.npz has not landed"),
                  r.err);
    r = run_gnn("eval --run " + run + " --data " + data() + " --checkpoint swa");
    CHECK_MESSAGE(contains(r.err, "swa.npz: it averages the weights up to epoch 2, model.npz is at epoch 1"), r.err);
    CHECK(run_gnn("eval --run " + run + " --data " + data() + " --checkpoint last").exit_code == 0);
    // A resume to no more epochs than model.npz's puts the kept ones back, and leaves no temporary.
    r = run_gnn("train --out " + run + " --resume --epochs 1 --progress lines");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK_MESSAGE(contains(r.err, run + "/best.npz: it holds the best of epoch 2, model.npz's best is epoch 1: "),
                  r.err);
    CHECK_MESSAGE(contains(r.err, "the copy the run kept of it put back (" + run + "/best.npz.before.tmp-" + pid),
                  r.err);
    CHECK(testing::read_bytes(run + "/best.npz") == best);
    CHECK(testing::read_bytes(run + "/swa.npz") == swa);
    CHECK(run_gnn("eval --run " + run + " --data " + data()).exit_code == 0);
  }
  // best.npz removed by hand (eval refused it), its kept copy there: put back, not swept away as a temporary.
  const std::string gone = killed("gone", "999999999");
  fs::remove(gone + "/best.npz");
  r = run_gnn("train --out " + gone + " --resume --epochs 1 --progress lines");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK_MESSAGE(contains(r.err, gone + "/best.npz is missing: the copy the run kept of it put back"), r.err);
  CHECK(testing::read_bytes(gone + "/best.npz") == best);
  // Nothing kept in step (a copy of another time only), and model.npz has a best: the file is refused, and it
  // and the copy are left as they are.
  const std::string lost = killed("lost", "");
  fs::copy_file(next + "/best.npz", lost + "/best.npz.before.tmp-999999999");
  r = run_gnn("train --out " + lost + " --resume --epochs 1 --progress lines");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, "--resume: " + lost + "/best.npz: it holds the best of epoch 2"), r.err);
  CHECK(testing::read_bytes(lost + "/best.npz") == testing::read_bytes(next + "/best.npz"));
  CHECK(fs::exists(lost + "/best.npz.before.tmp-999999999"));
  // A file behind model.npz (put back from an earlier time) is refused as such.
  const std::string behind = t.file("behind");
  fs::copy(next, behind, fs::copy_options::recursive);
  fs::remove(behind + "/lock");
  fs::copy_file(good + "/best.npz", behind + "/best.npz", fs::copy_options::overwrite_existing);
  r = run_gnn("eval --run " + behind + " --data " + data());
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, "it holds the best of epoch 1, model.npz's best is epoch 2: older than the run's "),
                r.err);
  // Nothing kept, and model.npz says there was no best yet (the epoch wrote the file first): the file goes.
  const std::string first = damaged_run(t, lost, "first", [](std::map<std::string, Tensor>& a) {
    a["state/best_epoch"] = i64_tensor(0), a["state/best_score"] = f64_tensor(-INFINITY);
  });
  fs::remove(first + "/swa.npz");
  r = run_gnn("train --out " + first + " --resume --epochs 1 --progress lines");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK_MESSAGE(contains(r.err, "removed, as model.npz says there was none before"), r.err);
  CHECK_FALSE(fs::exists(first + "/best.npz"));
  // The same model.npz (as a backup of epoch 1 put back by hand) beside the best.npz of a later epoch than the
  // next: not what a kill leaves, so refused and left as it is.
  const std::string later =
      damaged_run(t, next, "later", [](std::map<std::string, Tensor>& a) { a["state/best_score"] = f64_tensor(-1.0); });
  REQUIRE_MESSAGE(run_gnn("train --out " + later + " --resume --epochs 3").exit_code == 0, "epoch 3");
  const std::string restored = damaged_run(t, lost, "restored", [](std::map<std::string, Tensor>& a) {
    a["state/best_epoch"] = i64_tensor(0), a["state/best_score"] = f64_tensor(-INFINITY);
  });
  fs::remove(restored + "/swa.npz");
  fs::copy_file(later + "/best.npz", restored + "/best.npz", fs::copy_options::overwrite_existing);
  r = run_gnn("train --out " + restored + " --resume --epochs 1 --progress lines");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, restored + "/best.npz: it holds the best of epoch 3, model.npz's best is none yet: "
                                           "newer than the epoch after model.npz's (model.npz put back"),
                r.err);
  CHECK(testing::read_bytes(restored + "/best.npz") == testing::read_bytes(later + "/best.npz"));
  // The next epoch's best.npz, but a log that went further than the next epoch: the run went on past it, so
  // this model.npz was put back since; refused and left as it is.
  const std::string went_on = damaged_run(t, lost, "went_on", [](std::map<std::string, Tensor>& a) {
    a["state/best_epoch"] = i64_tensor(0), a["state/best_score"] = f64_tensor(-INFINITY);
  });
  fs::remove(went_on + "/swa.npz");
  fs::copy_file(later + "/metrics.jsonl", went_on + "/metrics.jsonl", fs::copy_options::overwrite_existing);
  r = run_gnn("train --out " + went_on + " --resume --epochs 1 --progress lines");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, went_on + "/best.npz: it holds the best of epoch 2, model.npz's best is none yet"),
                r.err);
  CHECK(testing::read_bytes(went_on + "/best.npz") == testing::read_bytes(next + "/best.npz"));
}

TEST_CASE("run files: a first checkpoint that cannot be written leaves no part of the run, and --resume says so") {
  if (std::system("command -v prlimit >/dev/null 2>&1") != 0) return testing::skip("no prlimit (util-linux)");
  TempDir t;
  const std::string run = t.file("run"),
                    train = "train --model tile-mlp --data " + data() + " --epochs 1 --batch-graphs 2 --swa 1 --out ";
  // The files' sizes, from a run that writes them: a file-size limit between best.npz's and swa.npz's and
  // model.npz's (which holds the optimiser's state too) lets the first two land and not the checkpoint.
  auto r = run_gnn(train + t.file("sizes"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const uintmax_t small = std::max(fs::file_size(t.file("sizes/best.npz")), fs::file_size(t.file("sizes/swa.npz"))),
                  model = fs::file_size(t.file("sizes/model.npz"));
  REQUIRE(small < model);
  r = testing::run_gnn_env("prlimit --fsize=" + std::to_string((small + model) / 2), train + run);
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, run + "/model.npz: write failed (File too large)"), r.err);
  CHECK_FALSE(fs::exists(run));  // best.npz and swa.npz taken back, then the folder the run made
  r = run_gnn("train --resume --out " + run);
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(contains(r.err, "--resume: --out " + run + " does not exist, so there is no run to resume"), r.err);
  fs::create_directories(run);
  // An empty folder given as --out is left as it was: empty, without the run's lock file.
  r = testing::run_gnn_env("prlimit --fsize=" + std::to_string((small + model) / 2), train + run);
  CHECK(r.exit_code == 1);
  CHECK(fs::is_empty(run));
  r = run_gnn("train --resume --out " + run);
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(
      contains(r.err, "--resume: " + run + "/model.npz does not exist, so " + run + " holds no run to resume"), r.err);
}

TEST_CASE("run files: a new run replaces an interrupted first epoch's best.npz and swa.npz") {
  TempDir t;
  const std::string run = t.file("run");
  auto r = run_gnn("train --model tile-mlp --data " + data() + " --out " + run +
                   " --epochs 1 --batch-graphs 2 --swa 1 --progress lines");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  REQUIRE(fs::exists(run + "/best.npz"));
  REQUIRE(fs::exists(run + "/swa.npz"));
  fs::remove(run + "/model.npz");  // as a kill after the epoch's metrics line, before its checkpoint, leaves it
  // another attempt that fails before it writes anything leaves them as they were
  const std::vector<uint8_t> swa = testing::read_bytes(run + "/swa.npz");
  r = run_gnn("train --model tile-mlp --data " + data() + " --out " + run + " --epochs 1 --memory-limit 1K");
  CHECK(r.exit_code != 0);
  CHECK(testing::read_bytes(run + "/swa.npz") == swa);
  // one that does not average: the first one's swa.npz may not pass for its own
  r = run_gnn("train --model tile-mlp --data " + data() + " --out " + run + " --epochs 1 --batch-graphs 2 --seed 7");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK_MESSAGE(contains(r.err, "replacing what an interrupted first epoch left: " + run + "/"), r.err);
  CHECK(!fs::exists(run + "/swa.npz"));
  CHECK(run_gnn("eval --run " + run + " --data " + data() + " --checkpoint swa").exit_code != 0);
}

// A partial epoch's validation must leave the weights as they were: with --op-max-norm, looking up the
// valid graphs' opcodes renormalises those embedding rows in place, which the unbroken run never does
// at that step (the weight decay moves the rows the valid graphs alone look up between validations).
// `flags` sets the batch and the step budget: the six training kernels make an epoch of 6 / B batches.
static void check_resume_inside_epoch(const std::string& model, const std::string& flags) {
  INFO(model, " ", flags);
  TempDir t;
  const std::string base = "train --model " + model + " --data " + data() + " --progress lines --out ";
  auto r = run_gnn(base + t.file("a") + " --epochs 3 " + flags);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string partial = slurp(t.file("a/metrics.jsonl"));
  CHECK(contains(partial, "\"partial_epoch\": true"));
  // Resumed within its budget it has nothing to train, and its log stays as it was.
  r = run_gnn("train --out " + t.file("a") + " --resume");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(slurp(t.file("a/metrics.jsonl")) == partial);
  r = run_gnn("train --out " + t.file("a") + " --resume --steps 0");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = run_gnn(base + t.file("b") + " --epochs 3 " + flags.substr(0, flags.find(" --steps")));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(testing::same_bits(testing::checkpoint_weights(t.file("a/model.npz")),
                           testing::checkpoint_weights(t.file("b/model.npz"))));
  // The resumed run's log is the unbroken run's: the partial line gave way to the whole epoch's.
  auto lines = [&](const std::string& path) {
    std::vector<std::string> out;
    std::istringstream in(slurp(path));
    for (std::string line; std::getline(in, line);) {
      const Json j = Json::parse(line);
      out.push_back(std::to_string(j["epoch"].as_int()) + " " + std::to_string(j["step"].as_int()) + " " +
                    j["train_loss"].dump() + " " + j["valid_score"].dump() +
                    (j.contains("partial_epoch") ? " partial" : ""));
    }
    return out;
  };
  CHECK(lines(t.file("a/metrics.jsonl")) == lines(t.file("b/metrics.jsonl")));
  CHECK(lines(t.file("a/metrics.jsonl")).size() == 3);
}

TEST_CASE("run files: a resume drops log lines that are no epoch's and says whether any epoch's is lost") {
  TempDir t;
  const std::string run = trained_run(t, "run");  // two epochs logged
  const std::string metrics = run + "/metrics.jsonl", lines = slurp(metrics);
  std::ofstream(metrics) << "garbage\n" << lines << "{\"epoch\": -5}\n";
  auto r = run_gnn("train --out " + run + " --resume --epochs 3");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK_MESSAGE(contains(r.err, metrics + " holds 2 line(s) that are not an epoch's record, dropped; the 2 epochs "
                                          "before the checkpoint are all there"),
                r.err);
  const std::string now = slurp(metrics);
  CHECK(now.rfind(lines, 0) == 0);  // the epochs' lines as they were, then epoch 3's
  CHECK(std::count(now.begin(), now.end(), '\n') == 3);
  r = run_gnn("plot " + run);
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  // An epoch's line gone: said as lost.
  const std::string all = slurp(metrics);
  std::ofstream(metrics) << all.substr(all.find('\n') + 1);
  r = run_gnn("train --out " + run + " --resume --epochs 4");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK_MESSAGE(contains(r.err, metrics + " holds the lines of 2 of the 3 epochs before the checkpoint; the rest "
                                          "of its history is lost"),
                r.err);
  // The log now holds epochs 2, 3 and 4 (epoch 1's line went above); epoch 2's line twice in place of epoch 3's
  // is three lines of two epochs.
  const std::string three = slurp(metrics), first = three.substr(0, three.find('\n') + 1);
  std::ofstream(metrics) << first << first << three.substr(three.find('\n', first.size()) + 1);
  r = run_gnn("train --out " + run + " --resume --epochs 5");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK_MESSAGE(contains(r.err, metrics + " holds the lines of 2 of the 4 epochs before the checkpoint"), r.err);
}

TEST_CASE("run files: a run's last validation, which a longer run would not make, leaves its weights alone") {
  // Under --val-every a run validates at its end; resumed with more epochs it goes on from the weights
  // as training left them, as the unbroken longer run (which did not validate there) has them. With
  // --op-max-norm the validation's lookups would otherwise have renormalised embedding rows in place.
  TempDir t;
  const std::string base = "train --model tile-gat-6th --op-max-norm 1 --hidden 16 --weight-decay 0.5 --data " +
                           data() + " --batch-graphs 2 --val-every 100 --progress lines --out ";
  for (const std::string& stop : {std::string(" --epochs 1"), std::string(" --epochs 4 --steps 3")}) {
    CAPTURE(stop);
    const std::string a = t.file("a"), b = t.file("b");
    fs::remove_all(a), fs::remove_all(b);
    auto r = run_gnn(base + a + " --epochs 4");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    r = run_gnn(base + b + stop);  // 3 batches an epoch: both stop at the end of epoch 1 (this data: the
                                   // unbroken run's weights and the resumed one's parted before the fix)
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(contains(slurp(b + "/metrics.jsonl"), "valid_score"));
    r = run_gnn("train --out " + b + " --resume --epochs 4 --steps 0");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(testing::same_bits(testing::checkpoint_weights(a + "/model.npz"),
                             testing::checkpoint_weights(b + "/model.npz")));
  }
}

TEST_CASE("run files: a run stopped by --steps mid-epoch resumes inside the epoch, as the unbroken run") {
  check_resume_inside_epoch("tile-mlp", "--batch-graphs 2 --steps 4");  // stops after epoch 2's first batch
  check_resume_inside_epoch("tile-gat-6th --op-max-norm 1 --hidden 16 --weight-decay 0.5",
                            "--batch-graphs 1 --steps 3");  // stops halfway through epoch 1
}

TEST_CASE("run files: a submission row that names no graph of the split is refused") {
  TempDir t;
  const std::string run = trained_run(t, "run");
  auto r = run_gnn("predict --run " + run + " --data " + data() + " --split valid --out " + t.file("sub.csv"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string sub = slurp(t.file("sub.csv"));
  write_file_atomic(t.file("stray.csv"), sub + "tile:xla:synth_test_0000,1;0;2;3;4\n");
  r = run_gnn("score --submission " + t.file("stray.csv") + " --data " + data() + "/npz/tile/xla");
  CHECK(r.exit_code == 1);
  CHECK(contains(r.err,
                 "1 row(s) name no valid graph of " + data() + "/npz/tile/xla, the first 'tile:xla:synth_test_0000'"));
  // A row of a collection the data does not hold (here a layout row scored on the tile folder) is said.
  write_file_atomic(t.file("other.csv"), sub + "layout:xla:default:synth_valid_0000,1;0\n");
  r = run_gnn("score --submission " + t.file("other.csv") + " --data " + data() + "/npz/tile/xla");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK(contains(r.err, "1 row(s) of collections with no valid files"));
}

TEST_CASE("run files: error lines name the file, the graph and the flag") {
  TempDir t;
  // A layout file in a tile collection folder.
  fs::copy(data(), t.file("data"), fs::copy_options::recursive);
  fs::copy_file(t.file("data/npz/layout/xla/default/train/synth_train_0000.npz"),
                t.file("data/npz/tile/xla/train/zz.npz"));
  auto r = run_gnn("train --model tile-mlp --data " + t.file("data") + " --out " + t.file("r"));
  CHECK(r.exit_code == 1);
  CHECK(contains(r.err, "zz.npz: a layout file (its arrays say so) in the tile collection folder"));
  // A float in eval_indices names the file and the graph (the layout run validates on them).
  fs::remove(t.file("data/npz/tile/xla/train/zz.npz"));
  REQUIRE(fs::create_directory(t.file("ei")));
  write_file_atomic(t.file("ei/xla_default.json"), "{\"synth_valid_0000\": [0, 2.5]}");
  r = run_gnn("train --model layout-mlp --data " + data() + " --out " + t.file("l") + " --epochs 1 --eval-indices " +
              t.file("ei"));
  CHECK(r.exit_code == 1);
  CHECK(contains(
      r.err,
      "xla_default.json: 'synth_valid_0000' holds something other than a config index (an integer >= 0) at entry 1"));
  // Numbers: any finite --lr is a number > 0 (1e308 too); a sign, hex or spaces are not plain numbers.
  r = run_gnn("train --model tile-mlp --data " + data() + " --out " + t.file("h") + " --lr 1e308");
  CHECK_FALSE(contains(r.err, "expected a number"));
  for (const char* v : {"+1", "0x10", "' 1'", "inf"}) {
    CAPTURE(v);
    r = run_gnn("train --model tile-mlp --data " + data() + " --out " + t.file("h2") + " --lr " + v);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, "--lr: expected a number > 0"));
  }
  // A control byte in a flag is shown escaped: the error stays one line.
  r = run_gnn("train --model \"$(printf 'a\\001b\\nc')\" --data " + data() + " --out " + t.file("h3"));
  CHECK(r.exit_code != 0);
  CHECK(contains(r.err, "a\\x01b\\x0ac"));
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("run files: eval scores a run whose directory it cannot write, and synth does not mix datasets") {
  TempDir t;
  const std::string run = trained_run(t, "run");
  fs::create_directory(run + "/eval_valid.jsonl");  // the default per-graph file cannot be written
  auto r = run_gnn("eval --run " + run + " --data " + data());
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK(contains(r.err, "warning: the per-graph scores are not written"));
  CHECK(Json::parse(last_line(r.out)).contains("score"));
  r = run_gnn("eval --run " + run + " --data " + data() + " --per-graph " + run + "/eval_valid.jsonl");
  CHECK(r.exit_code == 2);  // (given by the flag, it is refused before anything is scored)
  CHECK(contains(r.err, "--per-graph " + run + "/eval_valid.jsonl: is a directory"));
  // gnn synth into a split folder that holds graphs is refused; an empty --split list too.
  r = run_gnn("synth --collection tile --out " + t.file("d") + " --graphs 3 --seed 1");
  REQUIRE(r.exit_code == 0);
  r = run_gnn("synth --collection tile --out " + t.file("d") + " --graphs 2 --seed 2");
  CHECK(r.exit_code == 1);
  CHECK(contains(r.err, "already holds graphs"));
  CHECK(walk_dataset(t.file("d")).size() == 9);
  r = run_gnn("synth --collection tile --out " + t.file("e") + " --split ''");
  CHECK(r.exit_code == 2);
  // Every split is checked before any is written: a later split that holds graphs leaves the earlier alone.
  r = run_gnn("synth --collection tile --out " + t.file("f") + " --graphs 1 --split valid --nodes 4 --configs 5");
  REQUIRE(r.exit_code == 0);
  r = run_gnn("synth --collection tile --out " + t.file("f") + " --graphs 2 --split train,valid --nodes 4 --configs 5");
  CHECK(r.exit_code == 1);
  CHECK_FALSE(fs::exists(t.file("f/npz/tile/xla/train")));
  // A call that fails midway removes the graphs and folders it wrote (here the second graph cannot list 850
  // distinct tiles of a 4-node kernel).
  r = run_gnn("synth --collection tile --out " + t.file("g") + " --graphs 4 --split train,valid --nodes 4 "
              "--nodes-max 60 --configs 850 --min-configs 850");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, "--min-configs 850"), r.err);
  CHECK_FALSE(fs::exists(t.file("g")));
  // A full disk: the same.
  r = testing::run_gnn_env("ulimit -f 20; trap '' XFSZ;",
                           "synth --collection tile --out " + t.file("h") + " --graphs 3 --split train --stored");
  CHECK(r.exit_code == 1);
  CHECK_FALSE(fs::exists(t.file("h")));
  // Killed outright (SIGKILL, which no handler sees) once two graphs are written: none of them reads as a
  // graph (each waits under a staged name until the last is written), and the next synth there removes them.
  const std::string k = t.file("k"), k_train = k + "/npz/layout/xla/default/train";
  const int status =
      std::system(("sh -c '" + std::string(GNN_CLI_PATH) + " synth --collection layout --out " + k +
                   " --graphs 40 --nodes 3000 --configs 100 --split train --threads 1 >/dev/null 2>&1 & p=$!; i=0; "
                   "while [ $i -lt 6000 ] && ! ls " +
                   k_train +
                   " 2>/dev/null | grep -q synth_train_0002; do "
                   "sleep 0.01; i=$((i + 1)); done; kill -9 $p; wait $p; true'")
                      .c_str());
  REQUIRE(status == 0);
  REQUIRE(fs::is_directory(k_train));
  CHECK(walk_dataset(k).empty());
  int staged = 0;
  for (const auto& f : fs::directory_iterator(k_train)) staged += contains(f.path().string(), ".npz.tmp-");
  CHECK(staged >= 2);
  r = run_gnn("synth --collection layout --out " + k + " --graphs 2 --nodes 60 --configs 5 --split train");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK(walk_dataset(k).size() == 2);
  for (const auto& f : fs::directory_iterator(k_train)) CHECK_MESSAGE(!contains(f.path().string(), ".tmp-"), f.path());
  // --configurable-share is the layout generator's; on tile kernels it is refused, not ignored.
  r = run_gnn("synth --collection tile --out " + t.file("i") + " --configurable-share 0.3");
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--configurable-share is for --collection layout"));
}

TEST_CASE("run files: first_nonfinite names the first non-finite value of float and double arrays, wherever it is") {
  for (const int64_t n : {1, 7, 64, 1001})
    for (const int64_t at : {int64_t(0), n / 2, n - 1})
      for (const double bad : {double(NAN), double(INFINITY), -double(INFINITY)}) {
        std::vector<float> f(size_t(n), 1.5f);
        std::vector<double> d(size_t(n), -2.0);
        f[size_t(at)] = float(bad), d[size_t(at)] = bad;
        const std::string where = " at " + std::to_string(at);
        const std::vector<std::pair<std::string, Tensor>> ok = {{"a", Tensor::from_vector(std::vector<float>(n, 1.0f))},
                                                                 {"b", Tensor::from_vector(std::vector<double>(n))}};
        CHECK(first_nonfinite(ok).empty());
        std::string got = first_nonfinite({ok[0], {"f", Tensor::from_vector(f)}});
        CHECK_MESSAGE((contains(got, "'f' holds a non-finite value") && got.ends_with(where)), got);
        got = first_nonfinite({{"d", Tensor::from_vector(d)}, ok[1]});
        CHECK_MESSAGE((contains(got, "'d' holds a non-finite value") && got.ends_with(where)), got);
        // the one exception: -inf where the caller allows it
        CHECK(first_nonfinite({{"d", Tensor::from_vector(d)}}, "d").empty() == (bad == -double(INFINITY)));
      }
}
