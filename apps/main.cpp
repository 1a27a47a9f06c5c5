#include "apps/commands.h"
#include "dist/comm.h"

int main(int argc, char** argv) {
  using namespace gnn::cli;
  const std::vector<Command> commands = {demo_command(), train_command(), eval_command(), predict_command(), score_command(), models_command(), plot_command(), synth_command(), planetoid_command(), inspect_command(), bench_command(), info_command()};
  // Under mpirun every rank runs the command; one that fails ends the job (the others would wait in
  // their next collective for it), with its own message already printed.
  gnn::dist::init(&argc, &argv);
  const int rc = run(commands, argc, argv);
  if (rc != 0 && gnn::dist::distributed()) gnn::dist::abort(rc);
  gnn::dist::finalize();
  return rc;
}
