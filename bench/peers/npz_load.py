"""Loading every array of a 1 GB TpuGraphs-like .npz: numpy's np.load(f)[k] for all keys vs
`gnn bench npz`, same file, same machine, warm page cache, medians of repeated runs after a warm-up.

    python3 bench/peers/npz_load.py [--gnn build/bin/gnn] [--dir /tmp/gnn_npz_bench] [--repeat 5]

The archive mimics a big layout:nlp file: node_config_feat (configs x configurable nodes x 18,
values in {-1..5}, like the real ones) dominates, plus node_feat (sparse, heavy-tailed), edge_index,
node_config_ids, config_runtime and node_splits. numpy writes both files (np.savez and
np.savez_compressed), so gnn reads what numpy wrote.
"""
import argparse
import json
import os
import subprocess

import numpy as np
from timing import median_ms


def make(path, compressed):
    if os.path.exists(path):
        return
    rng = np.random.default_rng(0)
    n, c, nc = 40_000, 5_800, 2_300
    feat = np.zeros((n, 140), np.float32)
    mask = rng.random((n, 140)) < 0.15
    feat[mask] = np.exp(rng.normal(2, 4, mask.sum())).astype(np.float32)
    cfg = rng.integers(-1, 6, (c, nc, 18)).astype(np.float32)
    cfg[:, :, 6:] = -1  # most layout slots are unset in real files
    arrays = dict(
        node_feat=feat,
        node_opcode=rng.integers(0, 121, n).astype(np.uint8),
        edge_index=np.stack([np.arange(1, 72_000) % n, rng.integers(0, n, 71_999)], 1).astype(np.int64),
        node_config_ids=np.sort(rng.choice(n, nc, replace=False)).astype(np.int64),
        node_config_feat=cfg,
        config_runtime=rng.integers(100_000, 10**9, c).astype(np.int64),
        node_splits=np.array([[0, n // 2, n]], np.int64),
    )
    part = path + ".part"  # (written whole, then renamed: an interrupted run leaves no half file to reuse)
    try:
        with open(part, "wb") as fh:
            (np.savez_compressed if compressed else np.savez)(fh, **arrays)
        os.replace(part, path)
    except BaseException:
        if os.path.exists(part):
            os.remove(part)
        raise


def time_numpy(path, repeat):
    def once():
        with np.load(path) as z:
            return [z[k] for k in z.files]
    return median_ms(once, repeat, warmup=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gnn", default="build/bin/gnn")
    ap.add_argument("--dir", default="/tmp/gnn_npz_bench")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if args.repeat < 1:  # (checked before the 1 GB files are written)
        ap.error(f"--repeat must be >= 1, got {args.repeat}")
    if os.path.exists(args.dir) and not os.path.isdir(args.dir):
        ap.error(f"--dir {args.dir}: a file, not a folder")
    if not os.access(args.gnn, os.X_OK):
        ap.error(f"--gnn {args.gnn}: not an executable")
    os.makedirs(args.dir, exist_ok=True)
    print(f"numpy {np.__version__}, {os.cpu_count()} CPUs")
    for kind in ["stored", "deflated"]:
        path = os.path.join(args.dir, f"layout_like_{kind}.npz")
        make(path, kind == "deflated")
        raw = sum(a.nbytes for a in np.load(path).values())
        np_ms = time_numpy(path, args.repeat)
        out = subprocess.run([args.gnn, "bench", "npz", path, "--repeat", str(args.repeat), "--json"],
                             check=True, capture_output=True, text=True).stdout
        gnn = json.loads(out.strip().splitlines()[-1])
        print(f"{kind:9s} {os.path.getsize(path) / 1e9:.2f} GB file, {raw / 1e9:.2f} GB raw: "
              f"numpy {np_ms:8.1f} ms ({raw / np_ms / 1e6:5.2f} GB/s)   "
              f"gnn {gnn['median_ms']:8.1f} ms ({gnn['gbps']:5.2f} GB/s)   "
              f"gnn is {np_ms / gnn['median_ms']:.2f}x numpy")


if __name__ == "__main__":
    main()
