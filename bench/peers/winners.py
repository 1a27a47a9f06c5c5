#!/usr/bin/env python3
"""One training step of the Kaggle "Fast or Slow" winners' layout models, run from THEIR OWN code, to time
against `gnn train --model layout-tgraph | layout-sage-6th | layout-gin-6th` on the same file.

This file holds none of their code: it imports their modules from the checkouts under --originals at
run time (importlib, from the files' paths) and drives them the way their training loops do. Get them:

    mkdir -p ORIG && cd ORIG
    git clone https://github.com/thanhhau097/google_fast_or_slow             # 1st place
    git clone https://github.com/hengck23/solution-predict-ai-model-runtime  # 6th place
    git -C google_fast_or_slow checkout 626c463dfb02abd739616773ca74f34e38635c71                # the commits read
    git -C solution-predict-ai-model-runtime checkout c9c5194b308931af8076c063afef84766e3ad19e  # (their HEADs)
    git clone https://github.com/knshnb/kaggle-tpu-graph-5th-place   # 5th place: scripts/check_vs_original.py only
    git -C kaggle-tpu-graph-5th-place checkout 3f2dfb86836156a3ce86fecb64becc5baa632659  # (needs pyyaml too)
    git clone https://github.com/Obs01ete/kaggle_latenciaga          # 2nd place: train_original.py, check_vs_original.py
    git -C kaggle_latenciaga checkout ca55746e8d424b685a7dae0f61462018c0cdfd12  # (before ListMLE; pandas, tqdm)
    pip install torch torch_geometric pandas scikit-learn tqdm  # the 1st place's dataset.py needs pandas, sklearn
The JSON line reports the commit it ran (originals_commit).

Usage: winners.py --originals ORIG --data FILE.npz --model tgraph|sage6|gin6 [--configs C] [--steps S]
       winners.py --originals ORIG --data TILE_DIR --model tile6 [--kernels 32] [--configs 64] [--steps S]
                  [--threads T] [--seed S] [--device cpu|cuda] [--amp none|bf16|fp16[,...]]

--device cuda --amp A runs their step on the GPU the way their training did: the 1st place's HF Trainer
with --bf16 (accelerate wraps the model's forward in torch.autocast(bfloat16) and hands its outputs back
as fp32, so the loss, backward, clipping and AdamW run outside it), the 6th place's trainer.py (inputs .cuda(non_blocking=True), the forward and loss under fp16
autocast, GradScaler's scale / step / update, torch.clear_autocast_cache()). --amp takes a comma list
(none,bf16): each precision is timed in turn on the same model and optimiser, which go on training from
where the previous one stopped, and prints its own JSON line; none is fp32. On the GPU every step ends
with torch.cuda.synchronize(), and peak_gpu_mb is torch.cuda.max_memory_allocated over the precision's
steps.

--model tgraph (1st place, google_fast_or_slow, as train_xla_default.sh runs it)
  preprocessing, once: data/data_compression.py's prune_graph (the configurable nodes and every node on an
    edge touching one, both directions; only the edges touching a configurable node are kept),
    remove_dupplicated_node_configs (train split) and compress_configs, written with np.savez_compressed
    as its __main__ does, then read back by dataset.py's load_df; dataset.py's LayoutDataset(split
    "train", max_configs C, scaler StandardScaler(), tgt_scaler StandardScaler()) fits both scalers
    (node_feat[:, :134] and config_runtime) on the (one-file) train set.
  each step: LayoutDataset[0] (random.sample of C configs, decompress_configs, node_feat split into
    [:, :134] standardised and [:, 134:140] as layout ids, runtime standardised, edge_index transposed to
    PyG's [2, E]) -> layout_collate_fn -> model.py's LayoutModel(hidden_channels [256, 256], graph_in 256,
    graph_out 256, hidden_dim 256, dropout 0.2, gat_droprate 0.2, op_embedding_dim 16,
    layout_embedding_dim 4, norm "instance", use_cross_attn True) in train mode -> loss.py's
    PairwiseHingeLoss as engine.py's pairwise_hinge_loss calls it -> backward -> clip_grad_norm_ 1.0 ->
    AdamW (lr 1e-3, weight decay 1e-5: HF Trainer's adamw_torch) -> cosine schedule with 5% warm-up
    (over --steps) -> zero_grad: the order of transformers' Trainer loop.
  The batch: one graph x C configs; node_config_feat [C, K, 18] int64, node_feat [N, 134] f32,
    node_layout_feat [N, 6] int64, node_opcode [N], edge_index [2, E], node_config_ids [K], target [C].
--model sage6 / gin6 (6th place, solution-predict-ai-model-runtime,
    src/res-graphsage4-pair-hop5-layout and src/res-gin4-pair-hop5-layout, as trainer.py runs them)
  preprocessing, once: dataset.py's run_make_mean_std_pickle_file over the train folder (here: the one
    file; the whole graph, as it uses num_hop=0), then load_npz(num_hop=5): add_hop (hop 0 the configurable
    nodes, then 5 hops to the nodes consuming them) and reduce_to_subgraph (the induced subgraph), tensors.
    model.py's Net(cfg) with cfg["pickle_file"] (its feature mean and std are nn.Parameters, so trained).
  each step: dataset.py's LayoutDataset(subsample size C, is_random, is_droplast) item (one graph, one
    group of C configs from a shuffled split of its configs; reset_subsample at each epoch's start, outside
    the timer) -> null_collate -> net([r]) in train mode (forward, F_ordered_pair_loss and
    F_ordered_pair_accuracy) -> rank_loss / B and .item() as trainer.py -> backward -> AdamW (lr 5e-4,
    torch's default weight decay 0.01; no clipping, no schedule).
  The batch: one graph x C configs; node_config_feat [C, K, 18] f32, node_feat [N, 140] f32, node_opcode
    [N], edge_index [2, E], node_config_ids [K], config_runtime [C].

--model tile6 (6th place, src/res-gatconv4-listmle-hop5-tile, as its trainer.py and
    res_gatconv4_tile_configuration.py run it; --data a folder of tile .npz files, the train split)
  preprocessing, once: dataset.py's run_make_mean_std_pickle_file and load_npz over the folder (edge pairs
    sorted, tensors), TileDataset(subsample size C = 64, is_random, is_droplast), model.py's Net(cfg).
  each step: --kernels (32) slates of a shuffled epoch of the dataset (reset_subsample when fewer remain;
    a kernel of n >= 128 configs gives n // 64 slates of an epoch) -> per slate: net([r]) in train mode (forward, F_listMLE, the accuracy metrics), rank_loss / B, .item(),
    backward -> AdamW (lr 5e-4, weight decay 0.01). configs counts the configs of the step's groups (a
    kernel with fewer than C configs gives them all), its mean over the steps.
  gnn's peer: `gnn train --model tile-gat-6th --join late --heads 1 --batch-graphs 32 --configs 64`, the
  same function (scripts/check_vs_original.py --model tilegat6); the default --join early runs the graph
  layers once per config.

Departures from their runs, and why:
- On the CPU: fp32 (torch.set_num_threads(--threads)). The 1st place trained with --bf16 (HF Trainer's
  autocast) on an RTX 4090; the 6th with torch.cuda.amp.autocast (fp16) and a GradScaler on a Quadro RTX
  8000. On the CPU the GradScaler is left out (it is a no-op without CUDA) and the step is a plain
  optimizer.step(); --device cuda --amp bf16 / fp16 puts their precision back.
- Their loaders run the dataset's __getitem__ in DataLoader workers (1st: 8, 6th: 4), overlapping the GPU;
  here it runs in the timed step, in the main process. batch_ms_median reports that part, and
  configs_per_s_model the rate without it (what overlapped workers would leave).
- 6th place: one graph per optimizer step (B = 1) to match `gnn train --batch-graphs 1`; its own runs
  accumulate 32 graphs (train_batch_size 32) into one AdamW step, so there the optimizer's share of a
  graph's step is 1/32 of what it is here.
- 1st place: engine.py (the loss wrapper, CustomTrainer) imports transformers 4.34's trainer internals
  (deepspeed_init, is_torch_tpu_available) that current transformers lack, so it is not imported: its
  4-line pairwise_hinge_loss (PairwiseHingeLoss() called on scores[None], targets[None], n=[C], .mean())
  and the Trainer loop's order (backward, clip 1.0, optimizer, scheduler, zero_grad) are restated here,
  with torch's AdamW and a LambdaLR of transformers' get_cosine_schedule_with_warmup formula. Its
  create_optimizer's no-weight-decay group is empty for this model (no BatchNorm/LayerNorm/GroupNorm).
- 1st place: data/data_compression.py imports seaborn, which it never uses: when seaborn is missing, an
  empty stub module named seaborn is put in sys.modules before the import (SHIM, marked below).
- 1st place: it trained on its re-extracted files (node_feat[:, 134:140] padded with -1); this runs on
  the files given (padded with 0): same shapes, same cost.
- The step's config sampling (the 1st place's random.sample; the 6th's np.random.shuffle of its groups and
  the torch.randperm standing in for its RandomSampler) is seeded from --seed; a file with fewer configs than
  --configs takes them all (the 1st place's own rule; for the 6th place the subsample size is cut to the
  number of configs, where its code would yield an empty group).

Prints one JSON line, as layout_step.py: model, file, nodes and edges (of the prepared graph), nodes_file,
configs (per step), configs_available (after the 1st place's dedup), steps, configs_per_s (configs over the
median step after the first), configs_per_s_all (over every step, the first included), step_ms_median,
batch_ms_median, configs_per_s_model, peak_rss_mb (the process's, from getrusage: torch alone takes
hundreds of MB) and step_mb (that peak less the resident memory just before the first step), step_ms
(every step, batch included), threads, the torch and torch_geometric versions and the originals' commit.
Their own prints (settings, progress) go to stderr.
"""
import argparse
import contextlib
import importlib.util
import json
import math
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import rss_mb  # noqa: E402

