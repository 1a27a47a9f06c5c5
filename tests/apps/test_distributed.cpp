// Data-parallel training (dist/, apps/train/data_parallel.h): gnn under `mpirun -np R` against one
// process, faults of one rank, and the GPU sum through NCCL (on the emulator: a job of one rank).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>

#include "apps/train/data_parallel.h"
#include "autograd/ops.h"
#include "dist/comm.h"
#include "io/json.h"
#include "nn/layers.h"
#include "nn/optim.h"
#include "testing.h"

using namespace gnn;
using namespace gnn::testing;

namespace {

// 8 tile kernels and 5 layout programs per split, enough for batches that split unevenly over 3 ranks.
const std::string& dataset() {
  static TempDir dir;
  static const std::string root = tile_and_layout(dir.file("data"), {8, 0, 40, 13}, {5, 300, 24, 14});
  return root;
}

bool same_weights(const std::string& a, const std::string& b) {
  const auto x = checkpoint_weights(a);
  return !x.empty() && same_bits(x, checkpoint_weights(b));
}

std::vector<Json> metrics(const std::string& run) {
  std::ifstream in(run + "/metrics.jsonl");
  std::vector<Json> out;
  for (std::string line; std::getline(in, line);) out.push_back(Json::parse(line));
  return out;
}

std::string last_json(const std::string& out) {
  const size_t end = out.find_last_not_of('\n'), begin = out.rfind('\n', end);
  return out.substr(begin == std::string::npos ? 0 : begin + 1);
}

#define SKIP_UNLESS_MPI()                     \
  do {                                        \
    if (!mpi_missing().empty()) {             \
      skip("needs mpirun: " + mpi_missing()); \
      return;                                 \
    }                                         \
  } while (0)

}  // namespace

TEST_CASE("distributed: 2 ranks follow 1 rank's loss curve, and two 2-rank runs give the same bits") {
  SKIP_UNLESS_MPI();
  TempDir t;
  // tile: ListMLE plus an MSE term (two loss terms, each weighted by its rank's share); layout: the pairwise
  // hinge (a rank's share is its share of the ordered pairs) with segment training (a graph's segment drawn
  // from its own generator). 4 graphs per step: 2 per rank; 3 ranks: 2, 1 and 1.
  for (const char* model : {"tile-mlp", "layout-resmodel"}) {
    CAPTURE(model);
    const bool layout = std::string(model).rfind("layout", 0) == 0;
    const std::string flags = std::string(" --model ") + model + " --data " + dataset() +
                              " --epochs 3 --batch-graphs 4 " + "--threads 1 --seed 5 " +
                              (layout ? "--loss hinge --segment 200" : "--mse-weight 0.5");
    const std::string one = t.file(std::string(model) + "1"), two = t.file(std::string(model) + "2"),
                      again = t.file(std::string(model) + "2b"), three = t.file(std::string(model) + "3"),
                      parts = t.file(std::string(model) + "2a");
    auto r = run_gnn("train --out " + one + flags);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    r = run_gnn_mpi(2, "train --out " + two + flags);
    REQUIRE_MESSAGE(r.exit_code == 0, std::string(r.err + r.out));
    CHECK(r.out.find("data-parallel over 2 ranks (MPI)") != std::string::npos);
    const Json summary = Json::parse(last_json(r.out));
    CHECK(summary["ranks"].as_int() == 2);
    CHECK(summary["allreduce_bytes_per_step"].as_int() > 0);
    r = run_gnn_mpi(2, "train --out " + again + flags);
    REQUIRE_MESSAGE(r.exit_code == 0, std::string(r.err + r.out));
    r = run_gnn_mpi(3, "train --out " + three + flags);
    REQUIRE_MESSAGE(r.exit_code == 0, std::string(r.err + r.out));
    r = run_gnn_mpi(2, "train --out " + parts + flags + " --accumulate 2");  // 2 ranks x 2 micro-batches of 1 graph
    REQUIRE_MESSAGE(r.exit_code == 0, std::string(r.err + r.out));

    // Two runs of 2 ranks: the same bits (weights, Adam state, best checkpoint, metrics).
    CHECK(same_weights(two + "/model.npz", again + "/model.npz"));
    CHECK(same_weights(two + "/best.npz", again + "/best.npz"));
    const auto m1 = metrics(one), m2 = metrics(two), m2b = metrics(again), m3 = metrics(three), m2a = metrics(parts);
    REQUIRE(m1.size() == 3);
    REQUIRE(m2.size() == 3);
    REQUIRE(m3.size() == 3);
    REQUIRE(m2a.size() == 3);
    for (size_t e = 0; e < 3; ++e) {
      CHECK(m2[e]["train_loss"].as_number() == m2b[e]["train_loss"].as_number());
      CHECK(m2[e]["valid_score"].as_number() == m2b[e]["valid_score"].as_number());
      // The same global batches: the loss differs from one process's by the rounding of the sums over
      // ranks, amplified a little by Adam over 6 steps. Stated tolerance: 1e-4 relative.
      for (const auto* m : {&m2, &m3, &m2a}) {
        const double a = m1[e]["train_loss"].as_number(), b = (*m)[e]["train_loss"].as_number();
        CHECK(std::fabs(a - b) <= 1e-4 * std::fabs(a));
      }
      CHECK(m2[e]["ranks"].as_int() == 2);
    }
  }
}

