#!/usr/bin/env python3
"""Train a winner's layout model with its own code on a config split and rank the held-out configs: the
peer that says whether a recipe's distance from gradient boosting on a real program is the model's (and
its settings'), or ours.

    bench/peers/train_original.py --originals ORIG --model sage2|sage5|sage6|gin6 --data SPLIT [--steps 400]
                                  [--val-every 100] [--seed 1] [--graphs G] [--configs C] [--lr LR]
                                  [--threads 2] [--split test] [--mape on|off]

SPLIT is a tree scripts/split_configs.py wrote (layout/<coll>/train/<stem>.npz holds some configs of each
program, the --split file of the same stem the others); ORIG holds the clones bench/peers/winners.py's
docstring lists (scipy for the tau; the 5th place's config also needs pyyaml, the 2nd place's data.py
pandas and tqdm). This file holds none of their code: it imports their files by path and drives them as
their training scripts do (what cannot be imported is written out from its definition, as said below).
Prints the validation line at every --val-every step on stderr (scoring puts Python's, numpy's and
torch's CPU generators back as it found them, so the training's draws do not depend on --val-every) and
one JSON line at the end; kendall_tau is what `gnn eval --split test` prints (Kendall tau-b of score against
runtime per program, mean over programs; a program whose tau is undefined is left out, as the 6th
place's nanmean does, and none left is null).
The runtimes ranked against: the file's (int64) for the 5th place, its load_npz's float32 copies for the
6th, as its do_valid, and the 2nd place's float32 seconds, as its _compute_metrics; on unet3d's held-out
file f32 merges 232 runtimes into 186, which moves tau by about 1e-4. The 5th and 6th places trained on a
GPU in mixed precision (the 6th place with fp16 autocast, in its validation too), the 2nd in fp32; here
they run in fp32 on the CPU, as gnn's recipes do.

--model sage2: the 2nd place (Obs01ete/kaggle_latenciaga at ca55746, the commit its write-up describes,
  before it moved layout to ListMLE), its xla layout training as src/main.py's Trainer.train runs it
  (collection layout-xla-default here; nlp takes its nlp margin), against gnn's layout-sage-2nd:
  model      src/model.py Model(is_tile False, wider_config False): node features through log1p(relu(x))
             (in its forward) and Linear(140 -> 20), its opcode embedding (12), the 18 layout config
             values on the configurable nodes and zeros elsewhere, concatenated -> Linear(50 -> 32) ->
             ReLU; SAGEConv (mean) 64, 64, 128, 128, 256, 256, ReLU after each, no residual; Linear(1) per
             node summed over the graph, times 1e-3 (seconds). The graph is the file's edge_index
             transposed, in PyG's default flow (each node takes the mean over the nodes consuming it)
  batches    src/data.py LayoutData over the train folder, repacked by its repack_one_npz with duplicate
             removal on (main.py's default for train: configs whose layout configs are the same kept once,
             the fastest; of unet3d's 927 training configs 579 are left), its files listed 100 times
             (its oversample factor) in torch's DataLoader (shuffled, --graphs items a batch: its batch
             size, 10; run in this process, as its --debug runs it, where its 16 workers would draw
             configs from numpy generators seeded per worker); an item is one program and --configs of its
             configs (its microbatch, 4) drawn with replacement by np.random.choice, runtimes in seconds,
             so a step on one training program holds 10 slates of that program. The items' graphs are
             batched as main.py's concat_premade_microbatches does, written out here (main.py imports
             tensorboard, torchmetrics and click, which this peer does not need)
  loss       main.py's for layout, written out (it sits in its training loop): torch's margin ranking loss
             on each pair's prediction difference against the sign of its runtime difference, over the 6
             pairs of each slate of 4 (a tied pair costs the margin, a constant), margin 0.01 s (nlp:
             1.5e-4 s), divided by the margin, mean over the batch's pairs; plus its MAPE term at weight 1
             (torchmetrics' MeanAbsolutePercentageError of the predicted seconds against the runtimes, its
             clamp 1.17e-6, written out too). --mape off drops the MAPE term (peer "sage2-original-nomape";
             gnn's recipe leaves it off by default, its --mape-weight 0.01 beside an unscaled hinge is it)
  optimiser  Adam lr 1e-3 (its two parameter groups both have weight decay 0, main.py's default, so one
             here), MultiStepLR: times 1/sqrt(10) at int(0.6, 0.7, 0.8, 0.9 x --steps) (its fractions of
             max_iterations), stepped after each optimiser step
  scoring    eval mode, LayoutData with purpose Test over the --split folder, repacked without duplicate
             removal as its test set (every config, in file order), in its DataLoader of 40 items (its
             layout val batch size), one config a slate; ranked against its own float32 seconds
  Left out: its gradient-norm logging every 10 iterations (extra backward passes and a clip at 1000,
  whose gradients it zeroes before the step's own backward, so the weights do not see them), its
  TensorBoard and wandb logging, checkpoints and submissions. Where its code is bent: its LayoutData leaves
  unet programs out of xla training (and its validation mean), and the split may hold only unet3d, so the
  training list is set back to every repacked train file, 100 times, after LayoutData is built; the split's
  files are repacked in this process, where its _repack_data would use a multiprocessing pool; and
  data.py's `name in data.keys` (PyG < 2.4, where keys was a property) runs through a Data subclass put in
  its module (SHIM in keys_shim). Its own budget: 100,000 iterations in its xla default job (200,000 by
  default, 400,000 in its write-up); --steps sets this run's, and the schedule's milestones with it.

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
import atexit
import glob
import json
import math
import os
import pathlib
import random
import shutil
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import winners  # noqa: E402
from winners import commit_of, quiet  # noqa: E402

import torch  # noqa: E402  (winners.py has refused a Python without it)

REPO_2ND = "kaggle_latenciaga"


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


def load_second(originals):
    """The 2nd place's clone imported by path: src/sys_utils.py, src/utils.py, src/data.py and src/model.py
    (they import src.*, so its root goes on sys.path). Returns its root and the data and model modules."""
    try:
        import pandas  # noqa: F401  (its data.py)
        import tqdm  # noqa: F401
    except ImportError:
        sys.exit("train_original.py --model sage2: the 2nd place's data.py needs pandas and tqdm "
                 "(pip install pandas tqdm)")
    root = os.path.join(originals, REPO_2ND)
    sys.path.insert(0, root)
    with quiet():
        mods = {m: winners.load_module("src." + m, os.path.join(root, "src", m + ".py"))
                for m in ("sys_utils", "utils", "data", "model")}
    keys_shim(mods["data"])
    return root, mods["data"], mods["model"]


def keys_shim(data_mod):
    """SHIM: data.py was written for PyG < 2.4, whose Data.keys was a property (its get() asks `name in
    data.keys`); from 2.4 on it is a method, and that test raises. In its module only, Data becomes a
    subclass whose keys is a list that can also be called, so its test and PyG's own keys() both work."""
    from torch_geometric.data import Data
    if isinstance(getattr(Data, "keys", None), property):
        return

    class Keys(list):
        def __call__(self):
            return list(self)

    class KeysData(Data):
        @property
        def keys(self):
            return Keys(Data.keys(self))

    data_mod.Data = KeysData


