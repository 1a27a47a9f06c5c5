#!/usr/bin/env python3
"""The layout-resmodel training step written the way a PyTorch (or PyG) user would, to time against
`gnn train --model layout-resmodel` on the same files (docs/benchmarks.md, "Layout training step").

The model is gnn's layout-resmodel (apps/train/recipes/layout_resmodel.cpp; the official tpu_graphs
ResModel): [opcode embedding (32) | node features | layout config (18, zeros off the configurable
nodes)] per node and config -> MLP [32, 32] -> 2 x (x + leaky_relu(A_hat (x W) + b)) with
A_hat = D^-1/2 (A + A^T + I) D^-1/2 -> [mean pool | l2norm(sum pool) | l2norm(sum over configurable
nodes)] -> MLP [32, 1]; ListMLE over the configs of the graph; Adam 1e-3. One graph and C sampled
configs per step, the whole graph (no segment), as `gnn train --batch-graphs 1 --segment 0`.

  --impl torch   configs as x [N, C, F]: one torch.sparse.mm per layer on the [N, C*F] view
  --impl pyg     PyG message passing: SimpleConv (sum of edge_weight * x_j) on the [N, C*F] view, with
                 the edge_index and gcn_norm weights of A + A^T + I (the scatter path PyG layers take)

Feature preprocessing (gnn's "official": drop constant columns, min-max scale to [0, 1] with the
training files' ranges) and the normalised adjacency are computed once per graph before timing, as
gnn caches its prepared graphs; each timed step samples the configs, assembles the inputs, runs the
forward, the loss, the backward and the optimiser step.

Prints one JSON line: impl, nodes, configs, steps, configs_per_s (configs over the median step after
the first), configs_per_s_all (over every step, the first included), step_ms_median,
peak_rss_mb (the process's, from getrusage: importing torch alone takes hundreds of MB) and step_mb
(that peak less the resident memory just before the first step: what the steps added).
With --device cuda the model, the graph and each step's inputs live on the GPU (configs and runtimes
sampled on the host and copied up each step, as gnn does), each step ends with torch.cuda.synchronize()
so its time is the device's too, and step_mb is torch.cuda.max_memory_allocated() over the steps in
MB of 1e6 bytes, as gnn's peak_device_mb (the model, the graph and Adam's state included, as in gnn's).
Usage: layout_step.py --data DIR --configs C [--steps S] [--threads T] [--impl torch|pyg] [--seed S]
                      [--device cpu|cuda]
"""
import argparse
import glob
import json
import os
import resource
import statistics
import sys
import time

import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import rss_mb  # noqa: E402

try:
    import torch
except ImportError:
    sys.exit("layout_step.py needs PyTorch (pip install torch)")

OPCODES = 121  # the opcode ids gnn embeds (io/tpugraphs.h kOpcodes)


def load(data):
    files = sorted(glob.glob(os.path.join(data, "**", "train", "*.npz"), recursive=True))
    if not files:
        sys.exit(f"layout_step.py: no train/*.npz under {data}")
    z = dict(np.load(files[0]))
    return files[0], z


def official_transform(x):
    keep = x.max(0) > x.min(0)
    x = x[:, keep]
    lo, hi = x.min(0), x.max(0)
    return ((x - lo) / (hi - lo)).astype(np.float32)


def gcn_adjacency(edges, n):
    """D^-1/2 (A + A^T + I) D^-1/2 as a torch sparse CSR matrix; every edge once per direction."""
    u, v = edges[:, 0], edges[:, 1]
    keep = u != v
    src = np.concatenate([v[keep], u[keep], np.arange(n)])
    dst = np.concatenate([u[keep], v[keep], np.arange(n)])
    deg = np.bincount(dst, minlength=n).astype(np.float64)
    w = (1.0 / np.sqrt(deg[src] * deg[dst])).astype(np.float32)
    a = torch.sparse_coo_tensor(torch.from_numpy(np.stack([dst, src])), torch.from_numpy(w), (n, n)).coalesce()
    return a.to_sparse_csr(), (torch.from_numpy(src), torch.from_numpy(dst), torch.from_numpy(w))


