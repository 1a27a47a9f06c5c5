#!/usr/bin/env python3
"""Does a gnn recipe compute the function of the original authors' model? Given the same weights and the
same batch, both are run and their scores and every parameter gradient compared.

Run by hand, not in CI: it needs PyTorch, PyG and the originals' files, cloned from their public
repositories (bench/peers/winners.py's docstring gives the commands and the commits read) and never
committed. It imports their model files by path; it holds none of their code.

    scripts/check_vs_original.py --originals ORIG --model sage6 [--gnn build/bin/gnn] [--data DIR]
                                 [--configs 8] [--epochs 1] [--keep DIR]

What it does:
  1. `gnn train` a run of the recipe (on --data, or on a generated layout set), briefly: the point is
     weights that are not the initial ones, not a good model.
  2. `gnn pass` on one training graph and --configs configs (eval mode): our scores, loss, gradients, the
     weights and the preprocessed batch, in one npz.
  3. The original model built from its own model.py, our weights loaded through an explicit map (below),
     fed the same preprocessed batch, its own loss taken and backpropagated.
  4. Per array, the largest difference relative to the largest magnitude of the original's array (or to
     the largest gradient anywhere, for an array that is zero in exact arithmetic: marked ~0).

--model sage6: the 6th place's layout SAGE (hengck23/solution-predict-ai-model-runtime,
  src/res-graphsage4-pair-hop5-layout/model.py, Net.infer_one; loss myloss.py F_ordered_pair_loss) against
  gnn's layout-sage-6th. To feed both the same inputs:
  - node_feat: our preprocessed x; the original's in-forward standardisation (x - mean) / (std + 1e-4) is
    made the identity (mean 0, std 1 - 1e-4, which is 1 after the + 1e-4 in f32) and left out of the
    comparison, as are its MyNorm1d weights, which its forward never reads.
  - its opcode embedding's max_norm=1 is turned off: it renormalises the looked-up rows of the weight in
    place, so our weights would not be the ones it runs with (a training departure, listed in
    recipes/layout_sage_6th.cpp).
  - eval mode on both sides (no dropout); targets distinct, so that our pairwise logistic loss over the
    strict pairs is the original's mean over all pairs.
  Weight map (torch Linear stores [out, in], gnn [in, out]): node_opcode_embed.weight rows 0..120 =
  op_embedding.weight; early_mlp.0/4 = early.0/1.lin.weight^T; gconv.l.lin_l.weight = layers.l.lin.weight
  [:D]^T (the neighbour mean), gconv.l.lin_r.weight = [D:]^T (the node itself), gconv.l.lin_l.bias =
  layers.l.lin.bias; late_mlp.0/3 = head.late.0/1.lin.weight^T; predict = head.predict.

Prints one line per array and a JSON summary as the last line; exits 1 when an array differs by more
than --tol (default 1e-4) relative.
"""
import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "peers"))
from winners import DIR_6TH, REPO_6TH, commit_of, load_module, quiet  # noqa: E402

import torch  # noqa: E402  (winners.py has refused a Python without it)


