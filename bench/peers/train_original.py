#!/usr/bin/env python3
"""Train a winner's layout model with its own code on a config split and rank the held-out configs: the
peer that says whether a recipe's distance from gradient boosting on a real program is the model's (and
its settings'), or ours.

    bench/peers/train_original.py --originals ORIG --model sage5|sage6|gin6 --data SPLIT [--steps 400]
                                  [--val-every 100] [--seed 1] [--graphs 1] [--configs C] [--lr LR]
                                  [--threads 2] [--split test]

SPLIT is a tree scripts/split_configs.py wrote (layout/<coll>/train/<stem>.npz holds some configs of each
program, the --split file of the same stem the others); ORIG holds the clones bench/peers/winners.py's
docstring lists (scipy for the tau; the 5th place's config also needs pyyaml). This file holds none of
their code: it imports their files by path and drives them as their training scripts do. Prints the
validation line at every --val-every step on stderr (scoring puts Python's, numpy's and torch's CPU
generators back as it found them, so the training's draws do not depend on --val-every) and one JSON
line at the end; kendall_tau is what `gnn eval --split test` prints (Kendall tau-b of score against
runtime per program, mean over programs; a program whose tau is undefined is left out, as the 6th
place's nanmean does, and none left is null).
The runtimes ranked against: the file's (int64) for the 5th place, its load_npz's float32 copies for the
6th, as its do_valid; on unet3d's held-out file f32 merges 232 runtimes into 186, which moves tau by
about 1e-4. Both originals trained on a GPU in mixed precision (the 6th place with fp16 autocast, in its
validation too); here they run in fp32 on the CPU, as gnn's recipes do.

--model sage5: the 5th place (knshnb/kaggle-tpu-graph-5th-place at 3f2dfb8), as its scripts/train.py runs
  it, against gnn's layout-sage-5th (scripts/check_vs_original.py --model sage5 shows the same function):
  model      src/nn.py GNN(config/default.yaml): SAGE 384 wide, 3 layers, the element-wise unary opcodes
             merged, DropEdge with a probability drawn from U(0, 0.15) each forward
  batches    src/dataset.py KaggleDataset over the train files with a seeded generator (config_from_npy
             False: the configs read from the npz, the values its preprocess_layout_data.py copies into
             int8 .npy files), a pass of its items in the order a second generator of the same seed draws
             (as its TileLayoutSampler without tile data), --graphs items a step (its
             layout_batch_size, 4; here 1 by default, so that a step holds the 8 configs a step of
             layout-sage-5th holds on one program) collated by PyG's Batch; a new pass, with the next
             seed, when one runs out
  loss       train.py's pairwise_hinge (margin 1; half within each item, half over the batch flattened),
             written out here from its definition: train.py imports Lightning, transformers and wandb,
             which this peer does not need
  optimiser  AdamW (lr 1e-4, weight decay 0.01), gradient norm clipped to 1 (Lightning's
             gradient_clip_val), the cosine schedule without warm-up over --steps (transformers'
             get_cosine_schedule_with_warmup), stepped after each optimiser step
  scoring    eval mode, KaggleDataset over the --split files without a generator (consecutive slates of
             8 configs, as its test loader)
  Its own budget differs: two passes of about sqrt(n * max n) configs per graph over every layout
  collection and tile/xla at once; --steps sets this run's.

--model sage6 / gin6: the 6th place (hengck23/solution-predict-ai-model-runtime at c9c5194,
  src/res-graphsage4-pair-hop5-layout or src/res-gin4-pair-hop5-layout), against gnn's layout-sage-6th /
  layout-gin-6th: one training program (the split's one train file), its step as winners.py's Sixth runs
  it (trainer.py's: the 5-hop subgraph, its feature statistics from the train file, AdamW lr 5e-4, no
  schedule, no clipping), --graphs slates of --configs configs a step from an epoch's shuffled slates,
  the epoch's leftover slates dropped (its DataLoader's drop_last); 80 configs and 1 slate by default, as
  the gnn recipes on one program (its xla:default configuration has 32 slates of 32 a step, more than
  one program of 927 training configs fills). Scored as its do_valid: the held-out folder through
  load_npz, its configs in order cut by np.array_split into n // 100 near-equal slates of at least 100
  (xla:default's valid_subsample_size; its late norm is over a slate's configs, so the cut matters),
  infer_one in eval mode. The last weights: its SWA (a mean of saved checkpoints
  late in a 7.5-epoch run) is not reproduced. The gnn run of the same function (check_vs_original.py's
  flags, and the original's dropout masks and trainable standardisation): `--op-max-norm 1
  --node-transform trainable --dropout-mask config`, and for GIN `--layer4-input second`.
"""
import argparse
import glob
import json
import math
import os
import random
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import winners  # noqa: E402
from winners import commit_of, quiet  # noqa: E402