try:
    import torch
except ImportError:
    sys.exit("winners.py needs PyTorch (pip install torch)")

REPO_1ST = "google_fast_or_slow"
REPO_5TH = "kaggle-tpu-graph-5th-place"  # (check_vs_original.py, train_original.py; not timed here)
REPO_6TH = "solution-predict-ai-model-runtime"
DIR_6TH = {"sage6": "src/res-graphsage4-pair-hop5-layout", "gin6": "src/res-gin4-pair-hop5-layout"}
DIR_6TH_TILE = "src/res-gatconv4-listmle-hop5-tile"


def load_module(name, path):
    """Their file `path` as module `name` (registered in sys.modules, so their own imports of it resolve)."""
    if not os.path.isfile(path):
        sys.exit(f"winners.py: {path} not found (clone the originals under --originals; see the docstring)")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_fifth(originals):
    """The 5th place's clone imported by path: its config module, src/dataset.py, src/nn.py and
    config/default.yaml as its Config (its modules import config.config and src.*, so its root goes on
    sys.path). Returns a namespace: root, config, dataset, nn, cfg."""
    root = os.path.join(originals, REPO_5TH)
    sys.path.insert(0, root)
    with quiet():
        config = load_module("config.config", os.path.join(root, "config", "config.py"))
        load_module("src.constants", os.path.join(root, "src", "constants.py"))
        dataset = load_module("src.dataset", os.path.join(root, "src", "dataset.py"))
        nn_mod = load_module("src.nn", os.path.join(root, "src", "nn.py"))
    try:
        import yaml
    except ImportError:
        sys.exit("the 5th place's config needs pyyaml (pip install pyyaml)")
    with open(os.path.join(root, "config", "default.yaml")) as f:
        cfg = config.Config(yaml.safe_load(f))
    return types.SimpleNamespace(root=root, config=config, dataset=dataset, nn=nn_mod, cfg=cfg)


