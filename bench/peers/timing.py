"""The timing rule every peer script uses: warm-up runs, then the median of repeated runs, in ms; and how
the scripts run gnn's side."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def median_ms(fn, repeat, warmup=3):
    for _ in range(warmup):
        fn()
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(runs)


def cuda_median_ms(fn, repeat, warmup=3):
    """GPU work timed as gnn times it: CUDA events around each run on the current stream."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        runs.append(start.elapsed_time(end))
    return statistics.median(runs)


def ratio_rounds(label, peer_name, rounds, run_round):
    """gnn and a peer timed in turn `rounds` times: run_round() returns (gnn_ms, peer_ms, line) and each round
    prints `label round i/R: line`; then the median of the per-round ratios peer/gnn."""
    if rounds < 1:
        sys.exit(f"--rounds must be >= 1, got {rounds}")
    ratios = []
    for r in range(rounds):
        ours, peer, line = run_round()
        ratios.append(peer / ours)
        print(f"{label} round {r + 1}/{rounds}: {line}", flush=True)
    print(f"{label}: median ratio {peer_name}/gnn {statistics.median(ratios):.2f}x "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f})", flush=True)


def gnn_bench(args, *cli):
    """`gnn bench kernel CLI... --json --repeat args.repeat` with the binary args.gnn: its JSON line, parsed."""
    cmd = [args.gnn, "bench", "kernel", *cli, "--json", "--repeat", str(args.repeat)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:  # (no such binary: --gnn)
        sys.exit(f"--gnn {args.gnn}: {e}")
    if r.returncode != 0:  # gnn's own reason, not a CalledProcessError
        sys.exit(f"{' '.join(cmd)} failed (exit {r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def gpu_pyg_args():
    """The GPU-against-PyG scripts' flags (--gnn, --repeat, --rounds), parsed, after printing the versions
    and the GPU the run is on."""
    import torch
    import torch_geometric
    ap = argparse.ArgumentParser()
    ap.add_argument("--gnn", default="build/bin/gnn")
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    check_gpu(ap, args)
    print(f"torch {torch.__version__}, PyG {torch_geometric.__version__}, {torch.cuda.get_device_name()}")
    return args


def check_gpu(ap, args):
    """The GPU scripts' arguments checked, and a GPU asked for, before any work: one line each, no traceback."""
    import torch
    for flag in ("repeat", "rounds"):
        if getattr(args, flag, 1) < 1:
            ap.error(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    if not torch.cuda.is_available():
        sys.exit(f"{os.path.basename(sys.argv[0])}: torch sees no CUDA device (a GPU peer: run it on a machine "
                 "with one, as scripts/gpu_check.sh does)")


def rss_mb():
    """The process's resident memory now, in MiB (VmRSS)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0
