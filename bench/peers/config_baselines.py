#!/usr/bin/env python3
"""Non-graph baselines for held-out configs of the same layout programs: how well a program's runtimes
are ranked from its config values alone, beside the graph recipes (docs/benchmarks.md, "unet3d").

    python3 bench/peers/config_baselines.py --data SPLIT [--split test] [--seeds 1,2,3] [--train-score]
                                            [--versus NAME=CSV ...]

SPLIT is a tree scripts/split_configs.py wrote: train/<stem>.npz holds some configs of a program, the
--split file of the same stem the others. Per program, each config is its node_config_feat values
([configurable nodes, 18]) one-hot encoded per (node, field): every value a field takes among the
program's training configs is a column, so a model sees which layout each node has. The peers fit log
runtime on the training configs and rank the held-out ones:
  ridge     closed-form ridge regression (numpy), alpha 1 on standardised columns: additive, each
            (node, field, value) a term of its own
  gbr       scikit-learn's GradientBoostingRegressor (300 trees of depth 4, learning rate 0.05,
            subsample 0.8, seeded), when scikit-learn is installed
  hgb       scikit-learn's HistGradientBoostingRegressor (600 trees of depth 4, learning rate 0.05,
            no early stopping; no subsampling, so its seeds agree), any columns in one tree
  hgb-node  the same with interaction constraints: a tree splits on the columns of one configurable
            node only, so the prediction is a sum of per-node terms, each a function of its own node's 18
            values. Against hgb, how much of the ranking needs layouts of different nodes combined: the
            most a model that sums per-node terms of each node's own config can reach
And one line that is no model:
  noise     the tau of the held-out runtimes against themselves times exp(sd * N(0, 1)), sd the pooled
            standard deviation of log runtime among the training configs measured more than once (the
            same layout timed again): roughly the most any model can reach there; null without repeats
Scored as gnn scores layout graphs: Kendall tau-b of predicted against true runtimes over the held-out
configs, mean over programs. Prints one JSON line per peer and seed; --train-score adds each model's tau
on its own training configs (beside `gnn eval --split train`: a model that scores no better there than
on the held-out configs is not overfitting them).
--versus NAME=CSV (repeatable) reads a submission CSV of `gnn predict` on the same SPLIT and --split
(each program's held-out configs, predicted fastest first; with --ensemble for several runs) and prints
its tau and, when scikit-learn is installed, its difference from gbr's (the first seed) on the same
configs with a 95% interval from resampling the held-out configs (2,000 draws, the same draw for both):
on a hundred configs a gap of 0.01 is often inside it.
"""
import argparse
import glob
import json
import os
import re
import sys
from collections import namedtuple

import numpy as np