def commit_of(path):
    try:
        return subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def quiet():
    """Their modules print progress and settings: keep stdout for the JSON line."""
    return contextlib.redirect_stdout(sys.stderr)


class First:
    """1st place (thanhhau097/google_fast_or_slow): LayoutModel, their dataset and loss modules."""

    def __init__(self, a, tmp):
        root = os.path.join(a.originals, REPO_1ST)
        sys.path.insert(0, root)
        try:
            import pandas  # noqa: F401  (their dataset.py)
            import sklearn  # noqa: F401
            from sklearn.preprocessing import StandardScaler
        except ImportError:
            sys.exit("winners.py --model tgraph: the 1st place's dataset.py needs pandas and scikit-learn "
                     "(pip install pandas scikit-learn)")
        if importlib.util.find_spec("seaborn") is None:
            # SHIM: data/data_compression.py does `import seaborn as sns` and never uses it.
            sys.modules["seaborn"] = types.ModuleType("seaborn")
        with quiet():
            comp = load_module("gfos_data_compression", os.path.join(root, "data", "data_compression.py"))
            self.ds_mod = load_module("dataset", os.path.join(root, "dataset.py"))
            model_mod = load_module("gfos_model", os.path.join(root, "model.py"))
            self.loss_mod = load_module("loss", os.path.join(root, "loss.py"))
            # data_compression.py's __main__ body (_process_one_npz) for a train file, then load_df.
            split_dir = os.path.join(tmp, "train")
            os.makedirs(split_dir)
            data = dict(np.load(a.data, allow_pickle=True))
            self.nodes_file = len(data["node_feat"])
            data = comp.prune_graph(data)
            data = comp.remove_dupplicated_node_configs(data)
            data["node_config_feat"] = comp.compress_configs(data["node_config_feat"])
            np.savez_compressed(os.path.join(split_dir, os.path.basename(a.data)), **data)
            df = self.ds_mod.load_df(tmp, "train")
            if len(df) == 0:
                sys.exit("winners.py: the 1st place's load_df skipped the file (one config or none)")
            df["search"] = "default"
            self.dataset = self.ds_mod.LayoutDataset(df, split="train", max_configs=a.configs,
                                                     scaler=StandardScaler(), tgt_scaler=StandardScaler(),
                                                     select_close_runtimes=False)
            # train_xla_default.sh with model_args.py's defaults for the rest.
            self.model = model_mod.LayoutModel(hidden_channels=[256, 256], graph_in=256, graph_out=256,
                                               hidden_dim=256, dropout=0.2, gat_droprate=0.2,
                                               op_embedding_dim=16, layout_embedding_dim=4, norm="instance",
                                               use_cross_attn=True)
        self.nodes = len(data["node_feat"])
        self.edges = len(data["edge_index"])
        self.total_configs = len(data["config_runtime"])
        self.configs = min(a.configs, self.total_configs)
        self.commit = commit_of(root)
        self.model.to(a.device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=1e-5)
        warm = math.ceil(0.05 * a.steps)

        def cosine(step):  # transformers.get_cosine_schedule_with_warmup, num_cycles 0.5
            if step < warm:
                return step / max(1, warm)
            progress = (step - warm) / max(1, a.steps - warm)
            return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 2.0 * 0.5 * progress)))

        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, cosine)
        self.model.train()

    def epoch(self):
        pass

    def batch(self):
        return self.ds_mod.layout_collate_fn([self.dataset[0]])

    def step(self, inputs, prec):
        # Trainer._prepare_inputs: every tensor to the device
        inputs = {k: v.to(prec.device) if torch.is_tensor(v) else v for k, v in inputs.items()}
        with prec.autocast():  # --bf16: accelerate's autocast around the model's forward ...
            out = self.model(inputs["node_config_feat"], inputs["node_feat"], inputs["node_layout_feat"],
                             inputs["node_opcode"], inputs["edge_index"], inputs["node_config_ids"])
        out = out.float()  # ... and its outputs converted back to fp32
        # engine.py's pairwise_hinge_loss (engine.py itself needs transformers 4.34: see the docstring)
        y_pred, y_true = out.unsqueeze(0), inputs["target"].unsqueeze(0)
        n = torch.tensor([y_pred.shape[1]], device=y_pred.device)
        loss = self.loss_mod.PairwiseHingeLoss()(y_pred, y_true, n=n).mean()
        prec.scaler.scale(loss).backward()
        prec.scaler.unscale_(self.opt)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        prec.scaler.step(self.opt)
        prec.scaler.update()
        self.sched.step()
        self.model.zero_grad()
        return loss.detach()


