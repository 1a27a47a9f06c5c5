#!/usr/bin/env python3
"""Does a gnn recipe compute the function of the original authors' model? Given the same weights and the
same batch, both are run and their scores and every parameter gradient compared.

Run by hand, not in CI: it needs PyTorch, PyG and the originals' files, cloned from their public
repositories (bench/peers/winners.py's docstring gives the commands and the commits read) and never
committed. It imports their model files by path; it holds none of their code.

    scripts/check_vs_original.py --originals ORIG --model tgraph|sage2|sage5|sage6|gin6|tilegat6
                                 [--gnn build/bin/gnn] [--data DIR]
                                 [--configs 8] [--first-config 0] [--epochs 1] [--threads 2] [--keep DIR]

What it does:
  1. `gnn train` a run of the recipe (on --data, or on a generated layout set), briefly: the point is
     weights that are not the initial ones, not a good model.
  2. `gnn pass` on one training graph and --configs configs (eval mode): our scores, loss, gradients, the
     weights and the preprocessed batch, in one npz.
  3. The original model built from its own model.py, our weights loaded through an explicit map (below),
     fed the same preprocessed batch, its own loss taken and backpropagated.
  4. Per array, the largest difference relative to the largest magnitude of the original's array (or to
     the largest gradient anywhere, for an array that is zero in exact arithmetic: marked ~0); beside
     it, both against the original run in f64 (in_f64): how far the original's own f32 result is from
     exact on this batch, the scale of rounding that a second f32 implementation may differ by.

--model tgraph: the 1st place's LayoutModel (thanhhau097/google_fast_or_slow) against gnn's layout-tgraph
  --node-layout embedded (class Tgraph says how the inputs and weights map).

--model sage2: the 2nd place's layout Model (Obs01ete/kaggle_latenciaga at ca55746, src/model.py, the xla
  stack; its loss as src/main.py takes it, without its MAPE term) against gnn's layout-sage-2nd, each fed
  its own preprocessing of the graph's file: the original its raw node features (its forward takes
  log1p(relu(x))), ours the trainer's sign-log1p (--node-transform log1p); equal where no feature is
  negative, and compared as an input (class Second says how the inputs, loss and weights map). Its
  output-layer gradient sums per-config terms that cancel under a pairwise loss (the score gradients of
  a slate sum to zero, and most nodes' rows are the same in every config): in f32 it lands up to a few
  1e-3 from exact on unet3d, where gnn's, which runs the shared rows once, stays within 1e-5.

--model sage6 / gin6: the 6th place's layout SAGE / GIN (hengck23/solution-predict-ai-model-runtime,
  src/res-graphsage4-pair-hop5-layout/model.py, Net.infer_one; loss myloss.py F_ordered_pair_loss) against
  gnn's layout-sage-6th. To feed both the same inputs:
  - node_feat: our preprocessed x; the original's in-forward standardisation (x - mean) / (std + 1e-4) is
    made the identity (mean 0, std 1 - 1e-4, which is 1 after the + 1e-4 in f32) and left out of the
    comparison, as are its MyNorm1d weights, which its forward never reads.
  - its opcode embedding's max_norm=1 renormalises the looked-up rows of the weight in place before the
    lookup. It is set to the run's own --op-max-norm (read from the run's meta/hparams; train with
    --train-flags "--op-max-norm 1"), and off when the run has none. `gnn pass` writes the weights its
    forward starts from (param/) and the rows its forward renormalised (param_after/); the original is
    loaded from the former, before each of its f32 and f64 runs, and its table after its forward is
    compared with the latter (param_after/op_embedding.weight).
  - eval mode on both sides (no dropout); targets distinct, so that our pairwise logistic loss over the
    strict pairs is the original's mean over all pairs.
  Weight map (torch Linear stores [out, in], gnn [in, out]): node_opcode_embed.weight rows 0..120 =
  op_embedding.weight; early_mlp.0/4 = early.0/1.lin.weight^T; gconv.l.lin_l.weight = layers.l.lin.weight
  [:D]^T (the neighbour mean), gconv.l.lin_r.weight = [D:]^T (the node itself), gconv.l.lin_l.bias =
  layers.l.lin.bias; late_mlp.0/3 = head.late.0/1.lin.weight^T; predict = head.predict.

--model sage5: the 5th place's GNN (knshnb/kaggle-tpu-graph-5th-place at 3f2dfb8, src/nn.py; its loss is
  scripts/train.py's pairwise_hinge) against gnn's layout-sage-5th with the original's inputs
  (--node-transform 5th --opcode-groups unary --own-layout zeros), end to end: the original's own dataset
  (src/dataset.py KaggleDataset) reads the graph's file and builds its batch of the same configs, its
  inputs are compared with ours (arrays input/*: node columns, per-dimension columns, opcodes, layout
  values), and its model runs on its own batch (class Sage5 says how the weights map). On a large real
  program a ReLU input may lie within f32 rounding of zero: gnn's f32 and the original's then put it on
  different sides, and every gradient upstream of it differs by up to a few 1e-4. That is a kink, not a
  departure: docs/benchmarks.md shows one (unet3d, on a node whose inputs do not depend on the config, so
  in every batch of those weights) and the check agreeing once that input is put on gnn's side by hand.

--model tilegat6: the 6th place's tile Net (src/res-gatconv4-listmle-hop5-tile/model.py; loss myloss.py
  F_listMLE) against gnn's tile-gat-6th --join late --heads 1 --listmle-order slowest, the published
  function (class TileGat6 says why its GATv2 layers have no counterpart and how the rest maps). Its
  default data is a generated tile set; a real kernel: --data a tree of the real tile files --graph STEM.

Prints one line per array and a JSON summary as the last line; exits 1 when an array differs from the
original's by more than --tol (default 1e-4) relative and from the original in f64 by more than 4x the
original's own f32 does (a ~0 array: by more than 1e-3 of the largest gradient).
"""
import argparse
import contextlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "peers"))
from winners import DIR_6TH, REPO_1ST, REPO_6TH, commit_of, load_fifth, load_module, quiet  # noqa: E402
from train_original import REPO_2ND  # noqa: E402

import torch  # noqa: E402  (winners.py has refused a Python without it)


