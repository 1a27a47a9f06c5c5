// The gnn binary as users and scripts see it: exit codes, one-line errors, JSON on the last line.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "apps/cli.h"
#include "bench/registry.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/npz.h"
#include "runtime/allocator.h"
#include "runtime/cuda.h"
#include "runtime/parallel.h"
#include "testing.h"

using namespace gnn;
using testing::last_line;
using testing::run_gnn;

namespace {
size_t lines(const std::string& s) { return size_t(std::count(s.begin(), s.end(), '\n')); }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
std::string slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}
}  // namespace

TEST_CASE("cli: help, version, and usage errors exit 2 with one line") {
  auto r = run_gnn("--help");
  CHECK(r.exit_code == 0);
  for (const char* cmd :
       {"demo", "train", "eval", "predict", "score", "models", "plot", "synth", "inspect", "bench", "info"})
    CHECK(r.out.find(std::string("  ") + cmd) != std::string::npos);
  r = run_gnn("--version");
  CHECK(r.exit_code == 0);
  CHECK(r.out.rfind("gnn ", 0) == 0);
  r = run_gnn("inspect --help");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("--json") != std::string::npos);

  r = run_gnn("help train");  // a command's help, as `gnn train --help`
  CHECK(r.exit_code == 0);
  CHECK(r.out.rfind("usage: gnn train", 0) == 0);
  // A value only some recipes take is listed, with them.
  CHECK(r.out.find("one of official|log1p|standardize|none|5th|trainable") != std::string::npos);
  CHECK(r.out.find("(trainable: tile-gat-6th, layout-sage-6th, layout-gin-6th only)") != std::string::npos);
  // An unknown command is named as one, on one line whatever it holds.
  r = run_gnn("help nosuch");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("gnn help: unknown command 'nosuch'") != std::string::npos);
  r = run_gnn("'bad\ncmd'");
  CHECK(r.exit_code == 2);
  CHECK(r.err == "gnn: unknown command 'bad\\x0acmd' (see gnn --help)\n");
  // gnn demo's runs are seeded --seed, --seed + 1, ...: each must be a seed gnn train takes back.
  r = run_gnn("demo --seeds 2 --seed 9223372036854775807");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--seed") != std::string::npos);
  // Words nothing reads are refused, not ignored: after --version or --help, an empty item in a list, a flag
  // of the other benchmark.
  for (const char* bad : {"frobnicate", "inspect", "inspect a.npz --nope", "inspect a.npz b.npz",
                          "bench npz x.npz --repeat zero", "bench npz x.npz --repeat 0", "inspect a.npz -j",
                          "--version extra", "--help nope", "help train extra",
                          "synth --collection tile --split train,,valid --out x",
                          "bench npz x.npz --keys a, --repeat 2",
                          "bench npz x.npz --nodes 3", "bench npz x.npz --device cuda --matmul-precision bf16",
                          "bench kernel gemm --keys a"}) {
    CAPTURE(bad);
    r = run_gnn(bad);
    CHECK(r.exit_code == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.out.empty());
  }
  r = run_gnn("bench npz x.npz --repeat zero");
  CHECK(r.err.find("--repeat expects an integer, got 'zero'") != std::string::npos);
  r = run_gnn("bench npz x.npz --repeat 99999999999999999999");  // a whole number past 64 bits: out of range
  CHECK_MESSAGE(contains(r.err, "--repeat must be in [1, "), r.err);
  CHECK_MESSAGE(contains(r.err, "], got 99999999999999999999"), r.err);
  r = run_gnn("synth --collection tile --split train,,valid --out x");
  CHECK(r.err.find("--split: an empty item in 'train,,valid'") != std::string::npos);
  r = run_gnn("bench npz x.npz --nodes 3");
  CHECK(r.err.find("--nodes is a flag of `gnn bench kernel`") != std::string::npos);
  r = run_gnn("bench npz x.npz --device cuda --matmul-precision bf16");  // named before the flags' own checks
  CHECK(r.err.find("--device is a flag of `gnn bench kernel`") != std::string::npos);
  r = run_gnn("help train extra");
  CHECK(r.err.find("got 'extra'") != std::string::npos);
  CHECK(run_gnn("").exit_code == 2);
}

TEST_CASE("cli: gnn::Error exits 1 with one line naming the file") {
  auto r = run_gnn("inspect /nonexistent.npz");
  CHECK(r.exit_code == 1);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("/nonexistent.npz: cannot open") != std::string::npos);
  r = run_gnn("inspect " + testing::source_path("tests/data/make_fixtures.py"));
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("not a ZIP archive") != std::string::npos);
  r = run_gnn("inspect --json --max-member-bytes 100 " + testing::fixture("deflated.npz"));
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("exceeds the limit of 100 bytes") != std::string::npos);
}

