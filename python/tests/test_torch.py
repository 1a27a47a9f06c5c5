"""gnn.torch: the layers against plain-torch formulations of PyG's layers (always) and against PyG's own
layers with the same state_dict (when torch_geometric is installed), forward and every gradient; the
same bits run to run."""
import numpy as np
import pytest

import gnn
import gnn.torch as gt
from conftest import random_graph, torch

N, E, F, O = 60, 400, 8, 5


def inputs(seed=0, self_loops=True):
    torch.manual_seed(seed)
    ei = torch.as_tensor(random_graph(N, E, seed, self_loops))
    return torch.randn(N, F, requires_grad=True), ei


def seg_mean(x, ei, n):
    out = torch.zeros(n, x.shape[1]).index_add(0, ei[1], x[ei[0]])
    deg = torch.zeros(n).index_add(0, ei[1], torch.ones(ei.shape[1]))
    return out / deg.clamp(min=1)[:, None]


def ref_sage(m, x, ei):
    return m.lin_l(seg_mean(x, ei, N)) + m.lin_r(x)


def ref_gcn(m, x, ei):
    loop = torch.arange(N)
    ei = torch.cat([ei[:, ei[0] != ei[1]], torch.stack([loop, loop])], 1)  # one loop per node, as PyG
    deg = torch.zeros(N).index_add(0, ei[1], torch.ones(ei.shape[1]))
    dinv = deg.pow(-0.5)
    w = dinv[ei[0]] * dinv[ei[1]]
    xw = x @ m.lin.weight.t()
    return torch.zeros(N, xw.shape[1]).index_add(0, ei[1], w[:, None] * xw[ei[0]]) + m.bias


def ref_gin(m, x, ei):
    return m.nn(torch.zeros(N, F).index_add(0, ei[1], x[ei[0]]) + (1 + m.eps) * x)


def ref_gat(m, x, ei):
    ei = ei[:, ei[0] != ei[1]]
    loop = torch.arange(N)
    ei = torch.cat([ei, torch.stack([loop, loop])], 1)
    H, C = m.heads, m.out_channels
    xw = (x @ m.lin.weight.t()).view(N, H, C)
    a_s, a_d = (xw * m.att_src).sum(-1), (xw * m.att_dst).sum(-1)
    s = torch.nn.functional.leaky_relu(a_s[ei[0]] + a_d[ei[1]], m.negative_slope)
    mx = torch.full((N, H), -1e30).scatter_reduce(0, ei[1][:, None].expand(-1, H), s, "amax")
    ex = torch.exp(s - mx[ei[1]])
    alpha = ex / torch.zeros(N, H).index_add(0, ei[1], ex)[ei[1]]
    out = torch.zeros(N, H, C).index_add(0, ei[1], alpha[..., None] * xw[ei[0]])
    out = out.reshape(N, H * C) if m.concat else out.mean(1)
    return out + m.bias


LAYERS = {
    "sage": (lambda: gt.SAGEConv(F, O), ref_sage),
    "gcn": (lambda: gt.GCNConv(F, O), ref_gcn),
    "gin": (lambda: gt.GINConv(torch.nn.Sequential(torch.nn.Linear(F, 16), torch.nn.ReLU(), torch.nn.Linear(16, O)),
                               train_eps=True), ref_gin),
    "gat": (lambda: gt.GATConv(F, O, heads=3), ref_gat),
    "gat-mean": (lambda: gt.GATConv(F, O, heads=2, concat=False), ref_gat),
}


def grads(module, x):
    return [x.grad] + [p.grad for p in module.parameters()]


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_against_plain_torch(name):
    make, ref = LAYERS[name]
    x, ei = inputs()
    m = make()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))  # nonzero biases and eps
    y = m(x, ei)
    dy = torch.randn_like(y)
    (y * dy).sum().backward()
    got = [g.clone() for g in grads(m, x)]
    x.grad = None
    m.zero_grad()
    want = ref(m, x, ei)
    torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-5)
    (want * dy).sum().backward()
    for a, b in zip(got, grads(m, x)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_same_bits_run_to_run(name):
    make, _ = LAYERS[name]
    runs = []
    for threads in (1, 2):
        gnn.set_num_threads(threads)
        torch.manual_seed(3)
        x, ei = inputs(1)
        m = make()
        m.eval()
        y = m(x, ei)
        y.square().sum().backward()
        runs.append([y.detach().numpy().tobytes()] + [g.numpy().tobytes() for g in grads(m, x)])
    assert runs[0] == runs[1]


def test_graph_cache_follows_edge_index():
    x, ei = inputs()
    m = gt.SAGEConv(F, O)
    y1 = m(x, ei)
    g1 = m._cache.value
    assert m(x, ei) is not None and m._cache.value is g1  # the same edge_index: the same graph
    ei[1, 0] = (ei[1, 0] + 1) % N  # an in-place change bumps the version: rebuilt
    y2 = m(x, ei)
    assert m._cache.value is not g1
    torch.testing.assert_close(y2, ref_sage(m, x, ei))
    assert not torch.equal(y1, y2)


def test_layers_refuse_what_they_do_not_compute():
    x, ei = inputs()
    with pytest.raises(NotImplementedError, match="edge_dim"):
        gt.GATConv(F, O, edge_dim=3)
    with pytest.raises(NotImplementedError, match="aggr"):
        gt.SAGEConv(F, O, aggr="lstm")
    with pytest.raises(TypeError, match="float32"):
        gt.SAGEConv(F, O)(x.double(), ei)
    with pytest.raises(ValueError, match="edge_index must have shape"):
        gt.SAGEConv(F, O)(x, ei.t().contiguous())


pyg = pytest.importorskip  # resolved per test below, so the other cases run without PyG


@pytest.mark.parametrize("name", ["sage", "gcn", "gin", "gat", "gat-mean"])
def test_layer_against_pyg(name):
    nn_ = pytest.importorskip("torch_geometric.nn", reason="torch_geometric is not installed (pip install torch_geometric)")
    make, _ = LAYERS[name]
    x, ei = inputs(2)
    m = make()
    theirs = {
        "sage": lambda: nn_.SAGEConv(F, O),
        "gcn": lambda: nn_.GCNConv(F, O),
        "gin": lambda: nn_.GINConv(torch.nn.Sequential(torch.nn.Linear(F, 16), torch.nn.ReLU(),
                                                       torch.nn.Linear(16, O)), train_eps=True),
        "gat": lambda: nn_.GATConv(F, O, heads=3),
        "gat-mean": lambda: nn_.GATConv(F, O, heads=2, concat=False),
    }[name]()
    theirs.load_state_dict(m.state_dict())  # PyG's parameter names and shapes
    y = m(x, ei)
    dy = torch.randn_like(y)
    (y * dy).sum().backward()
    got = [g.clone() for g in grads(m, x)]
    x.grad = None
    want = theirs(x, ei)
    torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-5)
    (want * dy).sum().backward()
    for a, b in zip(got, [x.grad] + [p.grad for p in theirs.parameters()]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_functional_pool_and_norms_gradcheck_like():
    torch.manual_seed(4)
    ptr = torch.tensor([0, 7, 7, 20])
    x = torch.randn(20, 3, requires_grad=True)
    w, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    for reduce in ("sum", "mean", "max", "logsumexp"):
        y = gt.pool(x, ptr, reduce)
        y[[0, 2]].sum().backward()
    y = gt.instance_norm(x, ptr, w, b) + gt.layer_norm(x, w, b)
    y.square().sum().backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in (x, w, b))