def gnn(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"check_vs_original: gnn {' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


def trainable_parts(z, constant):
    """--node-transform / --config-transform trainable: a norm after the first layer (over the nodes; over
    the configs of the slate, for the tile configs) cancels a shift of any input column, so the mean's
    gradient is zero in exact arithmetic (a ~0 array, as a bias before a norm), and so is the std's on a
    column constant on the training graphs (its standardised value is one number on every row): those
    columns are compared as a ~0 part of their own. constant: {std array: its columns constant on train}."""
    parts = {}
    for name, cols in constant.items():
        if "param/" + name in z and len(cols):
            varying = np.setdiff1d(np.arange(z["param/" + name].shape[0]), cols)
            parts[name] = [("varying", varying), ("constant on train", cols)]
    return parts


def load_pairs(z, sd, pairs):
    """Copies each gnn array (z["param/" + name], [in, out]) into the original's parameters it stacks
    along its rows (pairs: {gnn array: [original names]}; a 2-d torch weight is [out, in], so transposed),
    refusing a shape that does not fit."""
    for ours, names in pairs.items():
        a, at = z["param/" + ours], 0
        for n in names:
            t = sd[n]
            rows = t.shape[1] if t.dim() == 2 else t.shape[0]
            part = a[at:at + rows]
            at += rows
            part = part.T if t.dim() == 2 else part
            if tuple(part.shape) != tuple(t.shape):
                sys.exit(f"check_vs_original: {ours} {a.shape} does not fit {n} {tuple(t.shape)}: train the "
                         "run at the original's widths (the recipe's defaults)")
            t.copy_(torch.from_numpy(np.ascontiguousarray(part)))
        if at != a.shape[0]:
            sys.exit(f"check_vs_original: {ours} has {a.shape[0]} rows, {names} take {at}")


def layout_inputs(z, width=140):
    """A gnn pass npz's node features [N, width], configurable node ids [K] and their configs [C, K, 18]
    (ours are node-major, [N, C*18], zeros off the configurable nodes)."""
    x = z["batch/x"]
    if x.shape[1] != width:
        sys.exit(f"check_vs_original: the run's node features are {x.shape[1]} wide; the original reads "
                 f"{width} (140: a --node-transform that keeps every column; 191: --node-transform 5th)")
    cn = z["batch/config_nodes"].astype(np.int64)
    C = z["score"].shape[0]
    return x, cn, z["batch/node_config"][cn].reshape(len(cn), C, 18).transpose(1, 0, 2)


class Sixth:
    """The 6th place's layout Net (SAGE or GIN, src/<dir>/model.py) against the gnn recipe of the same name.
    A subclass says which directory, recipe and training flags, and maps the parameters: layers(l) lists,
    per gnn array of conv layer l, the original's parameters stacked along its rows ([in, out] = the
    torch weights transposed, one after the other), or a bias."""

    train_flags = ["--batch-graphs", "2", "--accumulate", "1", "--swa", "0"]

    def __init__(self, originals, work):
        self.root = os.path.join(originals, REPO_6TH)
        src = os.path.join(self.root, DIR_6TH[self.name])
        sys.path.insert(0, src)  # model.py does `from dataset import *` and `from myloss import *`
        with quiet(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load_module("dataset", os.path.join(src, "dataset.py"))
            self.loss_mod = load_module("myloss", os.path.join(src, "myloss.py"))
            model_mod = load_module("hengck_model_" + self.name, os.path.join(src, "model.py"))
        stat = os.path.join(work, "identity.stat.pickle")  # the in-forward standardisation made the identity
        with open(stat, "wb") as f:
            pickle.dump({"node_feat_mean": np.zeros(140, np.float32),
                         "node_feat_std": np.full(140, 1 - 1e-4, np.float32)}, f)
        self.net = model_mod.Net({"pickle_file": stat})
        self.net.node_opcode_embed.max_norm = None
        self.net.node_feat_mean.requires_grad_(False)
        self.net.node_feat_std.requires_grad_(False)
        self.net.eval()

    def pairs(self):
        """{gnn array: [original parameters, stacked along the gnn array's rows]}; a 2-d original
        parameter is a torch Linear weight [out, in], transposed to gnn's [in, out]."""
        p = {"head.late.0.lin.weight": ["late_mlp.0.weight"], "head.late.1.lin.weight": ["late_mlp.3.weight"],
             "head.predict.weight": ["predict.weight"], "head.predict.bias": ["predict.bias"]}
        p.update(self.early())
        for l in range(len(self.net.gconv)):
            p.update(self.layers(l))
        return p

    def load(self, z):
        sd = dict(self.net.named_parameters())
        with torch.no_grad():
            e = z["param/op_embedding.weight"]  # [121, D]: the original's table has 128 rows
            sd["node_opcode_embed.weight"].zero_()
            sd["node_opcode_embed.weight"][: e.shape[0]] = torch.from_numpy(e)
            # --node-transform trainable: its in-forward standardisation is ours (node_norm), trained
            # and compared; otherwise the identity made above, and left out.
            trainable = "param/node_norm.mean" in z
            for n, ours in (("node_feat_mean", "node_norm.mean"), ("node_feat_std", "node_norm.std")):
                if trainable:
                    sd[n].copy_(torch.from_numpy(z["param/" + ours]).reshape(1, -1))
                sd[n].requires_grad_(trainable)
            load_pairs(z, sd, self.pairs())

    def forward(self, z):
        x, cn, cfg = layout_inputs(z)
        dt = next(self.net.parameters()).dtype
        r = {"node_feat": torch.from_numpy(x).to(dt),
             "node_opcode": torch.from_numpy(z["batch/opcode"].astype(np.int64)),
             "edge_index": torch.from_numpy(z["batch/edges"].T.astype(np.int64).copy()),
             "node_config_ids": torch.from_numpy(cn), "node_config_feat": torch.from_numpy(cfg.copy()).to(dt)}
        return self.net.infer_one(r)

    def loss(self, score, z):
        truth = torch.from_numpy(z["batch/target"]).reshape(1, -1)  # f64: only compared
        return self.loss_mod.F_ordered_pair_loss(score.reshape(1, -1), truth)

    def grads(self, z):
        """Each of our gradient arrays rebuilt from the original's parameter gradients."""
        sd = dict(self.net.named_parameters())
        g = {k: sd[k].grad.numpy() for k in sd if sd[k].grad is not None}
        out = {"op_embedding.weight": g["node_opcode_embed.weight"][: z["param/op_embedding.weight"].shape[0]]}
        for ours, names in self.pairs().items():
            out[ours] = np.concatenate([g[n].T if g[n].ndim == 2 else g[n] for n in names], 0)
        if "param/node_norm.mean" in z:
            out["node_norm.mean"], out["node_norm.std"] = g["node_feat_mean"][0], g["node_feat_std"][0]
        return out

    constant = {}  # set by main: trainable_parts

    def row_parts(self, z):
        return trainable_parts(z, self.constant)


class Sage6(Sixth):
    """layout-sage-6th: SAGEConv's lin_l (the neighbour mean) over lin_r (the node) in one weight."""

    name, recipe = "sage6", "layout-sage-6th"

    def early(self):
        return {"early.0.lin.weight": ["early_mlp.0.weight"], "early.1.lin.weight": ["early_mlp.4.weight"]}

    def layers(self, l):
        return {f"layers.{l}.lin.weight": [f"gconv.{l}.lin_l.weight", f"gconv.{l}.lin_r.weight"],
                f"layers.{l}.lin.bias": [f"gconv.{l}.lin_l.bias"]}


class Gin6(Sixth):
    """layout-gin-6th: GINConv's MLP, Linear (nn.0) -> norm -> ELU -> Linear (nn.3) -> norm -> ELU. The
    original's fourth layer reads the second's output: the run trains with --layer4-input second."""

    name, recipe = "gin6", "layout-gin-6th"
    train_flags = Sixth.train_flags + ["--layer4-input", "second"]

    def early(self):
        return {"early.lin.weight": ["early_mlp.0.weight"]}

    def layers(self, l):
        return {f"layers.{l}.mlp.{k}.lin.{w}": [f"gconv.{l}.nn.{3 * k}.{w}"] for k in (0, 1) for w in ("weight", "bias")}


class Tgraph:
    """gnn's layout-tgraph --node-layout embedded against the 1st place's LayoutModel (model.py, with the
    arguments its train_xla_default.sh passes; loss.py PairwiseHingeLoss as engine.py calls it).

    Its forward takes configs [C, K, 18] (values -1..5), node features [N, 134] already standardised (its
    dataset's StandardScaler runs before the model, so ours are fed as they are), the node's own layout
    [N, 6] (ours are categories v + 1, 0 past the rank: minus 1), opcodes, edge_index [2, E] and the
    configurable node ids. Its hinge is a mean over all C^2 pairs, ours over the pairs that count (a
    listed departure): its loss is taken times C^2 / P for the comparison.

    Weight map: embedding_op = op_embedding rows 0..119 (its table has 120); embedding_layout_cfg row 0
    (not configurable) = config_embedding row 7, rows 1..7 (values -1..5) = rows 0..6; linear.linear reads
    [x | configs | own layout | opcode], ours input.0.lin the rows [opcode 0:16 | x 16:150 | own 150:174 |
    configs 174:246]; linear2 = input.1.lin; {linear, linear2, convs.l}.attn.linear1/2 = the blocks'
    attend.se.squeeze/excite; cross_attn.temperature = 1 / attend.cross.beta (so dL/dbeta = -T^2 dL/dT);
    convs.l.conv.lin_l (neighbour mean, with the bias) over lin_r (the node) = blocks.l.sage.lin;
    classifier = predict."""

    name, recipe = "tgraph", "layout-tgraph"
    train_flags = ["--node-layout", "embedded"]
    OP, X, OWN, CFG = (0, 16), (16, 150), (150, 174), (174, 246)  # our input.0.lin.weight rows

    def __init__(self, originals, work):
        self.root = os.path.join(originals, REPO_1ST)
        with quiet(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model_mod = load_module("gfos_model", os.path.join(self.root, "model.py"))
            self.loss_mod = load_module("gfos_loss", os.path.join(self.root, "loss.py"))
            self.net = model_mod.LayoutModel(hidden_channels=[256, 256], graph_in=256, graph_out=256,
                                             hidden_dim=256, dropout=0.2, gat_droprate=0.2, op_embedding_dim=16,
                                             layout_embedding_dim=4, norm="instance", use_cross_attn=True)
        self.net.eval()

    def blocks(self):
        """(the original's module, ours) for each block with squeeze-excitation and cross attention."""
        return [("linear", "input.0"), ("linear2", "input.1")] + \
               [(f"convs.{l}", f"blocks.{l}") for l in range(len(self.net.convs))]

    def rows(self, r):
        return slice(*getattr(self, r))

    def load(self, z):
        sd = dict(self.net.named_parameters())
        P = lambda n: z["param/" + n]  # noqa: E731

        def put(name, a):
            a = np.array(a, np.float32, order="C")
            if tuple(a.shape) != tuple(sd[name].shape):
                sys.exit(f"check_vs_original: {a.shape} does not fit {name} {tuple(sd[name].shape)}: train the run "
                         "at the original's widths (the recipe's defaults) with --node-layout embedded")
            sd[name].copy_(torch.from_numpy(a))

        if int(z["batch/opcode"].max()) >= 120:
            sys.exit("check_vs_original: an opcode of 120 in the batch: the original's table has 120 rows")
        with torch.no_grad():
            put("embedding_op.weight", P("op_embedding.weight")[:120])
            ce = P("config_embedding.weight")
            put("embedding_layout_cfg.weight", np.concatenate([ce[7:8], ce[0:7]], 0))
            w = P("input.0.lin.weight")
            put("linear.linear.weight", np.concatenate([w[self.rows(r)] for r in ("X", "CFG", "OWN", "OP")], 0).T)
            put("linear.linear.bias", P("input.0.lin.bias"))
            put("linear2.linear.weight", P("input.1.lin.weight").T)
            put("linear2.linear.bias", P("input.1.lin.bias"))
            for o, u in self.blocks():
                for k, ours in (("linear1", "squeeze"), ("linear2", "excite")):
                    put(f"{o}.attn.{k}.weight", P(f"{u}.attend.se.{ours}.weight").T)
                    put(f"{o}.attn.{k}.bias", P(f"{u}.attend.se.{ours}.bias"))
                put(f"{o}.cross_attn.temperature", (1.0 / P(f"{u}.attend.cross.beta").astype(np.float64)).reshape(()))
            for l in range(len(self.net.convs)):
                w = P(f"blocks.{l}.sage.lin.weight")
                put(f"convs.{l}.conv.lin_l.weight", w[: w.shape[0] // 2].T)
                put(f"convs.{l}.conv.lin_r.weight", w[w.shape[0] // 2:].T)
                put(f"convs.{l}.conv.lin_l.bias", P(f"blocks.{l}.sage.lin.bias"))
            put("classifier.weight", P("predict.weight").T)
            put("classifier.bias", P("predict.bias"))

    def forward(self, z):
        x, cn, cfg = layout_inputs(z)
        dt = self.net.classifier.weight.dtype
        return self.net(torch.from_numpy(cfg.astype(np.int64).copy()),
                        torch.from_numpy(np.ascontiguousarray(x[:, :134])).to(dt),
                        torch.from_numpy(z["batch/node_layout"].astype(np.int64) - 1),
                        torch.from_numpy(z["batch/opcode"].astype(np.int64)),
                        torch.from_numpy(z["batch/edges"].T.astype(np.int64).copy()), torch.from_numpy(cn))

    def loss(self, score, z):
        t = z["batch/target"]
        y = score.reshape(1, -1)
        loss = self.loss_mod.PairwiseHingeLoss()(y, torch.from_numpy(t).reshape(1, -1),
                                                 n=torch.tensor([y.shape[1]])).mean()
        return loss * (len(t) ** 2 / int((t[:, None] > t[None, :]).sum()))  # over the counted pairs, as ours

    def grads(self, z):
        sd = dict(self.net.named_parameters())
        g = {k: (v.grad if v.grad is not None else torch.zeros_like(v)).double().numpy() for k, v in sd.items()}
        op = np.zeros(z["param/op_embedding.weight"].shape)
        op[:120] = g["embedding_op.weight"]
        ce = g["embedding_layout_cfg.weight"]
        out = {"op_embedding.weight": op, "config_embedding.weight": np.concatenate([ce[1:8], ce[0:1]], 0)}
        first, w = g["linear.linear.weight"].T, np.zeros(z["param/input.0.lin.weight"].shape)
        at = 0
        for r in ("X", "CFG", "OWN", "OP"):
            n = self.rows(r).stop - self.rows(r).start
            w[self.rows(r)], at = first[at:at + n], at + n
        out["input.0.lin.weight"], out["input.0.lin.bias"] = w, g["linear.linear.bias"]
        out["input.1.lin.weight"], out["input.1.lin.bias"] = g["linear2.linear.weight"].T, g["linear2.linear.bias"]
        for o, u in self.blocks():
            for k, ours in (("linear1", "squeeze"), ("linear2", "excite")):
                out[f"{u}.attend.se.{ours}.weight"] = g[f"{o}.attn.{k}.weight"].T
                out[f"{u}.attend.se.{ours}.bias"] = g[f"{o}.attn.{k}.bias"]
            T = float(sd[f"{o}.cross_attn.temperature"].detach())
            out[f"{u}.attend.cross.beta"] = np.array([-T * T * float(g[f"{o}.cross_attn.temperature"])])
        for l in range(len(self.net.convs)):
            out[f"blocks.{l}.sage.lin.weight"] = np.concatenate([g[f"convs.{l}.conv.lin_l.weight"].T,
                                                                 g[f"convs.{l}.conv.lin_r.weight"].T], 0)
            out[f"blocks.{l}.sage.lin.bias"] = g[f"convs.{l}.conv.lin_l.bias"]
        out["predict.weight"], out["predict.bias"] = g["classifier.weight"].T, g["classifier.bias"]
        return out


class TileGat6:
    """gnn's tile-gat-6th --join late --heads 1 --listmle-order slowest against the 6th place's tile Net
    (src/res-gatconv4-listmle-hop5-tile/model.py, Net.infer_one; loss myloss.py F_listMLE).

    The published model joins the configs late: its first late Linear reads [config | pooled graph], and
    the norm over the slate's configs that follows subtracts the pooled part, the same for every config.
    So its score is a function of the config features and the late weights alone; everything before the
    pool (opcode embedding, early MLP, the four GATv2 layers) gets a gradient that is zero in exact
    arithmetic. Its GATv2 layers (ours are GAT's) therefore have no counterpart to map: they keep a seeded
    initialisation, and the comparison shows their gradients and ours to be rounding noise (~0 rows).

    Inputs: node_feat our standardised x [N, 140], config_feat ours [C, 24]; the original's in-forward
    standardisations (both nn.Parameters) made the identity (mean 0, std 1 - 1e-4) and left out, as for
    sage6. Its opcode embedding's max_norm is the run's --op-max-norm, off without it, as for sage6.
    Its listMLE sorts the runtimes descending and takes its scores as utilities: ours with
    --listmle-order slowest. Its log(cumsum + 1e-10) is ours without the 1e-10. It is fed our targets
    (the runtimes over their normalisers): the same order as its raw config_runtime wherever a kernel's
    normaliser is one number for all its configs, as in the files read here.

    Weight map: node_opcode_embed rows 0..120 = op_embedding (its table has 128); early_mlp.0/4 =
    early.0/1.lin.weight^T; late_mlp.0/3 = head.late.0/1.lin.weight^T (rows [config 24 | pooled 256], as
    its concatenation); predict = head.predict."""

    name, recipe = "tilegat6", "tile-gat-6th"
    DIR = "src/res-gatconv4-listmle-hop5-tile"
    train_flags = ["--join", "late", "--heads", "1", "--listmle-order", "slowest", "--batch-graphs", "2"]
    synth = ["--collection", "tile", "--graphs", "3", "--nodes", "60", "--configs", "40", "--seed", "3",
             "--split", "train,valid"]

    def __init__(self, originals, work):
        self.root = os.path.join(originals, REPO_6TH)
        src = os.path.join(self.root, self.DIR)
        sys.path.insert(0, src)
        with quiet(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load_module("dataset", os.path.join(src, "dataset.py"))
            self.loss_mod = load_module("myloss", os.path.join(src, "myloss.py"))
            model_mod = load_module("hengck_model_tile", os.path.join(src, "model.py"))
        stat = os.path.join(work, "identity_tile.stat.pickle")
        with open(stat, "wb") as f:
            pickle.dump({"node_feat_mean": np.zeros(140, np.float32), "node_feat_std": np.full(140, 1 - 1e-4, np.float32),
                         "config_feat_mean": np.zeros(24, np.float32),
                         "config_feat_std": np.full(24, 1 - 1e-4, np.float32)}, f)
        torch.manual_seed(0)  # the GATv2 layers' initialisation (no counterpart in ours)
        self.net = model_mod.Net({"pickle_file": stat})
        self.net.node_opcode_embed.max_norm = None
        for n in ("node_feat_mean", "node_feat_std", "config_feat_mean", "config_feat_std"):
            getattr(self.net, n).requires_grad_(False)
        self.net.eval()

    PAIRS = {"early.0.lin.weight": "early_mlp.0.weight", "early.1.lin.weight": "early_mlp.4.weight",
             "head.late.0.lin.weight": "late_mlp.0.weight", "head.late.1.lin.weight": "late_mlp.3.weight",
             "head.predict.weight": "predict.weight", "head.predict.bias": "predict.bias"}

    def load(self, z):
        sd = dict(self.net.named_parameters())
        with torch.no_grad():
            e = z["param/op_embedding.weight"]
            sd["node_opcode_embed.weight"].zero_()
            sd["node_opcode_embed.weight"][: e.shape[0]] = torch.from_numpy(e)
            for ours, theirs in self.PAIRS.items():
                a = z["param/" + ours]
                a = a.T if sd[theirs].dim() == 2 else a
                if tuple(a.shape) != tuple(sd[theirs].shape):
                    sys.exit(f"check_vs_original: {ours} {a.shape} does not fit {theirs} {tuple(sd[theirs].shape)}: "
                             "train the run at the original's widths (the recipe's defaults) with --heads 1")
                sd[theirs].copy_(torch.from_numpy(np.ascontiguousarray(a)))
            for theirs, ours in self.NORMS.items():  # --node/--config-transform trainable: ours, compared
                trainable = "param/" + ours in z
                if trainable:
                    sd[theirs].copy_(torch.from_numpy(z["param/" + ours]).reshape(1, -1))
                sd[theirs].requires_grad_(trainable)

    NORMS = {"node_feat_mean": "node_norm.mean", "node_feat_std": "node_norm.std",
             "config_feat_mean": "config_norm.mean", "config_feat_std": "config_norm.std"}

    def forward(self, z):
        dt = next(self.net.parameters()).dtype
        r = {"node_feat": torch.from_numpy(z["batch/x"]).to(dt),
             "node_opcode": torch.from_numpy(z["batch/opcode"].astype(np.int64)),
             "edge_index": torch.from_numpy(z["batch/edges"].T.astype(np.int64).copy()),
             "config_feat": torch.from_numpy(z["batch/config_feat"]).to(dt)}
        return self.net.infer_one(r)

    def loss(self, score, z):
        return self.loss_mod.F_listMLE(score.reshape(1, -1), torch.from_numpy(z["batch/target"]).reshape(1, -1))

    def grads(self, z):
        sd = dict(self.net.named_parameters())
        g = {k: v.grad.double().numpy() for k, v in sd.items() if v.grad is not None}
        out = {"op_embedding.weight": g["node_opcode_embed.weight"][: z["param/op_embedding.weight"].shape[0]]}
        for ours, theirs in self.PAIRS.items():
            out[ours] = g[theirs].T if g[theirs].ndim == 2 else g[theirs]
        for theirs, ours in self.NORMS.items():
            if "param/" + ours in z:
                out[ours] = g[theirs][0]
        for k in z:  # our GAT layers: no counterpart, zero in exact arithmetic
            if k.startswith("grad/layers."):
                out[k[len("grad/"):]] = np.zeros_like(z[k], np.float64)
        return out

    def row_parts(self, z):
        """The first late Linear's rows compared in two parts: the config rows carry the gradient, the
        pooled rows' gradient is zero in exact arithmetic (the slate norm cancels them), rounding noise on
        both sides, so it is judged as a ~0 array of its own."""
        width = z["batch/config_feat"].shape[1]
        return {"head.late.0.lin.weight": [("config", slice(0, width)), ("pooled", slice(width, None))],
                **trainable_parts(z, self.constant)}

    constant = {}  # set by main: trainable_parts

    def original_only(self):
        """The original's parameters without a counterpart in ours, whose gradients must be ~0."""
        return [n for n, _ in self.net.named_parameters() if n.startswith("gconv.")]


class Sage5:
    """gnn's layout-sage-5th with the original's inputs (--node-transform 5th --opcode-groups unary
    --own-layout zeros) against the 5th place's GNN (src/nn.py, config/default.yaml's settings: 64-wide
    opcodes, a 384-wide pre-linear, 3 layers, the last layer's output pooled), which runs on the batch its
    own dataset builds from the graph's file (extra() compares that batch's inputs with ours).

    Its forward reads [x (53 whole-node columns) | opcode | dim_feat (6 x 23) | layout (3 x 6) | tile
    (3 x 6, zeros for layout graphs)] per node and config; ours [opcode | x (191: the 53, then the 138) |
    layout (18)]. Its loss is half the hinge over each graph's pairs and half over the batch's, both means
    over all C^2 pairs; with one graph the two are one, and it is taken times C^2 / P for the comparison,
    as ours is a mean over the counted pairs.

    Weight map: opcode_embed = ours (121 rows); pre_linear.0.weight (its [384, 291]) columns [x 0:53 |
    opcode 53:117 | dims 117:255 | layout 255:273] = our pre_linear.weight rows [64:117 | 0:64 | 117:255 |
    255:273], its tile columns 273:291 zero (their inputs are); {convs, rev_convs}.l.lin_l (the neighbour
    mean, with the bias) and lin_r (the node) = ours, transposed; head = ours."""

    name, recipe = "sage5", "layout-sage-5th"
    train_flags = ["--node-transform", "5th", "--opcode-groups", "unary", "--own-layout", "zeros",
                   "--batch-graphs", "1"]
    OURS = [(64, 117), (0, 64), (117, 255), (255, 273)]  # our pre_linear rows, in the original's column order

    def __init__(self, originals, work):
        o = load_fifth(originals)
        self.root, self.config, self.dataset, self.cfg = o.root, o.config, o.dataset, o.cfg
        self.net = o.nn.GNN(self.cfg)
        self.net.eval()
        self.data = None  # set by main: the dataset tree, for the graph's own node_feat

    def names(self):
        """{our array: (its parameter, transpose)} for every array but the pre-linear weight."""
        p = {"opcode_embed.weight": ("opcode_embed.weight", False), "pre_linear.bias": ("pre_linear.0.bias", False),
             "head.weight": ("head.weight", True), "head.bias": ("head.bias", False)}
        for side in ("convs", "rev_convs"):
            for l in range(len(self.net.convs)):
                for w in ("lin_l.weight", "lin_l.bias", "lin_r.weight"):
                    p[f"{side}.{l}.{w}"] = (f"{side}.{l}.{w}", w.endswith("weight"))
        return p

    def load(self, z):
        sd = dict(self.net.named_parameters())
        with torch.no_grad():
            for ours, (theirs, tr) in self.names().items():
                a = z["param/" + ours]
                a = a.T if tr else a
                if tuple(a.shape) != tuple(sd[theirs].shape):
                    sys.exit(f"check_vs_original: {ours} {z['param/' + ours].shape} does not fit {theirs} "
                             f"{tuple(sd[theirs].shape)}: train the run at the original's widths (the defaults)")
                sd[theirs].copy_(torch.from_numpy(np.ascontiguousarray(a)))
            w, ours = sd["pre_linear.0.weight"], z["param/pre_linear.weight"]
            if ours.shape[0] != 273 or w.shape[1] != 291:
                sys.exit(f"check_vs_original: pre_linear.weight is {ours.shape}, the original's {tuple(w.shape)}: "
                         "train with --node-transform 5th (191 node columns)")
            w.zero_()
            at = 0
            for lo, hi in self.OURS:
                w[:, at:at + hi - lo] = torch.from_numpy(np.ascontiguousarray(ours[lo:hi].T))
                at += hi - lo

    def graph_file(self):
        """The file gnn pass read: <collection>/train/<stem>.npz under --data (a graph id is
        layout:xla:default:STEM; the same program may also sit in another collection, valid or test)."""
        *collection, stem = self.graph.split(":")
        where = os.sep + os.path.join(*collection, "train") + os.sep
        found = [os.path.join(r, f) for r, _, fs in os.walk(self.data) for f in fs
                 if f == stem + ".npz" and where in os.path.join(r, f)]
        if len(found) != 1:
            sys.exit(f"check_vs_original: {len(found)} files named {stem}.npz under {self.data}")
        return found[0]

    def their_batch(self, z):
        """The original's dataset item for the same configs (first_config is a multiple of configs: its items
        are consecutive slates of the file's configs), collated as its DataLoader does."""
        from torch_geometric.data import Batch
        C = z["score"].shape[0]
        ids = z["batch/config_ids"].astype(np.int64)
        if ids[0] % C or not np.array_equal(ids, np.arange(ids[0], ids[0] + C)):
            sys.exit("check_vs_original: --model sage5 needs consecutive configs from a multiple of --configs "
                     f"(the original's slates), got {ids.tolist()}")
        cfg = self.config.Config(dict(self.cfg))
        ds = self.dataset.KaggleDataset([self.graph_file()], C, cfg, None, config_from_npy=False)
        return Batch.from_data_list([ds[int(ids[0] // C)]["data"]])

    def batch(self, z):
        b = self.their_batch(z)
        dt = next(self.net.parameters()).dtype
        for k in ("x", "dim_feat", "tile_feat", "layout_feat"):
            b[k] = b[k].to(dt)
        return b

    def forward(self, z):
        return self.net(self.batch(z)).reshape(-1)

    def loss(self, score, z):
        t = torch.from_numpy(z["batch/target"])
        pred = score.reshape(1, -1).to(t.dtype)
        hinge = ((t[:, None] > t[None, :]) * torch.relu(1 - (pred[0][:, None] - pred[0][None, :]))).mean()
        return hinge * (len(t) ** 2 / int((t[:, None] > t[None, :]).sum()))

    def grads(self, z):
        sd = dict(self.net.named_parameters())
        out = {}
        for ours, (theirs, tr) in self.names().items():
            g = sd[theirs].grad.numpy()
            out[ours] = g.T if tr else g
        g = sd["pre_linear.0.weight"].grad.numpy().T  # [291, 384]
        w = np.zeros_like(z["param/pre_linear.weight"], dtype=g.dtype)
        at = 0
        for lo, hi in self.OURS:
            w[lo:hi] = g[at:at + hi - lo]
            at += hi - lo
        out["pre_linear.weight"] = w
        return out

    def extra(self, z, graph):
        """The original's inputs for this batch against ours: its FeatureReader's columns against our
        preprocessed x, its (merged) opcodes, and its layout values against what our recipe builds."""
        x, cn, cfg = layout_inputs(z, width=191)
        b = self.their_batch(z)
        C, N = cfg.shape[0], x.shape[0]
        own = z["batch/node_layout"].astype(np.float32) - 1  # categories v + 1, 0 past the rank
        if self.hparams.get("own-layout") == "zeros":
            own[own == 0] = -1
        layout = np.repeat(np.repeat(own[:, None, None, :], 3, axis=2), C, axis=1)  # [N, C, 3, 6]
        layout[cn] = cfg.reshape(C, len(cn), 3, 6).transpose(1, 0, 2, 3)
        ops = z["batch/opcode"].astype(np.int64)
        if self.hparams.get("opcode-groups") == "unary":
            unary = self.dataset.opcode_groups["element-wise-unary"]
            ops = np.where(np.isin(ops, unary), unary[0], ops)
        return {"input/node columns": (x[:, :53], b.x.numpy()),
                "input/per-dimension columns": (x[:, 53:].reshape(N, 6, 23), b.dim_feat.numpy()),
                "input/opcodes": (ops, b.node_opcode.numpy()),
                "input/layout values": (layout, b.layout_feat.numpy())}


class Second:
    """gnn's layout-sage-2nd against the 2nd place's layout Model (Obs01ete/kaggle_latenciaga at ca55746,
    src/model.py; Model(is_tile=False, is_nlp=False, is_default=True, wider_config=False): the xla stack;
    its loss as src/main.py's Trainer.train takes it on layout xla, written out below).

    Its own inputs, from the graph's file as its data.py reads it (edge_index the file's transposed,
    node_feat raw, the chosen configs' node_config_feat beside node_config_ids), one PyG Data per config
    collated as its training microbatch (Batch.from_data_list, follow_batch its FOLLOW_BATCH_KEYS), fed
    to its forward with ub_size = the batch's configs. Only src/utils.py and src/model.py are imported:
    model.py needs no data.py (whose `name in data.keys` fails on PyG >= 2.4: bench/peers/
    train_original.py's keys_shim), and nothing here calls it. Its forward takes log1p(relu(x)) of the
    raw features, ours the trainer's sign-log1p (--node-transform log1p): the two are compared as an
    input (input/node features: our x against log1p(relu(raw)) in f32), equal where no feature is
    negative. Its loss: (1 / margin) * mean over the C(C-1)/2 pairs of margin_ranking_loss(prediction
    difference, 0, sign(runtime difference)), margin 0.01 s (the run's --margin), without its MAPE term
    (the recipe's default --mape-weight 0; a run with one is refused); ours is the hinge mean over the
    P strictly ordered pairs, so its loss is taken times margin * C(C-1)/2 / P.

    Weight map (torch Linear [out, in], ours [in, out]): node_feat_embedding = node_feat_embedding^T;
    node_opcode_embedding = op_embedding rows 0..119 (its table has 120, ours 121); input_shaping =
    input^T (rows [node features 20 | opcode 12 | config 18], its concatenation's order); convs.l.lin_l
    (the neighbour mean, with the bias) over convs.l.lin_r (the node) = convs.l.lin; output_shaping = out."""

    name, recipe = "sage2", "layout-sage-2nd"
    train_flags = []
    graph_file = Sage5.graph_file  # (the file gnn pass read)

    def __init__(self, originals, work):
        self.root = os.path.join(originals, REPO_2ND)
        sys.path.insert(0, self.root)  # its model.py does `from src.utils import ...`
        with quiet(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.utils = load_module("src.utils", os.path.join(self.root, "src", "utils.py"))
            model_mod = load_module("src.model", os.path.join(self.root, "src", "model.py"))
        self.net = model_mod.Model(is_tile=False, is_nlp=False, is_default=True, wider_config=False)
        self.net.eval()
        self.raw = None

    def pairs(self):
        """{gnn array: [original parameters, stacked along its rows]}."""
        p = {"node_feat_embedding.weight": ["node_feat_embedding.weight"],
             "node_feat_embedding.bias": ["node_feat_embedding.bias"],
             "input.weight": ["input_shaping.weight"], "input.bias": ["input_shaping.bias"],
             "out.weight": ["output_shaping.weight"], "out.bias": ["output_shaping.bias"]}
        for l in range(len(self.net.convs)):
            p[f"convs.{l}.lin.weight"] = [f"convs.{l}.lin_l.weight", f"convs.{l}.lin_r.weight"]
            p[f"convs.{l}.lin.bias"] = [f"convs.{l}.lin_l.bias"]
        return p

    def load(self, z):
        if float(self.hparams.get("mape-weight", "0")) != 0:
            sys.exit("check_vs_original: --model sage2 compares the ranking loss alone: train the run with "
                     "--mape-weight 0 (the recipe's default)")
        if self.hparams.get("stack", "xla") != "xla":
            sys.exit("check_vs_original: --model sage2 builds the original's xla stack: train with --stack xla")
        if int(z["batch/opcode"].max()) >= 120:
            sys.exit("check_vs_original: an opcode of 120 in the batch: the original's table has 120 rows")
        sd = dict(self.net.named_parameters())
        with torch.no_grad():
            sd["node_opcode_embedding.weight"].copy_(torch.from_numpy(z["param/op_embedding.weight"][:120]))
            load_pairs(z, sd, self.pairs())

    def file(self):
        """The graph's file, read once: its arrays as the original's data.py reads them."""
        if self.raw is None:
            with np.load(self.graph_file()) as f:
                self.raw = {k: f[k] for k in ("node_feat", "node_opcode", "edge_index", "node_config_ids")}
                self.raw["node_config_feat"] = f["node_config_feat"]
        return self.raw

    def batch(self, z):
        """Its training microbatch of the pass's configs: one Data per config (its data.py's train branch),
        collated by PyG."""
        from torch_geometric.data import Batch, Data
        r = self.file()
        dt = next(self.net.parameters()).dtype
        ei = torch.tensor(r["edge_index"].T).long()
        feat, ops = torch.from_numpy(r["node_feat"]).to(dt), torch.from_numpy(r["node_opcode"])
        ids = torch.from_numpy(r["node_config_ids"])
        items = []
        for c in z["batch/config_ids"].astype(np.int64):
            d = Data(edge_index=ei)
            d.node_feat, d.node_opcode = feat, ops
            # f32 in its f64 run too: its forward scatters them into an f32 zeros (the values are small
            # integers, exact in f32) and torch.cat promotes that to the f64 of the rest
            d.node_config_feat, d.node_config_ids = torch.from_numpy(r["node_config_feat"][c]), ids
            items.append(d)
        return Batch.from_data_list(items, follow_batch=["node_config_feat", "node_config_ids", "config_feat"])

    def forward(self, z):
        b = self.batch(z)
        C = len(z["batch/config_ids"])
        with quiet():
            pred, self.pred_diff = self.net(b.node_feat, b.node_opcode, b.batch, b.ptr, b.node_config_feat,
                                            b.node_config_ids, b.node_config_feat_ptr, None, None, b.edge_index, C)
        return pred

    def loss(self, score, z):
        t = z["batch/target"]
        m = float(self.hparams.get("margin", "0.01"))
        y = self.utils.triu_vector(self.utils.make_diff_matrix(torch.from_numpy(t))).reshape(1, -1)
        hinge = torch.nn.functional.margin_ranking_loss(self.pred_diff, torch.zeros_like(self.pred_diff),
                                                        torch.sign(y).to(self.pred_diff.dtype), margin=m,
                                                        reduction="none") / m
        pairs = len(t) * (len(t) - 1) // 2
        return hinge.mean() * (m * pairs / int((t[:, None] > t[None, :]).sum()))  # as ours: over the ordered pairs

    def grads(self, z):
        sd = dict(self.net.named_parameters())
        g = {k: v.grad.numpy() for k, v in sd.items() if v.grad is not None}
        op = np.zeros(z["param/op_embedding.weight"].shape, g["node_opcode_embedding.weight"].dtype)
        op[:120] = g["node_opcode_embedding.weight"]
        out = {"op_embedding.weight": op}
        for ours, names in self.pairs().items():
            out[ours] = np.concatenate([g[n].T if g[n].ndim == 2 else g[n] for n in names], 0)
        return out

    def extra(self, z, graph):
        """Its inputs against ours: the node features each model's layer reads (our preprocessed x, its
        log1p(relu(raw)) in f32), opcodes, edges (as sets of rows [u, v], u consuming v) and configs."""
        r = self.file()
        x, cn, cfg = layout_inputs(z)
        theirs = np.log1p(np.maximum(r["node_feat"], 0).astype(np.float32))
        ours_e, their_e = (np.unique(e.astype(np.int64), axis=0) for e in (z["batch/edges"], r["edge_index"]))
        ids = z["batch/config_ids"].astype(np.int64)
        return {"input/node features": (x, theirs),
                "input/opcodes": (z["batch/opcode"].astype(np.int64), r["node_opcode"].astype(np.int64)),
                "input/edges": (ours_e, their_e),
                "input/config nodes": (cn, r["node_config_ids"].astype(np.int64)),
                "input/configs": (cfg, r["node_config_feat"][ids])}


MODELS = {"sage2": Second, "sage5": Sage5, "sage6": Sage6, "gin6": Gin6, "tgraph": Tgraph, "tilegat6": TileGat6}


@contextlib.contextmanager
def in_f64(net):
    """The original run in f64: its parameters as doubles, and Tensor.float(), which its forward calls on
    intermediate values (the 6th place's one_hot(...).float()), made a cast to double for the duration.
    Its f32 outputs measured against these are its own f32 rounding on the batch."""
    net.double()
    cast = torch.Tensor.float
    torch.Tensor.float = lambda self, *args, **kw: self.to(torch.float64)
    try:
        yield
    finally:
        torch.Tensor.float = cast
        net.float()  # (f32 -> f64 -> f32 gives the same bits back)


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
    ap.add_argument("--data", help="a dataset tree (default: a generated set of the model's kind)")
    ap.add_argument("--graph", help="the training graph to compare on (gnn pass --graph; default: the first)")
    ap.add_argument("--configs", type=int, default=8, help="configs in the batch (at least 2; 8 or more keeps "
                                                           "the late norm over the configs well conditioned)")
    ap.add_argument("--first-config", type=int, default=0,
                    help="the batch is configs first .. first + configs - 1 (default 0)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--train-flags", default="", help="more gnn train flags for the run, after the model's own "
                                                      "(a departure switched back on shows here)")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=2, help="CPU threads of gnn train, gnn pass and torch")
    ap.add_argument("--keep", help="keep the run and the pass here instead of a temporary folder")
    a = ap.parse_args()
    found = shutil.which(a.gnn)  # (a path, or a name on PATH)
    if not found:
        ap.error(f"--gnn {a.gnn}: not an executable (build gnn first)")
    a.gnn = found
    for flag, least in (("threads", 1), ("configs", 2), ("epochs", 1)):
        if getattr(a, flag) < least:
            ap.error(f"--{flag} must be >= {least}, got {getattr(a, flag)}")
    if a.keep and os.path.exists(a.keep) and not os.path.isdir(a.keep):
        ap.error(f"--keep {a.keep}: a file, not a folder")
    warnings.simplefilter("ignore")  # (the originals' own deprecation and shape notices)
    torch.set_num_threads(a.threads)
    work = a.keep or tempfile.mkdtemp(prefix="check_vs_original_")
    try:
        return check(a, work)
    finally:
        if not a.keep:  # (the temporary run and pass, 20-30 MB, whether the check passed or not)
            shutil.rmtree(work, ignore_errors=True)


def check(a, work):
    """The comparison of main()'s arguments a, its run and pass kept in the folder work."""
    os.makedirs(work, exist_ok=True)
    m = MODELS[a.model](a.originals, work)
    data = a.data
    if not data:  # (one a model: each model's kind and sizes)
        data = os.path.join(work, "data-" + a.model)
        if not os.path.isdir(data):
            gnn(a.gnn, "synth", "--out", data, *getattr(m, "synth", ["--collection", "layout", "--graphs", "3",
                                                                     "--nodes", "300", "--configs", "40", "--seed",
                                                                     "3", "--split", "train,valid"]))
    m.data = data
    run = os.path.join(work, "run")
    extra = a.train_flags.split()
    own = [f for i in range(0, len(m.train_flags), 2) if m.train_flags[i] not in extra
           for f in m.train_flags[i:i + 2]]  # (--train-flags replaces the model's flag of the same name)
    # A kept run is reused only for the same request: another --model, --epochs, --configs, --data or
    # --train-flags would be answered by the first run's weights. The request is written into the run's
    # folder once it has trained, so a run removed, or cut short, is never taken for it.
    request = {"model": a.model, "data": os.path.abspath(data), "epochs": a.epochs, "configs": a.configs,
               "train_flags": own + extra}  # (own in the model's order, then --train-flags as given)
    asked = os.path.join(run, "check_request.json")
    if os.path.exists(os.path.join(run, "model.npz")):
        kept = json.load(open(asked)) if os.path.exists(asked) else None
        if kept != request:
            sys.exit(f"check_vs_original: --keep {work} holds a run of other settings ({kept or 'not recorded'}, "
                     f"asked {request}); give another folder, or remove {run}")
    else:
        shutil.rmtree(run, ignore_errors=True)  # (a run cut short: trained again)
        gnn(a.gnn, "train", "--model", m.recipe, "--data", data, "--out", run, "--epochs", str(a.epochs),
            "--configs", str(a.configs), "--threads", str(a.threads), "--progress", "lines", *own, *extra)
        with open(asked, "w") as f:
            json.dump(request, f)
    # The run's own max_norm (its meta/hparams, so a kept run is read as it was trained): the original
    # renormalises as our run does, and not at all when it does not.
    with np.load(os.path.join(run, "model.npz")) as ckpt:
        hparams = json.loads(bytes(ckpt["meta/hparams"]).decode())
        # (prep/PART/scale: each column's std on train. The tile configs meet a norm at once only under
        # --join late; under --join early they pass a GELU first, and no column's gradient cancels.)
        m.constant = {f"{part}_norm.std": np.flatnonzero(ckpt[f"prep/{part}/scale"] == 0)
                      for part in ("node", "config") if hparams.get(f"{part}-transform") == "trainable"
                      and (part == "node" or hparams.get("join") == "late")}
    max_norm = float(hparams.get("op-max-norm", "0"))
    if hasattr(m.net, "node_opcode_embed"):
        m.net.node_opcode_embed.max_norm = max_norm if max_norm > 0 else None
    out = os.path.join(work, "pass.npz")
    configs = ",".join(str(c) for c in range(a.first_config, a.first_config + a.configs))
    info = json.loads(gnn(a.gnn, "pass", "--run", run, "--data", data, "--configs", configs,
                          "--threads", str(a.threads), "--out", out,
                          *(["--graph", a.graph] if a.graph else [])).strip().splitlines()[-1])
    z = dict(np.load(out))
    m.graph, m.hparams = info["graph"], hparams
    t = z["batch/target"]
    if len(np.unique(t)) != len(t):
        print("check_vs_original: warning: tied targets; the original's loss treats ties otherwise than ours (its "
              "pairwise losses count tied pairs; its listMLE breaks ties by a random shuffle, ours by index)",
              file=sys.stderr)
    m.load(z)

    def original(batch):
        torch.manual_seed(0)  # (the f32 and f64 runs draw alike: the tile listMLE's tie-breaking shuffle)
        for p in m.net.parameters():
            p.grad = None
        score = m.forward(batch)
        renormed = {}
        if max_norm > 0 and hasattr(m.net, "node_opcode_embed"):  # the table as its forward left it
            rows = batch["param/op_embedding.weight"].shape[0]
            renormed["param_after/op_embedding.weight"] = \
                m.net.node_opcode_embed.weight.detach().double().numpy()[:rows].copy()
        loss = m.loss(score, batch)
        loss.backward()
        out = {"score": score.detach().numpy().astype(np.float64), "loss": np.array([loss.item()]), **renormed}
        out.update({"grad/" + k: v.copy() for k, v in m.grads(batch).items()})
        sd = dict(m.net.named_parameters())
        for n in getattr(m, "original_only", list)():
            out["original/" + n] = sd[n].grad.double().numpy().copy()
        return out

    orig = original(z)
    m.load(z)  # (the f32 forward renormalised rows in place: the f64 run starts from the same weights)
    with in_f64(m.net):
        exact = original(z)
    if max_norm > 0 and "param_after/op_embedding.weight" not in z:  # our forward renormalised nothing
        z["param_after/op_embedding.weight"] = z["param/op_embedding.weight"]
    # An array whose rows play different parts (the model's row_parts) is compared part by part.
    parts = getattr(m, "row_parts", lambda z: {})(z)

    def split(d):
        out = {}
        for k, v in d.items():
            for name, rows in parts.get(k[len("grad/"):], []) if k.startswith("grad/") else []:
                out[f"{k}[{name}]"] = v[rows]
            if not (k.startswith("grad/") and k[len("grad/"):] in parts):
                out[k] = v
        return out

    orig, exact, z = split(orig), split(exact), split(z)
    # A gradient that is zero in exact arithmetic (a bias added before a norm over the nodes, the output
    # bias under a loss that compares scores only) is rounding noise on both sides: an array whose largest
    # magnitude is under 1e-4 of the largest gradient anywhere is measured against that largest gradient,
    # and marked ~0.
    top = max(float(np.abs(v).max()) for k, v in exact.items() if k.startswith("grad/") and v.size)
    rows = []
    for k, v in exact.items():
        if k.startswith("original/"):  # no counterpart in ours: the original's own gradient, ~0
            rows.append((k + " (~0)", rel(orig[k], np.zeros_like(v), top), rel(v, np.zeros_like(v), top),
                         rel(orig[k], v, top)))
            continue
        small = k.startswith("grad/") and float(np.abs(v).max()) < 1e-4 * top
        floor = top if small else 0.0
        ours = z[k].reshape(-1) if k == "score" else z[k]
        rows.append((k + (" (~0)" if small else ""), rel(ours, orig[k], floor), rel(ours, v, floor),
                     rel(orig[k], v, floor)))
    # An array agrees when gnn (f32) is within --tol of the original in f32, or no further from the
    # original in f64 than 4x the original's own f32 (its rounding on this batch). A ~0 array is a sum
    # that cancels in exact arithmetic, rounding noise in any f32 implementation: it agrees while that
    # noise stays under 1e-3 of the largest gradient.
    def agrees(name, d, d64, f):
        return d <= a.tol or d64 <= 4 * f or (name.endswith("(~0)") and d <= 1e-3)

    bad = [r for r in rows if not agrees(*r)]
    print(f"{'array':40s} {'gnn vs original':>16s} {'gnn vs orig f64':>16s} {'orig vs orig f64':>17s}")
    for name, d, d64, f in rows:
        ok = agrees(name, d, d64, f)
        print(f"{name:40s} {d:16.2e} {d64:16.2e} {f:17.2e}{'' if ok else '  differs'}")
    # Inputs the model's own preprocessing computes (sage5: its feature reader), ours against the
    # original's in f32: within --tol of the largest value.
    for name, (ours, theirs) in getattr(m, "extra", lambda z, g: {})(z, info["graph"]).items():
        d = rel(ours, theirs) if ours.shape == theirs.shape else float("inf")
        rows.append((name, d, d, 0.0))
        ok = d <= a.tol
        print(f"{name:40s} {d:16.2e} {'':16s} {'':17s}{'' if ok else '  differs'}")
        if not ok:
            bad.append(rows[-1])
    worst = max(r[1] for r in rows)
    print(json.dumps({"model": a.model, "recipe": m.recipe, "original_commit": commit_of(m.root),
                      "graph": info["graph"], "configs": a.configs, "nodes": int(z["batch/x"].shape[0]),
                      "max_rel_diff": worst, "max_rel_diff_f64": max(r[2] for r in rows),
                      "original_f32_vs_f64": max(r[3] for r in rows), "tol": a.tol,
                      "differs": [r[0] for r in bad], "same_function": not bad}))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