TEST_CASE("cli: inspect --json is one object with arrays and their statistics") {
  auto r = run_gnn("inspect --json " + testing::fixture("deflated.npz"));
  REQUIRE(r.exit_code == 0);
  const Json j = Json::parse(last_line(r.out), "inspect output");
  CHECK(j["format"].as_string() == "npz");
  CHECK(j["arrays"].size() == 16);
  const Json& a = j["arrays"][0];
  CHECK(a["key"].as_string() == "a_b1");
  CHECK(a["compression"].as_string() == "deflated");
  for (const Json& arr : j["arrays"].elements()) {
    if (arr["key"].as_string() == "a_i4") {
      CHECK(arr["dtype"].as_string() == "<i4");
      CHECK(arr["shape"].dump() == "[2, 3]");
      CHECK(arr["min"].as_number() == -6);
      CHECK(arr["max"].as_number() == -1);
      CHECK(arr["sum"].as_number() == -21);
      CHECK(arr["order"].as_string() == "C");
    }
  }
  CHECK_FALSE(j.contains("tpugraphs"));

  r = run_gnn("inspect --json " + testing::fixture("v2.npy"));
  REQUIRE(r.exit_code == 0);
  CHECK(Json::parse(last_line(r.out))["arrays"][0]["sum"].as_number() == 7.5);  // sum of (i - 3) / 4, i < 12
  // An int64 array's min and max exact (through a double, 2^63 - 1 read as 2^63 and 2^53 + 1 as 2^53)
  testing::TempDir tmp;
  save_npz(tmp.file("big.npz"), {{"a", Tensor::from_vector<int64_t>({INT64_MAX, INT64_MIN, (int64_t(1) << 53) + 1})},
                                 {"b", Tensor::from_vector<int64_t>({(int64_t(1) << 53) + 1, 3})}});
  r = run_gnn("inspect --json " + tmp.file("big.npz"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const Json big = Json::parse(last_line(r.out));
  CHECK(big["arrays"][0]["max"].as_int() == INT64_MAX);
  CHECK(big["arrays"][0]["min"].as_int() == INT64_MIN);
  CHECK(big["arrays"][1]["max"].as_int() == (int64_t(1) << 53) + 1);
}

TEST_CASE("cli: inspect recognises TpuGraphs files") {
  const std::string layout = testing::shared_data("tpugraphs/layout/xla/module_tuning_data_layout.npz");
  if (!std::filesystem::exists(layout)) return testing::skip("../shared/data is absent");
  auto r = run_gnn("inspect --json " + layout);
  REQUIRE(r.exit_code == 0);
  const Json t = Json::parse(last_line(r.out))["tpugraphs"];
  CHECK(t["collection"].as_string() == "layout");
  CHECK(t["nodes"].as_int() == 3163);
  CHECK(t["edges"].as_int() == 5112);
  CHECK(t["configs"].as_int() == 112);
  CHECK(t["configurable_nodes"].as_int() == 62);
  CHECK(t["runtime_min"].as_number() == 910876401);
  r = run_gnn("inspect " + testing::shared_data("tpugraphs/tile/xla/fusion.181.npz"));
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("TpuGraphs tile file: nodes=7 edges=6 configs=5") != std::string::npos);
}

TEST_CASE("cli: inspect FILE reads and checks everything before it prints, as inspect DIR does") {
  // A member whose CRC-32 does not match, a TpuGraphs file with an opcode past the table, one with no
  // nodes: one error line naming the file, exit 1, and no table printed before it.
  for (const auto& [name, want] :
       std::vector<std::pair<std::string, std::string>>{{"crc_mismatch.npz", "CRC-32 mismatch"},
                                                        {"opcode_121.npz", "opcode 121, outside the HLO opcode ids"},
                                                        {"zero_nodes.npz", "has no nodes"}}) {
    const std::string path = testing::source_path("tests/data/fuzz_regressions/" + name);
    for (const char* flags : {"", "--json "}) {
      CAPTURE(name);
      CAPTURE(flags);
      const auto r = run_gnn(std::string("inspect ") + flags + path);
      CHECK(r.exit_code == 1);
      CHECK(r.out.empty());
      CHECK(lines(r.err) == 1);
      CHECK(r.err.find(path) != std::string::npos);
      CHECK(r.err.find(want) != std::string::npos);
    }
  }
  // inspect DIR loads and validates each file: the bad opcode is caught in a tree too.
  testing::TempDir tmp;
  const std::string split = tmp.file("npz/tile/xla/train");
  std::filesystem::create_directories(split);
  std::filesystem::copy_file(testing::source_path("tests/data/fuzz_regressions/opcode_121.npz"), split + "/bad.npz");
  const auto r = run_gnn("inspect " + tmp.file("npz"));
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("bad.npz: array 'node_opcode': node 1 has opcode 121") != std::string::npos);
}

TEST_CASE("cli: plot draws several runs on the same axes with whole-epoch ticks") {
  testing::TempDir tmp;
  for (const char* run : {"alpha", "beta"}) {
    std::filesystem::create_directories(tmp.file(run));
    std::ofstream m(tmp.file(std::string(run) + "/metrics.jsonl"));
    for (int e = 1; e <= 3; ++e)
      m << "{\"epoch\": " << e << ", \"train_loss\": " << 1.0 / e << ", \"valid_score\": " << 0.1 * e
        << ", \"configs_per_s\": 100}\n";
  }
  auto r = run_gnn("plot " + tmp.file("alpha") + "/ " + tmp.file("beta"));  // a trailing slash names the same run
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  std::ifstream in(tmp.file("report.html"));  // several runs: beside them
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t lines = 0;
  for (size_t at = 0; (at = html.find("<polyline", at)) != std::string::npos; ++at) ++lines;
  CHECK(lines == 6);  // loss, validation and throughput, one line per run in each
  CHECK(!std::filesystem::exists(tmp.file("alpha/report.html")));
  CHECK(html.find("alpha") != std::string::npos);
  CHECK(html.find("beta") != std::string::npos);
  CHECK(html.find(">1.5<") == std::string::npos);  // epochs are whole
  CHECK(html.find(">2<") != std::string::npos);
  // From inside a run, "." is that run: the report goes beside it, and its legend names it.
  std::filesystem::remove(tmp.file("report.html"));
  r = testing::run_gnn_env("cd " + tmp.file("alpha") + " &&", "plot . ../beta");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(!std::filesystem::exists(tmp.file("alpha/report.html")));
  std::ifstream again(tmp.file("report.html"));
  const std::string html2((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>());
  CHECK(html2.find("&#9632; alpha<") != std::string::npos);
  r = run_gnn("plot " + tmp.file("alpha"));  // one run: its own report, as before
  CHECK(r.exit_code == 0);
  CHECK(std::filesystem::exists(tmp.file("alpha/report.html")));
  r = run_gnn("plot");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("expected RUN [RUN...]") != std::string::npos);
}

