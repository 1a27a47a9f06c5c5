// Every gnn subcommand, one function each (apps/cmd_<name>.cpp).
#pragma once
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
Command models_command();
Command plot_command();

}  // namespace gnn::cli
