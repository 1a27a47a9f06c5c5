"""gnn's SAGE and GAT layers on the GPU against PyG's, forward + backward, on the same graph and GPU.

    python3 bench/peers/cuda_layers.py [--gnn build/bin/gnn] [--repeat 50] [--rounds 3]

`gnn bench kernel sage-layer|sage-layer-fused|gat-layer --device cuda --backward` times gnn's nn layers
through its autograd (SAGEConv composed or fused: mean aggregation, root weight, bias, relu; GATConv: 4 heads of F/4
concatenated, no self-loops, no bias), the backward seeded with a fixed upstream gradient into dx and
every weight; it writes its graph, and this script times PyG's SAGEConv / GATConv on that graph the
same way (y.backward(g), x requiring grad). Both sides are medians of CUDA-event timings after warm-up;
with --rounds R they are timed in turn R times and the median of the per-round ratios is printed.
Each round also times gnn's step captured once and replayed as a CUDA graph (`--cuda-graph`), beside
the same PyG step launched eagerly (reported, not part of the ratio).
Python, PyTorch and PyG serve the comparison only.
"""
import subprocess
import tempfile

import numpy as np
import torch
from timing import cuda_median_ms, gnn_bench, gpu_pyg_args, ratio_rounds


def gnn(args, *cli):
    return gnn_bench(args, *cli, "--device", "cuda", "--backward")


def pyg_step(kind, n, f, edge_index_npz):
    """PyG's layer for gnn's `kind` on the graph gnn saved (its edge_index: [E, 2], target then source),
    forward + backward as gnn's step: y.backward(g) with x requiring grad."""
    ei = torch.from_numpy(edge_index_npz).cuda()
    edge_index = torch.stack([ei[:, 1], ei[:, 0]])  # PyG: row 0 source, row 1 target
    x = torch.randn(n, f, device="cuda", requires_grad=True)
    g = torch.randn(n, f, device="cuda")
    if kind.startswith("sage-layer"):
        from torch_geometric.nn import SAGEConv
        conv = SAGEConv(f, f, aggr="mean").cuda()
        return lambda: torch.relu(conv(x, edge_index)).backward(g)
    from torch_geometric.nn import GATConv
    conv = GATConv(f, f // 4, heads=4, add_self_loops=False, bias=False).cuda()
    return lambda: conv(x, edge_index).backward(g)


def layer(args, kind, n, e, f):
    shape = ["--nodes", str(n), "--edges", str(e), "--features", str(f)]
    with tempfile.NamedTemporaryFile(suffix=".npz") as tmp:
        gnn(args, kind, *shape, "--save-graph", tmp.name)
        step = pyg_step(kind, n, f, np.load(tmp.name)["edge_index"])

    def run_round():
        ours = gnn(args, kind, *shape)["median_ms"]
        try:
            graph = f"{gnn(args, kind, *shape, '--cuda-graph')['median_ms']:.3f} ms"
        except subprocess.CalledProcessError as err:
            graph = "failed: " + err.stderr.strip()
        peer = cuda_median_ms(step, args.repeat)
        return ours, peer, (f"gnn {ours:.3f} ms | PyG {peer:.3f} ms -> {peer / ours:.2f}x | "
                            f"gnn as a CUDA graph {graph}")
    ratio_rounds(f"{kind} fwd+bwd N={n} E={e} F={f}", "PyG", args.rounds, run_round)


def main():
    args = gpu_pyg_args()
    for kind in ("sage-layer", "sage-layer-fused", "gat-layer"):
        for n, e, f in ((10_000, 20_000, 128), (100_000, 200_000, 128), (100_000, 1_000_000, 256)):
            layer(args, kind, n, e, f)


if __name__ == "__main__":
    main()
