"""Where one forward + backward step of a layer goes on the GPU, kernel by kernel: gnn's beside PyG's on the
same graph and GPU.

    python3 bench/peers/cuda_profile.py [--gnn build/bin/gnn] [--kind sage-layer-fused]
        [--nodes 100000] [--edges 200000] [--features 128] [--ncu ncu]

Both sides run under Nsight Compute (`ncu --metrics gpu__time_duration.sum`, clocks and caches left as
they are): gnn as `gnn bench kernel KIND --device cuda --backward` (3 warm-up steps and 20 timed ones),
PyG as cuda_layers.py builds it, for as many steps. Kernels are grouped by name; "per step" is a group's
launch count over the step count, rounded (kernels that run once, at set-up, drop out), and its time is
the median launch's. ncu runs kernels one at a time, so the kernel total leaves out launch gaps and any
overlap; the CUDA-event time of the same step, taken without ncu, is printed beside it. Python, PyTorch
and PyG serve the comparison only.
"""
import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict

import numpy as np
from timing import check_gpu, cuda_median_ms

STEPS = 23  # gnn bench: 3 warm-up runs + --repeat 20
UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def ncu_kernels(args, cmd):
    """[(kernel, launches per step, median us)] of `cmd` run under ncu, the costliest first."""
    with tempfile.NamedTemporaryFile(suffix=".csv") as log:
        subprocess.run([args.ncu, "--csv", "--page", "raw", "--metrics", "gpu__time_duration.sum",
                        "--print-kernel-base", "function", "--clock-control", "none", "--cache-control", "none",
                        "--log-file", log.name, *cmd], check=True, capture_output=True, text=True)
        with open(log.name, newline="") as fh:
            rows = list(csv.reader(fh))
    start = next(i for i, r in enumerate(rows) if r[:1] == ["ID"])
    head, units = rows[start], rows[start + 1]
    name, dur = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    scale = UNITS[units[dur]]
    times = defaultdict(list)
    for r in rows[start + 2:]:
        if len(r) > dur and r[dur]:
            times[r[name]].append(float(r[dur].replace(",", "")) * scale)
    table = [(k, round(len(v) / STEPS), statistics.median(v)) for k, v in times.items()]
    return sorted((t for t in table if t[1] > 0), key=lambda t: -t[1] * t[2])


def report(label, table, event_ms):
    total = sum(per * us for _, per, us in table)
    print(f"{label}: {sum(t[1] for t in table)} launches per step, {total:.1f} us of kernels "
          f"(CUDA-event step without ncu: {1e3 * event_ms:.1f} us)")
    print("    us/step  launches  us each  kernel")
    for k, per, us in table:
        print(f"   {per * us:8.1f}  {per:8d}  {us:7.1f}  {k[:90]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gnn", default="build/bin/gnn")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--kind", default="sage-layer-fused", choices=("sage-layer", "sage-layer-fused", "gat-layer"))
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--edges", type=int, default=200_000)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=50, help="CUDA-event runs for the step times")
    ap.add_argument("--pyg-graph", help=argparse.SUPPRESS)  # internal: run PyG's steps on this graph, under ncu
    args = ap.parse_args()
    for flag in ("nodes", "edges", "features"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    check_gpu(ap, args)
    from cuda_layers import gnn, pyg_step
    if args.pyg_graph:
        step = pyg_step(args.kind, args.nodes, args.features, np.load(args.pyg_graph)["edge_index"])
        for _ in range(STEPS):
            step()
        import torch
        torch.cuda.synchronize()
        return
    shape = ["--nodes", str(args.nodes), "--edges", str(args.edges), "--features", str(args.features)]
    bench = [args.gnn, "bench", "kernel", args.kind, "--device", "cuda", "--backward", *shape, "--repeat", "20"]
    with tempfile.NamedTemporaryFile(suffix=".npz") as graph:
        ours_ms = gnn(args, args.kind, *shape, "--save-graph", graph.name)
        peer_ms = cuda_median_ms(pyg_step(args.kind, args.nodes, args.features, np.load(graph.name)["edge_index"]),
                                 args.repeat)
        ours = ncu_kernels(args, bench)
        peer = ncu_kernels(args, [sys.executable, __file__, "--kind", args.kind, *shape, "--pyg-graph", graph.name])
    what = f"{args.kind} fwd+bwd N={args.nodes} E={args.edges} F={args.features}"
    report(f"gnn {what}", ours, ours_ms["median_ms"])
    report(f"PyG {what}", peer, peer_ms)


if __name__ == "__main__":
    main()