TEST_CASE("cli: plot tells runs of one folder name apart, refuses one given twice, and draws long logs thinned") {
  testing::TempDir tmp;
  const auto log = [&](const std::string& run, int epochs) {
    std::filesystem::create_directories(tmp.file(run));
    std::ofstream m(tmp.file(run + "/metrics.jsonl"));
    for (int e = 1; e <= epochs; ++e) m << "{\"epoch\": " << e << ", \"train_loss\": " << 1.0 / e << "}\n";
  };
  std::string all;
  for (int k = 0; k < 12; ++k) {
    // (appended piece by piece: GCC 12 warns of a false overlap in "s" + std::to_string(k) and " " + ...)
    std::string run = "s";
    run += std::to_string(k);
    run += "/run";
    log(run, 3);
    all += ' ';
    all += tmp.file(run);
  }
  auto r = run_gnn("plot" + all + " --out " + tmp.file("all.html"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string html = slurp(tmp.file("all.html"));
  CHECK(contains(html, "&#9632; s0/run<"));
  CHECK(contains(html, "&#9632; s11/run</span> (dashed)"));  // the colours come round again, dashed
  CHECK(contains(html, "stroke-dasharray"));
  r = run_gnn("plot " + tmp.file("s0/run") + " " + tmp.file("s0") + "/./run/ --out " + tmp.file("twice.html"));
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(contains(r.err, "RUN " + tmp.file("s0") + "/./run/: the same folder as " + tmp.file("s0/run")), r.err);
  // Named as given: a link p/run to s1/other and the folder s2/run are p/run and s2/run; a link to a run given
  // beside it is the same folder twice.
  std::filesystem::create_directories(tmp.file("p"));
  std::filesystem::rename(tmp.file("s1/run"), tmp.file("s1/other"));
  std::filesystem::create_directory_symlink(tmp.file("s1/other"), tmp.file("p/run"));
  r = run_gnn("plot " + tmp.file("p/run") + " " + tmp.file("s2/run") + " --out " + tmp.file("links.html"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(contains(slurp(tmp.file("links.html")), "&#9632; p/run<"));
  CHECK(contains(slurp(tmp.file("links.html")), "&#9632; s2/run<"));
  r = run_gnn("plot " + tmp.file("p/run") + " " + tmp.file("s1/other") + " --out " + tmp.file("twice.html"));
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(contains(r.err, ": the same folder as " + tmp.file("p/run") + ", given twice"), r.err);
  CHECK_FALSE(std::filesystem::exists(tmp.file("twice.html")));
  // 100,000 epochs: every 50th drawn (and the last), unmarked
  log("long", 100000);
  r = run_gnn("plot " + tmp.file("long"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string big = slurp(tmp.file("long/report.html"));
  CHECK(big.size() < 200000);
  CHECK_FALSE(contains(big, "<circle"));
  CHECK(contains(big, "(100000 epochs)"));
}

TEST_CASE("cli: plot refuses a metrics line it cannot draw, by file and line, and escapes the run's name") {
  testing::TempDir tmp;
  const std::vector<std::pair<std::string, std::string>> cases = {
      // 1e17 + 1 is 1e17: the epoch ticks never reached the axis' end
      {"{\"epoch\": 1e17}", "line 2: 'epoch' is not a whole number in [0, 1000000]"},
      {"{\"epoch\": -1e308}", "line 2: 'epoch' is not a whole number"},
      {"{\"epoch\": \"two\"}", "line 2: 'epoch' is not a whole number"},
      {"{\"train_loss\": 1}", "line 2: 'epoch' is not a whole number"},
      {"{\"epoch\": 2, \"train_loss\": \"abc\"}", "line 2: 'train_loss' is not a number"},
      {"[1, 2]", "line 2: not a JSON object"}};
  for (const auto& [line, want] : cases) {
    CAPTURE(line);
    const std::string run = tmp.file("r");
    std::filesystem::create_directories(run);
    std::ofstream(run + "/metrics.jsonl") << "{\"epoch\": 1, \"train_loss\": 1}\n" << line << "\n";
    const auto r = testing::run_gnn_limited("plot " + run, 60);
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(contains(r.err, run + "/metrics.jsonl " + want), r.err);
    CHECK(!std::filesystem::exists(run + "/report.html"));
  }
  // A file where a run's folder should be: said as such, not as a missing log.
  std::ofstream(tmp.file("afile")) << "x\n";
  auto r = run_gnn("plot " + tmp.file("afile"));
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, tmp.file("afile") + ": not a directory (give the folder of a gnn train run)"), r.err);
  // A last line cut short (no newline: being written, or an interrupted write) is left out and said; the
  // same line ended by a newline is one the log holds, refused as above.
  const std::string torn = tmp.file("torn");
  std::filesystem::create_directories(torn);
  std::ofstream(torn + "/metrics.jsonl") << "{\"epoch\": 1, \"train_loss\": 1}\n{\"epoch\": 2, \"train_lo";
  r = run_gnn("plot " + torn);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK_MESSAGE(contains(r.err, torn + "/metrics.jsonl line 2: its last line is cut short"), r.err);
  CHECK(contains(slurp(torn + "/report.html"), "(1 epochs)"));
  std::ofstream(torn + "/metrics.jsonl", std::ios::app) << "\n";
  r = run_gnn("plot " + torn);
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, torn + "/metrics.jsonl line 2: bad JSON"), r.err);
  // values at the ends of the double's range are drawn, not written as inf or nan coordinates
  const std::string wide = tmp.file("a<b>&c");
  std::filesystem::create_directories(wide);
  std::ofstream(wide + "/metrics.jsonl") << "{\"epoch\": 1, \"train_loss\": -1e308}\n{\"epoch\": 2, "
                                            "\"train_loss\": 1e308}\n";
  r = run_gnn("plot '" + wide + "'");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string html = slurp(wide + "/report.html");
  CHECK(html.find("nan") == std::string::npos);
  CHECK(html.find("inf") == std::string::npos);
  CHECK(html.find("a<b>") == std::string::npos);  // the title and legend are the escaped name
  CHECK(html.find("a&lt;b&gt;&amp;c") != std::string::npos);
  r = run_gnn("plot '" + wide + "' --out ''");
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--out: no file given"));
}

TEST_CASE("cli: output that could not be written is an error, and inspect's flags apply where they are given") {
  if (!std::filesystem::exists("/dev/full")) {
    MESSAGE("skipped: no /dev/full");
  } else {
    testing::TempDir out;
    for (const char* cmd : {"models", "info", "--help"}) {
      CAPTURE(cmd);
      const int status =
          std::system((std::string(GNN_CLI_PATH) + " " + cmd + " >/dev/full 2>" + out.file("err")).c_str());
      CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 1));
      const std::string err = slurp(out.file("err"));
      CHECK_MESSAGE(contains(err, "writing the standard output failed"), err);
    }
  }
  testing::TempDir tmp;
  const std::string split = tmp.file("npz/tile/xla/train");
  std::filesystem::create_directories(split);
  std::filesystem::copy_file(testing::source_path("tests/data/fuzz_regressions/zero_nodes.npz"), split + "/a.npz");
  auto r = run_gnn("inspect " + tmp.file("npz") + " --max-member-bytes 10");  // a directory's files too
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, "a.npz"), r.err);
  r = run_gnn("inspect " + split + "/a.npz --skip-bad");
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--skip-bad: for a directory"));
  r = run_gnn("inspect " + tmp.file("npz") + " --skip-bad");  // its only file bad: no table of nothing
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, "warning: skipping a bad file"), r.err);
  CHECK_MESSAGE(contains(r.err, ": no TpuGraphs file of it could be read (--skip-bad left out every one"), r.err);
  {
    std::ofstream(tmp.file("x.npy")) << "not read";
  }
  r = run_gnn("inspect " + tmp.file("x.npy") + " --max-member-bytes 10");
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--max-member-bytes: for an .npz archive's members"));
  // a library error about a path names the path, not "filesystem error: ..."
  std::filesystem::create_symlink("loop", tmp.file("loop"));
  r = run_gnn("inspect " + tmp.file("loop"));
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, "error: " + tmp.file("loop") + ": Too many levels of symbolic links"), r.err);
  CHECK(!contains(r.err, "filesystem error"));
}

