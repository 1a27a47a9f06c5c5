#!/usr/bin/env python3
"""Non-graph baselines for held-out configs of the same layout programs: how well a program's runtimes
are ranked from its config values alone, beside the graph recipes (docs/benchmarks.md, "unet3d").

    python3 bench/peers/config_baselines.py --data SPLIT [--split test] [--seeds 1,2,3]

SPLIT is a tree scripts/split_configs.py wrote: train/<stem>.npz holds some configs of a program, the
--split file of the same stem the others. Per program, each config is its node_config_feat values
([configurable nodes, 18]) one-hot encoded per (node, field): every value a field takes among the
program's training configs is a column, so a model sees which layout each node has. Two peers fit log
runtime on the training configs and rank the held-out ones:
  ridge  closed-form ridge regression (numpy), alpha 1 on standardised columns
  gbr    scikit-learn's GradientBoostingRegressor (300 trees of depth 4, learning rate 0.05,
         subsample 0.8, seeded), when scikit-learn is installed
Scored as gnn scores layout graphs: Kendall tau-b of predicted against true runtimes over the held-out
configs, mean over programs. Prints one JSON line per peer and seed.
"""
import argparse
import glob
import json
import os
import sys

import numpy as np


def kendall_tau_b(a, b):
    """scipy.stats.kendalltau's tau-b, in O(n^2) (n is a few hundred held-out configs)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    da = np.sign(a[:, None] - a[None, :])
    db = np.sign(b[:, None] - b[None, :])
    iu = np.triu_indices(len(a), 1)
    da, db = da[iu], db[iu]
    s = float((da * db).sum())
    n0 = float(len(da))
    ta, tb = float((da == 0).sum()), float((db == 0).sum())
    den = np.sqrt((n0 - ta) * (n0 - tb))
    return s / den if den > 0 else float("nan")


def one_hot(train_cfg, other_cfg):
    """Columns: for each (node, field), one per value the training configs show there."""
    c, n, f = train_cfg.shape
    flat_t, flat_o = train_cfg.reshape(c, n * f), other_cfg.reshape(other_cfg.shape[0], n * f)
    cols_t, cols_o = [], []
    for j in range(n * f):
        values = np.unique(flat_t[:, j])
        if len(values) < 2:
            continue  # a field no training config changes tells nothing
        cols_t.append(flat_t[:, j][:, None] == values[None, :])
        cols_o.append(flat_o[:, j][:, None] == values[None, :])
    if not cols_t:
        return np.zeros((c, 0)), np.zeros((other_cfg.shape[0], 0))
    return np.hstack(cols_t).astype(np.float64), np.hstack(cols_o).astype(np.float64)


def ridge(xt, yt, xo, alpha=1.0):
    mu, sd = xt.mean(0), xt.std(0)
    sd[sd == 0] = 1
    zt, zo = (xt - mu) / sd, (xo - mu) / sd
    y0 = yt.mean()
    w = np.linalg.solve(zt.T @ zt + alpha * np.eye(zt.shape[1]), zt.T @ (yt - y0))
    return zo @ w + y0


def gbr(xt, yt, xo, seed):
    from sklearn.ensemble import GradientBoostingRegressor
    m = GradientBoostingRegressor(n_estimators=300, max_depth=4, learning_rate=0.05, subsample=0.8, random_state=seed)
    return m.fit(xt, yt).predict(xo)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="a tree from scripts/split_configs.py")
    p.add_argument("--split", default="test")
    p.add_argument("--seeds", default="1,2,3", help="seeds for the gradient boosting (ridge has none)")
    a = p.parse_args()
    trains = sorted(glob.glob(os.path.join(a.data, "**", "train", "*.npz"), recursive=True))
    if not trains:
        sys.exit(f"config_baselines.py: no train/*.npz under {a.data}")
    programs = []
    for t in trains:
        o = os.path.join(os.path.dirname(os.path.dirname(t)), a.split, os.path.basename(t))
        if not os.path.exists(o):
            continue
        zt, zo = np.load(t), np.load(o)
        xt, xo = one_hot(zt["node_config_feat"], zo["node_config_feat"])
        programs.append((os.path.basename(t), xt, np.log(zt["config_runtime"].astype(np.float64)), xo,
                         zo["config_runtime"].astype(np.float64)))
    if not programs:
        sys.exit(f"config_baselines.py: no {a.split}/ file shares a stem with a train/ file under {a.data}")
    try:
        import sklearn  # noqa: F401
        peers = ["ridge", "gbr"]
    except ImportError:
        peers = ["ridge"]
        print("config_baselines.py: scikit-learn is not installed; gradient boosting left out", file=sys.stderr)
    for peer in peers:
        for seed in ([0] if peer == "ridge" else [int(s) for s in a.seeds.split(",")]):
            taus = {}
            for stem, xt, yt, xo, yo in programs:
                pred = ridge(xt, yt, xo) if peer == "ridge" else gbr(xt, yt, xo, seed)
                taus[stem] = kendall_tau_b(pred, yo)
            print(json.dumps({"peer": peer, "seed": seed, "kendall_tau": float(np.mean(list(taus.values()))),
                              "programs": taus, "columns": int(programs[0][1].shape[1])}))


if __name__ == "__main__":
    main()
