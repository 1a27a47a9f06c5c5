"""gnn's CPU kernels against PyTorch (and PyTorch Geometric) on the same graph, same machine, same run.

    python3 bench/peers/kernels.py [--gnn build/bin/gnn] [--repeat 20] [--only sage] [--rounds 5]

For each shape, `gnn bench kernel ... --save-graph` times gnn and writes the graph it used; this script
loads that graph and times the peers on it: medians over repeated runs after warm-up, torch using the
same number of threads as gnn (all cores). Python and PyTorch serve the comparison only.
"""
import argparse
import statistics
import tempfile
import time

import numpy as np
import torch
from timing import gnn_bench, median_ms


def gnn(args, *cli):
    # torch's OpenMP / MKL worker threads keep spinning for a while after its last parallel op; gnn run
    # right away shares the 2 cores with them (gemm 160000x128x128 measured 45 ms instead of 31 ms).
    time.sleep(1.0)
    return gnn_bench(args, *cli)


def load_graph(path):
    z = np.load(path)
    ei = torch.from_numpy(z["edge_index"])
    return int(z["num_nodes"][0]), ei[:, 0].contiguous(), ei[:, 1].contiguous()


def _csr(n, dst, src, values):
    order = torch.argsort(dst * n + src)
    crow = torch.zeros(n + 1, dtype=torch.int64)
    crow[1:] = torch.cumsum(torch.bincount(dst, minlength=n), 0)
    return crow, src[order], values[order]


def spmm_mean(args, n, e, f, c):
    with tempfile.NamedTemporaryFile(suffix=".npz") as tmp:
        ours = gnn(args, "spmm-mean", "--nodes", str(n), "--edges", str(e), "--features", str(f), "--configs", str(c),
                   "--save-graph", tmp.name)
        n, dst, src = load_graph(tmp.name)
    width = f * c
    x = torch.randn(n, width)
    deg = torch.bincount(dst, minlength=n).clamp(min=1).float()
    # Two ways to build the matrix give different torch kernels (8x apart here): time both, keep the faster.
    a_coo = torch.sparse_coo_tensor(torch.stack([dst, src]), 1.0 / deg[dst], (n, n)).coalesce()
    a_csr = a_coo.to_sparse_csr()
    a_csr32 = torch.sparse_csr_tensor(*_csr(n, dst, src, 1.0 / deg[dst]), size=(n, n))
    sparse = {"torch.sparse.mm (coalesced COO -> CSR)": lambda: torch.sparse.mm(a_csr, x),
              "torch.sparse.mm (CSR built directly)": lambda: torch.sparse.mm(a_csr32, x),
              "torch.sparse.mm (COO)": lambda: torch.sparse.mm(a_coo, x)}
    peers = dict(sparse)
    out = torch.empty(n, width)
    peers["index_add_ mean"] = lambda: out.zero_().index_add_(0, dst, x[src]).div_(deg[:, None])
    try:
        from torch_geometric.utils import scatter
        peers["PyG scatter(reduce='mean')"] = lambda: scatter(x[src], dst, 0, dim_size=n, reduce="mean")
    except ImportError:
        pass
    times = {k: median_ms(v, args.repeat) for k, v in peers.items()}
    best_name = min(times, key=times.get)
    sp_name = min(sparse, key=times.get)
    best, sp = times[best_name], times[sp_name]
    print(f"spmm-mean N={n} E={e} F={f} C={c}: gnn {ours['median_ms']:.3f} ms ({ours['gbps']:.1f} GB/s) | "
          f"{sp_name} {sp:.3f} ms -> {sp / ours['median_ms']:.2f}x | fastest peer {best_name} {best:.3f} ms -> "
          f"{best / ours['median_ms']:.2f}x")


def gemm(args, m, f):
    """The best BLAS reachable here: torch.mm and numpy's matmul (OpenBLAS), whichever is faster."""
    ours = gnn(args, "gemm", "--nodes", str(m), "--features", str(f))
    a, b = torch.randn(m, f), torch.randn(f, f)
    an, bn, cn = a.numpy(), b.numpy(), np.empty((m, f), np.float32)
    t = {"torch.mm": median_ms(lambda: torch.mm(a, b), args.repeat),
         "numpy (OpenBLAS)": median_ms(lambda: np.matmul(an, bn, out=cn), args.repeat)}
    best = min(t, key=t.get)
    flops = 2 * m * f * f
    print(f"gemm {m}x{f}x{f}: gnn {ours['median_ms']:.3f} ms ({ours['gflops']:.1f} GFLOP/s) | " +
          " | ".join(f"{k} {v:.3f} ms ({flops / v / 1e6:.1f} GFLOP/s)" for k, v in t.items()) +
          f" -> gnn reaches {100 * t[best] / ours['median_ms']:.0f}% of {best}'s speed")