TEST_CASE("distributed: a killed rank stops the job with a message from the others, and the run resumes") {
  SKIP_UNLESS_MPI();
  TempDir t;
  const std::string flags = " --model tile-mlp --data " + dataset() + " --epochs 3 --batch-graphs 3 --threads 1 " +
                            "--checkpoint-minutes 0 --progress lines";
  const std::string whole = t.file("whole"), killed = t.file("killed"), one = t.file("one");
  auto r = run_gnn_mpi(2, "train --out " + whole + flags);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto start = std::chrono::steady_clock::now();
  r = run_gnn_mpi(2, "train --out " + killed + flags + " --kill-after-steps 4 --fault-rank 1");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code != 124);  // not the test's own time limit: the job ended by itself
  CHECK(seconds < 60);
  // mpirun names the dead rank; rank 0 says where the run stands.
  CHECK_MESSAGE(r.err.find("rank 1") != std::string::npos, r.err);
  CHECK_MESSAGE(r.err.find("rank 0 of 2: stopped by the launcher") != std::string::npos, r.err);
  CHECK_MESSAGE(r.err.find("holds step 4: --resume continues from there") != std::string::npos, r.err);
  r = run_gnn_mpi(2, "train --resume --out " + killed);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(same_weights(whole + "/model.npz", killed + "/model.npz"));
  CHECK(same_weights(whole + "/best.npz", killed + "/best.npz"));

  // Resumed on another number of ranks, the run goes on (the global batches do not depend on it) and says so.
  r = run_gnn_mpi(2, "train --out " + one + flags + " --kill-after-steps 4 --fault-rank 0");
  CHECK(r.exit_code != 0);
  r = run_gnn("train --resume --out " + one);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("resuming a run of 2 rank(s) with 1") != std::string::npos);
  CHECK(Json::parse(last_json(r.out))["steps"].as_int() == 9);
}

TEST_CASE("distributed: a rank that hangs stops the job after --comm-timeout, named by the others") {
  SKIP_UNLESS_MPI();
  TempDir t;
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_gnn_mpi(2, "train --model tile-mlp --data " + dataset() + " --out " + t.file("run") +
                                    " --epochs 3 --batch-graphs 2 --threads 1 --stall-after-steps 2 --fault-rank 1 "
                                    "--comm-timeout 2");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code != 124);
  CHECK(seconds < 60);
  CHECK_MESSAGE(r.err.find("rank 1 of 2: stalling after step 2") != std::string::npos, r.err);
  CHECK_MESSAGE(r.err.find("rank 0 of 2: no answer from every other rank in the loss counts of step 3 within 2 s "
                           "(--comm-timeout)") != std::string::npos,
                r.err);
}

TEST_CASE("distributed: an error on one rank ends the job with that rank's message") {
  SKIP_UNLESS_MPI();
  TempDir t;
  // A copy of the dataset whose last training kernel is not a zip: rank 1 of 2 reads it.
  const std::string data = t.file("data");
  std::filesystem::copy(dataset(), data, std::filesystem::copy_options::recursive);
  std::string bad;
  for (const auto& e : std::filesystem::directory_iterator(data + "/npz/tile/xla/train"))
    if (bad.empty() || e.path().string() > bad) bad = e.path().string();
  std::ofstream(bad, std::ios::trunc) << "not a zip file";
  const auto r = run_gnn_mpi(2, "train --model tile-mlp --data " + data + " --out " + t.file("run") + " --threads 1");
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code != 124);
  CHECK_MESSAGE(r.err.find("gnn train: rank 1 of 2: error: ") != std::string::npos, r.err);
  CHECK_MESSAGE(r.err.find(std::filesystem::path(bad).filename().string()) != std::string::npos, r.err);
}

