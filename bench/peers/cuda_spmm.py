"""gnn's CUDA SpMM against cuSPARSE (through gnn), torch.sparse.mm and PyG on the same graph and GPU.

    python3 bench/peers/cuda_spmm.py [--gnn build/bin/gnn] [--repeat 50]

For each shape, `gnn bench kernel spmm-mean --device cuda` times gnn's kernel and writes its graph;
`--spmm cusparse` times cuSPARSE's SpMM (CSR_ALG2, row-major) on the same CSR with values 1/deg; this
script loads the graph and times torch.sparse.mm (CSR) and PyG's scatter-mean on it, and measures the
device copy bandwidth (a tensor clone: read + write) as the floor. At small sizes a launch and its
latency, not bandwidth, set the time, so each shape also prints gnn's SpMM replayed as a CUDA graph
(`--cuda-graph`) beside a copy of as many bytes replayed the same way. All times are medians of CUDA-event
timings after warm-up. Python and PyTorch serve the comparison only.
"""
import argparse
import tempfile

import numpy as np
import torch
from timing import check_gpu, cuda_median_ms, gnn_bench


def gnn(args, *cli):
    return gnn_bench(args, *cli, "--device", "cuda")


def copy_gbps(args):
    x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # 256 MiB: far beyond L2
    ms = cuda_median_ms(lambda: x.clone(), args.repeat)
    return 2 * x.numel() / (ms * 1e-3) / 1e9


def graph_copy_ms(args, moved):
    """A device copy that reads and writes `moved` bytes in all, captured as a CUDA graph and timed per replay
    as `gnn bench --cuda-graph` times its step: the least a launch that moves those bytes takes."""
    x = torch.empty(int(moved) // 2, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y.copy_(x)  # warm-up off the capturing stream, as torch.cuda.graphs asks
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y.copy_(x)
    return cuda_median_ms(graph.replay, args.repeat)


def spmm_mean(args, n, e, f, c, floor):
    with tempfile.NamedTemporaryFile(suffix=".npz") as tmp:
        shape = ["--nodes", str(n), "--edges", str(e), "--features", str(f), "--configs", str(c)]
        ours = gnn(args, "spmm-mean", *shape, "--save-graph", tmp.name)
        cus = gnn(args, "spmm-mean", *shape, "--spmm", "cusparse")
        z = np.load(tmp.name)
    ei = torch.from_numpy(z["edge_index"]).cuda()
    dst, src = ei[:, 0].contiguous(), ei[:, 1].contiguous()
    width = f * c
    x = torch.randn(n, width, device="cuda")
    deg = torch.bincount(dst, minlength=n).clamp(min=1).float()
    a = torch.sparse_coo_tensor(torch.stack([dst, src]), 1.0 / deg[dst], (n, n)).coalesce().to_sparse_csr()
    peers = {"torch.sparse.mm (CSR)": lambda: torch.sparse.mm(a, x)}
    try:
        from torch_geometric.utils import scatter
        peers["PyG scatter(reduce='mean')"] = lambda: scatter(x[src], dst, 0, dim_size=n, reduce="mean")
    except ImportError:
        pass
    times = {k: cuda_median_ms(v, args.repeat) for k, v in peers.items()}
    t = ours["median_ms"]
    replayed = gnn(args, "spmm-mean", *shape, "--cuda-graph")["median_ms"]
    same = graph_copy_ms(args, ours["gbps"] * 1e9 * t * 1e-3)
    print(f"spmm-mean N={n} E={e} F={f} C={c}: gnn {t:.4f} ms, {ours['gbps']:.0f} GB/s = "
          f"{100 * ours['gbps'] / floor:.0f}% of copy | "
          f"as CUDA graphs: gnn {replayed:.4f} ms, a copy of as many bytes {same:.4f} ms | cuSPARSE {cus['median_ms']:.4f} ms -> {cus['median_ms'] / t:.2f}x | " +
          " | ".join(f"{k} {v:.4f} ms -> {v / t:.2f}x" for k, v in times.items()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gnn", default="build/bin/gnn")
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    check_gpu(ap, args)
    floor = copy_gbps(args)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}: device copy {floor:.0f} GB/s (clone, read + write)")
    for n, e in ((10_000, 20_000), (100_000, 200_000), (1_000_000, 2_000_000)):
        for f, c in ((128, 1), (256, 1), (128, 16)):
            if n * f * c > 400_000_000:
                continue
            spmm_mean(args, n, e, f, c, floor)


if __name__ == "__main__":
    main()
