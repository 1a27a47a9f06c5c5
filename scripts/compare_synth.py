#!/usr/bin/env python3
"""Compares generated TpuGraphs data (`gnn synth`) with real samples, statistic by statistic.

Usage: python3 scripts/compare_synth.py --generated DIR --real DIR [--json]

Every .npz file below each DIR (recursively) is read and classified: a tile kernel has
`config_feat`, a layout program has `node_config_feat`; other files are ignored. For each collection
found on either side the script prints a markdown table, generated next to real:

  tile:   kernels; configs and nodes per kernel; the runtime spread max/min of
          config_runtime / config_runtime_normalizers per kernel; the best config relative to the
          default; quantiles of runtime / kernel minimum, pooled; the score (1 - slowdown@5) of two
          rankings that ignore the graph, largest output tile first and a random order; the
          in-degree distribution; the
          top-10 opcodes and the total-variation distance between the two opcode histograms.
  layout: programs; nodes; share of configurable nodes; configs; runtime spread per program and
          quantiles of runtime / program minimum; in-degree distribution; share of duplicate
          configs; share of nodes within 1, 2, 4 undirected hops of a configurable node.

A side with no file of a collection shows "-". Rows of edge_index are [u, v] with u consuming v,
so the in-degree of u (its operand count) is the number of rows whose first column is u.
When --real does not exist the script prints "SKIP: <dir> not found" and exits 0 (the real data
is not part of the repository). --json prints the raw numbers as JSON instead of the tables.
Needs only numpy (Debian's python3-numpy, as scripts/setup.sh installs).
"""
import argparse
import json
import sys
from pathlib import Path

try:
    import numpy as np
except ImportError:
    sys.exit("compare_synth.py needs numpy: apt-get install python3-numpy (or run it with /usr/bin/python3)")

# The opcode ids ../shared/TPUGRAPHS.md names; others are shown by id only.
OPCODE_NAMES = {26: "convolution", 34: "dot", 41: "fusion", 63: "parameter", 75: "reshape"}
OPCODE_BINS = 256  # node_opcode is uint8
HOPS = (1, 2, 4)
QUANTILES = (10, 50, 90)


# ---- reading -------------------------------------------------------------------------------------


def find_files(root):
    """All .npz files below root, split by kind: {"tile": [...], "layout": [...]}."""
    found = {"tile": [], "layout": []}
    for path in sorted(Path(root).rglob("*.npz")):
        try:
            with np.load(path) as z:
                keys = set(z.files)
        except Exception as e:  # a broken file should not stop the comparison
            print(f"warning: cannot read {path}: {e}", file=sys.stderr)
            continue
        if "config_feat" in keys:
            found["tile"].append(path)
        elif "node_config_feat" in keys:
            found["layout"].append(path)
    return found


def in_degrees(edge_index, nodes):
    """Operand count of every node: rows [u, v] mean u consumes v."""
    edge_index = edge_index.reshape(-1, 2)
    return np.bincount(edge_index[:, 0], minlength=nodes)[:nodes]


def degree_shares(degree_counts):
    """Shares of nodes with in-degree 0, 1, 2, 3+ from a histogram of in-degrees."""
    total = max(degree_counts.sum(), 1)
    return [degree_counts[0] / total, degree_counts[1] / total, degree_counts[2] / total, degree_counts[3:].sum() / total]


def degree_histogram(degrees):
    return np.bincount(np.minimum(degrees, 3), minlength=4)


def min_med_max(values):
    v = np.asarray(values, dtype=np.float64)
    return [float(v.min()), float(np.median(v)), float(v.max())]


def quantiles(values):
    return [float(q) for q in np.percentile(np.asarray(values, dtype=np.float64), QUANTILES)]


def relative_to_min(runtimes):
    """runtimes / their minimum, or None when the minimum is not positive."""
    r = np.asarray(runtimes, dtype=np.float64)
    return r / r.min() if r.size and r.min() > 0 else None


def spread_stats(runtimes_per_graph):
    """Per graph max/min of its runtimes (min / median / max over graphs), and quantiles of every
    runtime over its graph's minimum, pooled."""
    rels = [r for r in map(relative_to_min, runtimes_per_graph) if r is not None]
    return {
        "spread": min_med_max([r.max() for r in rels]) if rels else None,
        "runtime_over_min": quantiles(np.concatenate(rels)) if rels else None,
    }


def duplicate_count(config_feat):
    """How many configs repeat an earlier one exactly (all node_config_feat values equal)."""
    c = config_feat.shape[0]
    rows = np.ascontiguousarray(config_feat.reshape(c, -1))
    as_bytes = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    return c - np.unique(as_bytes).size