import torch  # noqa: E402  (winners.py has refused a Python without it)


def pairwise_hinge(pred, y, margin=1.0):
    """max(0, margin - (p_i - p_j)) over the pairs y_i > y_j, a mean over every (i, j) of the last axis."""
    return ((y.unsqueeze(-1) > y.unsqueeze(-2)) * torch.relu(margin - (pred.unsqueeze(-1) - pred.unsqueeze(-2)))).mean()


def kendall_tau(pred, y):
    import scipy.stats
    return float(scipy.stats.kendalltau(pred, y)[0])


class Fifth:
    """The 5th place (src/nn.py GNN, src/dataset.py KaggleDataset), as its scripts/train.py trains it."""

    name = "sage5-original"

    def __init__(self, a, train):
        o = winners.load_fifth(a.originals)
        self.root, self.dataset, self.cfg = o.root, o.dataset, o.cfg
        self.configs = a.configs or self.cfg.layout_sample_per_graph
        self.net = o.nn.GNN(self.cfg)
        self.net.train()
        self.lr = self.cfg.lr if a.lr is None else a.lr
        self.opt = torch.optim.AdamW(self.net.parameters(), self.lr, weight_decay=self.cfg.weight_decay)
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: max(0.0, 0.5 * (1 + math.cos(math.pi * s / a.steps))))
        self.batches = self.passes(train, a.graphs, a.seed)

    def items(self, paths, rng):
        with quiet():
            return self.dataset.KaggleDataset(paths, self.configs, self.cfg, rng, config_from_npy=False)

    def passes(self, paths, graphs, seed):
        """Their training order: a pass of the dataset's items, graphs items a batch (the last short batch
        dropped, as their sampler's len // batch_size), then the next pass, next seed. As in their
        KaggleDataModule, the dataset's config draws and the sampler's order come from two generators of
        one seed (as its TileLayoutSampler draws with no tile data: a permutation of the items, then of the
        batches; its default.yaml also trains on tile/xla, whose permutation would come first)."""
        from torch_geometric.data import Batch
        for p in range(1 << 30):
            ds = self.items(paths, np.random.default_rng(seed + p))
            if len(ds) < graphs:
                sys.exit(f"train_original.py: {len(ds)} items a pass, fewer than --graphs {graphs}")
            order = np.random.default_rng(seed + p)  # its TileLayoutSampler's own generator, seeded alike
            perm = order.permutation(len(ds))
            for b in order.permutation(len(ds) // graphs):
                yield Batch.from_data_list([ds[int(i)]["data"] for i in perm[b * graphs:(b + 1) * graphs]])

    def step(self):
        b = next(self.batches)
        pred = self.net(b).squeeze(2)
        loss = pairwise_hinge(pred, b.y) * 0.5 + pairwise_hinge(pred.flatten(), b.y.flatten()) * 0.5
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.cfg.gradient_clip_val)
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad()
        return loss.item()

    @torch.no_grad()
    def score(self, paths):
        """Kendall tau-b per program over every config of the file, from their eval batches (consecutive
        slates, the last wrapping round to the first configs, which are scored twice alike)."""
        from torch_geometric.data import Batch
        self.net.eval()
        taus = []
        for path in paths:
            ds = self.items([path], None)
            pred = np.zeros(int(ds.n_config[0]))
            for i in range(len(ds)):
                it = ds[i]
                score = self.net(Batch.from_data_list([it["data"]]))
                pred[it["config_idx"].numpy().reshape(-1)] = score.reshape(-1).numpy()
            taus.append(kendall_tau(pred, np.load(path)["config_runtime"]))
        self.net.train()
        return taus


