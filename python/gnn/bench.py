"""gnn's kernels and layers against PyTorch Geometric and plain torch, on a graph you give.

    python -m gnn.bench [--edge-index FILE.npz | --planetoid FILE.npz | --pyg CLASS:NAME --root DIR]
                        [--nodes N --edges E] [--features F] [--hidden H] [--heads K] [--threads T]
                        [--repeat R] [--only spmm,sage,...] [--device cpu|cuda] [--overhead] [--json]

The graph: an npz with `edge_index` ([2, E] or [E, 2], optional `num_nodes`); the project's Planetoid
files (../shared/data/planetoid/cora_planetoid.npz, made undirected as PyG's Planetoid); a PyG dataset
class already on disk (`--pyg Planetoid:Cora --root ~/data`; PyG may try to download what is missing);
or, by default, a random graph. Every case runs forward + backward with the same inputs and, for layers,
the same parameters (PyG's state_dict loaded into gnn's layer), on `--threads` threads for gnn and torch
alike; times are medians of --repeat runs after 3 warm-up runs. `--device cuda` runs both sides on
torch CUDA tensors (gnn's kernels on torch's current stream), each run ended by a synchronisation. A header names the graph and the
sizes, then one line per case and peer:

    case  gnn ms  peer ms  peer  peer/gnn

`--overhead` times what a Python call costs around the C++ kernel on a small graph (N = 1000).
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time

import numpy as np

import gnn

try:
    import torch
except ImportError:  # the benchmark says so and stops; the module itself does not need torch
    torch = None


def median_ms(fn, repeat: int, warmup: int = 3, sync=lambda: None) -> float:
    for _ in range(warmup):
        fn()
    sync()
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        runs.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(runs)


def _npz(flag, path, keys):
    """The npz at path, holding keys; a one-line exit naming the flag otherwise."""
    try:
        z = np.load(path, allow_pickle=False)
    except Exception as e:  # (missing, empty, not a zip, a pickled array)
        sys.exit(f"--{flag} {path}: cannot be read as npz ({type(e).__name__}: {e})")
    if not hasattr(z, "files"):
        sys.exit(f"--{flag} {path}: one .npy array, not an npz of named arrays")
    missing = [k for k in keys if k not in z.files]
    if missing:
        sys.exit(f"--{flag} {path}: no {', '.join(missing)} array (it holds {', '.join(z.files) or 'none'})")
    return z


def load_edges(args):
    """(edge_index int64 [2, E], num_nodes, description)."""
    if args.edge_index:
        path = args.edge_index
        z = _npz("edge-index", path, ["edge_index"])
        ei = z["edge_index"]
        # (floats that are whole numbers, as np.loadtxt of an edge list gives, are ids too)
        whole = ei.dtype.kind in "iu" or (ei.dtype.kind == "f" and bool(np.all(np.isfinite(ei) & (ei == np.round(ei)))))
        if not whole or ei.ndim != 2 or 2 not in ei.shape:
            sys.exit(f"--edge-index {path}: edge_index must be whole numbers of shape [2, E] or [E, 2], got {ei.dtype} "
                     f"{list(ei.shape)}")
        ei = ei if ei.shape[0] == 2 else ei.T  # ([2, 2] is read as [2, E])
        if ei.size and ei.min() < 0:
            sys.exit(f"--edge-index {path}: edge_index holds a negative id ({ei.min()}); ids are >= 0")
        if ei.size and ei.max() > np.iinfo(np.int64).max:
            sys.exit(f"--edge-index {path}: edge_index holds an id past int64 ({ei.max()})")
        if "num_nodes" in z.files:
            nn = np.asarray(z["num_nodes"]).reshape(-1)
            if nn.size != 1 or nn.dtype.kind not in "iuf" or not (nn[0] >= 1 and nn[0] == np.round(nn[0])):
                sys.exit(f"--edge-index {path}: num_nodes must be one whole number >= 1, got {nn.tolist()!r}")
            n = int(nn[0])
        elif ei.size:
            n = int(ei.max()) + 1
        else:
            sys.exit(f"--edge-index {path}: no edges and no num_nodes: the graph has no size")
        if ei.size and ei.max() >= n:
            sys.exit(f"--edge-index {path}: edge_index names node {ei.max()}, and num_nodes is {n}")
        return np.ascontiguousarray(ei.astype(np.int64)), n, path
    if args.planetoid:
        path = args.planetoid
        z = _npz("planetoid", path, ["edge_index", "x_shape"])
        ei, shape = z["edge_index"], np.asarray(z["x_shape"]).reshape(-1)
        if ei.dtype.kind not in "iu" or ei.ndim != 2 or ei.shape[1] != 2:
            sys.exit(f"--planetoid {path}: edge_index must be integer ids of shape [E, 2], got {ei.dtype} "
                     f"{list(ei.shape)}")
        if not shape.size or shape.dtype.kind not in "iu" or shape[0] < 1:
            sys.exit(f"--planetoid {path}: x_shape must begin with the node count (an integer >= 1), got "
                     f"{shape.tolist()!r}")
        n = int(shape[0])
        if ei.size and (ei.min() < 0 or ei.max() >= n):
            sys.exit(f"--planetoid {path}: edge_index names node {ei.min() if ei.min() < 0 else ei.max()}, and "
                     f"x_shape says {n} nodes")
        ei = ei.astype(np.int64).T
        ei = np.concatenate([ei, ei[::-1]], 1)  # undirected, both directions, as PyG's Planetoid
        return np.ascontiguousarray(ei), n, path
    if args.pyg:
        import torch_geometric.datasets as ds
        cls, _, name = args.pyg.partition(":")
        c = getattr(ds, cls, None)
        if not isinstance(c, type) or cls.startswith("_"):
            sys.exit(f"--pyg {args.pyg}: torch_geometric.datasets has no dataset class {cls!r}")
        takes_root = "root" in inspect.signature(c).parameters  # (KarateClub and FakeDataset take none)
        if not takes_root and (name or args.root != "."):
            sys.exit(f"--pyg {args.pyg}: {cls} takes no root folder or name; give --pyg {cls} alone")
        try:  # (the name second, as the class's own second parameter: Planetoid's name, PPI's split)
            data = (c(args.root, name) if name else c(root=args.root) if takes_root else c())[0]
        except Exception as e:  # a missing name, a download that failed: said on one line
            sys.exit(f"--pyg {args.pyg} --root {args.root}: {type(e).__name__}: {e}")
        return data.edge_index.numpy().astype(np.int64), int(data.num_nodes), f"PyG {args.pyg}"
    rng = np.random.default_rng(args.seed)
    ei = rng.integers(0, args.nodes, size=(2, args.edges), dtype=np.int64)
    return ei, args.nodes, f"random graph, seed {args.seed}"


def fwd_bwd(fn, *tensors):
    def run():
        for t in tensors:
            t.grad = None
        out = fn()
        out.backward(torch.ones_like(out))
    return run


CASES = ("spmm-sum", "spmm-mean", "spmm-max", "sage layer", "gcn layer", "gin layer", "gat layer")  # (--only)


def cases(args, ei_np, n):
    """(case, gnn step, [(peer name, peer step), ...]) for each case asked for."""
    import gnn.torch as gt
    try:
        import torch_geometric.nn as pyg_nn
        from torch_geometric.utils import scatter as pyg_scatter
    except ImportError:
        pyg_nn = pyg_scatter = None
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    ei = torch.from_numpy(ei_np).to(dev)
    F, Hd, K = args.features, args.hidden, args.heads
    x = torch.randn(n, F).to(dev).requires_grad_()
    graph = gt.graph_of(ei, n)
    src, dst = ei[0], ei[1]
    out = []
    for reduce in ("sum", "mean", "max"):
        peers = [("torch index ops", fwd_bwd(lambda r=reduce: torch.zeros(n, F, device=dev).index_reduce_(
            0, dst, x[src], "amax" if r == "max" else r, include_self=False) if r != "sum" else
            torch.zeros(n, F, device=dev).index_add_(0, dst, x[src]), x))]
        if pyg_scatter is not None:
            peers.insert(0, ("PyG scatter", fwd_bwd(lambda r=reduce: pyg_scatter(x[src], dst, 0, n, r), x)))
        out.append((f"spmm-{reduce}", fwd_bwd(lambda r=reduce: gt.spmm(graph, x, r), x), peers))
    layers = {
        "sage": (lambda: gt.SAGEConv(F, Hd), lambda: pyg_nn.SAGEConv(F, Hd)),
        # (cached: PyG's layer then keeps its normalised graph across steps, as gnn's does)
        "gcn": (lambda: gt.GCNConv(F, Hd), lambda: pyg_nn.GCNConv(F, Hd, cached=True)),
        "gin": (lambda: gt.GINConv(torch.nn.Sequential(torch.nn.Linear(F, Hd), torch.nn.ReLU(), torch.nn.Linear(Hd, Hd))),
                lambda: pyg_nn.GINConv(torch.nn.Sequential(torch.nn.Linear(F, Hd), torch.nn.ReLU(),
                                                           torch.nn.Linear(Hd, Hd)))),
        "gat": (lambda: gt.GATConv(F, Hd // K, heads=K), lambda: pyg_nn.GATConv(F, Hd // K, heads=K)),
    }
    for name, (ours, theirs) in layers.items():
        m = ours().to(dev)
        peers = []
        if pyg_nn is not None:
            p = theirs().to(dev)
            p.load_state_dict(m.state_dict())
            peers.append(("PyG", fwd_bwd(lambda p=p: p(x, ei), x, *p.parameters())))
        label = f"{name} layer" + (f" ({K} heads)" if name == "gat" else "")
        out.append((label, fwd_bwd(lambda m=m: m(x, ei), x, *m.parameters()), peers))
    return [c for c in out if not args.only or any(c[0].startswith(o) for o in args.only)]


def overhead(args):
    """Per-call cost of gnn.spmm from Python, of the raw binding, and of the C++ call alone, N = 1000."""
    rng = np.random.default_rng(args.seed)
    n = 1000
    g = gnn.Graph(rng.integers(0, n, size=(2, 4 * n), dtype=np.int64), num_nodes=n)
    rows = []
    for F in (1, 16, 64):
        x = rng.standard_normal((n, F)).astype(np.float32)
        xt = torch.from_numpy(x.copy())
        out = np.empty((n, F), np.float32)
        calls = max(args.repeat * 100, 2000)
        cpp = min(gnn._gnn._time_spmm_forward(g, x, "sum", out, calls) for _ in range(5)) * 1e6

        def per_call(fn):
            fn()
            best = float("inf")
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                best = min(best, (time.perf_counter() - t0) / calls * 1e6)
            return best
        raw = per_call(lambda: gnn._gnn.spmm_forward(g, x, None, "sum", out, None))
        numpy_call = per_call(lambda: gnn.spmm(g, x, "sum"))
        torch_call = per_call(lambda: gnn.spmm(g, xt, "sum"))
        rows.append((F, cpp, raw, numpy_call, torch_call))
    print(f"Python call overhead, gnn.spmm sum, N={n} E={4 * n}, {gnn.num_threads()} threads, best of 5 loops (us per call)")
    print(f"{'F':>4} {'C++ call':>10} {'binding':>10} {'gnn.spmm numpy':>15} {'gnn.spmm torch':>15}"
          f" {'overhead numpy':>15} {'overhead torch':>15}")
    for F, cpp, raw, npc, tc in rows:
        print(f"{F:>4} {cpp:>10.2f} {raw:>10.2f} {npc:>15.2f} {tc:>15.2f} {npc - cpp:>15.2f} {tc - cpp:>15.2f}")
        if args.json:
            print(json.dumps({"name": "overhead", "features": F, "cpp_us": cpp, "binding_us": raw, "numpy_us": npc,
                              "torch_us": tc}))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gnn.bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--edge-index", metavar="FILE", help="npz with edge_index [2, E] or [E, 2] (and num_nodes)")
    src.add_argument("--planetoid", metavar="FILE", help="a Planetoid npz as ../shared/data/planetoid holds")
    src.add_argument("--pyg", metavar="CLASS:NAME", help="a torch_geometric.datasets class (and name) on disk")
    ap.add_argument("--root", default=".", help="--pyg: the dataset's root directory")
    ap.add_argument("--nodes", type=int, default=10000, help="random graph: nodes (default 10000)")
    ap.add_argument("--edges", type=int, default=100000, help="random graph: edges (default 100000)")
    ap.add_argument("--features", type=int, default=64, help="input features (default 64)")
    ap.add_argument("--hidden", type=int, default=64, help="layer outputs (default 64)")
    ap.add_argument("--heads", type=int, default=4, help="GAT heads (default 4; hidden is split among them)")
    ap.add_argument("--threads", type=int, default=2, help="threads for gnn and torch (default 2)")
    ap.add_argument("--repeat", type=int, default=20, help="timed runs per case (default 20)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", help="cases whose names start with these (a comma list)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where both sides run (default cpu)")
    ap.add_argument("--overhead", action="store_true", help="time the Python call around the kernel instead")
    ap.add_argument("--json", action="store_true", help="also one JSON object per case")
    args = ap.parse_args(argv)
    for flag in ("threads", "repeat", "nodes", "features", "hidden", "heads"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    if args.edges < 0:
        ap.error(f"--edges must be >= 0, got {args.edges}")
    if args.hidden % args.heads:
        ap.error(f"--hidden {args.hidden} must be a multiple of --heads {args.heads}")
    if args.only is not None:  # (an empty name would match every case: left out, and none at all refused)
        names = [o for o in args.only.split(",") if o]
        if not names:
            ap.error(f"--only {args.only!r}: no case named (the cases: {', '.join(CASES)})")
        args.only = names
    for o in args.only or ():
        if not any(c.startswith(o) for c in CASES):
            ap.error(f"--only {o}: no case starts with it (the cases: {', '.join(CASES)})")
    if torch is None:
        print("python -m gnn.bench needs torch (apt install python3-torch, or pip install torch)", file=sys.stderr)
        return 2
    if args.device == "cuda" and not (torch.cuda.is_available() and gnn.cuda.is_available()):
        print(f"--device cuda: torch sees {'a' if torch.cuda.is_available() else 'no'} CUDA device, gnn: "
              f"{gnn.cuda.status()}", file=sys.stderr)
        return 2
    if args.device == "cuda" and args.overhead:
        ap.error("--overhead times host calls; leave out --device cuda")
    if args.overhead and (args.edge_index or args.planetoid or args.pyg or args.only):
        ap.error("--overhead times its own small graph (N = 1000) and every call: no graph or --only")
    if args.root != "." and not args.pyg:
        ap.error("--root is the --pyg dataset's directory; give --pyg CLASS:NAME")
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    try:
        gnn.set_num_threads(args.threads)
    except (ValueError, gnn.Error) as e:
        ap.error(f"--threads {args.threads}: {e}")
    torch.set_num_threads(args.threads)
    if args.overhead:
        overhead(args)
        return 0
    ei, n, what = load_edges(args)
    if n > np.iinfo(np.int32).max:  # (gnn's graphs index their nodes in int32)
        sys.exit(f"{what}: {n} nodes; gnn's graphs hold at most 2^31 - 1")
    print(f"graph: {what}, N={n} E={ei.shape[1]}; F={args.features} hidden={args.hidden}; forward + backward; "
          f"{args.threads} threads; {args.device}; median of {args.repeat} runs after 3 warm-up runs; "
          f"torch {torch.__version__}")
    print(f"{'case':<22} {'gnn ms':>9} {'peer ms':>9}  {'peer':<16} {'peer/gnn':>8}")
    for name, ours, peers in cases(args, ei, n):
        t_ours = median_ms(ours, args.repeat, sync=sync)
        if not peers:
            print(f"{name:<22} {t_ours:>9.3f} {'-':>9}  {'(none installed)':<16} {'-':>8}")
        for peer, step in peers:
            time.sleep(0.2)  # torch's worker threads spin a while after their last parallel region
            t_peer = median_ms(step, args.repeat, sync=sync)
            print(f"{name:<22} {t_ours:>9.3f} {t_peer:>9.3f}  {peer:<16} {t_peer / t_ours:>8.2f}")
            if args.json:
                print(json.dumps({"name": name, "device": args.device, "gnn_ms": t_ours, "peer": peer,
                                  "peer_ms": t_peer, "nodes": n,
                                  "edges": int(ei.shape[1]), "features": args.features, "threads": args.threads}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