class Sixth:
    """6th place (hengck23/solution-predict-ai-model-runtime): Net (SAGE or GIN), their dataset and loss."""

    def __init__(self, a, tmp):
        root = os.path.join(a.originals, REPO_6TH)
        src = os.path.join(root, DIR_6TH[a.model])
        sys.path.insert(0, src)  # model.py does `from dataset import *` and `from myloss import *`
        with quiet():
            self.ds_mod = load_module("dataset", os.path.join(src, "dataset.py"))
            load_module("myloss", os.path.join(src, "myloss.py"))
            model_mod = load_module("hengck_model", os.path.join(src, "model.py"))
            train_dir = os.path.join(tmp, "train")
            os.makedirs(train_dir)
            os.symlink(os.path.abspath(a.data), os.path.join(train_dir, os.path.basename(a.data)))
            pickle_file = os.path.join(tmp, "stat", "npz-layout-train.stat.pickle")
            self.ds_mod.run_make_mean_std_pickle_file(npz_dir=train_dir, pickle_file=pickle_file)
            data = self.ds_mod.load_npz(train_dir)  # num_hop=5, to_tensor=True: trainer.py's call
            self.total_configs = len(data[0]["config_runtime"])
            self.configs = min(a.configs, self.total_configs)
            self.dataset = self.ds_mod.LayoutDataset(
                data, subsample_param=dict(size=self.configs, is_random=True, is_droplast=True))
            self.net = model_mod.Net({"pickle_file": pickle_file}).to(a.device)
        self.nodes_file = len(np.load(a.data)["node_opcode"])
        self.nodes = int(data[0]["num_node"])
        self.edges = int(data[0]["edge_index"].shape[1])
        self.commit = commit_of(root)
        self.opt = torch.optim.AdamW(filter(lambda p: p.requires_grad, self.net.parameters()), lr=5e-4)
        self.order = []

    def epoch(self):
        if not self.order:  # trainer.py: reset_subsample() at each epoch, a RandomSampler over the groups
            self.dataset.reset_subsample()
            self.order = list(torch.randperm(len(self.dataset)).numpy())

    def batch(self):
        return self.ds_mod.null_collate([self.dataset[int(self.order.pop())]])

    KEYS = ["edge_index", "node_feat", "node_opcode", "node_config_feat", "node_config_ids", "config_runtime"]
    METRICS = ["opa_acc"]  # what trainer.py's loop reads back with .item() besides the loss

    def step(self, batch, prec):
        self.net.train()
        self.net.output_type = ["loss", "infer"]
        self.opt.zero_grad()
        B = len(batch)
        loss = 0.0  # the step's mean over its slates, as trainer.py's loss / B summed
        for b in range(B):  # trainer.py's inner loop
            r = {k: batch[b][k].to(prec.device, non_blocking=True) for k in self.KEYS}
            with prec.autocast():
                output = self.net([r])
                rank_loss = output["rank_loss"].mean() / B
                for m in self.METRICS:
                    (output[m].mean() / B).item()
                loss += rank_loss.item()
            prec.scaler.scale(rank_loss).backward()
        prec.scaler.step(self.opt)
        prec.scaler.update()
        if prec.device == "cuda":
            torch.clear_autocast_cache()
        return loss


