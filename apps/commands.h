// Every gnn subcommand, one function each (apps/cmd_<name>.cpp).
#pragma once
#include <string>

#include "apps/cli.h"

namespace gnn::cli {

Command info_command();
Command inspect_command();
Command bench_command();
Command demo_command();
Command synth_command();
Command planetoid_command();
Command score_command();
Command train_command();
Command eval_command();
Command predict_command();
Command pass_command();
Command models_command();
Command plot_command();

// --eval-indices DIR of train, eval and score: "" when absent; a usage error when DIR is not a folder
// (a typo must not quietly score every config instead of the official subsets).
std::string eval_indices_flag(const Args& a);
// --split of eval, predict, pass and score: train, valid or test (the dataset walker reads no other folder),
// a usage error otherwise.
std::string split_flag(const Args& a);

}  // namespace gnn::cli
