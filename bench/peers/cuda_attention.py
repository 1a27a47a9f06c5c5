"""gnn's graph self-attention on the GPU against PyTorch's, forward + backward, on the same shapes and GPU.

    python3 bench/peers/cuda_attention.py [--gnn build/bin/gnn] [--repeat 50] [--rounds 3]

`gnn bench kernel graph-attention --device cuda --backward` times ag::graph_attention: N nodes split into
graphs of S, 4 heads of F/4, softmax attention within each graph, from given q, k, v [N, F], the backward
seeded with a fixed upstream gradient into dq, dk and dv. Heads of at most 64 columns run gnn's fused
kernels (one launch forward, two backward, whatever the number of graphs); wider heads run cuBLAS per graph
and head. The peer is what a PyG model with global attention (GraphGPS) does: to_dense_batch pads q, k
and v to [B, S, F], torch's scaled_dot_product_attention runs with the padding masked out of the keys,
and the valid rows are gathered back; y.backward(g) as gnn's. Both sides are medians of CUDA-event
timings after warm-up; with --rounds R they are timed in turn R times and the median of the per-round
ratios is printed. Python, PyTorch and PyG serve the comparison only.
"""
import torch
import torch.nn.functional as F
from timing import cuda_median_ms, gnn_bench, gpu_pyg_args, ratio_rounds


def gnn(args, n, s, f):
    return gnn_bench(args, "graph-attention", "--device", "cuda", "--backward", "--nodes", str(n), "--graph-nodes",
                     str(s), "--features", str(f))


def peer_step(n, s, f, heads=4):
    from torch_geometric.utils import to_dense_batch
    b = (n + s - 1) // s
    batch = torch.arange(n, device="cuda") // s
    q, k, v = (torch.randn(n, f, device="cuda", requires_grad=True) for _ in range(3))
    g = torch.randn(n, f, device="cuda")
    d = f // heads

    def step():
        dense = []
        for x in (q, k, v):
            xd, mask = to_dense_batch(x, batch, batch_size=b, max_num_nodes=s)
            dense.append(xd.view(b, s, heads, d).transpose(1, 2))
        y = F.scaled_dot_product_attention(*dense, attn_mask=mask[:, None, None, :])
        y.transpose(1, 2).reshape(b, s, f)[mask].backward(g)
    return step


def compare(args, n, s, f):
    step = peer_step(n, s, f)

    def run_round():
        res = gnn(args, n, s, f)
        ours = res["median_ms"]
        peer = cuda_median_ms(step, args.repeat)
        return ours, peer, (f"gnn {ours:.3f} ms ({res['gflops']:.0f} GFLOP/s) | torch SDPA {peer:.3f} ms -> "
                            f"{peer / ours:.2f}x")
    ratio_rounds(f"graph-attention fwd+bwd N={n} S={s} F={f} (D={f // 4})", "torch", args.rounds, run_round)


def main():
    args = gpu_pyg_args()
    # Many small graphs (launch-bound per graph), TpuGraphs tile sizes, larger graphs; D = 32, 64, and 128
    # (the last beyond the fused kernels: cuBLAS per graph and head)
    for n, s, f in ((10_000, 64, 128), (50_000, 200, 128), (50_000, 1000, 256), (20_000, 1000, 512)):
        compare(args, n, s, f)


if __name__ == "__main__":
    main()