class SixthTile(Sixth):
    """6th place tile model (src/res-gatconv4-listmle-hop5-tile): Net, their TileDataset and loss, as its
    trainer.py runs them: 32 slates per AdamW step, each slate's forward, listMLE / B and backward in
    turn; an epoch is every slate of every kernel (do_subsample_data: n // 64 slates of 64 configs for a
    kernel of n >= 128, one of all n below 64)."""

    def __init__(self, a, tmp):
        root = os.path.join(a.originals, REPO_6TH)
        src = os.path.join(root, DIR_6TH_TILE)
        sys.path.insert(0, src)
        with quiet():
            self.ds_mod = load_module("dataset", os.path.join(src, "dataset.py"))
            load_module("myloss", os.path.join(src, "myloss.py"))
            model_mod = load_module("hengck_model_tile", os.path.join(src, "model.py"))
            pickle_file = os.path.join(tmp, "stat", "npz-tile-xla-train.stat.pickle")
            self.ds_mod.run_make_mean_std_pickle_file(npz_dir=a.data, pickle_file=pickle_file)
            data = self.ds_mod.load_npz(a.data)
            self.dataset = self.ds_mod.TileDataset(
                data, subsample_param=dict(size=a.configs, is_random=True, is_droplast=True))
            self.net = model_mod.Net({"pickle_file": pickle_file}).to(a.device)
        self.kernels = a.kernels
        self.nodes = sum(int(d["num_node"]) for d in data)  # (the whole train split)
        self.nodes_file = self.nodes
        self.edges = sum(int(d["edge_index"].shape[1]) for d in data)
        self.total_configs = sum(len(d["config_runtime"]) for d in data)
        self.commit = commit_of(root)
        self.opt = torch.optim.AdamW(filter(lambda p: p.requires_grad, self.net.parameters()), lr=5e-4)
        self.order, self.step_configs = [], []
        self.KEYS = self.ds_mod.tensor_key

    METRICS = ["opa_acc", "topk_acc"]

    @property
    def configs(self):  # configs per step: the mean over the steps run (a kernel may have fewer than 64)
        return statistics.mean(self.step_configs) if self.step_configs else 0

    def epoch(self):
        if len(self.order) < self.kernels:  # trainer.py: reset_subsample() each epoch, shuffled, drop_last
            self.dataset.reset_subsample()
            self.order = list(torch.randperm(len(self.dataset)).numpy())

    def batch(self):
        b = self.ds_mod.null_collate([self.dataset[int(self.order.pop())] for _ in range(self.kernels)])
        self.step_configs.append(sum(len(r["config_runtime"]) for r in b))
        return b