TEST_CASE("cli: a signal leaves no partial dataset, one synth writes a tree at a time, bad environments are named") {
  testing::TempDir tmp;
  // SIGTERM once synth has written its first graph (under its staged name, graph.npz.tmp-PID, until the last is
  // written): the graphs it wrote and the folders it made are removed, and it ends by the signal (the shell's
  // 143), saying so.
  // The same for SIGXCPU, which a soft CPU-time limit (`ulimit -St`) sends once a process has used it (the
  // shell's 152; no core file).
  const std::string d = tmp.file("d");
  testing::CommandResult r;
  struct Ending {
    std::string sig;
    int code;
    std::string name;
  };
  for (const Ending& ending : {Ending{"TERM", 143, "Terminated"}, Ending{"XCPU", 152, "CPU time limit exceeded"}}) {
    const std::string& sig = ending.sig;
    const int code = ending.code;
    const std::string& name = ending.name;
    CAPTURE(sig);
    r = testing::run_gnn_env(
        "sh -c 'ulimit -c 0; \"$0\" synth --collection layout --out \"$1\" --nodes 3000 --configs 100 --graphs 40 "
        "--seed 1 & p=$!; "
        "while kill -0 $p 2>/dev/null && ! ls \"$1/npz/layout/xla/default/train\" 2>/dev/null | "
        "grep -qx \"synth_train_0000.npz.tmp-[0-9]*\"; do sleep 0.01; done; kill -" +
            sig + " $p; wait $p'",
        d);
    CHECK(r.exit_code == code);
    CHECK_MESSAGE(contains(r.err, "gnn synth: interrupted (" + name + "); the graphs it had written are removed"),
                  r.err);
    CHECK_FALSE(std::filesystem::exists(d));
  }
  // The demo stopped while it trains: it stops between steps, and its temporary folder goes too. The signal
  // sent twice at once (as `timeout` does, to its child and the child's group) counts as one. (Killed after
  // 300 s, with the demo, if it does not stop.)
  const std::string tmpdir = tmp.file("tmpdir");
  std::filesystem::create_directories(tmpdir);
  r = testing::run_gnn_env("TMPDIR=" + tmpdir +
                               " timeout -s KILL 300 sh -c '\"$0\" demo --tile-graphs 40 --layout-graphs 4 & p=$!; "
                               "while kill -0 $p 2>/dev/null && ! ls \"$TMPDIR\"/gnn_demo_*/runs >/dev/null 2>&1; "
                               "do sleep 0.05; done; kill -TERM $p; kill -TERM $p; wait $p'",
                           "");
  CHECK(r.exit_code == 143);
  CHECK_MESSAGE(contains(r.err, "gnn: stopping at the next step or graph; signal again to stop at once"), r.err);
  CHECK_MESSAGE(contains(r.err, "gnn demo: interrupted (Terminated); its folder " + tmpdir + "/gnn_demo_"), r.err);
  CHECK(std::filesystem::is_empty(tmpdir));
  // Two synths into one tree: the second is refused while the first holds it (the lock taken here).
  std::filesystem::create_directories(d + "/npz/tile/xla");
  const int fd = ::open((d + "/npz/tile/xla").c_str(), O_RDONLY | O_DIRECTORY);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX) == 0);
  r = run_gnn("synth --collection tile --out " + d + " --graphs 1");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, "another gnn synth is writing into it"), r.err);
  CHECK(lines(r.err) == 1);
  r = run_gnn("synth --collection layout --out " + d + " --graphs 1 --nodes 60 --configs 5");  // another tree
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  ::close(fd);
  r = run_gnn("synth --collection tile --out " + d + " --graphs 1");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  // Environments gnn cannot run in, named: a thread count libgomp cannot start (unless --threads replaces
  // it), and switches with values they do not take.
  r = testing::run_gnn_env("OMP_NUM_THREADS=100000", "inspect " + d);
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "OMP_NUM_THREADS=100000: more than the 4096 threads gnn runs; set it lower"));
  r = testing::run_gnn_env("OMP_NUM_THREADS=100000", "bench kernel gemm --nodes 64 --features 8 --threads 1");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  for (const char* env : {"GNN_HOST_CACHE=off", "GNN_SYNC=yes"}) {
    CAPTURE(env);
    r = testing::run_gnn_env(env, "inspect " + d);
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(contains(r.err, std::string(env) + ": expected 0 or 1"), r.err);
  }
  r = testing::run_gnn_env("GNN_HOST_CACHE=0 GNN_SYNC=", "inspect " + d);
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  // A GEMM kernel nobody has: a usage error before the command, as the switches' (it exited 1 at the first product).
  r = testing::run_gnn_env("GNN_GEMM_ISA=sse9", "inspect " + d);
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.err == "gnn inspect: GNN_GEMM_ISA=sse9: unknown (avx512, avx2, generic)\n", r.err);
}

TEST_CASE("cli: under small address-space and stack limits the CPU path runs, info names a library it cannot open") {
#if defined(__SANITIZE_ADDRESS__)
  testing::skip("AddressSanitizer reserves more address space than the limits here");
#else
  testing::TempDir tmp;
  const std::string d = tmp.file("d"), limited = "sh -c 'ulimit -v 600000; exec \"$0\" \"$@\"'";
  auto r = run_gnn("synth --collection tile --out " + d + " --graphs 2 --seed 1");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  // cuBLAS, cuSPARSE and NCCL linked were 1.1 GB of mappings: the loader refused the binary under 600 MB.
  const std::string train = "train --model tile-mlp --data " + d + " --threads 2 --out ";
  r = testing::run_gnn_env(limited, train + tmp.file("run") + " --steps 3");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  // A 64 KiB stack (the checkpoint's deflate buffer was 64 KiB on the stack): every thread's, OpenMP's too
  r = testing::run_gnn_env("sh -c 'ulimit -s 64; exec \"$0\" \"$@\"'", train + tmp.file("stack") + " --steps 2");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  // --memory-limit auto counts the limit: 1.6 GB of weights are refused as not fitting, not as a failed allocation
  r = testing::run_gnn_env(limited, train + tmp.file("big") + " --steps 1 --hidden 20000");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, "does not fit in the memory limit of"), r.err);
  r = testing::run_gnn_env("sh -c 'ulimit -v 100000; exec \"$0\" \"$@\"'", "info");  // (NCCL: 208 MB here)
  CHECK_MESSAGE(r.exit_code == 0, r.err);
#if GNN_WITH_NCCL && !GNN_CUDA_EMU
  CHECK_MESSAGE(contains(r.out, "NCCL not loadable (libnccl.so."), r.out);
#endif
#endif
}

TEST_CASE("cli: under any address-space limit gnn never aborts: it runs, or says it is out of memory") {
#if defined(__SANITIZE_ADDRESS__)
  testing::skip("AddressSanitizer reserves more address space than the limits here");
#else
  // From where the loader cannot map the binary up to where it runs: in between, an allocation of the
  // command table (built before a command's own errors are caught) failed into std::terminate (SIGABRT,
  // exit 134, found between 26.3 and 26.8 MB on the development VM). What dies before main is not gnn's
  // to mend (the loader under 14.5 MB, a shared library's initialiser in a window of its own: SIGSEGV).
  int ran = 0;
  for (int kib = 8 << 10; kib <= 96 << 10; kib += 256) {
    CAPTURE(kib);
    const auto r =
        testing::run_gnn_env("sh -c 'ulimit -v " + std::to_string(kib) + "; exec \"$0\" \"$@\"'", "--version");
    CHECK_MESSAGE(r.exit_code != 128 + SIGABRT, r.err);
    CHECK_MESSAGE(!contains(r.err, "terminate called"), r.err);
    if (r.exit_code == 1) CHECK_MESSAGE(contains(r.err, "gnn: error: out of memory"), r.err);
    ran += r.exit_code == 0;
  }
  CHECK(ran > 0);  // (the scan reaches limits under which it runs)
#endif
}