def gnn(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"check_vs_original: gnn {' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


class Sage6:
    """gnn's layout-sage-6th against the 6th place's Net (SAGE)."""

    recipe = "layout-sage-6th"
    train_flags = ["--batch-graphs", "2", "--accumulate", "1", "--swa", "0"]

    def __init__(self, originals, work):
        self.root = os.path.join(originals, REPO_6TH)
        src = os.path.join(self.root, DIR_6TH["sage6"])
        sys.path.insert(0, src)  # model.py does `from dataset import *` and `from myloss import *`
        with quiet(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load_module("dataset", os.path.join(src, "dataset.py"))
            self.loss_mod = load_module("myloss", os.path.join(src, "myloss.py"))
            model_mod = load_module("hengck_model", os.path.join(src, "model.py"))
        stat = os.path.join(work, "identity.stat.pickle")  # the in-forward standardisation made the identity
        with open(stat, "wb") as f:
            pickle.dump({"node_feat_mean": np.zeros(140, np.float32),
                         "node_feat_std": np.full(140, 1 - 1e-4, np.float32)}, f)
        self.net = model_mod.Net({"pickle_file": stat})
        self.net.node_opcode_embed.max_norm = None
        self.net.node_feat_mean.requires_grad_(False)
        self.net.node_feat_std.requires_grad_(False)
        self.net.eval()

    def pairs(self, p):
        """(original parameter, our array name, transform to the original's layout, back to ours)."""
        sd = dict(self.net.named_parameters())
        D = sd["gconv.0.lin_l.weight"].shape[1]
        t = (lambda a: a.T, lambda g: g.T)
        out = [("node_opcode_embed.weight", "op_embedding.weight", None, None),
               ("early_mlp.0.weight", "early.0.lin.weight") + t, ("early_mlp.4.weight", "early.1.lin.weight") + t,
               ("late_mlp.0.weight", "head.late.0.lin.weight") + t,
               ("late_mlp.3.weight", "head.late.1.lin.weight") + t,
               ("predict.weight", "head.predict.weight") + t, ("predict.bias", "head.predict.bias", None, None)]
        for l in range(len(self.net.gconv)):
            w = f"layers.{l}.lin.weight"
            out += [(f"gconv.{l}.lin_l.weight", w, lambda a, D=D: a[:D].T, None),
                    (f"gconv.{l}.lin_r.weight", w, lambda a, D=D: a[D:].T, None),
                    (f"gconv.{l}.lin_l.bias", f"layers.{l}.lin.bias", None, None)]
        return out

    def load(self, z):
        sd = dict(self.net.named_parameters())
        with torch.no_grad():
            for name, ours, fwd, _ in self.pairs(z):
                a = z["param/" + ours]
                a = fwd(a) if fwd else a
                if name == "node_opcode_embed.weight":
                    sd[name].zero_()
                    sd[name][: a.shape[0]] = torch.from_numpy(np.ascontiguousarray(a))
                else:
                    if tuple(a.shape) != tuple(sd[name].shape):
                        sys.exit(f"check_vs_original: {ours} {a.shape} does not fit {name} {tuple(sd[name].shape)}: "
                                 "train the run at the original's widths (the recipe's defaults)")
                    sd[name].copy_(torch.from_numpy(np.ascontiguousarray(a)))

    def forward(self, z):
        x = z["batch/x"]
        if x.shape[1] != 140:
            sys.exit(f"check_vs_original: the run's node features are {x.shape[1]} wide; the original reads 140")
        cn = z["batch/config_nodes"].astype(np.int64)
        C = z["score"].shape[0]
        cfg = z["batch/node_config"][cn].reshape(len(cn), C, 18).transpose(1, 0, 2)
        r = {"node_feat": torch.from_numpy(x), "node_opcode": torch.from_numpy(z["batch/opcode"].astype(np.int64)),
             "edge_index": torch.from_numpy(z["batch/edges"].T.astype(np.int64).copy()),
             "node_config_ids": torch.from_numpy(cn), "node_config_feat": torch.from_numpy(cfg.copy())}
        return self.net.infer_one(r)

    def loss(self, score, z):
        truth = torch.from_numpy(z["batch/target"]).reshape(1, -1)  # f64: only compared
        return self.loss_mod.F_ordered_pair_loss(score.reshape(1, -1), truth)

    def grads(self, z):
        """Each of our gradient arrays rebuilt from the original's parameter gradients."""
        sd = dict(self.net.named_parameters())
        g = {k: sd[k].grad.numpy() for k in sd if sd[k].grad is not None}
        out = {"op_embedding.weight": g["node_opcode_embed.weight"][: z["param/op_embedding.weight"].shape[0]]}
        for name, ours, fwd, back in self.pairs(z):
            if name.startswith("gconv") or name == "node_opcode_embed.weight":
                continue
            out[ours] = back(g[name]) if back else g[name]
        for l in range(len(self.net.gconv)):
            out[f"layers.{l}.lin.weight"] = np.concatenate([g[f"gconv.{l}.lin_l.weight"].T,
                                                            g[f"gconv.{l}.lin_r.weight"].T], 0)
            out[f"layers.{l}.lin.bias"] = g[f"gconv.{l}.lin_l.bias"]
        return out


MODELS = {"sage6": Sage6}


def rel(a, b, floor=0.0):
    """max |a - b| over max |b| (the original's scale), or over `floor` when that is larger."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(np.abs(b).max() if b.size else 0.0, floor)
    d = np.abs(a - b).max() if b.size else 0.0
    return float(d / scale) if scale > 0 else float(d)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--originals", required=True, help="folder holding the originals' clones")
    ap.add_argument("--model", required=True, choices=sorted(MODELS))
    ap.add_argument("--gnn", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin",
                                                  "gnn"))
    ap.add_argument("--data", help="a dataset tree (default: a generated layout set)")
    ap.add_argument("--graph", help="the training graph to compare on (gnn pass --graph; default: the first)")
    ap.add_argument("--configs", type=int, default=8, help="configs in the batch (at least 2; 8 or more keeps "
                                                           "the late norm over the configs well conditioned)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--keep", help="keep the run and the pass here instead of a temporary folder")
    a = ap.parse_args()
    torch.set_num_threads(2)
    work = a.keep or tempfile.mkdtemp(prefix="check_vs_original_")
    os.makedirs(work, exist_ok=True)
    m = MODELS[a.model](a.originals, work)
    data = a.data
    if not data:
        data = os.path.join(work, "data")
        if not os.path.isdir(data):
            gnn(a.gnn, "synth", "--collection", "layout", "--out", data, "--graphs", "3", "--nodes", "300",
                "--configs", "40", "--seed", "3", "--split", "train,valid")
    run = os.path.join(work, "run")
    if not os.path.exists(os.path.join(run, "model.npz")):
        gnn(a.gnn, "train", "--model", m.recipe, "--data", data, "--out", run, "--epochs", str(a.epochs),
            "--configs", str(a.configs), "--threads", "2", "--progress", "lines", *m.train_flags)
    out = os.path.join(work, "pass.npz")
    info = json.loads(gnn(a.gnn, "pass", "--run", run, "--data", data, "--configs",
                          ",".join(str(c) for c in range(a.configs)), "--threads", "2", "--out", out,
                          *(["--graph", a.graph] if a.graph else [])).strip().splitlines()[-1])
    z = dict(np.load(out))
    t = z["batch/target"]
    if len(np.unique(t)) != len(t):
        print("check_vs_original: warning: tied targets; the original's loss counts tied pairs, ours does not",
              file=sys.stderr)
    m.load(z)
    score = m.forward(z)
    loss = m.loss(score, z)
    loss.backward()
    rows = [("score", rel(z["score"].reshape(-1), score.detach().numpy())),
            ("loss", rel(z["loss"], [loss.item()]))]
    grads = m.grads(z)
    # A gradient that is zero in exact arithmetic (a bias added before a norm over the nodes, the output
    # bias under a loss that compares scores only) is rounding noise on both sides: an array whose largest
    # magnitude is under 1e-4 of the largest gradient anywhere is measured against that largest gradient,
    # and marked ~0.
    top = max(float(np.abs(g).max()) for g in grads.values() if g.size)
    for name, g in grads.items():
        small = float(np.abs(g).max()) < 1e-4 * top
        rows.append(("grad/" + name + (" (~0)" if small else ""), rel(z["grad/" + name], g, top if small else 0)))
    worst = max(d for _, d in rows)
    for name, d in rows:
        print(f"{name:40s} {d:.2e}{'' if d <= a.tol else '  > tol'}")
    print(json.dumps({"model": a.model, "recipe": m.recipe, "original_commit": commit_of(m.root),
                      "graph": info["graph"], "configs": a.configs, "nodes": int(z["batch/x"].shape[0]),
                      "max_rel_diff": worst, "tol": a.tol, "same_function": worst <= a.tol}))
    return 0 if worst <= a.tol else 1


if __name__ == "__main__":
    sys.exit(main())
