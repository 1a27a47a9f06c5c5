#if __has_include(<malloc.h>)
#include <malloc.h>  // glibc's mallopt
#endif

#include <fcntl.h>

#include <cerrno>

#include "apps/commands.h"
#include "dist/comm.h"
#include "io/atomic_file.h"

int main(int argc, char** argv) {
  using namespace gnn::cli;
  // A standard stream started closed (`2>&-`) would be the next file gnn opens, and a message meant for
  // stderr would land in a checkpoint: each is /dev/null instead.
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
#if defined(M_MMAP_THRESHOLD) && defined(M_TRIM_THRESHOLD)
  // glibc serves a block above its mmap threshold (adaptive, from 128 KiB) with a fresh mapping and
  // unmaps it on free, so a training step that frees its activations and allocates them again the
  // next step page-faults and zeroes them again every step: the kernel clearing pages was 33% of a
  // layout-resmodel step of 4 graphs x 4000 nodes x 32 configs. Blocks up to 32 MiB (glibc's largest
  // threshold) now stay in the heap, which is trimmed only past 512 MiB free: that step went from 1213
  // to 2534 configs/s, tile-earlyjoin-sage (8 kernels x 16 configs) from 9887 to 11747 (2-core
  // development machine, 2026-11-24; docs/benchmarks.md). The library leaves malloc alone: this is the
  // CLI's choice for its own process.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
  try {  // (the command table and the help are built before a command's own errors are caught)
    const std::vector<Command> commands = {demo_command(),  train_command(),     eval_command(),    predict_command(),
                                           pass_command(),  score_command(),     models_command(),  plot_command(),
                                           synth_command(), planetoid_command(), inspect_command(), bench_command(),
                                           info_command()};
    // Under mpirun every rank runs the command; one that fails ends the job (the others would wait in
    // their next collective for it), with its own message already printed.
    gnn::dist::init(&argc, &argv);
    gnn::install_interrupt_handlers();  // SIGINT, SIGTERM, SIGHUP, SIGXCPU leave no temporary file behind
    const int rc = run(commands, argc, argv);
    if (rc != 0 && gnn::dist::distributed()) gnn::dist::abort(rc);
    gnn::dist::finalize();
    return rc;
  } catch (const std::bad_alloc&) {
    print_out_of_memory("gnn: ");
    if (gnn::dist::distributed()) gnn::dist::abort(1);  // (as run's own failures: the other ranks would wait)
    return 1;
  }
}