TEST_CASE("cli: an allocation the system refused is said with the address-space limit in force") {
  // (eval, predict and bench have no phase of their own to name, as train does: the line says what limits)
  testing::TempDir tmp;
  cli::Command c;
  c.name = "allocating";
  c.run = [](const cli::Args&) -> int {
    throw MemoryLimitError("host allocation of 638976 bytes failed (2659816 bytes in use)", "here", 638976, 2659816, 0);
  };
  for (const int resource : {int(RLIMIT_AS), int(RLIMIT_DATA)}) {
    CAPTURE(resource);
#if defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer cannot map its own regions under either limit (its shadow alone is terabytes)
    if (resource >= 0) return testing::skip("AddressSanitizer maps more than a memory limit here lets it");
#endif
    const std::string err = tmp.file("err");
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(fd, 2);
      const rlimit lim{rlim_t(64) << 30, rlim_t(64) << 30};  // (64 GiB: a limit in force, harmless here)
      const rlimit none{RLIM_INFINITY, RLIM_INFINITY};  // (the other one lifted, as it is unless set)
      ::setrlimit(resource == int(RLIMIT_AS) ? RLIMIT_DATA : RLIMIT_AS, &none);
      ::setrlimit(resource == int(RLIMIT_AS) ? RLIMIT_AS : RLIMIT_DATA, &lim);
      set_num_threads(1);
      char name[] = "gnn", cmd[] = "allocating";
      char* argv[] = {name, cmd, nullptr};
      ::_exit(cli::run({c}, 2, argv));
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 1);
    CHECK(slurp(err) == std::string("gnn allocating: error: host allocation of 638976 bytes failed (2659816 bytes in "
                                    "use); this process's ") +
                            (resource == int(RLIMIT_AS) ? "address space is limited to 65536 MiB (ulimit -v)\n"
                                                        : "data segment is limited to 65536 MiB (ulimit -d)\n"));
  }
}

TEST_CASE("cli: a signal recorded while a command fails otherwise still ends the process by it") {
  // A cooperative scope records SIGTERM, then the command fails for another reason (a full disk, say):
  // its error is said, and the process ends by the signal, not with exit status 1.
  cli::Command c;
  c.name = "failing";
  c.run = [](const cli::Args&) -> int {
    CooperativeInterrupt scope;
    ::raise(SIGTERM);
    GNN_FAIL("out.npz: write failed (No space left on device)");
  };
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 2);  // (the child's error line, not the test's output)
    install_interrupt_handlers();
    set_num_threads(1);  // (no OpenMP team in a forked child: one the parent started would not be there)
    char name[] = "gnn", cmd[] = "failing";
    char* argv[] = {name, cmd, nullptr};
    ::_exit(cli::run({c}, 2, argv) == 0 ? 0 : 3);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
}

TEST_CASE("cli: what a writer killed with SIGKILL left goes at the next run of its command") {
  testing::TempDir tmp;
  testing::CommandResult r;
  // A temporary that a writer killed with SIGKILL left beside an output flag's path goes at the next run.
  std::fflush(nullptr);
  const pid_t dead = ::fork();
  REQUIRE(dead >= 0);
  if (dead == 0) ::_exit(0);
  REQUIRE(::waitpid(dead, nullptr, 0) == dead);
  const std::string graph = tmp.file("g.npz"), stale = graph + ".tmp-" + std::to_string(dead),
                    live = graph + ".tmp-" + std::to_string(::getpid());
  std::ofstream(stale) << "half";
  std::ofstream(live) << "half";
  r = run_gnn("bench kernel spmm-sum --nodes 100 --edges 200 --repeat 20 --threads 1 --save-graph " + graph);
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK_FALSE(std::filesystem::exists(stale));
  CHECK(std::filesystem::exists(live));  // (this process runs)
  // Through a symlink the temporaries lie beside the file it names, and are looked for there.
  std::filesystem::create_directories(tmp.file("real"));
  std::ofstream(tmp.file("real/g.npz")) << "old";
  std::filesystem::create_symlink(tmp.file("real/g.npz"), tmp.file("link.npz"));
  std::ofstream(tmp.file("real/g.npz.tmp-") + std::to_string(dead)) << "half";
  r = run_gnn("bench kernel spmm-sum --nodes 100 --edges 200 --repeat 20 --threads 1 --save-graph " +
              tmp.file("link.npz"));
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK_FALSE(std::filesystem::exists(tmp.file("real/g.npz.tmp-") + std::to_string(dead)));
  // And a killed synth's, in its split's folder: gone before the new graphs are written.
  const std::string split = tmp.file("s/npz/tile/xla/train"), stale_graph = split + "/synth_train_0000.npz.tmp-";
  std::filesystem::create_directories(split);
  std::ofstream(stale_graph + std::to_string(dead)) << "half";
  r = run_gnn("synth --collection tile --out " + tmp.file("s") + " --graphs 2 --split train");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK_FALSE(std::filesystem::exists(stale_graph + std::to_string(dead)));
  CHECK(std::filesystem::exists(split + "/synth_train_0001.npz"));
}

TEST_CASE("cli: a write past ulimit -f is an error naming the file, threads are started or named") {
  if (std::system("command -v prlimit >/dev/null 2>&1") != 0) return testing::skip("no prlimit (util-linux)");
  testing::TempDir tmp;
  // SIGXFSZ would end gnn unannounced, its temporary left: ignored, the write fails with EFBIG. 1 KiB lets
  // the error message through (the limit holds for the test's own capture of stdout and stderr too).
  const std::string d = tmp.file("d"), limited = "prlimit --fsize=1024";
  auto r = testing::run_gnn_env(limited, "synth --collection tile --out " + d + " --graphs 2");
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, "synth_train_0000.npz: write failed (File too large)"), r.err);
  CHECK_FALSE(std::filesystem::exists(d));
  r = testing::run_gnn_env(limited, "models");  // 3 KB of stdout
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, "gnn models: error: writing the standard output failed (File too large)"), r.err);
  // A process limit (`ulimit -u`, which root is exempt from: run as nobody) that leaves no room for the
  // threads of a command that computes: named before it runs, where libgomp would print its own line and
  // exit. (A command that computes nothing starts none.)
  const std::string nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups";
  if (::geteuid() != 0 || std::system((nobody + " true >/dev/null 2>&1").c_str()) != 0) {
    testing::skip("the thread limit's part runs gnn as nobody through setpriv, which needs root here");
    return;
  }
  // (LeakSanitizer's check at exit runs a thread of its own, which the limit refuses: off here)
  const std::string as_nobody =
      "OMP_NUM_THREADS=4 ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 " + nobody + " prlimit --nproc=1";
  r = testing::run_gnn_env(as_nobody, "bench kernel gemm --nodes 64 --features 8");
  if (r.exit_code == 126 || r.exit_code == 127) {
    testing::skip("nobody cannot run gnn here, or prlimit is missing: " + r.err);
    return;
  }
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(contains(r.err, "gnn bench: error: cannot start 4 CPU threads (Resource temporarily unavailable"),
                r.err);
  r = testing::run_gnn_env(as_nobody, "models");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
}