def within_hops(edge_index, nodes, sources, hops):
    """Number of nodes within k undirected hops of any source node, for each k in hops."""
    e = edge_index.reshape(-1, 2)
    a = np.concatenate([e[:, 0], e[:, 1]])
    b = np.concatenate([e[:, 1], e[:, 0]])
    reached = np.zeros(nodes, dtype=bool)
    reached[sources] = True
    counts = {}
    for hop in range(1, max(hops) + 1):
        grown = reached.copy()
        grown[b[reached[a]]] = True
        reached = grown
        if hop in hops:
            counts[hop] = int(reached.sum())
    return [counts[h] for h in hops]


# ---- statistics ----------------------------------------------------------------------------------


def slowdown_score(y, order):
    """1 - slowdown@5 of one kernel: 2 - (fastest of the first five in `order`) / (fastest of all)."""
    return 2.0 - y[order[:5]].min() / y.min()


def tile_stats(paths):
    configs, distinct, nodes, targets, best = [], [], [], [], []
    largest_first, random_order = [], []
    rng = np.random.default_rng(12345)
    degrees = np.zeros(4, dtype=np.int64)
    opcodes = np.zeros(OPCODE_BINS, dtype=np.int64)
    for path in paths:
        with np.load(path) as z:
            opcode = z["node_opcode"]
            y = z["config_runtime"].astype(np.float64) / z["config_runtime_normalizers"].astype(np.float64)
            n = opcode.shape[0]
            configs.append(y.shape[0])
            distinct.append(y.shape[0] - duplicate_count(z["config_feat"]))
            nodes.append(n)
            degrees += degree_histogram(in_degrees(z["edge_index"], n))
            opcodes += np.bincount(opcode.astype(np.int64), minlength=OPCODE_BINS)[:OPCODE_BINS]
            # Rankings that ignore the graph: the largest output tile (its product, feature 15) first, the
            # kernel tile (feature 7) breaking ties; and a random order, 20 draws.
            cf = z["config_feat"]
            if y.size and y.min() > 0:
                largest_first.append(slowdown_score(y, np.lexsort((-cf[:, 7], -cf[:, 15]))))
                random_order.append(np.mean([slowdown_score(y, rng.permutation(y.size)) for _ in range(20)]))
        targets.append(y)
        if y.size and y.min() > 0:
            best.append(y.min())
    return {
        "kernels": len(paths),
        "configs": min_med_max(configs),
        "distinct_configs": min_med_max(distinct),
        "single_tile": float(np.mean([d == 1 for d in distinct])) if distinct else None,
        "nodes": min_med_max(nodes),
        **spread_stats(targets),
        "best_vs_default": min_med_max(best) if best else None,
        "largest_first": float(np.mean(largest_first)) if largest_first else None,
        "random_order": float(np.mean(random_order)) if random_order else None,
        "in_degree": degree_shares(degrees),
        "opcodes": opcodes.tolist(),
    }


def layout_stats(paths):
    nodes, share, configs, runtimes = [], [], [], []
    duplicates = total_configs = total_nodes = 0
    degrees = np.zeros(4, dtype=np.int64)
    near = np.zeros(len(HOPS), dtype=np.int64)
    for path in paths:
        with np.load(path) as z:
            n = z["node_opcode"].shape[0]
            edge_index = z["edge_index"]
            ids = z["node_config_ids"].astype(np.int64)
            runtime = z["config_runtime"]
            c = runtime.shape[0]
            duplicates += duplicate_count(z["node_config_feat"])
        nodes.append(n)
        share.append(ids.size / n)
        configs.append(c)
        total_configs += c
        total_nodes += n
        degrees += degree_histogram(in_degrees(edge_index, n))
        near += within_hops(edge_index, n, ids, HOPS)
        runtimes.append(runtime)
    return {
        "programs": len(paths),
        "nodes": min_med_max(nodes),
        "configurable_share": min_med_max(share),
        "configs": min_med_max(configs),
        **spread_stats(runtimes),
        "in_degree": degree_shares(degrees),
        "duplicate_configs": duplicates / max(total_configs, 1),
        "near_configurable": (near / max(total_nodes, 1)).tolist(),
    }


def total_variation(counts_a, counts_b):
    p = np.asarray(counts_a, dtype=np.float64)
    q = np.asarray(counts_b, dtype=np.float64)
    return float(0.5 * np.abs(p / p.sum() - q / q.sum()).sum())


def top_opcodes(counts, k=10):
    counts = np.asarray(counts, dtype=np.float64)
    order = [int(i) for i in np.argsort(-counts, kind="stable")[:k] if counts[i] > 0]
    return [(i, counts[i] / counts.sum()) for i in order]


# ---- formatting ----------------------------------------------------------------------------------


def num(x):
    if isinstance(x, (int, np.integer)) or float(x).is_integer() and abs(x) < 1e6:
        return f"{int(x):,}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:#.3g}"