TEST_CASE("distributed: layout-gst, whose segment table lives in one process, is refused over 2 ranks") {
  SKIP_UNLESS_MPI();
  TempDir t;
  const auto r =
      run_gnn_mpi(2, "train --model layout-gst --data " + dataset() + " --out " + t.file("run") + " --threads 1");
  CHECK(r.exit_code != 0);
  CHECK_MESSAGE(r.err.find("--model layout-gst: its table of segment scores lives in one process") != std::string::npos,
                r.err);
  CHECK_FALSE(std::filesystem::exists(t.file("run")));
}

TEST_CASE("distributed: gnn demo, whose data, runs and report belong to one process, is refused over 2 ranks") {
  SKIP_UNLESS_MPI();
  TempDir t;
  const auto r = run_gnn_mpi(2, "demo --out " + t.file("demo") + " --threads 1");
  CHECK(r.exit_code != 0);
  CHECK_MESSAGE(r.err.find("gnn demo runs in one process; run it without mpirun") != std::string::npos, r.err);
  CHECK_FALSE(std::filesystem::exists(t.file("demo")));
}

TEST_CASE("distributed: gnn synth, whose dataset belongs to one writer, is refused over 2 ranks") {
  SKIP_UNLESS_MPI();
  TempDir t;
  const auto r = run_gnn_mpi(2, "synth --collection tile --graphs 2 --out " + t.file("data") + " --threads 1");
  CHECK(r.exit_code != 0);
  CHECK_MESSAGE(r.err.find("gnn synth writes a dataset in one process; run it without mpirun") != std::string::npos,
                r.err);
  CHECK_FALSE(std::filesystem::exists(t.file("data")));
}

TEST_CASE("distributed: --op-max-norm, which changes each process's weights in place, is refused over 2 ranks") {
  SKIP_UNLESS_MPI();
  TempDir t;
  const auto r = run_gnn_mpi(2, "train --model layout-sage-6th --op-max-norm 1 --data " + dataset() + " --out " +
                                    t.file("run") + " --threads 1");
  CHECK(r.exit_code != 0);
  CHECK_MESSAGE(r.err.find("--op-max-norm: each process would renormalise") != std::string::npos, r.err);
  CHECK_FALSE(std::filesystem::exists(t.file("run")));
}

// Two ranks, rank 1 started through `rank1` (a shell command line that runs "$@"; the flags `more` after the
// command's): what the job writes on stderr, with its exit status.
CommandResult two_ranks_one_apart(const TempDir& t, const std::string& rank1, const std::string& more,
                                  const std::string& args) {
  const std::string wrap = t.file("wrap.sh");
  std::ofstream(wrap) << "#!/bin/sh\nif [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then " << rank1 << " " << GNN_CLI_PATH
                      << " \"$@\" " << more << "; else exec " << GNN_CLI_PATH << " \"$@\"; fi\n";
  std::filesystem::permissions(wrap, std::filesystem::perms::owner_all);
  const std::string root = ::geteuid() == 0 ? "--allow-run-as-root " : "";
  const std::string cmd = "timeout 120 mpirun " + root + "--oversubscribe -np 2 " + wrap + " " + args + " >" +
                          t.file("out") + " 2>" + t.file("err") + " </dev/null";
  const int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(t.file("err"));
  r.err.assign(std::istreambuf_iterator<char>(in), {});
  return r;
}

TEST_CASE("distributed: ranks started with different flags stop at once, naming the flag") {
  SKIP_UNLESS_MPI();
  TempDir t;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--seed 3", "rank 1's seed is 3, rank 0's 1: every rank needs the same flags"},
      {"--lr 0.003", "rank 1's --lr is 0.003, rank 0's "}};  // (the flag, not every hyper-parameter of both)
  for (const auto& c : cases) {
    CAPTURE(c.first);
    const auto r = two_ranks_one_apart(
        t, "exec", c.first, "train --model tile-mlp --data " + dataset() + " --out " + t.file("run") + " --threads 1");
    CHECK(r.exit_code != 0);
    CHECK_MESSAGE(r.err.find(c.second) != std::string::npos, r.err);
    CHECK_FALSE(std::filesystem::exists(t.file("run") + "/model.npz"));
  }
}