TEST_CASE("cli: bench npz prints the JSON keys other tools read") {
  auto r = run_gnn("bench npz " + testing::fixture("stored.npz") + " --repeat 3 --json");
  REQUIRE(r.exit_code == 0);
  const Json j = Json::parse(last_line(r.out));
  CHECK(j["name"].as_string() == "npz-load");
  CHECK(j["median_ms"].as_number() > 0);
  CHECK(j["gbps"].as_number() > 0);
  CHECK(j.contains("gflops"));
}

TEST_CASE("cli: synth writes a dataset that inspect validates, demo runs end to end") {
  testing::TempDir tmp;
  auto r = run_gnn("synth --collection layout --out " + tmp.file("d") + " --graphs 2 --nodes 60 --configs 5");
  REQUIRE(r.exit_code == 0);
  r = run_gnn("synth --collection tile --out " + tmp.file("d") + " --graphs 1 --split train,valid");
  REQUIRE(r.exit_code == 0);
  r = run_gnn("inspect --json " + tmp.file("d"));
  REQUIRE(r.exit_code == 0);
  const Json j = Json::parse(last_line(r.out));
  CHECK(j["groups"].size() == 5);  // layout train/valid/test, tile train/valid
  CHECK(j["skipped_files"].as_int() == 0);
  {  // files the walk itself leaves out (not a zip) are counted with those that fail to load (they were not)
    testing::TempDir bad;
    std::filesystem::copy(tmp.file("d"), bad.file("d"), std::filesystem::copy_options::recursive);
    std::ofstream(bad.file("d/npz/tile/xla/train/zz_bad.npz")) << "not a zip";
    std::ofstream(bad.file("d/npz/tile/xla/valid/zz_bad.npz")) << "not a zip";
    r = run_gnn("inspect --json --skip-bad " + bad.file("d"));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(Json::parse(last_line(r.out))["skipped_files"].as_int() == 2);
    // A flat collection folder (no split folders) serves its files as every split: a bad one is said and
    // counted once, not once a split
    const std::string flat = bad.file("flat/npz/tile/xla");
    std::filesystem::create_directories(flat);
    std::filesystem::copy_file(bad.file("d/npz/tile/xla/train/zz_bad.npz"), flat + "/zz_bad.npz");
    for (const auto& f : std::filesystem::directory_iterator(bad.file("d/npz/tile/xla/valid")))
      if (f.path().filename() != "zz_bad.npz")
        std::filesystem::copy_file(f.path(), flat + "/" + f.path().filename().string());
    r = run_gnn("inspect --json --skip-bad " + bad.file("flat"));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(Json::parse(last_line(r.out))["skipped_files"].as_int() == 1);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  for (const char* bad :
       {"synth --out x", "synth --collection graph --out x", "synth --collection tile --out x --split dev",
        "synth --collection tile --out x --graphs 0"}) {
    CAPTURE(bad);
    r = run_gnn(bad);
    CHECK(r.exit_code == 2);
    CHECK(lines(r.err) == 1);
  }
  // Refused before anything is generated or written (each flag in its range): a split named twice, one
  // graph larger than memory, more files than the disk holds, deflated or stored.
  const std::string out = tmp.file("refused");
  const std::pair<const char*, const char*> refused[] = {
      {"--collection tile --graphs 1 --split train,valid,train", "--split names 'train' twice"},
      {"--collection layout --graphs 1 --nodes 10000000 --configs 1000000", "in memory, more than the"},
      {"--collection tile --graphs 1000000 --nodes 1000000 --configs 1000000", "GiB deflated, more than the"},
      {"--collection tile --graphs 1000000 --nodes 100000 --configs 1000 --stored", "GiB stored, more than the"},
      // (the default 2,000 nodes at share 0.02: 40 configurable, whose config features are most of the bytes:
      // a bound without them, 8.5 GB deflated, would pass on most disks; with them it is over a terabyte)
      {"--collection layout --graphs 10000 --configs 1000000", "deflated, more than the"}};
  for (const auto& [flags, says] : refused) {
    CAPTURE(flags);
    r = run_gnn("synth --out " + out + " " + flags);
    CHECK(r.exit_code == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find(says) != std::string::npos);
    CHECK(!std::filesystem::exists(out));
  }
  // The demo at a tiny size: every model trains with two seeds, and the table (mean and spread, the
  // random ranking's score), the reading, the report of every run's curves and the JSON line come out.
  r = run_gnn("demo --tile-graphs 3 --layout-graphs 2 --tile-epochs 2 --layout-epochs 1 --seeds 2 --out " +
              tmp.file("demo"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const Json d = Json::parse(last_line(r.out));
  for (const char* m : {"tile-mlp", "tile-earlyjoin-sage", "layout-mlp", "layout-resmodel", "layout-tgraph"}) {
    CHECK(d.contains(m));
    CHECK(d.contains(std::string(m) + "_sd"));
  }
  CHECK(d.contains("random_tile"));
  CHECK(r.out.find("configs/s") != std::string::npos);
  CHECK(r.out.find("(a random ranking)") != std::string::npos);
  CHECK(r.out.find("reading: tile: tile-earlyjoin-sage ") != std::string::npos);
  CHECK(r.out.find("; the 1st place: layout-tgraph ") != std::string::npos);
  std::ifstream report(tmp.file("demo/report.html"));
  const std::string html((std::istreambuf_iterator<char>(report)), std::istreambuf_iterator<char>());
  CHECK(html.find("layout-resmodel-seed2") != std::string::npos);
  // The same seed gives the same numbers, into the same folder (the demo made it: its data and runs
  // are replaced).
  const auto again = run_gnn(
      "demo --tile-graphs 3 --layout-graphs 2 --tile-epochs 2 --layout-epochs 1 --seeds 2 --out " + tmp.file("demo"));
  REQUIRE_MESSAGE(again.exit_code == 0, again.err);
  const Json d2 = Json::parse(last_line(again.out));
  for (const char* m : {"tile-mlp", "tile-earlyjoin-sage", "layout-mlp", "layout-resmodel", "layout-tgraph"})
    CHECK(d2[m].as_number() == d[m].as_number());
  // One seed into it: the runs of the second seed, trained on the data this demo makes anew, go too.
  REQUIRE(std::filesystem::exists(tmp.file("demo/runs/tile-mlp-seed2")));
  const auto one = run_gnn("demo --tile-graphs 3 --layout-graphs 2 --tile-epochs 2 --layout-epochs 1 --seeds 1 --out " +
                           tmp.file("demo"));
  REQUIRE_MESSAGE(one.exit_code == 0, one.err);
  CHECK(std::filesystem::exists(tmp.file("demo/runs/tile-mlp-seed1")));
  CHECK_FALSE(std::filesystem::exists(tmp.file("demo/runs/tile-mlp-seed2")));
  // While a demo runs in the folder (its lock on the marker, taken here), a second is refused, touching nothing.
  const std::string tiny = "demo --tile-graphs 3 --layout-graphs 2 --tile-epochs 1 --layout-epochs 1 --seeds 1 --out ";
  const int fd = ::open(tmp.file("demo/.gnn-demo").c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX) == 0);
  const auto before = std::filesystem::last_write_time(tmp.file("demo/runs/tile-mlp-seed1/model.npz"));
  r = run_gnn(tiny + tmp.file("demo"));
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(contains(r.err, "another gnn demo is running in this folder"), r.err);
  CHECK(std::filesystem::last_write_time(tmp.file("demo/runs/tile-mlp-seed1/model.npz")) == before);
  CHECK(std::filesystem::exists(tmp.file("demo/report.html")));
  ::close(fd);
  // A demo that fails once it has replaced the data (a file size limit: synth's first graph) leaves no report
  // of the runs it removed.
  r = testing::run_gnn_env("ulimit -f 1; trap '' XFSZ;", tiny + tmp.file("demo"));
  CHECK(r.exit_code == 1);
  CHECK_FALSE(std::filesystem::exists(tmp.file("demo/runs")));
  CHECK_FALSE(std::filesystem::exists(tmp.file("demo/report.html")));
}

TEST_CASE("cli: bench kernel runs every registered kernel and prints the JSON keys") {
  const std::vector<std::string> names = cli::bench_kernel_names();  // bench/registry.cpp's families
  REQUIRE(names.size() >= 19 + 40);  // the kernels' cases, and every op case as op:NAME
  CHECK(std::set<std::string>(names.begin(), names.end()).size() == names.size());
  for (const std::string& k : names) {
    // (an op case runs its forward inside --backward, and tests/autograd/test_op_cases.cpp checks it)
    const bool op = k.rfind("op:", 0) == 0;
    for (const char* bwd : {"", " --backward"}) {
      if (op && !*bwd) continue;
      CAPTURE(k);
      CAPTURE(bwd);
      auto r =
          run_gnn(std::string("bench kernel ") + k + " --nodes 300 --edges 600 --features 16 --repeat 20 --json" + bwd);
      REQUIRE(r.exit_code == 0);
      const Json j = Json::parse(last_line(r.out));
      CHECK(j["name"].as_string() == k);
      CHECK(j["median_ms"].as_number() > 0);
      CHECK(j["gbps"].as_number() > 0);
      // (an embedding lookup is a copy: no flops forward; an op case, bench/registry_ops.cpp, counts none)
      if ((k == "embedding" && !*bwd) || op) CHECK(j["gflops"].as_number() == 0);
      else CHECK(j["gflops"].as_number() > 0);
    }
  }
  auto r = run_gnn("bench kernel nope");
  CHECK(r.exit_code == 2);
  // the error lists them all: "(available: a, b, c)"
  const size_t from = r.err.find("(available: "), to = r.err.find(')', from);
  REQUIRE(from != std::string::npos);
  REQUIRE(to != std::string::npos);
  std::set<std::string> listed;
  for (size_t p = from + 12; p < to;) {
    const size_t q = std::min(r.err.find(", ", p), to);
    listed.insert(r.err.substr(p, q - p));
    p = q + 2;
  }
  CHECK(listed == std::set<std::string>(names.begin(), names.end()));
  r = run_gnn("bench kernel gemm --repeat 5");
  CHECK(r.exit_code == 2);  // at least 20 runs
  // --cold: the caches written over before each timed run and never before a warm-up one (cold_runs counts
  // the writes: one a timed run); said in the JSON and the line; a size below 0 or past memory refused
  r = run_gnn("bench kernel op:matmul --nodes 300 --features 16 --cold 4 --repeat 23 --json");
  REQUIRE(r.exit_code == 0);
  const Json cold = Json::parse(last_line(r.out));
  CHECK(cold["cold_mib"].as_number() == 4);
  CHECK(cold["cold_runs"].as_number() == 23);
  CHECK(cold["median_ms"].as_number() > 0);
  r = run_gnn("bench kernel spmm-mean --nodes 300 --edges 600 --features 16 --cold 2");
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("cold: 2 MiB written before each run") != std::string::npos);
  const Json warm = Json::parse(last_line(run_gnn("bench kernel gemm --nodes 300 --features 16 --json").out));
  CHECK(warm["cold_mib"].as_number() == 0);
  CHECK(warm["cold_runs"].as_number() == 0);
  r = run_gnn("bench kernel gemm --cold -1");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--cold") != std::string::npos);
  r = run_gnn("bench kernel gemm --cold 1048576");  // 1 TiB: refused before anything is allocated
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--cold 1048576 MiB is more than half of the") != std::string::npos);
  // --save-graph writes the edges a graph case (a kernel's or an op's) runs on, for the peer scripts.
  testing::TempDir tmp;
  for (const std::string k : {"spmm-sum", "gat-layer", "op:spmm-weighted"}) {
    CAPTURE(k);
    const std::string f = tmp.file(k.substr(k.find(':') + 1) + ".npz");
    r = run_gnn("bench kernel " + k + " --nodes 300 --edges 600 --features 16 --repeat 20 --save-graph " + f);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(NpzReader(f).load("edge_index").shape() == Shape{600, 2});
  }
  // Refused, each with its exit code and what the message says ("": the code alone). Usage errors exit 2; the
  // op cases whose shapes need more than one row or column exit 1 (each flag is in its range) naming the flag.
  std::vector<std::tuple<std::string, int, std::string>> refused = {
      {"gemm --device gpu", 2, "--device must be cpu or cuda"},
      {"spmm-mean --spmm cusparse", 2, ""},  // cuSPARSE is a GPU backend
      {"spmm-max --spmm cusparse --device cuda", 2, ""},
      {"segment-softmax --device cuda", 2, "runs on the CPU only"},
      {"spmm-mean --cuda-graph", 2, "--cuda-graph captures gemm, spmm-*"},
      {"gat-layer --device cuda --configs 4", 2, "on --device cuda does not take --configs"},
      {"sage-layer-fused --configs 16", 2, "does not take --configs"},
      {"graph-attention --features 18", 2, "splits --features into 4 heads, got 18"},
      {"spmm-sum --nodes 2147483647", 2, "--nodes must be in [1, 2147483646]"},  // a Graph's int32 indices
      {"op:slice-cols --nodes 4 --features 2", 1, "needs --features 3 or more"},  // (2: an empty slice)
      {"op:slice-rows --nodes 1 --configs 5 --features 4", 1, "needs --nodes x --configs >= 6"},
      // (refused before the inputs are made: pool-sum's would be 5 GB)
      {"pool-sum --nodes 20000000 --features 64 --save-graph " + tmp.file("unwritten.npz"), 2,
       "pool-sum takes no edges, so there is no edge_index to write"},
      {"op:layer-norm --nodes 30 --save-graph " + tmp.file("unwritten.npz"), 2, "op:layer-norm takes no edges"},
      // refused after the case has made its graph: the graph is not left behind
      {"spmm-sum --nodes 50 --edges 100 --features 4 --cuda-graph --save-graph " + tmp.file("unwritten.npz"), 2,
       "--cuda-graph captures"},
      {"spmm-sum --nodes 50 --edges 100 --features 4 --spmm cusparse --save-graph " + tmp.file("unwritten.npz"), 2,
       "--spmm cusparse times spmm-sum and spmm-mean forward on --device cuda only"},
      {"gemm --spmm cusparse --device cuda", 2, "--spmm cusparse times spmm-sum and spmm-mean"},
      {"spmm-sum --nodes 50 --edges 100 --save-graph ''", 2, "--save-graph: no file given"},
      // sizes past any machine's memory: refused before anything is allocated (8.8 TB)
      {"gemm --nodes 2147483646 --features 1024", 2, "gemm needs at least 8192.0 GiB, more than the"},
      {"spmm-sum --nodes 2147483646 --edges 2147483646 --features 1024", 2, "--edges 2147483646 --features 1024"}};
  if (!cuda_available()) refused.emplace_back("gemm --device cuda", 2, "--device cuda is not usable here");
  for (const auto& [args, code, says] : refused) {
    CAPTURE(args);
    r = run_gnn("bench kernel " + args);
    CHECK(r.exit_code == code);
    CHECK(r.err.find(says) != std::string::npos);
  }
  CHECK(!std::filesystem::exists(tmp.file("unwritten.npz")));
  // An npz member listed twice would be counted twice and loaded once: the rate overstated.
  r = run_gnn("bench npz " + tmp.file("spmm-sum.npz") + " --keys edge_index,edge_index");
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.err.find("--keys: 'edge_index' is listed twice") != std::string::npos, r.err);
  // A shape flag the case does not read is said and left out of the JSON (not refused: scripts give one
  // shape to a list of cases).
  r = run_gnn("bench kernel gemm --nodes 300 --edges 600 --graph-nodes 30 --features 16 --json");
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("warning: --edges: gemm runs on no graph's edges; ignored") != std::string::npos);
  CHECK(r.err.find("warning: --graph-nodes: gemm does not split its rows into graphs") != std::string::npos);
  CHECK_FALSE(Json::parse(last_line(r.out)).contains("edges"));
  CHECK_FALSE(Json::parse(last_line(r.out)).contains("graph_nodes"));
  r = run_gnn("bench kernel op:pool-sum --nodes 300 --graph-nodes 30 --features 16 --backward --json");
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("warning") == std::string::npos);
  CHECK(Json::parse(last_line(r.out))["graph_nodes"].as_number() == 30);
  r = run_gnn("bench kernel graph-attention --nodes 300 --graph-nodes 40 --features 16 --json");
  REQUIRE(r.exit_code == 0);  // graphs of 40 nodes, the last of 20: 4 F (7 * 40^2 + 20^2) flops
  const Json att = Json::parse(last_line(r.out));
  CHECK(att["graph_nodes"].as_number() == 40);
  CHECK(att["gflops"].as_number() * att["median_ms"].as_number() * 1e6 == doctest::Approx(64.0 * (7 * 1600 + 400)));
  r = run_gnn("bench kernel sage-layer --configs 4 --nodes 300 --edges 600 --features 16 --backward --json");
  REQUIRE(r.exit_code == 0);  // config-batched: node-major N x (C*F), GEMMs over N*C rows
  CHECK(Json::parse(last_line(r.out))["configs"].as_number() == 4);
}

