// gnn train / eval / predict: the loop, checkpoints that survive kill -9, and scoring.
//
// RUN/ holds
//   model.npz      the latest checkpoint: weights, Adam state, the recipe's name and hyper-parameters,
//                  the preprocessing statistics and where training stands (epoch, batch, step). Written
//                  after every epoch and every --checkpoint-minutes, atomically (temporary + rename).
//   best.npz       the weights of the validated epoch with the best score (when there is a valid split)
//   swa.npz        with --swa K: the mean of the last K epochs' weights
//   metrics.jsonl  one JSON object per finished epoch
//   lock           the writer's pid, flock-ed while it runs (RunLock)
// A resumed run (--resume) restarts from model.npz at the batch after the one it recorded. Every random
// choice (graph order, sampled configs, segments) is drawn from (seed, epoch, batch), so the resumed run
// takes exactly the steps the unbroken run would have taken (tested bit for bit).
#pragma once
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/scoring.h"
#include "apps/train/recipe.h"

namespace gnn::train {

inline constexpr int64_t kMaxEpochs = 1'000'000;  // --epochs' bound (a checkpoint past it is damaged)

// On --resume, what is left empty (0, "", no value) is the run's own: its recipe, data folder, epochs,
// steps, seed, --max-graphs and --eval-indices are stored in model.npz. A value given again that differs
// is taken for epochs and steps (extending or shortening the run, said in the output) and the data folder
// (the run's preprocessing is kept), and refused for the recipe, its hyper-parameters and the seed.
struct TrainOptions {
  std::string recipe;  // empty with resume: the run's own
  std::string data, out, eval_indices;  // eval_indices: folder of the official JSON files, optional
  std::map<std::string, std::string> hparams;  // set on the command line
  int64_t epochs = 0;  // 0: 10 for a new run; at most kMaxEpochs
  int64_t steps = 0;  // > 0: stop after this many optimiser steps; < 0: no limit,
                      // even on a resumed run that had one
  std::optional<uint64_t> seed;  // none: 1 for a new run
  int64_t memory_limit = 0;  // > 0: host tensor bytes allowed (a batch past it stops, named)
  bool resume = false;
  bool skip_nonfinite = false;
  double checkpoint_minutes = 10;  // 0: after every step
  int progress = -1;  // 1 bar, 0 plain lines, -1 bar when stderr is a terminal
  int64_t kill_after_steps = 0;  // tests: SIGKILL this process after that step's checkpoint
  bool stall = false;  // tests: at that step, hang (sleep) instead of dying
  int fault_rank = -1;  // tests: the rank of a data-parallel job that dies or hangs (-1: all)
  int64_t max_graphs = 0;  // > 0: use only the first N train and valid graphs
  bool quiet = false;  // no per-epoch lines on stdout (metrics.jsonl still written)
  bool profile = false;  // time each step's phases and ops (apps/train/profile.h)
  Device device = Device::cpu();  // where the model and each batch's features live
  // Build the next batch on a second thread during each step: -1 on a GPU only (on the host the step
  // itself uses every core), 0 never, 1 always. The batches, and so the run, are the same either way.
  int prefetch = -1;
  // > 0 with a GPU: capture the forward and backward of up to this many repeating batch structures as
  // CUDA graphs and replay steps from them (apps/train/step_graph.h); 0: every step eagerly.
  int64_t cuda_graphs = 0;
};

// A flag value or combination that cannot be meant (out of range, conflicting with the resumed run):
// `gnn train` reports it as a usage error (exit 2) before anything is created on disk.
class OptionError : public Error {
 public:
  explicit OptionError(std::string message) : Error(std::move(message), "options") {}
};

struct TrainResult {
  int64_t configs = 0;  // (graph, config) pairs trained on
  double seconds = 0;  // training time, validation excluded
  std::string json;  // the summary printed as the last line
};
TrainResult run_training(const TrainOptions& options);

// The files of a run directory that gnn train writes and reads back (model.npz, best.npz, swa.npz,
// metrics.jsonl, lock). No output of eval, predict or plot may name one: it would destroy the run.
std::vector<std::string> run_files(const std::string& run);

// A model rebuilt from a checkpoint (model.npz or best.npz): everything eval and predict need.
struct LoadedModel {
  const Recipe* recipe = nullptr;
  HParams hparams;
  TrainHParams train;  // hparams' training ones, typed (eval-chunk, tta, loss)
  Preprocessing prep;
  std::unique_ptr<RankModel> model;
  std::string path;
  int64_t epoch = 0;
};
// On the CPU (`device`, where the caller will run it) loading also sets the process's matrix products to
// the run's --matmul-precision, so a model is scored as it was validated; a GPU's products are cuBLAS's.
LoadedModel load_model(const std::string& checkpoint, Device device = Device::cpu());
// RUN/best.npz when it exists, else RUN/model.npz; `which` = best | last | swa (RUN/swa.npz) forces one. A
// best.npz or swa.npz that is not of the run its model.npz holds (another recipe, seed, preprocessing or
// flag a resume may not change: a file copied from another run) is refused, naming what differs.
std::string run_checkpoint(const std::string& run, const std::string& which);

// Scores (lower = faster) for the listed configs of one graph, in the fewest forward passes of at most
// `chunk` configs, of near-equal size, on the device of the model's parameters (batches are moved
// there, the scores copied back). With tta > 1, the mean over tta passes, pass t over the configs in
// the order tta_order(n, t) (pass 0 in the given order): for a model whose configs interact (a norm or
// attention across the configs of a batch), a config's score then depends less on its chunk. A
// non-finite score (a diverged model) becomes the largest double, with a warning: it ranks last.
std::vector<double> predict_configs(RankModel& model, const ModelGraph& g, const std::vector<int64_t>& configs,
                                    int64_t chunk, int64_t tta = 1);
// One forward and backward of a loaded model on one graph's configs, with the run's loss on this batch
// and no optimiser step: what `gnn pass` writes, so that another implementation of the model (the
// original authors' code) can be fed the same batch and compared. The batch is the whole graph, as eval
// sees it: no --segment, --sample-nodes, --edge-dropout or GST part, as a training step may have. In
// eval mode (no dropout) unless `training`, then with the masks of noise seed 0. Needs runtimes.
struct ModelPass {
  Batch batch;  // on the host
  Tensor score;  // f32 [C, 1] (lower = faster)
  double loss = 0;
  std::vector<std::pair<std::string, Tensor>> grads;  // per parameter, by name, on the host
  // The weights the forward started from, per parameter on the host, and those the forward changed in
  // place (--op-max-norm's embedding renorm), as it left them.
  std::vector<std::pair<std::string, Tensor>> params, changed;
};
ModelPass model_pass(const LoadedModel& m, const ModelGraph& g, const std::vector<int64_t>& configs, bool training);
// Pass t's order of n configs: the identity for t = 0, else a permutation drawn from a fixed seed and t.
std::vector<int64_t> tta_order(int64_t n, int64_t t);

// Every graph of `src` scored with the competition metrics (layout graphs on their eval_indices subset
// when the folder has one for them).
struct Evaluation {
  std::vector<std::pair<std::string, GraphScore>> scores;  // (collection, score), file order
  double score = 0;  // mean_score
  std::string json;  // summary_json
  int64_t nonfinite = 0;  // predictions that were not finite, over all the graphs
};
// In a job of several ranks (mpirun) each rank scores its share of the graphs and every rank returns all
// the scores, in file order.
// log_runtime: the model predicts log runtimes (trained with --loss mse or mape, TrainHParams::regression),
// as its output plus log_offset (the run's Preprocessing::log_offset): each graph's score also carries
// its mean relative error.
// max_configs > 0: a graph with more configs (and no eval_indices subset) is scored on that many, a
// subset drawn once from its id (the same every call; training's --val-configs).
// An eval_indices subset is scored alone, as the test files hold only their 1000 configs; a config it lists
// twice (the release's xla random file repeats 519) ties with itself, as the subset's scores do in the
// official scoring and in a scored submission.
Evaluation evaluate(RankModel& model, GraphSource& src, int64_t chunk, const std::string& eval_indices_dir,
                    int64_t tta = 1, bool log_runtime = false, double log_offset = 0, int64_t max_configs = 0);
// The same with the scores of file i's listed configs (lower = faster) from `scorer`: an ensemble's. It sets
// `nonfinite` to the configs of which a prediction (one run's, or any member's) was not finite.
constexpr double kNotFinitePrediction = std::numeric_limits<double>::max();  // predict_configs' mark for them
using ConfigScorer = std::function<std::vector<double>(size_t file, const ModelGraph& g,
                                                       const std::vector<int64_t>& configs, int64_t& nonfinite)>;
Evaluation evaluate(const ConfigScorer& scorer, GraphSource& src, const std::string& eval_indices_dir,
                    bool log_runtime = false, double log_offset = 0, int64_t max_configs = 0);

// Ensembles (gnn eval / predict --run A --run B): how the members' scores of one graph's configs become
// one. kMeanZ standardises each member's scores over the graph's configs (mean 0, standard deviation 1;
// all equal: all 0) and averages them; kMeanRank averages each member's ranks (0 = predicted fastest,
// ties by config index as a submission's ranking: `configs` holds the scored configs' indices, empty for
// 0, 1, 2, ...); kMean averages the raw scores, as the 6th place's submission summed its SAGE and GIN
// models' (src/3_run_make_kaggle_submission.py), for members whose scores are comparable. A prediction
// that is not finite (predict_configs ranks it last with the largest double) counts as one more than the
// member's largest finite z, or the mean of the places after its finite ones (a member that scored none is
// neutral under both); under kMean the config ranks last. One member: its scores unchanged.
enum class Combine { kMeanZ, kMeanRank, kMean };
Combine parse_combine(const std::string& name);  // mean-z | mean-rank | mean; gnn::Error otherwise
std::vector<double> combine_scores(const std::vector<std::vector<double>>& members, Combine how,
                                   const std::vector<int64_t>& configs = {});
// Every rank's scores, in rank order, on every rank (a job of one: `mine`).
std::vector<std::pair<std::string, GraphScore>> gather_scores(
    const std::vector<std::pair<std::string, GraphScore>>& mine, const std::string& what);

// The model's files of one kind from a dataset tree (tile or layout collections), of one split.
std::vector<DatasetFile> kind_files(const std::string& data, const std::string& kind, const std::string& split);

}  // namespace gnn::train