def kendall_tau_b(a, b):
    """scipy.stats.kendalltau's tau-b, in O(n^2) time and memory (n is a few hundred held-out configs; with
    --train-score the training configs too, a few thousand at most on the release's layout programs)."""
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
    """Columns: for each (node, field), one per value the training configs show there. Also the columns of
    each configurable node that has any, in column order (hgb-node's interaction groups)."""
    c, n, f = train_cfg.shape
    flat_t, flat_o = train_cfg.reshape(c, n * f), other_cfg.reshape(other_cfg.shape[0], n * f)
    cols_t, cols_o, groups, col = [], [], {}, 0
    for j in range(n * f):
        values = np.unique(flat_t[:, j])
        if len(values) < 2:
            continue  # a field no training config changes tells nothing
        cols_t.append(flat_t[:, j][:, None] == values[None, :])
        cols_o.append(flat_o[:, j][:, None] == values[None, :])
        groups.setdefault(j // f, []).extend(range(col, col + len(values)))
        col += len(values)
    if not cols_t:
        return np.zeros((c, 0)), np.zeros((other_cfg.shape[0], 0)), []
    return np.hstack(cols_t).astype(np.float64), np.hstack(cols_o).astype(np.float64), list(groups.values())


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


def hgb(xt, yt, xo, seed, groups=None):
    from sklearn.ensemble import HistGradientBoostingRegressor
    extra = {"interaction_cst": groups} if groups is not None else {}  # scikit-learn 1.2 on
    m = HistGradientBoostingRegressor(max_iter=600, max_depth=4, learning_rate=0.05, early_stopping=False,
                                      random_state=seed, **extra)
    return m.fit(xt, yt).predict(xo)


# One program: training columns and log runtimes, the other split's columns and runtimes, hgb-node's
# groups, and the spread of its repeated training configs (repeat_sd).
Program = namedtuple("Program", "stem xt yt xo yo groups sd")


def read_orders(path):
    """{program stem: config indices, predicted fastest first} from a gnn submission CSV."""
    orders = {}
    with open(path, encoding="utf-8", errors="replace") as f:  # (a binary file: no header, said below)
        if f.readline().strip() != "ID,TopConfigs":
            sys.exit(f"config_baselines.py: {path} is not a submission CSV (header ID,TopConfigs)")
        for n, line in enumerate(f, 2):
            key, _, configs = line.strip().partition(",")
            stem = key.split(":")[-1]
            if not re.fullmatch(r"\d+(;\d+)*", configs) or stem in orders:
                sys.exit(f"config_baselines.py: {path} line {n}: want 'ID,c;c;...' with each program once "
                         f"(a split tree holds one program of a stem), got '{line.strip()[:60]}'")
            orders[stem] = np.array([int(c) for c in configs.split(";")], np.int64)
    return orders


def paired(a, b, y, draws=2000, seed=0):
    """tau(a, y) - tau(b, y) over the configs, and its 2.5 and 97.5 percentiles over resampled configs."""
    rng = np.random.default_rng(seed)
    diff = []
    for _ in range(draws):
        i = rng.integers(0, len(y), len(y))
        diff.append(kendall_tau_b(a[i], y[i]) - kendall_tau_b(b[i], y[i]))
    return kendall_tau_b(a, y) - kendall_tau_b(b, y), np.percentile(diff, [2.5, 97.5])


def repeat_sd(cfg, log_runtime):
    """Pooled sd of log runtime among configs whose values repeat exactly; None when none repeat."""
    keys = {}
    for row, y in zip(cfg.reshape(cfg.shape[0], -1), log_runtime):
        keys.setdefault(row.tobytes(), []).append(y)
    dev = [np.asarray(v) - np.mean(v) for v in keys.values() if len(v) > 1]
    if not dev:
        return None
    dof = sum(len(d) - 1 for d in dev)
    return float(np.sqrt(sum(float((d * d).sum()) for d in dev) / dof))


def number(v):
    """v as a JSON number, or None where it is undefined (NaN: JSON has none)."""
    return None if v is None or np.isnan(v) else float(v)


def defined(taus):
    """Per program tau, None where it is undefined (every prediction or runtime alike: tau-b's denominator is 0)."""
    return {k: number(v) for k, v in taus.items()}


def defined_mean(taus, what):
    """The mean of the defined taus; the programs left out are said on stderr (JSON has no NaN)."""
    d = defined(taus)
    known = [v for v in d.values() if v is not None]
    if len(known) < len(d):
        print(f"config_baselines.py: {what}: tau undefined for {len(d) - len(known)} program(s), left out of the "
              "mean (every config predicted alike, too few training configs to split on? or every runtime alike)",
              file=sys.stderr)
    return float(np.mean(known)) if known else None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="a tree from scripts/split_configs.py")
    p.add_argument("--split", default="test")
    p.add_argument("--seeds", default="1,2,3", help="seeds for the gradient boosting and the noise draws")
    p.add_argument("--train-score", action="store_true", help="also each model's tau on its training configs")
    p.add_argument("--versus", action="append", default=[], metavar="NAME=CSV",
                   help="a gnn predict CSV of the --split configs, set against gbr's on the same configs")
    a = p.parse_args()
    try:
        seeds = [int(s) for s in a.seeds.split(",")]
    except ValueError:
        p.error(f"--seeds: expected comma-separated integers, got '{a.seeds}'")
    if any(s < 0 for s in seeds):  # (numpy's and scikit-learn's seeds are >= 0)
        p.error(f"--seeds: each seed must be >= 0, got '{a.seeds}'")
    versus = []
    for v in a.versus:
        name, eq, path = v.partition("=")
        if not eq or not name or not os.path.isfile(path):
            sys.exit(f"config_baselines.py: --versus wants NAME=CSV with an existing CSV, got '{v}'")
        versus.append((name, read_orders(path)))
    trains = sorted(glob.glob(os.path.join(a.data, "**", "train", "*.npz"), recursive=True))
    if not trains:
        sys.exit(f"config_baselines.py: no train/*.npz under {a.data}")
    programs = []
    for t in trains:
        o = os.path.join(os.path.dirname(os.path.dirname(t)), a.split, os.path.basename(t))
        if not os.path.exists(o):
            continue
        zt, zo = np.load(t), np.load(o)
        if "node_config_feat" not in zt.files:  # (a tile file: no layout configs to rank)
            continue
        seen = next((pr.stem for pr in programs if pr.stem == os.path.basename(t)), None)
        if seen:  # (results are keyed by the file's name: a second one would overwrite the first's)
            sys.exit(f"config_baselines.py: {t}: a second layout program named {seen} under {a.data}; "
                     "a tree of scripts/split_configs.py holds one per name")
        xt, xo, groups = one_hot(zt["node_config_feat"], zo["node_config_feat"])
        yt = np.log(zt["config_runtime"].astype(np.float64))
        programs.append(Program(os.path.basename(t), xt, yt, xo, zo["config_runtime"].astype(np.float64),
                                groups, repeat_sd(zt["node_config_feat"], yt)))
    if not programs:
        sys.exit(f"config_baselines.py: no layout {a.split}/ file shares a stem with a train/ file under {a.data}")
    ranks = {}  # --versus: per run and program, each held-out config's predicted rank (checked before any fit)
    for name, orders in versus:
        for pr in programs:
            order = orders.get(os.path.splitext(pr.stem)[0])
            if order is None or sorted(order.tolist()) != list(range(len(pr.yo))):
                sys.exit(f"config_baselines.py: --versus {name}: no order of {len(pr.yo)} configs for {pr.stem}")
            ranks.setdefault(name, {})[pr.stem] = np.argsort(order).astype(np.float64)
    try:
        import sklearn
        peers = ["ridge", "gbr", "hgb"]
        if tuple(int(re.match(r"\d*", v).group() or 0) for v in sklearn.__version__.split(".")[:2]) >= (1, 2):
            peers.append("hgb-node")
        else:
            print(f"config_baselines.py: scikit-learn {sklearn.__version__} has no interaction constraints (1.2 on); "
                  "hgb-node left out", file=sys.stderr)
    except ImportError:
        peers = ["ridge"]
        print("config_baselines.py: scikit-learn is not installed; gradient boosting left out", file=sys.stderr)

    def fit(peer, seed, pr, xo):  # pr's training configs fitted, xo's rows predicted
        if pr.xt.shape[1] == 0:  # no field a training config changes: one constant, its tau undefined (null)
            return np.full(len(xo), pr.yt.mean())
        if peer == "ridge":
            return ridge(pr.xt, pr.yt, xo)
        if peer == "gbr":
            return gbr(pr.xt, pr.yt, xo, seed)
        return hgb(pr.xt, pr.yt, xo, seed, pr.groups if peer == "hgb-node" else None)

    gbr_pred = {}  # the first seed's held-out predictions, per program (--versus)
    for peer in peers:
        for seed in ([0] if peer == "ridge" else seeds):
            taus, train_taus = {}, {}
            for pr in programs:
                if a.train_score:
                    both = fit(peer, seed, pr, np.vstack([pr.xo, pr.xt]))
                    pred, train_taus[pr.stem] = both[:len(pr.xo)], kendall_tau_b(both[len(pr.xo):], pr.yt)
                else:
                    pred = fit(peer, seed, pr, pr.xo)
                taus[pr.stem] = kendall_tau_b(pred, pr.yo)
                if peer == "gbr" and seed == seeds[0]:
                    gbr_pred[pr.stem] = pred
            line = {"peer": peer, "seed": seed, "kendall_tau": defined_mean(taus, f"{peer}, seed {seed}"),
                    "programs": defined(taus), "columns": int(programs[0].xt.shape[1])}
            if a.train_score:
                line["train_kendall_tau"] = defined_mean(train_taus, f"{peer}, seed {seed}, training configs")
                line["train_programs"] = defined(train_taus)
            print(json.dumps(line, allow_nan=False))
    for seed in seeds:
        rng = np.random.default_rng(seed)
        taus = {pr.stem: None if pr.sd is None else
                kendall_tau_b(pr.yo * np.exp(pr.sd * rng.standard_normal(len(pr.yo))), pr.yo) for pr in programs}
        d = defined(taus)  # (None: no config timed twice, or every held-out runtime alike)
        known = [v for v in d.values() if v is not None]
        print(json.dumps({"peer": "noise", "seed": seed, "kendall_tau": float(np.mean(known)) if known else None,
                          "programs": d, "repeat_sd": {pr.stem: number(pr.sd) for pr in programs}},
                         allow_nan=False))
    for name, _ in versus:
        line = {"versus": name, "programs": {}}
        for pr in programs:
            score = ranks[name][pr.stem]
            r = {"kendall_tau": number(kendall_tau_b(score, pr.yo))}
            if pr.stem in gbr_pred:
                d, (lo, hi) = paired(score, gbr_pred[pr.stem], pr.yo)
                r.update({"minus_gbr": number(d), "minus_gbr_95": [number(lo), number(hi)]})
            line["programs"][pr.stem] = r
        print(json.dumps(line, allow_nan=False))

if __name__ == "__main__":
    main()