TEST_CASE("cli: bench kernel on the GPU: gnn's SpMM, cuSPARSE's, cuBLAS GEMM and the SAGE and GAT layers") {
  GNN_SKIP_UNLESS_CUDA();
  for (const char* cmd :
       {"spmm-mean --backward", "spmm-max", "spmm-sum --spmm cusparse", "spmm-mean --spmm cusparse", "gemm --backward",
        "sage-layer", "sage-layer --backward", "sage-layer-fused --backward", "gat-layer --backward",
        "spmm-mean --backward --cuda-graph", "gemm --cuda-graph", "sage-layer --backward --cuda-graph",
        "sage-layer-fused --backward --cuda-graph", "gat-layer --backward --cuda-graph", "gat-layer --cuda-graph",
        "layer-norm --backward", "rowwise-softmax --backward", "rowwise-l2-normalize --backward --cuda-graph"}) {
    CAPTURE(cmd);
    auto r =
        run_gnn(std::string("bench kernel ") + cmd + " --device cuda --nodes 1000 --edges 2000 --features 64 --json");
    REQUIRE(r.exit_code == 0);
    const Json j = Json::parse(last_line(r.out));
    CHECK(j["device"].as_string() == "cuda");
    CHECK(j["median_ms"].as_number() > 0);
  }
  for (const char* cmd : {"gemm --cold 1", "spmm-mean --backward --cuda-graph --cold 1"}) {  // a fill before each run
    CAPTURE(cmd);
    auto r =
        run_gnn(std::string("bench kernel ") + cmd + " --device cuda --nodes 1000 --edges 2000 --features 64 --json");
    REQUIRE(r.exit_code == 0);
    const Json j = Json::parse(last_line(r.out));
    CHECK(j["cold_mib"].as_number() == 1);
    CHECK(j["cold_runs"].as_number() == 20);
    CHECK(j["median_ms"].as_number() > 0);
  }
  for (const char* cmd : {"--backward", "--graph-nodes 100"}) {  // fewer nodes: the emulator runs every thread
    CAPTURE(cmd);
    auto r = run_gnn(std::string("bench kernel graph-attention --device cuda --nodes 400 --features 64 --json ") + cmd);
    REQUIRE(r.exit_code == 0);
    CHECK(Json::parse(last_line(r.out))["median_ms"].as_number() > 0);
  }
  // cuSPARSE's SpMM and graph-attention are not captured
  for (const char* cmd : {"spmm-mean --spmm cusparse", "graph-attention"}) {
    auto r = run_gnn(std::string("bench kernel ") + cmd +
                     " --device cuda --cuda-graph --nodes 300 --edges 600 --features 16");
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("is not capturable") != std::string::npos);
  }
}