class Sixth:
    """The 6th place's layout SAGE or GIN (src/res-*-layout: model.py Net, dataset.py), its step as
    winners.py's Sixth runs it (trainer.py's loop: AdamW lr 5e-4, no schedule, no clipping); --graphs
    slates a step, each --configs configs of one program (their train_batch_size and
    train_subsample_size)."""

    def __init__(self, a, train):
        if len(train) != 1:
            sys.exit(f"train_original.py --model {a.model}: one training program (winners.py's Sixth reads "
                     f"one file), got {len(train)}")
        import tempfile
        import shutil
        self.name = a.model + "-original"
        ns = argparse.Namespace(originals=a.originals, model=a.model, data=train[0], device="cpu",
                                configs=a.configs or 80)
        tmp = tempfile.mkdtemp(prefix="train_original_")
        try:
            self.run = winners.Sixth(ns, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if a.lr is not None:
            for g in self.run.opt.param_groups:
                g["lr"] = a.lr
        self.lr = self.run.opt.param_groups[0]["lr"]
        self.configs, self.graphs = self.run.configs, a.graphs
        self.root = os.path.join(a.originals, winners.REPO_6TH)
        self.prec = winners.Precision("cpu", "none")
        self.held = {}  # folder: its LayoutDataset, loaded once

    def step(self):
        with quiet():
            if len(self.run.order) < self.graphs:  # drop_last: a new epoch, its slates reshuffled
                self.run.order = []
                self.run.epoch()
                if len(self.run.order) < self.graphs:
                    sys.exit(f"train_original.py: {len(self.run.order)} slates an epoch, fewer than --graphs "
                             f"{self.graphs}")
            batch = []
            for _ in range(self.graphs):
                batch += self.run.batch()
            return self.run.step(batch, self.prec)

    @torch.no_grad()
    def score(self, paths):
        """Their do_valid: load_npz of the held-out folder (5 hops), n // 100 near-equal slates of its
        configs in order (do_subsample_data, valid_subsample_size 100, is_droplast False), infer_one in
        eval mode, Kendall tau per program."""
        ds_mod, net = self.run.ds_mod, self.run.net
        taus = []
        for folder in sorted({os.path.dirname(p) for p in paths}):
            if folder not in self.held:
                with quiet():
                    data = ds_mod.load_npz(folder)
                    self.held[folder] = ds_mod.LayoutDataset(
                        data, subsample_param=dict(size=100, is_random=False, is_droplast=False))
            held = self.held[folder]
            net.eval()
            pred = {}
            for i in range(len(held)):
                r = held[i]
                pred.setdefault(r["file"], []).append((r["config_runtime"].numpy(), net.infer_one(r).numpy()))
            net.train()
            for f in sorted(pred):
                truth, p = (np.concatenate(x) for x in zip(*pred[f]))
                taus.append(kendall_tau(p, truth))
        return taus


def files(data, split):
    found = sorted(glob.glob(os.path.join(data, "**", "layout", "*", "*", split, "*.npz"), recursive=True))
    if not found:
        sys.exit(f"train_original.py: no layout/<coll>/{split}/*.npz under {data}")
    return found


MODELS = {"sage5": Fifth, "sage6": Sixth, "gin6": Sixth}


def scored(run, held):
    """run.score(held) with Python's, numpy's and torch's CPU generators put back as they were: the 5th
    place's forward draws its DropEdge rate from Python's random in eval mode too, so without this the
    training's draws would depend on --val-every."""
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        return run.score(held)
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--originals", required=True, help="folder holding the originals' clones")
    ap.add_argument("--model", required=True, choices=sorted(MODELS))
    ap.add_argument("--data", required=True, help="a config split (scripts/split_configs.py)")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--val-every", type=int, default=100, help="score the --split files every so many steps")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--graphs", type=int, default=1, help="items (sage5) or slates (sage6, gin6) a step")
    ap.add_argument("--configs", type=int, default=None, help="configs an item or slate (sage5: 8, 6th: 80)")
    ap.add_argument("--lr", type=float, default=None, help="default: the original's")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--split", default="test", help="the held-out files' folder name")
    a = ap.parse_args()
    for flag, v in (("--steps", a.steps), ("--val-every", a.val_every), ("--graphs", a.graphs),
                    ("--threads", a.threads)):
        if v < 1:
            sys.exit(f"train_original.py: {flag} must be at least 1, got {v}")
    if a.configs is not None and a.configs < 2:
        sys.exit(f"train_original.py: --configs must be at least 2 (a ranking needs pairs), got {a.configs}")

    warnings.filterwarnings("ignore")
    torch.set_num_threads(a.threads)
    random.seed(a.seed)  # the 5th place's DropEdge draws its probability from Python's random
    np.random.seed(a.seed)  # the 6th place's slates: np.random.shuffle
    torch.manual_seed(a.seed)
    train, held = files(a.data, "train"), files(a.data, a.split)
    run = MODELS[a.model](a, train)
    line, t0, step_s = [], time.time(), []
    for step in range(1, a.steps + 1):
        t = time.perf_counter()
        loss = run.step()
        step_s.append(time.perf_counter() - t)
        if step % a.val_every == 0 or step == a.steps:
            taus = [t for t in scored(run, held) if np.isfinite(t)]
            line.append(round(float(np.mean(taus)), 4) if taus else None)
            print(f"train_original: step {step} loss {loss:.4f} {a.split} tau {line[-1]}", file=sys.stderr)
    print(json.dumps({"peer": run.name, "originals_commit": commit_of(run.root), "seed": a.seed,
                      "steps": a.steps, "graphs": a.graphs, "configs": run.configs, "lr": run.lr,
                      "threads": a.threads, "split": a.split, "kendall_tau": line[-1], "line": line,
                      "step_ms_median": round(1e3 * float(np.median(step_s)), 1),
                      "wall_s": round(time.time() - t0, 1), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