TEST_CASE("distributed: ranks that read other checkpoints, splits or files stop at once, naming them") {
  SKIP_UNLESS_MPI();
  TempDir t;
  const std::string run = t.file("run");
  auto r = run_gnn("train --model tile-mlp --data " + dataset() + " --out " + run + " --epochs 1 --threads 1");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  REQUIRE(std::filesystem::exists(run + "/best.npz"));
  const std::string eval = "eval --run " + run + " --data " + dataset() + " --threads 1 --per-graph " + t.file("e"),
                    predict = "predict --run " + run + " --data " + dataset() + " --threads 1 --out " + t.file("p.csv");
  // eval and predict: rank 0 scores best.npz, rank 1 model.npz; rank 1 another split
  r = two_ranks_one_apart(t, "exec", "--checkpoint last", eval);
  CHECK(r.exit_code != 0);
  CHECK_MESSAGE(
      r.err.find("rank 1's checkpoint of --run " + run + " is " + run + "/model.npz (epoch 1, ") != std::string::npos,
      r.err);
  CHECK_MESSAGE(r.err.find(", rank 0's " + run + "/best.npz (epoch 1, ") != std::string::npos, r.err);
  r = two_ranks_one_apart(t, "exec", "--split valid", predict);
  CHECK(r.exit_code != 0);
  CHECK_MESSAGE(r.err.find("rank 1's --split is valid, rank 0's test") != std::string::npos, r.err);
  // rank 1 with one run more (a --runs file that differs per node), or with --runtimes (a gather more)
  std::filesystem::copy(run, run + "_copy", std::filesystem::copy_options::recursive);
  r = two_ranks_one_apart(t, "exec", "--run " + run + "_copy", eval);
  CHECK(r.exit_code != 0);
  CHECK_MESSAGE(r.err.find("rank 1's runs (--run, --runs) is " + run + ", " + run + "_copy, rank 0's " + run + ": ") !=
                    std::string::npos,
                r.err);
  r = two_ranks_one_apart(t, "exec", "--runtimes " + t.file("rt.csv"), predict);
  CHECK(r.exit_code != 0);
  CHECK_MESSAGE(r.err.find("rank 1's --runtimes is on, rank 0's off") != std::string::npos, r.err);
  CHECK_FALSE(std::filesystem::exists(t.file("e")));
  CHECK_FALSE(std::filesystem::exists(t.file("p.csv")));
  // The same --data path holding other files on rank 1 (its own mount: a copy per node), one kernel fewer in
  // each split. (Needs a mount namespace: root, or a user namespace.)
  if (std::system("unshare -m true >/dev/null 2>&1") != 0)
    return skip("unshare -m cannot make a mount namespace here: rank 1 cannot see other files under --data");
  const std::string other = t.file("other");
  std::filesystem::copy(dataset(), other, std::filesystem::copy_options::recursive);
  for (const char* split : {"train", "valid", "test"}) {
    std::string last;
    for (const auto& e : std::filesystem::directory_iterator(other + "/npz/tile/xla/" + split))
      if (e.path().string() > last) last = e.path().string();
    std::filesystem::remove(last);
  }
  const std::string own_mount =
      "exec unshare -m sh -c 'mount --bind " + other + " " + dataset() + " && exec \"$0\" \"$@\"'";
  r = two_ranks_one_apart(t, own_mount, "",
                          "train --model tile-mlp --data " + dataset() + " --out " + t.file("run2") + " --threads 1");
  CHECK(r.exit_code != 0);
  CHECK_MESSAGE(r.err.find("rank 1's train split is 7 files (paths and sizes hash ") != std::string::npos, r.err);
  CHECK_MESSAGE(r.err.find("--data must be the same files on every rank") != std::string::npos, r.err);
  CHECK_FALSE(std::filesystem::exists(t.file("run2") + "/model.npz"));
  for (const std::string& cmd : {eval, predict}) {
    r = two_ranks_one_apart(t, own_mount, "", cmd);
    CHECK(r.exit_code != 0);
    CHECK_MESSAGE(r.err.find(" split is 7 files (paths and sizes hash ") != std::string::npos, r.err);
  }
  CHECK_FALSE(std::filesystem::exists(t.file("e")));
  CHECK_FALSE(std::filesystem::exists(t.file("p.csv")));
}

