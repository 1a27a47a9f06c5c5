#include "apps/commands.h"

int main(int argc, char** argv) {
  using namespace gnn::cli;
  const std::vector<Command> commands = {demo_command(), train_command(), eval_command(), predict_command(), score_command(), models_command(), plot_command(), synth_command(), planetoid_command(), inspect_command(), bench_command(), info_command()};
  return run(commands, argc, argv);
}