def sage(args, n, e, f, c=1):
    """SAGE layer forward + backward (input gradient included), relu, F -> F; with c > 1 configs batched
    node-major as [N, C, F] (gnn: the composed kernels; PyG: SAGEConv with node_dim 0).
    With --rounds R > 1, gnn and the peers are timed in turn R times (the VM's speed drifts by tens of
    percent over a minute) and the median of the per-round ratios is printed."""
    kinds = ("sage-layer", "sage-layer-fused") if c == 1 else ("sage-layer",)
    with tempfile.NamedTemporaryFile(suffix=".npz") as tmp:
        cli = ("--nodes", str(n), "--edges", str(e), "--features", str(f), "--configs", str(c), "--backward")
        gnn(args, kinds[0], *cli, "--save-graph", tmp.name)
        n, dst, src = load_graph(tmp.name)
    x = torch.randn(n, c, f, requires_grad=True)
    wl, wr, b = torch.randn(f, f, requires_grad=True), torch.randn(f, f, requires_grad=True), torch.randn(f, requires_grad=True)
    deg = torch.bincount(dst, minlength=n).clamp(min=1).float()[:, None, None]
    g = torch.randn(n, c, f)

    def plain_torch():  # the fastest hand-written PyTorch: gather, index_add_ mean, two matmuls
        agg = torch.zeros(n, c, f).index_add_(0, dst, x[src]) / deg
        out = torch.relu(agg @ wl + x @ wr + b)
        out.backward(g)

    peers = {"PyTorch (index_add_ + mm)": plain_torch}
    try:
        from torch_geometric.nn import SAGEConv
        conv = SAGEConv(f, f, aggr="mean")
        conv.node_dim = 0  # nodes along dim 0 of [N, C, F]
        ei = torch.stack([src, dst])

        def pyg():
            torch.relu(conv(x, ei)).backward(g)

        peers["PyG SAGEConv"] = pyg
    except ImportError:
        pass
    ratios = {k: [] for k in peers}
    for r in range(args.rounds):
        ours = {k: gnn(args, k, *cli)["median_ms"] for k in kinds}  # same seed: the same graph as saved
        times = {k: median_ms(v, args.repeat) for k, v in peers.items()}
        best = min(ours.values())
        for k, v in times.items():
            ratios[k].append(v / best)
        print(f"sage fwd+bwd N={n} E={e} F={f} C={c}" + (f" round {r + 1}/{args.rounds}" if args.rounds > 1 else "") +
              ": " + ", ".join(f"gnn {k} {ours[k]:.2f} ms" for k in kinds) +
              " | " + " | ".join(f"{k} {v:.2f} ms -> {v / best:.2f}x" for k, v in times.items()))
    if args.rounds > 1:
        print(f"sage fwd+bwd N={n} E={e} F={f} C={c}: median ratio over {args.rounds} rounds: " +
              " | ".join(f"{k} {statistics.median(v):.2f}x (min {min(v):.2f}, max {max(v):.2f})"
                         for k, v in ratios.items()))


def gat(args, n, e, f):
    """GAT layer forward + backward (dx and dW): 4 heads of F/4 concatenated, no self-loops, no bias."""
    with tempfile.NamedTemporaryFile(suffix=".npz") as tmp:
        ours = gnn(args, "gat-layer", "--nodes", str(n), "--edges", str(e), "--features", str(f), "--backward",
                   "--save-graph", tmp.name)
        n, dst, src = load_graph(tmp.name)
    try:
        from torch_geometric.nn import GATConv
    except ImportError:
        print(f"gat fwd+bwd N={n} E={e} F={f}: gnn {ours['median_ms']:.2f} ms | no PyTorch Geometric installed")
        return
    conv = GATConv(f, f // 4, heads=4, add_self_loops=False, bias=False)
    x = torch.randn(n, f, requires_grad=True)
    ei = torch.stack([src, dst])
    g = torch.randn(n, f)
    t = median_ms(lambda: conv(x, ei).backward(g), args.repeat)
    print(f"gat fwd+bwd N={n} E={e} F={f}: gnn {ours['median_ms']:.2f} ms | PyG GATConv {t:.2f} ms -> "
          f"{t / ours['median_ms']:.2f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gnn", default="build/bin/gnn")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--only", choices=("gemm", "spmm", "sage", "gat"), help="time one family of kernels")
    ap.add_argument("--rounds", type=int, default=1, help="SAGE: time gnn and the peers in turn this many times")
    args = ap.parse_args()
    if args.rounds < 1 or args.repeat < 20:  # (gnn bench kernel times at least 20 runs)
        ap.error(f"--rounds must be >= 1 and --repeat >= 20, got {args.rounds} and {args.repeat}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    want = lambda fam: args.only in (None, fam)
    if want("gemm"):
        for f in (64, 128, 256):
            gemm(args, 160_000, f)
    if want("spmm"):
        for n, e in ((10_000, 20_000), (100_000, 200_000)):
            for f, c in ((128, 1), (256, 1), (128, 16)):
                spmm_mean(args, n, e, f, c)
    if want("sage"):
        sage(args, 10_000, 20_000, 128)
        sage(args, 10_000, 20_000, 128, 16)
    if want("gat"):
        gat(args, 10_000, 20_000, 128)

if __name__ == "__main__":
    main()