TEST_CASE("distributed: eval and predict over 3 ranks write what one process writes") {
  SKIP_UNLESS_MPI();
  TempDir t;
  const std::string run = t.file("run");
  auto r = run_gnn("train --model layout-resmodel --data " + dataset() + " --out " + run + " --epochs 1 --threads 1");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = run_gnn("eval --run " + run + " --data " + dataset() + " --per-graph " + t.file("e1.jsonl"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string one = r.out;
  r = run_gnn_mpi(3, "eval --run " + run + " --data " + dataset() + " --threads 1 --per-graph " + t.file("e3.jsonl"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out == one);  // printed once, by rank 0
  CHECK(read_bytes(t.file("e1.jsonl")) == read_bytes(t.file("e3.jsonl")));
  for (const char* split : {"valid", "test"}) {
    r = run_gnn("predict --run " + run + " --data " + dataset() + " --split " + split + " --out " + t.file("p1.csv"));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    r = run_gnn_mpi(3, "predict --run " + run + " --data " + dataset() + " --split " + split + " --threads 1 --out " +
                           t.file("p3.csv"));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(read_bytes(t.file("p1.csv")) == read_bytes(t.file("p3.csv")));
  }
}

TEST_CASE("distributed: gnn info names the backends, and a job of one rank sums nothing") {
  const auto r = run_gnn("info --json");
  REQUIRE(r.exit_code == 0);
  const Json j = Json::parse(last_json(r.out));
  CHECK(j["mpi_built"].as_bool() == dist::built_with_mpi());
  CHECK(j["distributed"].as_string().find("rank 0 of 1") != std::string::npos);
  CHECK(dist::world().size == 1);
  std::vector<double> v = {1.5, -2};
  dist::allreduce_sum(v.data(), 2, "a test");
  CHECK(v == std::vector<double>{1.5, -2});
  for (int64_t n : {0, 1, 7, 8})
    for (int R : {1, 2, 3}) {
      int64_t covered = 0;
      for (int k = 0; k < R; ++k) {
        const dist::Range s = dist::shard(n, k, R);
        CHECK(s.begin == covered);
        CHECK(s.size() >= n / R);
        CHECK(s.size() <= n / R + 1);
        covered = s.end;
      }
      CHECK(covered == n);
    }
}

// The GPU side: gradients gathered into the flat buffer on the device, summed through NCCL (a job of one
// rank, forced onto the NCCL path), and handed back as slices that the optimiser steps on.
TEST_CASE("distributed: the GPU gradient sum through NCCL hands back each gradient unchanged, aligned") {
  GNN_SKIP_UNLESS_CUDA();
  if (!dist::built_with_nccl()) {
    skip("this build has no NCCL");
    return;
  }
  ::setenv("GNN_NCCL_ALONE", "1", 1);
  Rng rng(3);
  nn::Linear a(5, 7, rng), b(7, 3, rng);
  const Device dev = Device::cuda(0);
  std::vector<nn::NamedParam> params;
  for (nn::Module* m : std::initializer_list<nn::Module*>{&a, &b}) {
    nn::move_parameters(*m, dev);
    for (const nn::NamedParam& p : m->parameters()) params.push_back(p);
  }
  std::vector<float> xv(20);
  for (float& v : xv) v = float(rng.uniform() * 2 - 1);
  const ag::Var x(Tensor::from_vector(xv, Shape{4, 5}).to(dev));
  ag::backward(ag::sum(b.forward(ag::relu(a.forward(x)))));
  std::vector<Tensor> before;
  for (const nn::NamedParam& p : params) before.push_back(p.var.grad().on(Device::cpu()));
  train::DataParallel dp(params);
  const auto sums = dp.reduce(2.5, true, 12, 1);
  CHECK(sums.finite);
  CHECK(sums.loss == 2.5);
  CHECK(sums.configs == 12);
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(params[i].name);
    CHECK(params[i].var.grad().is_cuda());
    CHECK(reinterpret_cast<uintptr_t>(params[i].var.grad().data()) % 256 == 0);
    CHECK(same_bytes(params[i].var.grad().on(Device::cpu()), before[i]));
  }
  nn::Adam opt(nn::one_group(params, 0.0), 1e-2, true);
  opt.step();  // reads the slices (float4 loads: misaligned ones stop the emulator)
  dp.check_same_weights("in the test");
  ::unsetenv("GNN_NCCL_ALONE");
}