class ResModel(torch.nn.Module):
    def __init__(self, features, hidden=32, embed=32, layers=2):
        super().__init__()
        self.emb = torch.nn.Embedding(OPCODES, embed)
        act = torch.nn.LeakyReLU(0.01)
        self.prenet = torch.nn.Sequential(torch.nn.Linear(embed + features + 18, hidden), act,
                                          torch.nn.Linear(hidden, hidden), act)
        self.lins = torch.nn.ModuleList([torch.nn.Linear(hidden, hidden, bias=False) for _ in range(layers)])
        self.biases = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(hidden)) for _ in range(layers)])
        self.postnet = torch.nn.Sequential(torch.nn.Linear(3 * hidden, hidden), act, torch.nn.Linear(hidden, 1))

    def readout(self, x, cfg_ids):  # x [N, C, H]
        mean = x.mean(0)
        total = torch.nn.functional.normalize(x.sum(0), dim=-1)
        conf = torch.nn.functional.normalize(x[cfg_ids].sum(0), dim=-1)
        return self.postnet(torch.cat([mean, total, conf], -1)).squeeze(-1)

    def inputs(self, feat, opcode, cfg_ids, cfg):  # cfg [C, K, 18] -> [N, C, E+F+18]
        n, c = feat.shape[0], cfg.shape[0]
        h = torch.cat([self.emb(opcode), feat], -1)
        xc = torch.zeros(n, c, 18, device=feat.device)
        xc[cfg_ids] = cfg.transpose(0, 1)
        return torch.cat([h.unsqueeze(1).expand(n, c, h.shape[1]), xc], -1)

    def forward_torch(self, feat, opcode, cfg_ids, cfg, a):
        x = self.prenet(self.inputs(feat, opcode, cfg_ids, cfg))
        n, c, f = x.shape
        for lin, b in zip(self.lins, self.biases):
            agg = torch.sparse.mm(a, lin(x).reshape(n, c * f)).reshape(n, c, f)
            x = x + torch.nn.functional.leaky_relu(agg + b, 0.01)
        return self.readout(x, cfg_ids)

    def forward_pyg(self, feat, opcode, cfg_ids, cfg, conv, edge_index, edge_weight):
        x = self.prenet(self.inputs(feat, opcode, cfg_ids, cfg))  # [N, C, F]
        n, c, f = x.shape
        for lin, b in zip(self.lins, self.biases):
            agg = conv(lin(x).reshape(n, c * f), edge_index, edge_weight).reshape(n, c, f)
            x = x + torch.nn.functional.leaky_relu(agg + b, 0.01)
        return self.readout(x, cfg_ids)


def list_mle(pred, runtime):  # lower runtime ranks first
    order = torch.argsort(runtime)
    s = pred[order] * -1.0  # gnn scores: lower = faster
    return (torch.logcumsumexp(s.flip(0), 0).flip(0) - s).mean()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--configs", type=int, default=16)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--impl", choices=["torch", "pyg"], default="torch")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    a = p.parse_args()
    # (--steps >= 2: the rate is the median over the steps after the first)
    for flag, least in (("configs", 2), ("steps", 2), ("threads", 1)):
        if getattr(a, flag) < least:
            p.error(f"--{flag} must be >= {least}, got {getattr(a, flag)}")
    if a.seed < 0:
        p.error(f"--seed must be >= 0 (numpy's seeds), got {a.seed}")
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("layout_step.py --device cuda: torch sees no GPU")
    dev = torch.device(a.device)
    warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    path, z = load(a.data)
    feat = torch.from_numpy(official_transform(z["node_feat"].astype(np.float32)))
    opcode = torch.from_numpy(z["node_opcode"].astype(np.int64))
    cfg_ids = torch.from_numpy(z["node_config_ids"].astype(np.int64))
    cfg_all = z["node_config_feat"].astype(np.float32)
    runtime_all = z["config_runtime"].astype(np.float64)
    n = feat.shape[0]
    a_csr, (src, dst, w) = gcn_adjacency(z["edge_index"], n)
    feat, opcode, cfg_ids, a_csr, src, dst, w = (t.to(dev) for t in (feat, opcode, cfg_ids, a_csr, src, dst, w))
    model = ResModel(feat.shape[1]).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    conv, edge_index = None, None
    if a.impl == "pyg":
        try:
            from torch_geometric.nn import SimpleConv
        except ImportError:
            sys.exit("layout_step.py --impl pyg needs PyTorch Geometric (pip install torch_geometric)")
        conv = SimpleConv(aggr="sum")
        edge_index = torch.stack([src, dst])  # PyG: row 0 the source, row 1 the target
    before_mb = rss_mb()
    if a.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(a.steps):
        t0 = time.perf_counter()
        pick = rng.choice(cfg_all.shape[0], size=min(a.configs, cfg_all.shape[0]), replace=False)
        cfg = torch.from_numpy(cfg_all[pick]).to(dev)
        runtime = torch.from_numpy(runtime_all[pick]).to(dev)
        opt.zero_grad()
        if a.impl == "torch":
            pred = model.forward_torch(feat, opcode, cfg_ids, cfg, a_csr)
        else:
            pred = model.forward_pyg(feat, opcode, cfg_ids, cfg, conv, edge_index, w)
        loss = list_mle(pred, runtime)
        loss.backward()
        opt.step()
        if a.device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    c = min(a.configs, cfg_all.shape[0])
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    step_mb = torch.cuda.max_memory_allocated() / 1e6 if a.device == "cuda" else max(0.0, peak_mb - before_mb)
    print(json.dumps({"impl": a.impl, "device": a.device, "file": path, "nodes": n, "configs": c, "steps": a.steps,
                      "configs_per_s_all": c * a.steps / sum(times),
                      "step_ms_median": 1000 * statistics.median(times[1:] or times),
                      "configs_per_s": c / statistics.median(times[1:] or times),
                      "peak_rss_mb": peak_mb, "step_mb": step_mb}))


if __name__ == "__main__":
    main()