def mape(pred, y, eps=1.17e-6):
    """torchmetrics' MeanAbsolutePercentageError on one batch: the mean of |pred - y| / max(|y|, eps)."""
    return (torch.abs(pred - y) / torch.clamp(torch.abs(y), min=eps)).mean()


def margin_matrix_loss(pred_diff, y_diff, margin):
    """The 2nd place's layout ranking loss: torch's margin ranking loss of each pair's prediction difference
    against the sign of its runtime difference (a tied pair costs the margin, a constant), divided by the
    margin, mean over the pairs."""
    hinge = torch.nn.functional.margin_ranking_loss(
        pred_diff, torch.zeros_like(pred_diff), torch.sign(y_diff), margin=margin, reduction="none")
    return (hinge / margin).mean()


def collection_of(path):
    """(layout-<source>-<search>, DATA) of DATA/layout/<source>/<search>/<split>/<stem>.npz."""
    p = pathlib.Path(path)
    return "-".join(p.parts[-5:-2]), p.parents[4]


class Second:
    """The 2nd place's layout model (src/model.py Model, src/data.py LayoutData), as its src/main.py's
    Trainer.train steps it: --graphs items (its batch_size, 10) of --configs configs (its microbatch_size,
    4) a step."""

    OVERSAMPLE = 100  # its oversample_factor
    HELD_BATCH = 40  # its val_batch_size for layout

    def __init__(self, a, train):
        from torch.utils.data import DataLoader
        self.root, self.data, model = load_second(a.originals)
        colls = {collection_of(p) for p in train}
        if len(colls) != 1:
            sys.exit(f"train_original.py --model sage2: one layout collection (the original trains one at a "
                     f"time), got {sorted(c for c, _ in colls)}")
        (self.coll, self.data_root), = colls
        self.is_nlp = "-nlp-" in self.coll
        self.configs, self.graphs = a.configs or 4, a.graphs
        self.margin = 1.5e-4 if self.is_nlp else 1e-2  # seconds, main.py's ranking_margin for layout
        self.use_mape = a.mape == "on"
        self.name = "sage2-original" + ("" if self.use_mape else "-nomape")
        self.cache = tempfile.mkdtemp(prefix="train_original_")
        atexit.register(shutil.rmtree, self.cache, True)
        ds = self.dataset(os.path.dirname(train[0]), "train", self.data.Purpose.Train, True)
        # Its LayoutData drops unet programs from xla training (afdfe01); the split's may be only unet3d.
        ds.file_name_list = self.repacked(ds) * self.OVERSAMPLE
        ds._len = len(ds.file_name_list)
        if not ds._len:
            sys.exit("train_original.py --model sage2: no training program left after its duplicate removal")
        self.net = model.Model(False, self.is_nlp, "-default" in self.coll, False)
        self.net.train()
        self.lr = 1e-3 if a.lr is None else a.lr
        self.opt = torch.optim.Adam(self.net.parameters(), lr=self.lr)
        self.sched = torch.optim.lr_scheduler.MultiStepLR(
            self.opt, milestones=[int(a.steps * v) for v in (0.6, 0.7, 0.8, 0.9)], gamma=1 / math.sqrt(10))
        self.loader = DataLoader(ds, batch_size=self.graphs, shuffle=True, collate_fn=self.collate)
        self.batches = self.epochs()
        self.held = {}  # folder: its LayoutData, built once

    def dataset(self, folder, split, purpose, dedup):
        """Its LayoutData over a split folder: the folder's files first repacked into the cache by its
        repack_one_npz, in this process (its _repack_data would run them in a multiprocessing pool), so
        that LayoutData finds its cache folder there and reads it."""
        if split not in self.data.LayoutData.SPLIT:
            sys.exit(f"train_original.py --model sage2: the original's LayoutData reads train, valid or test "
                     f"folders, not {split}")
        dst = os.path.join(self.cache, *pathlib.Path(folder).parts[-4:])
        os.makedirs(dst)
        for f in sorted(os.listdir(folder)):
            if f.endswith(".npz"):
                self.data.repack_one_npz(os.path.join(folder, f), os.path.join(dst, f), is_tile=False,
                                         delete_duplicates=dedup)
        with quiet():
            return self.data.LayoutData(
                self.data_root, coll=self.coll, split=split, purpose=purpose,
                microbatch_size=self.configs if purpose == self.data.Purpose.Train else None,
                cache_root=pathlib.Path(self.cache), delete_duplicates=dedup)

    @staticmethod
    def repacked(ds):
        return [str(ds.data_dir / f) for f in sorted(os.listdir(ds.data_dir)) if f.endswith(".npz")]

    def collate(self, items):
        """main.py's concat_premade_microbatches, written out (main.py imports tensorboard, torchmetrics and
        click): the items' graphs in one Batch, following LayoutData's FOLLOW_BATCH_KEYS."""
        from torch_geometric.data import Batch
        return Batch.from_data_list([g for it in items for g in it.to_data_list()],
                                    follow_batch=self.data.LayoutData.FOLLOW_BATCH_KEYS)

    def epochs(self):
        while True:  # its `while True: for batch in train_loader`
            yield from self.loader

    def forward(self, b, ub_size):
        with quiet():
            return self.net(b.node_feat, b.node_opcode, b.batch, b.ptr, b.node_config_feat, b.node_config_ids,
                            b.node_config_feat_ptr, None, None, b.edge_index, ub_size)

    def step(self):
        with quiet():
            b = next(self.batches)
        pred, pred_diff = self.forward(b, self.configs)
        # every item carries its slate's runtime differences; one a slate is the slate's
        loss = margin_matrix_loss(pred_diff, b.diff_triu_vector[::self.configs], self.margin)
        if self.use_mape:
            loss = mape(pred, b.config_runtime) + loss
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.sched.step()
        return loss.item()

    @torch.no_grad()
    def score(self, paths):
        """Its _make_predictions on the --split folders: LayoutData purpose Test (every config in order, no
        duplicate removal, as its test set) in its DataLoader of 40 items, eval mode, one config a slate;
        Kendall tau per program of the predictions against its runtimes (f32 seconds, as its
        _compute_metrics)."""
        from torch.utils.data import DataLoader
        pred, truth = {}, {}
        self.net.eval()
        for folder in sorted({os.path.dirname(p) for p in paths}):
            if collection_of(os.path.join(folder, "x.npz"))[0] != self.coll:
                sys.exit(f"train_original.py --model sage2: {folder} is not in {self.coll}")
            if folder not in self.held:
                self.held[folder] = self.dataset(folder, os.path.basename(folder), self.data.Purpose.Test,
                                                 False)
            for b in DataLoader(self.held[folder], batch_size=self.HELD_BATCH, shuffle=False,
                                collate_fn=self.collate):
                p, _ = self.forward(b, 1)
                for pr, tg, fn in zip(p.tolist(), b.config_runtime.tolist(), b.fname):
                    pred.setdefault((folder, fn), []).append(pr)
                    truth.setdefault((folder, fn), []).append(tg)
        self.net.train()
        return [kendall_tau(np.array(pred[k], dtype=np.float32), np.array(truth[k], dtype=np.float32))
                for k in sorted(pred)]