def pct(x):
    return f"{100 * x:.1f}%"


def triple(v, f=num):
    return " / ".join(f(x) for x in v)


def opcode_cell(entry):
    op, share = entry
    name = OPCODE_NAMES.get(op)
    return f"{op}{' ' + name if name else ''} {pct(share)}"


def cell(stats, key, f):
    if stats is None or stats.get(key) is None:
        return "-"
    return f(stats[key])


TILE_ROWS = [
    ("kernels", "kernels", num),
    ("configs per kernel (min / median / max)", "configs", triple),
    ("distinct configs per kernel (min / median / max)", "distinct_configs", triple),
    ("kernels whose configs are all one tile", "single_tile", pct),
    ("nodes per kernel (min / median / max)", "nodes", triple),
    ("runtime spread max/min per kernel (min / median / max)", "spread", triple),
    ("best config / default, min of runtime/normaliser (min / median / max)", "best_vs_default", triple),
    ("runtime / kernel min, pooled (p10 / p50 / p90)", "runtime_over_min", triple),
    ("1 - slowdown@5 of the largest output tile first (mean)", "largest_first", num),
    ("1 - slowdown@5 of a random order (mean)", "random_order", num),
    ("in-degree 0 / 1 / 2 / 3+", "in_degree", lambda v: triple(v, pct)),
]

LAYOUT_ROWS = [
    ("programs", "programs", num),
    ("nodes (min / median / max)", "nodes", triple),
    ("configurable nodes share (min / median / max)", "configurable_share", lambda v: triple(v, pct)),
    ("configs per program (min / median / max)", "configs", triple),
    ("runtime spread max/min per program (min / median / max)", "spread", triple),
    ("runtime / program min, pooled (p10 / p50 / p90)", "runtime_over_min", triple),
    ("in-degree 0 / 1 / 2 / 3+", "in_degree", lambda v: triple(v, pct)),
    ("duplicate configs", "duplicate_configs", pct),
    ("nodes within 1 / 2 / 4 hops of a configurable node", "near_configurable", lambda v: triple(v, pct)),
]


def markdown_table(title, rows, generated, real):
    lines = [f"### {title}", "", "| statistic | generated | real |", "| --- | --- | --- |"]
    for label, key, f in rows:
        lines.append(f"| {label} | {cell(generated, key, f)} | {cell(real, key, f)} |")
    return lines


def tile_report(generated, real):
    lines = markdown_table("tile", TILE_ROWS, generated, real)
    tops = [top_opcodes(s["opcodes"]) if s else [] for s in (generated, real)]
    for k in range(10):
        cells = [opcode_cell(t[k]) if k < len(t) else "-" for t in tops]
        lines.append(f"| opcode #{k + 1} (id, share) | {cells[0]} | {cells[1]} |")
    tv = total_variation(generated["opcodes"], real["opcodes"]) if generated and real else None
    lines += ["", f"Opcode histogram total-variation distance, generated vs real: {'-' if tv is None else f'{tv:.3f}'}"]
    return lines


# ---- main ----------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generated", required=True, help="folder of generated .npz files (searched recursively)")
    parser.add_argument("--real", required=True, help="folder of real .npz files (searched recursively)")
    parser.add_argument("--json", action="store_true", help="print the raw statistics as JSON instead of tables")
    args = parser.parse_args()
    if Path(args.real).exists() and not Path(args.real).is_dir():
        parser.error(f"--real {args.real}: not a folder")
    if not Path(args.real).is_dir():
        print(f"SKIP: {args.real} not found")
        return 0
    if not Path(args.generated).is_dir():
        parser.error(f"--generated {args.generated}: not a folder")

    files = {"generated": find_files(args.generated), "real": find_files(args.real)}
    compute = {"tile": tile_stats, "layout": layout_stats}
    stats = {
        kind: {side: compute[kind](files[side][kind]) if files[side][kind] else None for side in files}
        for kind in compute
    }

    if args.json:
        out = {kind: s for kind, s in stats.items() if s["generated"] or s["real"]}
        if "tile" in out and out["tile"]["generated"] and out["tile"]["real"]:
            out["tile"]["opcode_tv"] = total_variation(out["tile"]["generated"]["opcodes"], out["tile"]["real"]["opcodes"])
        print(json.dumps(out, indent=2))
        return 0

    lines = [f"Generated: {args.generated}", f"Real: {args.real}", ""]
    for kind in compute:
        generated, real = stats[kind]["generated"], stats[kind]["real"]
        if generated is None and real is None:
            lines += [f"### {kind}", "", f"No {kind} files on either side.", ""]
            continue
        table = tile_report(generated, real) if kind == "tile" else markdown_table(kind, LAYOUT_ROWS, generated, real)
        lines += table + [""]
    print("\n".join(lines).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
