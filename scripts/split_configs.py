#!/usr/bin/env python3
"""Holds out configs of TpuGraphs files: a dataset tree whose valid and test graphs are the same graphs
with configs none of the training ones share, to judge a model on configs it did not train on when the
real data at hand is one layout program and 15 tile kernels (../shared/data).

    /usr/bin/python3 scripts/split_configs.py OUT FILE.npz [FILE.npz ...] [--holdout 0.2] [--seed 0]

Writes OUT/npz/layout/xla/default/train/<stem>.npz (a tile file: OUT/npz/tile/xla/train/<stem>.npz;
every layout file goes to xla/default, whatever collection it came from)
with a random (1 - holdout) of each file's configs
and valid/<stem>.npz and test/<stem>.npz with the rest (the same held-out configs in both: score with
`gnn eval --checkpoint last`, so no epoch is picked on them). Every other array is copied unchanged.
Needs numpy (a fixture script: the engine reads and writes npz itself).
"""
import argparse
import os
import sys

import numpy as np

# The arrays indexed by config on their first axis, per kind of file.
CONFIG_ARRAYS = {
    "layout": ("node_config_feat", "config_runtime"),
    "tile": ("config_feat", "config_runtime", "config_runtime_normalizers"),
}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("files", nargs="+")
    p.add_argument("--holdout", type=float, default=0.2, help="share of each program's configs held out")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if not 0 < a.holdout < 1:
        sys.exit(f"split_configs.py: --holdout must lie in (0, 1), got {a.holdout}")
    if a.seed < 0:
        sys.exit(f"split_configs.py: --seed must be >= 0, got {a.seed}")
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        sys.exit(f"split_configs.py: OUT {a.out} is a file, not a folder")
    rng = np.random.default_rng(a.seed)
    roots = {"layout": os.path.join(a.out, "npz", "layout", "xla", "default"),
             "tile": os.path.join(a.out, "npz", "tile", "xla")}
    # Every file read and split before anything is written: a bad one leaves no partial tree (each is read
    # again to be written: a release's layout files are large).
    seen, writes = {}, []
    for f in a.files:
        try:
            with np.load(f, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except Exception as e:  # (missing, a folder, not an npz)
            sys.exit(f"split_configs.py: {f}: cannot be read as npz ({type(e).__name__}: {e})")
        kind = "layout" if "node_config_feat" in arrays else "tile"
        missing = [k for k in CONFIG_ARRAYS[kind] if k not in arrays]
        if missing:
            sys.exit(f"split_configs.py: {f}: not a layout or tile file (no {', '.join(missing)})")
        if arrays["config_runtime"].ndim != 1:
            sys.exit(f"split_configs.py: {f}: config_runtime has shape {arrays['config_runtime'].shape}, not [configs]")
        n = len(arrays["config_runtime"])
        # (the engine refuses a file whose config arrays disagree; split, it would pass them off as sound)
        for k in CONFIG_ARRAYS[kind]:
            if arrays[k].ndim == 0 or len(arrays[k]) != n:
                sys.exit(f"split_configs.py: {f}: {k} has shape {arrays[k].shape}, and config_runtime lists {n} "
                         "configs; each config array holds one entry per config")
        held = max(2, int(round(n * a.holdout)))  # a ranking needs 2 configs
        if n - held < 2:
            print(f"{f}: skipped, {n} configs leave fewer than 2 to train on and 2 to hold out")
            continue
        order = rng.permutation(n)
        parts = {"train": np.sort(order[held:]), "valid": np.sort(order[:held])}
        parts["test"] = parts["valid"]
        stem = os.path.splitext(os.path.basename(f))[0]
        if (kind, stem) in seen:  # (a layout and a tile file of one name go to different folders)
            sys.exit(f"split_configs.py: {f}: a {kind} file named {stem} came already ({seen[kind, stem]}); "
                     "one per name")
        seen[kind, stem] = f
        writes.append((f, roots[kind], stem, kind, parts, n, held))
        del arrays
    if not writes:
        sys.exit(f"split_configs.py: every file was skipped at --holdout {a.holdout}: nothing written")
    for f, root, stem, kind, parts, n, held in writes:
        with np.load(f, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        # A program's three files written whole under .part names, then renamed together: an interrupt
        # leaves no truncated npz, nor a new train/ file beside an older split's valid/ and test/ ones
        done = {}
        try:
            for split, idx in parts.items():
                out = {k: (v[idx] if k in CONFIG_ARRAYS[kind] else v) for k, v in arrays.items()}
                os.makedirs(os.path.join(root, split), exist_ok=True)
                final = os.path.join(root, split, stem + ".npz")
                done[final + ".part"] = final
                with open(final + ".part", "wb") as fh:
                    np.savez_compressed(fh, **out)
            for part, final in done.items():
                os.replace(part, final)
        except BaseException:
            for part in done:
                if os.path.exists(part):
                    os.remove(part)
            raise
        print(f"{stem}: {n - held} train configs, {held} held out")

if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("split_configs.py: interrupted; the programs printed above were written, the one under way not")