def files(data, split):
    found = sorted(glob.glob(os.path.join(data, "**", "layout", "*", "*", split, "*.npz"), recursive=True))
    if not found:
        sys.exit(f"train_original.py: no layout/<coll>/{split}/*.npz under {data}")
    return found


MODELS = {"sage2": Second, "sage5": Fifth, "sage6": Sixth, "gin6": Sixth}


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
    ap.add_argument("--graphs", type=int, default=None,
                    help="items (sage2, sage5) or slates (sage6, gin6) a step (sage2: 10, others: 1)")
    ap.add_argument("--configs", type=int, default=None,
                    help="configs an item or slate (sage2: 4, sage5: 8, 6th: 80)")
    ap.add_argument("--lr", type=float, default=None, help="default: the original's")
    ap.add_argument("--mape", choices=("on", "off"), default="on",
                    help="sage2: its MAPE term beside the margin loss (on: the original's)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--split", default="test", help="the held-out files' folder name")
    a = ap.parse_args()
    if a.graphs is None:
        a.graphs = 10 if a.model == "sage2" else 1  # the 2nd place's batch_size; see --model sage5
    for flag, v in (("--steps", a.steps), ("--val-every", a.val_every), ("--graphs", a.graphs),
                    ("--threads", a.threads)):
        if v < 1:
            sys.exit(f"train_original.py: {flag} must be at least 1, got {v}")
    if a.seed < 0:
        sys.exit(f"train_original.py: --seed must be >= 0 (numpy's seeds), got {a.seed}")
    if a.lr is not None and not (math.isfinite(a.lr) and a.lr > 0):
        sys.exit(f"train_original.py: --lr must be a finite number > 0, got {a.lr}")
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
