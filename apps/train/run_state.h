// gnn train's run directory, for the files of apps/train: what a checkpoint holds besides the weights
// (meta/: the recipe, hyper-parameters, preprocessing and the run's settings; state/: where training
// stands), the plan of a new or resumed run, and metrics.jsonl. The public side is trainer.h.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "apps/checkpoint.h"
#include "apps/train/trainer.h"

namespace gnn::train {

inline constexpr int64_t kCheckpointFormat = 1;

// Reads the recipe, hyper-parameters and preprocessing of a checkpoint (no weights).
struct Meta {
  const Recipe* recipe = nullptr;
  HParams hparams;
  Preprocessing prep;
  std::map<std::string, Tensor> arrays;  // the non-parameter arrays
  int64_t epochs = 10, steps = 0;  // the run's length as --epochs and --steps bound it (10 and 0: not recorded)
};
Meta read_meta(const std::string& path);
// What theirs (a best.npz or swa.npz) records otherwise than ours (model.npz) of what every checkpoint of one
// run shares (its seed, preprocessing, the flags a resume may not change); "" if nothing
std::string meta_differing(const Meta& ours, const Meta& theirs);
// A scalar int64 the checkpoint holds (-1: none)
int64_t stored_i64(const Meta& m, const std::string& key);
// What a best.npz (its best epoch) or swa.npz (its epoch) says otherwise than model.npz of the same run ("" if
// nothing): an epoch writes them before its model.npz, so a run stopped between the two leaves them ahead.
std::string out_of_step(const Meta& model, const Meta& file, bool swa);
// The largest epoch of metrics.jsonl's lines (0: none, or no file); lines that do not read are passed over.
int64_t last_logged_epoch(const std::string& metrics);
ModelDims dims_of(const Preprocessing& p);

// Where training stands: saved in every checkpoint, so a resumed run continues the counters.
struct State {
  int64_t epoch = 0, batch = 0, step = 0, skipped = 0;  // the next batch to run
  double loss_sum = 0, seconds = 0, best_score = -INFINITY;
  int64_t loss_n = 0, configs = 0, best_epoch = 0;
  void save(std::vector<std::pair<std::string, Tensor>>& out) const;  // as state/...
  void load(const std::map<std::string, Tensor>& a, const std::string& file);
};

// What a run is, resolved from the options and checked before anything is written: the recipe and its
// hyper-parameters, and on --resume the run's own settings where the command line leaves them out.
struct RunPlan {
  const Recipe* recipe = nullptr;
  HParams hp;
  Meta meta;  // the checkpoint's, on resume
  State state;  // the checkpoint's counters, on resume (checked)
  bool resuming = false;
  uint64_t seed = 1;
  std::string data, eval_indices;
  int64_t epochs = 10, steps = 0, max_graphs = 0;
  std::vector<std::string> notes;  // what a resumed run took from the command line instead of its own
};
RunPlan plan_run(const TrainOptions& o, const std::string& model_path);

// A flag that cannot be meant: OptionError (gnn train exits 2) before anything is written.
template <class... Parts>
[[noreturn]] void bad_option(const Parts&... parts) {
  throw OptionError(detail::str_cat(parts...));
}

// An advisory lock on a run directory (flock on RUN/lock, which holds the writer's pid), held for the
// life of this object by the one process that writes the run. A second writer is refused with the
// first one's pid; the kernel drops the lock of a process that dies, even of SIGKILL, so the next
// writer takes a stale lock over by itself.
class RunLock {
 public:
  explicit RunLock(const std::string& run);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  bool created() const { return created_; }  // the lock file did not exist before: this process made it
  bool held() const { return held_; }  // locked (false where the filesystem has no flock: a warning said so)

 private:
  int fd_ = -1;
  bool created_ = false, held_ = false;
};

// A run folder without model.npz that holds another run's files: an interrupted first epoch leaves its
// best.npz, swa.npz and metrics line before the first model.npz (end_epoch writes them in that order), and
// a new run here replaces them; files of a later epoch are a run's history whose checkpoint is gone, which
// a new run would destroy: refused (gnn::Error), naming them.
void check_leftovers(const std::string& run);

// metrics.jsonl without the lines of epochs after `epochs` (a resumed run writes them again) and
// without a torn last line; with keep_partial, a --steps stop's partial line of epoch `epochs` + 1 stays
// (the run is finished: nothing will write it again). A missing file, unreadable lines before the last
// and missing epochs are said on stderr: the history is gone, the training goes on from the checkpoint.
void trim_metrics(const std::string& path, int64_t epochs, bool keep_partial);
void append_line(const std::string& path, const std::string& line);  // flushed and synced

}  // namespace gnn::train
