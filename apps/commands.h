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

}  // namespace gnn::cli
