"""Shared fixtures: random graphs, and references written with numpy / torch index operations."""
import os
import pathlib

import numpy as np
import pytest

import gnn

try:  # the NumPy cases run without torch; the others skip, saying why
    import torch
except ImportError:
    torch = None

NEED_TORCH = "torch is not installed (apt install python3-torch, or pip install torch)"


@pytest.fixture
def need_torch():
    if torch is None:
        pytest.skip(NEED_TORCH)
    return torch

SHARED = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "data"
GNN_CLI = pathlib.Path(gnn.__file__).resolve().parents[2] / "bin" / "gnn"


def random_graph(n, e, seed, self_loops=True):
    """edge_index [2, E] int64 with repeated edges, isolated nodes and (optionally) self-loops."""
    rng = np.random.default_rng(seed)
    ei = rng.integers(0, max(n - 3, 1), size=(2, e), dtype=np.int64)  # the last 3 nodes stay isolated
    if not self_loops:
        ei = ei[:, ei[0] != ei[1]]
    return np.ascontiguousarray(ei)


def ref_spmm(ei, x, n, reduce, w=None):
    """Input-order edges, float64 torch: sum / mean / max of w * x[src] at each dst."""
    src, dst = torch.as_tensor(ei[0]), torch.as_tensor(ei[1])
    msg = x[src] if w is None else (w.reshape(w.shape[0], -1, 1) * x[src].reshape(src.shape[0], w.reshape(
        w.shape[0], -1).shape[1], -1)).reshape(src.shape[0], -1)
    if reduce == "max":
        out = torch.full((n, x.shape[1]), float("-inf"), dtype=x.dtype).scatter_reduce(
            0, dst[:, None].expand_as(msg), msg, "amax", include_self=True)
        return torch.where(torch.isinf(out), torch.zeros_like(out), out)
    out = torch.zeros(n, x.shape[1], dtype=x.dtype).index_add(0, dst, msg)
    if reduce == "mean":
        deg = torch.zeros(n, dtype=x.dtype).index_add(0, dst, torch.ones(dst.shape[0], dtype=x.dtype))
        out = out / deg.clamp(min=1)[:, None]
    return out


def directional_fd(f, x, v, h=1e-2):
    """(f(x + h v) - f(x - h v)) / 2h for a scalar f of a float32 array, evaluated in float64."""
    return (float(f(x + h * v)) - float(f(x - h * v))) / (2 * h)


@pytest.fixture(autouse=True)
def _threads():
    before = gnn.num_threads()
    yield
    gnn.set_num_threads(before)


@pytest.fixture
def cora():
    path = SHARED / "planetoid" / "cora_planetoid.npz"
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared/data holds the real Cora)")
    return path