class Precision:
    """How a step runs: the device, an autocast context (none: fp32) and a GradScaler (live for fp16 on
    the GPU only; a disabled one passes scale / unscale_ / step / update straight through)."""

    def __init__(self, device, amp):
        self.device, self.amp = device, amp
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
        self.scaler = torch.amp.GradScaler(device, enabled=(amp == "fp16" and device == "cuda"))

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device, dtype=self.dtype)

    def sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--originals", required=True, help=f"folder holding {REPO_1ST}/ and {REPO_6TH}/")
    p.add_argument("--data", required=True, help="a TpuGraphs layout .npz file (tile6: a folder of tile files)")
    p.add_argument("--model", choices=["tgraph", "sage6", "gin6", "tile6"], required=True)
    p.add_argument("--configs", type=int, default=None,
                   help="configs per step (64 for tgraph, 80 for the 6th; tile6: per kernel, 64)")
    p.add_argument("--kernels", type=int, default=32, help="tile6: kernels per step (its train_batch_size)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--amp", default="none", help="comma list of none, bf16, fp16 (autocast dtypes)")
    a = p.parse_args()
    amps = a.amp.split(",")
    if any(m not in ("none", "bf16", "fp16") for m in amps) or len(set(amps)) != len(amps):
        sys.exit(f"winners.py: --amp {a.amp!r}: give a comma list of distinct none, bf16, fp16")
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("winners.py: --device cuda, but torch sees no GPU")
    if a.configs is None:
        a.configs = 64 if a.model in ("tgraph", "tile6") else 80
    # (--steps >= 2: the rate is the median after the first step)
    for flag, least in (("configs", 2), ("steps", 2), ("threads", 1), ("kernels", 1), ("seed", 0)):
        if getattr(a, flag) < least:
            sys.exit(f"winners.py: --{flag} must be >= {least}, got {getattr(a, flag)}")
    if not (os.path.isdir if a.model == "tile6" else os.path.isfile)(a.data):
        sys.exit(f"winners.py: --data {a.data}: not a " + ("folder of tile files" if a.model == "tile6" else
                                                           "layout .npz file"))
    warnings.filterwarnings("ignore")
    torch.set_num_threads(a.threads)
    random.seed(a.seed)
    np.random.seed(a.seed)
    torch.manual_seed(a.seed)
    tmp = tempfile.mkdtemp(prefix="winners_")
    try:
        run = {"tgraph": First, "tile6": SixthTile}.get(a.model, Sixth)(a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    before_mb = rss_mb()
    for amp in amps:
        prec = Precision(a.device, amp)
        if a.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        times, batch_times, model_times = [], [], []
        for _ in range(a.steps):
            with quiet():
                run.epoch()
            t0 = time.perf_counter()
            batch = run.batch()
            t1 = time.perf_counter()
            with quiet():
                run.step(batch, prec)
            prec.sync()
            t2 = time.perf_counter()
            times.append(t2 - t0)
            batch_times.append(t1 - t0)
            model_times.append(t2 - t1)
        report(a, run, amp, times, batch_times, model_times, before_mb)


def report(a, run, amp, times, batch_times, model_times, before_mb):
    c = run.configs
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    step_s = statistics.median(times[1:] or times)
    batch_s = statistics.median(batch_times[1:] or batch_times)
    model_s = statistics.median(model_times[1:] or model_times)
    import torch_geometric
    row = {"model": a.model, "file": a.data, "nodes": run.nodes, "nodes_file": run.nodes_file,
           "edges": run.edges, "configs": c, "configs_available": run.total_configs, "steps": a.steps,
           "device": a.device, "amp": amp,
           "configs_per_s_all": c * a.steps / sum(times),
           "step_ms_median": 1000 * step_s,
           "configs_per_s": c / step_s,
           "batch_ms_median": 1000 * batch_s,
           "configs_per_s_model": c / model_s,
           "peak_rss_mb": peak_mb, "step_mb": max(0.0, peak_mb - before_mb),
           "step_ms": [round(1000 * t, 1) for t in times],
           "threads": a.threads, "torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
           "originals_commit": run.commit}
    if a.device == "cuda":
        row["gpu"] = torch.cuda.get_device_name()
        row["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
