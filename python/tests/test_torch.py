"""gnn.torch: the layers against plain-torch formulations of PyG's layers (always) and against PyG's own
layers with the same state_dict (when torch_geometric is installed), forward and every gradient, over
their constructor options; the same bits run to run; the graph cache, copies, and what is refused."""
import copy
import io
import subprocess
import sys

import numpy as np
import pytest

import gnn
from conftest import NEED_TORCH, random_graph

torch = pytest.importorskip("torch", reason=NEED_TORCH)
import gnn.torch as gt  # noqa: E402 (needs torch)

N, E, F, O = 60, 400, 8, 5


def inputs(seed=0, self_loops=True):
    torch.manual_seed(seed)
    ei = torch.as_tensor(random_graph(N, E, seed, self_loops))
    return torch.randn(N, F, requires_grad=True), ei


def aggregate(x, ei, n, how):
    src, dst = ei[0], ei[1]
    if how == "max":
        out = torch.full((n, x.shape[1]), float("-inf")).scatter_reduce(0, dst[:, None].expand(-1, x.shape[1]),
                                                                          x[src], "amax")
        return torch.where(torch.isinf(out), torch.zeros_like(out), out)
    out = torch.zeros(n, x.shape[1]).index_add(0, dst, x[src])
    if how == "mean":
        out = out / torch.zeros(n).index_add(0, dst, torch.ones(ei.shape[1])).clamp(min=1)[:, None]
    return out


def ref_sage(m, x, ei, ew=None):
    out = m.lin_l(aggregate(torch.relu(m.lin(x)) if m.project else x, ei, N, m.aggr))
    if m.root_weight:
        out = out + m.lin_r(x)
    return torch.nn.functional.normalize(out, dim=-1) if m.normalize else out


def ref_gcn(m, x, ei, ew=None):
    w = torch.ones(ei.shape[1]) if ew is None else ew
    if m.add_self_loops:  # PyG's add_remaining_self_loops: one loop per node, the last existing loop's weight
        loops = ei[0] == ei[1]
        loop_w = torch.full((N,), 2.0 if (m.improved and ew is not None) else 1.0)
        for p in torch.nonzero(loops).flatten().tolist():
            loop_w = loop_w.index_put((ei[0][p:p + 1],), w[p:p + 1])
        node = torch.arange(N)
        ei = torch.cat([ei[:, ~loops], torch.stack([node, node])], 1)
        w = torch.cat([w[~loops], loop_w])
    if m.normalize:
        deg = torch.zeros(N).index_add(0, ei[1], w)
        dinv = deg.pow(-0.5)
        dinv = torch.where(torch.isinf(dinv), torch.zeros_like(dinv), dinv)
        w = dinv[ei[0]] * w * dinv[ei[1]]
    xw = x @ m.lin.weight.t()
    out = torch.zeros(N, xw.shape[1]).index_add(0, ei[1], w[:, None] * xw[ei[0]])
    return out + m.bias if m.bias is not None else out


def ref_gin(m, x, ei, ew=None):
    return m.nn(aggregate(x, ei, N, "sum") + (1 + m.eps) * x)


def ref_fill(ea, dst, n, fill):
    """PyG's self-loop features for a fill_value that names a reduction: per node i < n, that reduction
    of its incoming edges' features ea [E, D] (none: 0, or 1 for 'mul'); written node by node."""
    rows = []
    for i in range(n):
        mine = ea[dst == i]
        if mine.shape[0] == 0:
            rows.append(torch.full((ea.shape[1],), 1.0 if fill == "mul" else 0.0))
        else:
            how = {"mean": lambda t: t.mean(0), "add": lambda t: t.sum(0), "sum": lambda t: t.sum(0),
                   "max": lambda t: t.max(0).values, "min": lambda t: t.min(0).values, "mul": lambda t: t.prod(0)}
            rows.append(how[fill](mine))
    return torch.stack(rows)


def ref_gat(m, x, ei, ew=None):
    # one node set: the bipartite formulation with x as sources and targets (ew: edge features, if any)
    return ref_bipartite(m, x, x, ei, ea=ew if m.lin_edge is not None else None)


def gin_mlp():
    return torch.nn.Sequential(torch.nn.Linear(F, 16), torch.nn.ReLU(), torch.nn.Linear(16, O))


# name -> (layer class name, constructor kwargs, reference, whether forward takes an edge_weight)
LAYERS = {
    "sage": ("SAGEConv", dict(in_channels=F, out_channels=O), ref_sage, False),
    "sage-sum-noroot": ("SAGEConv", dict(in_channels=F, out_channels=O, aggr="sum", root_weight=False), ref_sage, False),
    "sage-max-normalize": ("SAGEConv", dict(in_channels=F, out_channels=O, aggr="max", normalize=True), ref_sage, False),
    "sage-nobias": ("SAGEConv", dict(in_channels=F, out_channels=O, bias=False), ref_sage, False),
    "sage-project": ("SAGEConv", dict(in_channels=F, out_channels=O, project=True), ref_sage, False),
    "sage-project-max": ("SAGEConv", dict(in_channels=F, out_channels=O, aggr="max", project=True), ref_sage, False),
    "gcn": ("GCNConv", dict(in_channels=F, out_channels=O), ref_gcn, False),
    "gcn-weighted": ("GCNConv", dict(in_channels=F, out_channels=O), ref_gcn, True),
    "gcn-improved-weighted": ("GCNConv", dict(in_channels=F, out_channels=O, improved=True), ref_gcn, True),
    "gcn-improved": ("GCNConv", dict(in_channels=F, out_channels=O, improved=True), ref_gcn, False),
    "gcn-plain": ("GCNConv", dict(in_channels=F, out_channels=O, normalize=False), ref_gcn, True),
    "gcn-noloops": ("GCNConv", dict(in_channels=F, out_channels=O, add_self_loops=False), ref_gcn, False),
    "gin": ("GINConv", dict(train_eps=True), ref_gin, False),
    "gat": ("GATConv", dict(in_channels=F, out_channels=O, heads=3), ref_gat, False),
    "gat-1head": ("GATConv", dict(in_channels=F, out_channels=O), ref_gat, False),
    "gat-mean": ("GATConv", dict(in_channels=F, out_channels=O, heads=2, concat=False), ref_gat, False),
    "gat-noloops": ("GATConv", dict(in_channels=F, out_channels=O, heads=2, add_self_loops=False), ref_gat, False),
    "gat-residual": ("GATConv", dict(in_channels=F, out_channels=O, heads=2, residual=True), ref_gat, False),
    "gat-edge": ("GATConv", dict(in_channels=F, out_channels=O, heads=2, edge_dim=1), ref_gat, True),  # [E] features
    "gat-edge-max": ("GATConv", dict(in_channels=F, out_channels=O, edge_dim=1, fill_value="max"), ref_gat, True),
    "gat-residual-mean": ("GATConv", dict(in_channels=F, out_channels=O, heads=3, concat=False, residual=True), ref_gat,
                          False),
}


def make(module, name):
    cls, kwargs, _, _ = LAYERS[name]
    kwargs = dict(kwargs)
    if cls == "GINConv":
        torch.manual_seed(11)
        kwargs["nn"] = gin_mlp()
    return getattr(module, cls)(**kwargs)


def perturbed(m):
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))  # nonzero biases and eps
    return m


def run(m, x, ei, ew):
    """The layer's output and the gradients of a random projection of it: x, edge_weight, parameters."""
    for t in [x, ew] + list(m.parameters()):
        if t is not None:
            t.grad = None
    y = m(x, ei) if ew is None else m(x, ei, ew)
    torch.manual_seed(99)
    (y * torch.randn_like(y)).sum().backward()
    return y.detach(), [x.grad] + ([] if ew is None else [ew.grad]) + [p.grad for p in m.parameters()]


def assert_same(y, got, want_y, want):
    """A layer's output and gradients (run's) against another run's: the same within float rounding,
    None where the other has None."""
    torch.testing.assert_close(y, want_y, rtol=1e-4, atol=1e-5)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


class Reference(torch.nn.Module):
    """A reference formulation run through a gnn layer's own parameters (the same order of parameters)."""

    def __init__(self, layer, ref):
        super().__init__()
        self.layer, self.ref = layer, ref

    def forward(self, x, ei, ew=None):
        return self.ref(self.layer, x, ei, ew)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_against_plain_torch(name):
    _, _, ref, weighted = LAYERS[name]
    x, ei = inputs()
    ew = (torch.rand(ei.shape[1]) + 0.5).requires_grad_() if weighted else None
    m = perturbed(make(gt, name))
    y, got = run(m, x, ei, ew)
    want_y, want = run(Reference(m, ref), x, ei, ew)
    assert_same(y, got, want_y, want)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_against_pyg(name):
    pyg = pytest.importorskip("torch_geometric.nn", reason="torch_geometric is not installed (pip install torch_geometric)")
    _, _, _, weighted = LAYERS[name]
    x, ei = inputs(2)
    if weighted:  # at most one self-loop per node: of repeated loops PyG gives every one the used one's gradient
        loops = torch.nonzero(ei[0] == ei[1]).flatten()
        first = {}
        for p in loops.tolist():
            first.setdefault(int(ei[0, p]), p)
        keep = torch.ones(ei.shape[1], dtype=torch.bool)
        keep[[p for p in loops.tolist() if first[int(ei[0, p])] != p]] = False
        ei = ei[:, keep]
    ew = (torch.rand(ei.shape[1]) + 0.5).requires_grad_() if weighted else None
    ours, theirs = perturbed(make(gt, name)), make(pyg, name)
    theirs.load_state_dict(ours.state_dict())  # PyG's parameter names and shapes
    y, got = run(ours, x, ei, ew)
    want_y, want = run(theirs, x, ei, ew)
    assert_same(y, got, want_y, want)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_takes_pygs_edge_index_class(name):
    # PyG's EdgeIndex is a tensor subclass wrapping another: its DLPack export points at no data (the raw
    # gnn.Graph refuses it by name), and the layers read the tensor it holds: the same bits as a plain one.
    tg = pytest.importorskip("torch_geometric", reason="torch_geometric is not installed (pip install torch_geometric)")
    if not hasattr(tg, "EdgeIndex"):
        pytest.skip("this torch_geometric has no EdgeIndex (2.5 and later)")
    _, _, _, weighted = LAYERS[name]
    x, ei = inputs(4)
    wrapped = tg.EdgeIndex(ei.clone(), sparse_size=(x.shape[0], x.shape[0]))
    with pytest.raises(TypeError, match="edge_index has no data"):
        gnn.Graph(wrapped)
    ew = torch.linspace(0.5, 1.5, ei.shape[1]) if weighted else None
    m = make(gt, name)
    xs = [x.detach().clone().requires_grad_() for _ in range(2)]
    got = [run(m, xs[i], e, ew) for i, e in enumerate((ei, wrapped))]
    assert torch.equal(got[0][0], got[1][0])
    for a, b in zip(got[0][1], got[1][1]):
        assert (a is None and b is None) or torch.equal(a, b)


@pytest.mark.parametrize("name", ["sage", "gcn-weighted", "gin", "gat", "gat-edge"])
def test_layer_same_bits_run_to_run(name):
    runs = []
    for threads in (1, 2):
        gnn.set_num_threads(threads)
        x, ei = inputs(1)
        ew = torch.linspace(0.5, 1.5, ei.shape[1]).requires_grad_() if LAYERS[name][3] else None
        torch.manual_seed(3)
        # GIN's nn is torch's own code, whose sums (a Linear's weight gradient over the nodes) may be split
        # by thread count, and gnn.set_num_threads sets torch's count too (one OpenMP runtime): the identity
        # keeps the bits gnn's (its aggregation, forward and backward).
        m = gt.GINConv(torch.nn.Identity(), eps=0.25) if name == "gin" else make(gt, name)
        y, grads = run(m, x, ei, ew)
        # GAT's parameter gradients, with or without edge features, are torch's own sums over the nodes and
        # edges (lin's and lin_edge's weights, the att vectors, the bias), which torch may split by thread count
        # (torch 2.15 does for lin_edge's weight): y and the input gradients carry gnn's kernels' bits.
        if name.startswith("gat"):
            grads = grads[:1 + (ew is not None)]
        runs.append([y.numpy().tobytes()] + [g.numpy().tobytes() for g in grads])
    assert runs[0] == runs[1]


# Bipartite layers (PyG's (x_src, x_dst) inputs): NS sources of FS features, ND targets of FD.
NO_PYG = "torch_geometric is not installed (pip install torch_geometric)"
NS, ND, FS, FD = 50, 30, 7, 4


def bipartite_inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    ei = torch.stack([torch.randint(0, NS, (300,), generator=g), torch.randint(0, ND, (300,), generator=g)])
    ei[:, :5] = torch.arange(5).repeat(2, 1)  # i -> i edges, which GATConv's self-loops replace
    xs = torch.randn(NS, FS, generator=g).requires_grad_()
    return xs, torch.randn(ND, FD, generator=g).requires_grad_(), torch.randn(ND, FS, generator=g).requires_grad_(), ei


def ref_bipartite(m, xs, xd, ei, nd=None, ea=None, with_alpha=False):
    """PyG's bipartite SAGEConv and GATConv in plain torch: xs [num_src, *] sources, xd [num_dst, *]
    targets or None (then num_dst = nd, or num_src, and GAT scores the sources alone); ea GAT's edge
    features (the self-loops' from fill_value over the edges into each of the first min(...) nodes);
    with_alpha: also GAT's attention weights, in the order of the edges after the self-loops."""
    nd = (xs.shape[0] if nd is None else nd) if xd is None else xd.shape[0]
    if isinstance(m, gt.GINConv):
        out = aggregate(xs, ei, nd, "sum")
        return m.nn(out if xd is None else out + (1 + m.eps) * xd)
    if isinstance(m, gt.SAGEConv):
        out = m.lin_l(aggregate(torch.relu(m.lin(xs)) if m.project else xs, ei, nd, m.aggr))
        if m.root_weight and xd is not None:
            out = out + m.lin_r(xd)
        return torch.nn.functional.normalize(out, dim=-1) if m.normalize else out
    lin_s, lin_d = (m.lin, m.lin) if m.lin is not None else (m.lin_src, m.lin_dst)
    if m.add_self_loops:
        loop, keep = torch.arange(min(xs.shape[0], nd)), ei[0] != ei[1]
        if ea is not None:
            fill, k = m.fill_value, loop.numel()
            if isinstance(fill, str):
                name = {"amax": "max", "amin": "min"}.get(fill, fill)
                loops = ref_fill(ea.view(-1, m.edge_dim)[keep], ei[1][keep], k, name).view((k,) + tuple(ea.shape[1:]))
            else:  # a number (None: 1) or a tensor, broadcast over the loops as PyG's compute_loop_attr
                t = torch.as_tensor(1.0 if fill is None else fill, dtype=torch.float32)
                t = t.unsqueeze(0) if isinstance(fill, torch.Tensor) and t.dim() != ea.dim() else t
                loops = t.expand((k,) + tuple(ea.shape[1:]))
            ea = torch.cat([ea[keep], loops])
        ei = torch.cat([ei[:, keep], torch.stack([loop, loop])], 1)
    H, C = m.heads, m.out_channels
    hs = (xs @ lin_s.weight.t()).view(-1, H, C)
    a_s = (hs * m.att_src).sum(-1)
    a_d = torch.zeros(nd, H) if xd is None else ((xd @ lin_d.weight.t()).view(-1, H, C) * m.att_dst).sum(-1)
    pre = a_s[ei[0]] + a_d[ei[1]]
    if ea is not None:
        pre = pre + ((ea.view(-1, m.edge_dim) @ m.lin_edge.weight.t()).view(-1, H, C) * m.att_edge).sum(-1)
    sc = torch.nn.functional.leaky_relu(pre, m.negative_slope)
    mx = torch.full((nd, H), -1e30).scatter_reduce(0, ei[1][:, None].expand(-1, H), sc, "amax")
    ex = torch.exp(sc - mx[ei[1]])
    alpha = ex / torch.zeros(nd, H).index_add(0, ei[1], ex)[ei[1]]
    out = torch.zeros(nd, H, C).index_add(0, ei[1], alpha[..., None] * hs[ei[0]])
    out = out.reshape(nd, H * C) if m.concat else out.mean(1)
    if m.res is not None and xd is not None:
        out = out + xd @ m.res.weight.t()
    return (out + m.bias, alpha) if with_alpha else out + m.bias


# name -> (layer class, constructor args, which inputs: "pair" (xs, xd), "nodst" (xs, None), "shared"
# (xs, xs-wide targets), "single" (xs alone), "few" (20 sources of xs, xd))
BIPARTITE = {
    "sage": ("SAGEConv", ((FS, FD), O), {}, "pair"),
    "sage-max-noroot": ("SAGEConv", ((FS, FD), O), dict(aggr="max", root_weight=False), "pair"),
    "sage-sum-normalize": ("SAGEConv", ((FS, FD), O), dict(aggr="sum", normalize=True), "pair"),
    "sage-nodst": ("SAGEConv", ((FS, FD), O), dict(aggr="sum"), "nodst"),
    "sage-shared": ("SAGEConv", (FS, O), {}, "shared"),
    "sage-project": ("SAGEConv", ((FS, FD), O), dict(project=True, normalize=True), "pair"),
    "gat": ("GATConv", ((FS, FD), O), dict(heads=2), "pair"),
    "gat-mean-noloops": ("GATConv", ((FS, FD), O), dict(heads=3, concat=False, add_self_loops=False), "pair"),
    "gat-nodst": ("GATConv", ((FS, FD), O), dict(heads=2), "nodst"),
    "gat-shared": ("GATConv", (FS, O), dict(heads=2), "shared"),
    "gat-single": ("GATConv", ((FS, FS), O), dict(heads=2), "single"),
    "gat-few-sources": ("GATConv", ((FS, FD), O), dict(heads=2), "few"),  # self-loops for the 20 sources only
    "gat-residual": ("GATConv", ((FS, FD), O), dict(heads=2, residual=True), "pair"),
    "gin": ("GINConv", (), dict(train_eps=True), "shared"),
    "gin-nodst": ("GINConv", (), dict(eps=0.5), "nodst"),
    "gat-residual-single": ("GATConv", ((FS, FS), O), dict(heads=2, concat=False, residual=True), "single"),
}


def bipartite_run(m, name, seed=0):
    """The layer's output and its gradients (inputs, then parameters) on bipartite_inputs(seed)."""
    xs, xd, xw, ei = bipartite_inputs(seed)
    how = BIPARTITE[name][3]
    x = {"pair": (xs, xd), "nodst": (xs, None), "shared": (xs, xw), "single": xs, "few": (xs[:20], xd)}[how]
    if how == "few":
        ei = ei[:, ei[0] < 20]
    for p in m.parameters():
        p.grad = None
    y = m(x, ei)
    torch.manual_seed(99)
    (y * torch.randn_like(y)).sum().backward()
    inputs = [xs] + ([xd] if how in ("pair", "few") else [xw] if how == "shared" else [])
    return y.detach(), [t.grad for t in inputs] + [p.grad for p in m.parameters()], (x, ei)


def make_bipartite(module, name):
    cls, args, kwargs, _ = BIPARTITE[name]
    torch.manual_seed(5)
    if cls == "GINConv":
        args = (torch.nn.Sequential(torch.nn.Linear(FS, 9), torch.nn.ReLU(), torch.nn.Linear(9, O)),)
    return getattr(module, cls)(*args, **kwargs)


@pytest.mark.parametrize("name", sorted(BIPARTITE))
def test_bipartite_layer_against_plain_torch(name):
    m = perturbed(make_bipartite(gt, name))
    y, got, (x, ei) = bipartite_run(m, name)
    single = not isinstance(x, tuple)

    class Ref(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = m

        def forward(self, x, ei):
            return ref_bipartite(m, x, x, ei) if single else ref_bipartite(m, x[0], x[1], ei)

    want_y, want, _ = bipartite_run(Ref(), name)
    assert y.shape[0] == (NS if BIPARTITE[name][3] in ("nodst", "single") else ND)
    assert_same(y, got, want_y, want)


@pytest.mark.parametrize("name", sorted(BIPARTITE))
def test_bipartite_layer_against_pyg(name):
    pyg = pytest.importorskip("torch_geometric.nn", reason=NO_PYG)
    ours, theirs = perturbed(make_bipartite(gt, name)), make_bipartite(pyg, name)
    theirs.load_state_dict(ours.state_dict())  # PyG's parameter names and shapes
    y, got, _ = bipartite_run(ours, name, 1)
    want_y, want, _ = bipartite_run(theirs, name, 1)
    assert_same(y, got, want_y, want)


@pytest.mark.parametrize("case", ["square", "square-noloops", "bipartite", "bipartite-nodst"])
def test_gat_returns_attention_weights_as_pyg(case):
    # (edge_index, alpha): the edges after the self-loops are replaced, alpha in their order; a loss on
    # alpha too reaches every parameter and input as PyG's does
    xs, xd, _, ei = bipartite_inputs(3)
    if case.startswith("square"):
        x, args = xs, (FS, O)
        ei = ei[:, ei[1] < NS]
    else:
        x, args = ((xs, xd) if case == "bipartite" else (xs, None)), ((FS, FD), O)
    kwargs = dict(heads=2, add_self_loops=case != "square-noloops")

    def run_layer(m):
        for t in [xs, xd] + list(m.parameters()):
            t.grad = None
        y, (e, a) = m(x, ei, return_attention_weights=True)
        torch.manual_seed(7)
        ((y * torch.randn_like(y)).sum() + (a * torch.randn_like(a)).sum()).backward()
        return y.detach(), e, a.detach(), [t.grad for t in [xs, xd] + list(m.parameters())]

    ours = perturbed(gt.GATConv(*args, **kwargs))
    y, e, a, grads = run_layer(ours)
    assert e.shape == (2, a.shape[0]) and a.shape[1] == 2
    if case == "square-noloops":
        assert e is ei  # as PyG: the caller's own edge_index where no self-loop is edited
    n_dst = y.shape[0]  # softmax over each target's edges: the weights of a target's edges sum to 1
    sums = torch.zeros(n_dst, 2).index_add(0, e[1], a)
    has = torch.zeros(n_dst).index_add(0, e[1], torch.ones(e.shape[1])) > 0
    torch.testing.assert_close(sums[has], torch.ones_like(sums[has]))
    pyg = pytest.importorskip("torch_geometric.nn", reason=NO_PYG)
    theirs = pyg.GATConv(*args, **kwargs)
    theirs.load_state_dict(ours.state_dict())
    want_y, want_e, want_a, want = run_layer(theirs)
    assert torch.equal(e, want_e)
    torch.testing.assert_close(y, want_y, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(a, want_a, rtol=1e-4, atol=1e-6)
    for g1, g2 in zip(grads, want):
        assert (g1 is None) == (g2 is None)
        if g1 is not None:
            torch.testing.assert_close(g1, g2, rtol=1e-4, atol=1e-4)


def test_gat_attention_weights_after_dropout_and_kept_edges():
    xs, _, _, ei = bipartite_inputs(4)
    ei = ei[:, ei[1] < NS]
    m = gt.GATConv(FS, O, heads=2, dropout=0.5)
    m.eval()
    y, (e, a) = m(xs, ei, return_attention_weights=True)
    y2, (e2, a2) = m(xs, ei, return_attention_weights=True)  # the graph kept: the same edges and weights
    assert torch.equal(y, y2) and torch.equal(e, e2) and torch.equal(a, a2)
    e2[0].fill_(0)  # the edges returned are the caller's to change, not the layer's kept copy
    assert torch.equal(m(xs, ei, return_attention_weights=True)[1][0], e)
    m.train()  # the weights returned are the ones aggregated with: after dropout, as PyG's
    torch.manual_seed(0)
    y, (e, a) = m(xs, ei, return_attention_weights=True)
    assert (a == 0).any() and (a > 1).any()  # dropped, and the kept scaled by 1 / (1 - p)
    xw = (xs @ m.lin.weight.t()).view(NS, 2, O)
    want = torch.zeros(NS, 2, O).index_add(0, e[1], a[..., None] * xw[e[0]]).reshape(NS, 2 * O) + m.bias
    torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-5)


# fill_value cases: (constructor kwargs, inputs: "square" / "bipartite" / "few" (20 sources, 30 targets:
# loops for 20 only, where PyG fails if an edge reaches a target past them) / "loops" (every edge a
# self-loop: none kept) / "empty" (no edges), edge_attr width (0: [E]))
EDGE_CASES = {
    "mean": (dict(), "square", 3), "add": (dict(fill_value="add"), "square", 3),
    "max": (dict(fill_value="max"), "square", 3), "min": (dict(fill_value="min"), "square", 3),
    "mul": (dict(fill_value="mul"), "square", 3), "amax": (dict(fill_value="amax"), "square", 3),
    "number": (dict(fill_value=0.5), "square", 3), "none": (dict(fill_value=None), "square", 3),
    "tensor": (dict(fill_value=torch.tensor([0.5, -1.0, 2.0])), "square", 3),
    "tensor-row": (dict(fill_value=torch.tensor([[0.5, -1.0, 2.0]])), "square", 3),
    "per-node": (dict(fill_value=torch.linspace(-1, 1, NS)), "square", 0),  # 1-D edge_attr, a value per node
    "flat": (dict(fill_value="max"), "square", 0), "noloops": (dict(add_self_loops=False), "square", 3),
    "bipartite": (dict(fill_value="min"), "bipartite", 3), "bipartite-mean": (dict(), "bipartite", 3),
    "few": (dict(), "few", 3), "all-loops": (dict(fill_value="max"), "loops", 3), "no-edges": (dict(), "empty", 0),
    "few-mul": (dict(fill_value="mul"), "few", 3),
}


@pytest.mark.parametrize("case", sorted(EDGE_CASES))
def test_gat_edge_features(case):
    # the scores' edge term and the self-loops' features (fill_value), against the plain formulation and
    # PyG's layer: values, the attention weights and every gradient, edge_attr's included
    kwargs, how, width = EDGE_CASES[case]
    xs, xd, _, ei = bipartite_inputs(5)
    g = torch.Generator().manual_seed(6)
    args, x = ((FS, FD), O), (xs, xd)
    if how in ("square", "loops", "empty"):
        args, x, ei = (FS, O), xs, ei[:, ei[1] < NS]
        ei = ei[:, :0] if how == "empty" else torch.arange(12).repeat(2, 1) if how == "loops" else ei
    elif how == "few":
        x = (xs[:20], xd)
        ei = ei[:, ei[0] < 20]
    ea = (torch.randn(ei.shape[1], width, generator=g) if width else torch.randn(ei.shape[1], generator=g))
    ea.requires_grad_()

    def run_layer(m):
        for t in [xs, xd, ea] + list(m.parameters()):
            t.grad = None
        y, (e, a) = m(x, ei, ea, return_attention_weights=True)
        torch.manual_seed(8)
        ((y * torch.randn_like(y)).sum() + (a * torch.randn_like(a)).sum()).backward()
        return y.detach(), a.detach(), [t.grad for t in [xs, xd, ea] + list(m.parameters())]

    def same(got, want):  # output, gradients, and the attention weights
        assert_same(got[0], got[2], want[0], want[2])
        torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-5)

    ours = perturbed(gt.GATConv(*args, heads=2, edge_dim=max(width, 1), **kwargs))
    got = run_layer(ours)

    class Ref(torch.nn.Module):  # the plain formulation through ours's parameters, returning as the layer
        def __init__(self):
            super().__init__()
            self.layer = ours

        def forward(self, x_, e_, a_, return_attention_weights):
            xs_, xd_ = x_ if isinstance(x_, tuple) else (x_, x_)
            y_, alpha_ = ref_bipartite(ours, xs_, xd_, e_, ea=a_, with_alpha=True)
            return y_, (None, alpha_)

    same(got, run_layer(Ref()))
    if how == "few" and (ei[1] >= 20).any():
        return  # (PyG's add_self_loops fails on an edge past the loops' nodes)
    pyg = pytest.importorskip("torch_geometric.nn", reason=NO_PYG)
    theirs = pyg.GATConv(*args, heads=2, edge_dim=max(width, 1), **kwargs)
    theirs.load_state_dict(ours.state_dict())
    same(got, run_layer(theirs))


def test_gat_edge_features_refused_by_name():
    xs, _, _, ei = bipartite_inputs()
    ei = ei[:, ei[1] < NS]
    m = gt.GATConv(FS, O, edge_dim=3)
    with pytest.raises(ValueError, match=r"GATConv: edge_attr must have shape \(E, edge_dim=3\)"):
        m(xs, ei, torch.ones(ei.shape[1], 2))
    with pytest.raises(ValueError, match=r"GATConv: edge_attr must have shape"):
        m(xs, ei, torch.ones(ei.shape[1] + 1, 3))
    with pytest.raises(TypeError, match=r"edge_attr must be float32, got torch.float64"):
        m(xs, ei, torch.ones(ei.shape[1], 3, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"edge_attr must be a torch.Tensor, got list"):
        m(xs, ei, [[1.0, 2.0, 3.0]] * ei.shape[1])
    with pytest.raises(ValueError, match=r"GATConv: edge_attr must have shape .* got \(\)"):
        m(xs, ei, torch.tensor(1.0))
    with pytest.raises(ValueError, match=r"GATConv: fill_value must be"):
        gt.GATConv(FS, O, edge_dim=3, fill_value=np.array([1.0, 2.0, 3.0]))
    assert gt.GATConv(FS, O, edge_dim=np.int64(3)).edge_dim == 3
    gt.GATConv(FS, O, fill_value="median")  # (read only with edge features, as in PyG)
    for bad in (0, -2):
        with pytest.raises(ValueError, match=rf"GATConv: edge_dim must be >= 1, got {bad}"):
            gt.GATConv(FS, O, edge_dim=bad)
    for bad, kind in ((1.5, "float"), (True, "bool"), ("3", "str")):
        with pytest.raises(TypeError, match=rf"GATConv: edge_dim must be an integer, got {kind}"):
            gt.GATConv(FS, O, edge_dim=bad)
    with pytest.raises(ValueError, match=r"GATConv: fill_value must be"):
        gt.GATConv(FS, O, edge_dim=3, fill_value="median")
    # without edge_dim, edge_attr is not read (PyG's behaviour): the same output as without it
    plain = gt.GATConv(FS, O)
    torch.testing.assert_close(plain(xs, ei, torch.ones(ei.shape[1], 3)), plain(xs, ei))


@pytest.mark.parametrize("name", ["gcn", "gat"])
def test_layer_settings_changed_after_a_call_rebuild_the_graph(name):
    # the kept graph holds the self-loops (and GCN's normalised weights): a layer whose add_self_loops
    # or normalize is switched after a call computes what a fresh layer with those settings does
    x, ei = inputs(6)
    m = make(gt, name)
    m(x, ei)
    m.add_self_loops = False
    if name == "gcn":
        m.normalize = False
    fresh = make(gt, name)
    fresh.add_self_loops, fresh.normalize = m.add_self_loops, getattr(m, "normalize", None)
    fresh.load_state_dict(m.state_dict())
    torch.testing.assert_close(m(x, ei), fresh(x, ei))


def test_bipartite_layers_refuse_mismatched_inputs():
    xs, xd, _, ei = bipartite_inputs()
    sage, gat = gt.SAGEConv((FS, FD), O), gt.GATConv((FS, FD), O)
    for m in (sage, gat):
        who = type(m).__name__
        with pytest.raises(ValueError, match=rf"{who}: x_dst must have shape \(N, in_channels={FD}\)"):
            m((xs, xs), ei)
        with pytest.raises(ValueError, match=rf"{who}: x_src must have shape \(N, in_channels={FS}\)"):
            m((xd, xd), ei)
        with pytest.raises(ValueError, match=rf"{who}: x must be a tensor or a pair"):
            m((xs, xd, xd), ei)
        with pytest.raises(ValueError, match=rf"{who}: size \(50, 29\) does not match the inputs"):
            m((xs, xd), ei, size=(NS, ND - 1))
        with pytest.raises(TypeError, match=rf"{who}: size must be a pair of ints"):
            m((xs, xd), ei, size=(NS, 30.0))
        bad = ei.clone()
        bad[1, 7] = ND  # a target past x_dst's rows
        with pytest.raises(gnn.Error, match=rf"edge 7 \(\d+ -> {ND}\)"):
            m((xs, xd), bad)
    with pytest.raises(ValueError, match=rf"GINConv: x_dst must have shape \(N, in_channels={FS}\)"):
        gt.GINConv(torch.nn.Identity())((xs, xd), ei)  # the targets' features are added to the sum
    with pytest.raises(TypeError, match=r"in_channels must be an int or a pair of ints"):
        gt.SAGEConv((FS, FD, 3), O)
    with pytest.raises(TypeError, match=r"in_channels must be an int or a pair of ints"):
        gt.GATConv("7", O)
    g = gnn.Graph(ei, num_nodes=ND, num_src_nodes=NS)
    torch.testing.assert_close(sage((xs, xd), g), sage((xs, xd), ei))  # a gnn.Graph of the same shape
    with pytest.raises(ValueError, match=r"the gnn.Graph has 30 targets and 50 sources; the inputs have 30 and 30"):
        sage((xs[:ND], xd), g)
    # size, where x_dst is None, sets the targets (GAT's self-loops then for min(size) nodes)
    for m in (gt.SAGEConv((FS, FD), O, aggr="sum"), gt.GATConv((FS, FD), O, heads=2)):
        y = m((xs, None), ei, size=(NS, ND))
        assert y.shape[0] == ND
        torch.testing.assert_close(y, ref_bipartite(m, xs, None, ei, ND), rtol=1e-4, atol=1e-5)
        with pytest.raises(ValueError, match=r"size \(50, -1\) does not match"):
            m((xs, None), ei, size=(NS, -1))
    # GATConv's arguments in PyG's order: (x, edge_index, edge_attr, size, return_attention_weights)
    torch.testing.assert_close(gat((xs, xd), ei, None, (NS, ND)), gat((xs, xd), ei))
    for bad_in in (True, (FS, True), -2, (FS, -2), (FS, 2.0), "7"):
        with pytest.raises((TypeError, ValueError), match=r"in_channels must be"):
            gt.SAGEConv(bad_in, O)
    # a bipartite gnn.Graph of one node set's size, given one tensor: aggregated by spmm (the fused SAGE
    # layer takes one node set only), the same values as the square graph
    square = gt.SAGEConv(FS, O)
    g_same = gnn.Graph(ei, num_nodes=NS, num_src_nodes=NS)
    assert g_same.is_bipartite
    torch.testing.assert_close(square(xs, g_same), square(xs, ei), rtol=1e-5, atol=1e-6)


def test_graph_cache_follows_the_edge_index_object():
    x, ei = inputs()
    m = gt.SAGEConv(F, O)
    y1 = m(x, ei)
    g1 = m._cache.value
    m(x, ei)
    assert m._cache.value is g1  # the same tensor, unchanged: the same graph
    ei[1, 0] = (ei[1, 0] + 1) % N  # an in-place change bumps the version: rebuilt
    y2 = m(x, ei)
    assert m._cache.value is not g1
    torch.testing.assert_close(y2, ref_sage(m, x, ei))
    assert not torch.equal(y1, y2)
    # A new edge_index each step, as a mini-batch loop makes (torch may hand out the freed memory again):
    # never a stale graph.
    for step in range(20):
        torch.manual_seed(100 + step)
        fresh = torch.randint(0, N, (2, 200))
        torch.testing.assert_close(m(x, fresh), ref_sage(m, x, fresh))
        del fresh


def test_layers_under_inference_mode():
    """An edge_index made under torch.inference_mode() has no version counter: the graph is built each
    call, and the output is the one outside inference mode. An ordinary edge_index evaluated under
    inference mode first leaves nothing in the cache that a training step cannot save for backward."""
    x, ei = inputs()
    ew = torch.rand(ei.shape[1]) + 0.5
    for make_layer, weighted in ((lambda: gt.SAGEConv(F, O), False), (lambda: gt.GCNConv(F, O), False),
                                 (lambda: gt.GCNConv(F, O), True), (lambda: gt.GATConv(F, O, heads=2), False),
                                 (lambda: gt.GINConv(gin_mlp()), False)):
        torch.manual_seed(5)
        m = make_layer()
        twin = copy.deepcopy(m)
        call = (lambda layer, e: layer(x, e, ew)) if weighted else (lambda layer, e: layer(x, e))
        want = call(twin, ei).detach()
        with torch.inference_mode():
            inf_ei = ei.clone()
            assert inf_ei.is_inference()
            torch.testing.assert_close(call(m, inf_ei), want, rtol=0, atol=0)
            inf_ei[1, 0] = (inf_ei[1, 0] + 1) % N  # edited in place: seen, as nothing is kept
            torch.testing.assert_close(call(m, inf_ei), call(m, inf_ei.clone()), rtol=0, atol=0)
            torch.testing.assert_close(call(m, ei), want, rtol=0, atol=0)  # the ordinary one: kept
        # then a training step on the ordinary edge_index, through what the inference call kept
        y = call(m, ei)
        grads = torch.autograd.grad(y.square().sum(), list(m.parameters()))
        want_grads = torch.autograd.grad(call(twin, ei).square().sum(), list(twin.parameters()))
        torch.testing.assert_close(y.detach(), want, rtol=0, atol=0)
        for a, b in zip(grads, want_grads):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_copies_and_pickles_of_a_used_layer():
    x, ei = inputs()
    for m in (gt.SAGEConv(F, O), gt.GCNConv(F, O), gt.GATConv(F, O, heads=2), gt.GINConv(gin_mlp())):
        y = m(x, ei)
        twin = copy.deepcopy(m)
        torch.testing.assert_close(twin(x, ei), y)
        buf = io.BytesIO()
        torch.save(m, buf)
        buf.seek(0)
        loaded = torch.load(buf, weights_only=False) if "weights_only" in torch.load.__code__.co_varnames else \
            torch.load(buf)
        torch.testing.assert_close(loaded(x, ei), y)


def test_double_backward_is_refused_not_wrong():
    x, ei = inputs()
    for m in (gt.SAGEConv(F, O), gt.SAGEConv(F, O, aggr="sum"), gt.GCNConv(F, O), gt.GATConv(F, O)):
        y = m(x, ei)
        with pytest.raises(RuntimeError):  # (at the grad itself, or at the second backward)
            (g,) = torch.autograd.grad(y.square().sum(), x, create_graph=True)
            g.square().sum().backward()


def test_a_gradient_penalty_is_refused_where_terms_would_drop_and_exact_where_none_do():
    """autograd.grad(y.sum(), x, create_graph=True): the incoming gradient does not require grad, so
    once_differentiable alone let the layers return gradients without their dependence on x and the weights
    (a penalty on them then trained on wrong gradients). Refused by name; spmm with no weight that requires
    grad (GCNConv's, its weights fixed) drops nothing and goes on."""
    x0, ei = inputs()
    g = gt.graph_of(ei, x0.shape[0])
    g_src, g_dst = ei[0], ei[1]  # (spmm sums x[src] into dst)
    w = torch.ones(F, requires_grad=True)
    for name, f in [("sage", lambda x: gt.SAGEConv(F, O)(x, ei)), ("spmm", lambda x: gt.GATConv(F, O)(x, ei)),
                    ("sage", lambda x: gt.sage(g, x, torch.randn(2 * F, O), activation="tanh")),
                    ("layer_norm", lambda x: gt.layer_norm(x, w, torch.zeros(F))),
                    ("segment_softmax", lambda x: gt.segment_softmax(x, torch.tensor([0, 20, x.shape[0]], dtype=torch.int32))),
                    ("pool", lambda x: gt.pool(x, torch.tensor([0, x.shape[0]]), "logsumexp"))]:
        x = x0.clone().requires_grad_()
        y = f(x)
        with pytest.raises(RuntimeError, match=f"gnn.torch.{name}: no double backward"):
            torch.autograd.grad(y.sum(), x, create_graph=True)
    # An incoming gradient that needs grad (y squared): once_differentiable's deferred error, raised only
    # where the gradient is differentiated again; another input's gradient penalised goes on, exactly
    x = x0.clone().requires_grad_()
    (gx,) = torch.autograd.grad(gt.GCNConv(F, O)(x, ei).square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        gx.square().sum().backward()
    grads = []
    for f in (lambda x: gt.spmm(g, x), lambda x: torch.zeros_like(x).index_add(0, g_dst, x[g_src])):
        x, z = x0.clone().requires_grad_(), torch.randn(3, generator=torch.Generator().manual_seed(1),
                                                        requires_grad=True)
        gx, gz = torch.autograd.grad(f(x).square().sum() + (z ** 3).sum(), [x, z], create_graph=True)
        gz.square().sum().backward()
        grads.append(z.grad)
    torch.testing.assert_close(grads[0], grads[1])
    # Ops whose gradient does not depend on their inputs go on, and the penalty's gradient is exact
    ptr = torch.tensor([0, 20, x0.shape[0]])
    seg = torch.repeat_interleave(torch.arange(2), ptr.diff())
    dense = {"sum": lambda x: torch.zeros(2, F).index_add(0, seg, x),
             "mean": lambda x: torch.zeros(2, F).index_add(0, seg, x) / ptr.diff()[:, None],
             "max": lambda x: torch.stack([x[:20].amax(0), x[20:].amax(0)])}
    for reduce, ref in dense.items():
        grads = []
        for f in (lambda x, r=reduce: gt.pool(x, ptr, r), ref):
            x = x0.clone().requires_grad_()
            (gx,) = torch.autograd.grad((f(x) * torch.arange(1.0, F + 1)).sum(), x, create_graph=True)
            wpen = torch.ones(F, requires_grad=True)
            ((gx * wpen).square().sum()).backward()
            grads.append(wpen.grad)
        torch.testing.assert_close(grads[0], grads[1], msg=reduce)
    a_src, a_dst = torch.randn(x0.shape[0], 2), torch.randn(x0.shape[0], 2)
    grads = []
    indptr, src = (torch.as_tensor(np.asarray(a)).long() for a in (g.indptr, g.indices))
    dst = torch.repeat_interleave(torch.arange(x0.shape[0]), indptr.diff())  # (CSR rows: the targets)
    for f in (lambda s, d: gt.gat_scores(g, s, d, 0.2),
              lambda s, d: torch.nn.functional.leaky_relu(s[src] + d[dst], 0.2)):
        s = a_src.clone().requires_grad_()
        (gs,) = torch.autograd.grad(f(s, a_dst).sum(), s, create_graph=True)
        wpen = torch.ones(2, requires_grad=True)
        (gs * wpen).square().sum().backward()
        grads.append(wpen.grad)
    torch.testing.assert_close(grads[0], grads[1])
    # GCNConv: x W through torch, then spmm weighted by fixed normalisation: the penalty's gradient is exact
    x0, ei = inputs(self_loops=False)
    torch.manual_seed(0)
    conv = gt.GCNConv(F, O)
    x = x0.clone().requires_grad_()
    y = conv(x, ei)
    (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    ((gx.norm(dim=1) - 1) ** 2).mean().backward()
    ours = conv.lin.weight.grad.clone()
    conv.lin.weight.grad = None
    a = torch.zeros(x0.shape[0], x0.shape[0])  # the same layer, dense: D^-1/2 (A + I) D^-1/2 x W^T + b
    loops = torch.arange(x0.shape[0])
    src, dst = torch.cat([ei[0], loops]), torch.cat([ei[1], loops])
    a.index_put_((dst, src), torch.ones(src.numel()), accumulate=True)
    deg = a.sum(1)
    norm = deg.pow(-0.5)[:, None] * a * deg.pow(-0.5)[None, :]
    x = x0.clone().requires_grad_()
    y = norm @ (x @ conv.lin.weight.T) + conv.bias
    (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    ((gx.norm(dim=1) - 1) ** 2).mean().backward()
    torch.testing.assert_close(ours, conv.lin.weight.grad, rtol=1e-5, atol=1e-6)


def test_functional_arguments_refused_by_name():
    g = gt.graph_of(torch.tensor([[0, 1], [1, 0]]), 2)
    x = torch.ones(2, 3)
    for call, exc, says in [
        (lambda: gt.spmm(g, x, "sum", np.ones(2, np.float32)), TypeError, "edge_weight must be a torch.Tensor"),
        (lambda: gt.sage(g, x, torch.ones(6, 2), np.ones(2, np.float32)), TypeError, "bias must be a torch.Tensor"),
        (lambda: gt.sage(g, x, torch.ones(6, 2), negative_slope="abc"), TypeError, "negative_slope must be a real"),
        (lambda: gt.gat_scores(g, x, x, negative_slope="abc"), TypeError, "negative_slope must be a real"),
        (lambda: gt.layer_norm(x, eps="abc"), TypeError, "eps must be a real number"),
        (lambda: gt.layer_norm(x, np.ones(3, np.float32), torch.ones(3)), TypeError, "weight must be a torch.Tensor"),
        (lambda: gt.instance_norm(x, torch.tensor([0, 2]), torch.ones(3), torch.ones(3, dtype=torch.float64)),
         TypeError, "bias must be float32"),
        (lambda: gt.graph_of(gnn.Graph.__new__(gnn.Graph)), ValueError, "edge_index is a gnn.Graph that was never"),
        (lambda: gt.SAGEConv(3, 2)(x, gnn.Graph.__new__(gnn.Graph)), ValueError, "edge_index is a gnn.Graph that"),
    ]:
        with pytest.raises(exc, match=says):
            call()


def test_gcn_edge_weight_on_a_graph_without_edges_as_pyg():
    x, ei, w = torch.randn(4, 3), torch.zeros(2, 0, dtype=torch.long), torch.zeros(0)
    conv = gt.GCNConv(3, 2)
    out = conv(x, ei, w)  # every node's only edge is its new self-loop (weight 1): lin(x) + bias
    torch.testing.assert_close(out, x @ conv.lin.weight.t() + conv.bias)
    try:
        import torch_geometric.nn as pyg_nn
    except ImportError:
        return
    peer = pyg_nn.GCNConv(3, 2)
    peer.load_state_dict(conv.state_dict())
    torch.testing.assert_close(out, peer(x, ei, w))


def test_functional_pool_and_norms_against_torch():
    torch.manual_seed(4)
    ptr = torch.tensor([0, 7, 7, 20])
    x = torch.randn(20, 3, requires_grad=True)
    w, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    segs = [(0, 7), (7, 20)]  # (graph 1 is empty)
    refs = {"sum": lambda s: s.sum(0), "mean": lambda s: s.mean(0), "max": lambda s: s.max(0).values,
            "logsumexp": lambda s: torch.logsumexp(s, 0)}
    for reduce, f in refs.items():
        y = gt.pool(x, ptr, reduce)
        (gx,) = torch.autograd.grad(y[[0, 2]].sum(), x)
        want = torch.stack([f(x[a:e]) for a, e in segs])
        torch.testing.assert_close(y[[0, 2]], want)
        torch.testing.assert_close(gx, torch.autograd.grad(want.sum(), x)[0])
    y = gt.instance_norm(x, ptr, w, b)
    want = torch.cat([torch.nn.functional.instance_norm(x[a:e].t()[None], eps=1e-5)[0].t() for a, e in segs]) * w + b
    torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-5)
    dy = torch.randn_like(y)
    for a, e in zip(torch.autograd.grad((y * dy).sum(), (x, w, b)), torch.autograd.grad((want * dy).sum(), (x, w, b))):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)
    y = gt.layer_norm(x, w, b)
    want = torch.nn.functional.layer_norm(x, (3,), w, b)
    torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-5)
    for a, e in zip(torch.autograd.grad((y * dy).sum(), (x, w, b)), torch.autograd.grad((want * dy).sum(), (x, w, b))):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)


def test_functional_index_changed_after_forward_and_strided_arguments():
    """The backward reads ptr (indptr) as the forward did, whatever happens to the caller's array in
    between; non-contiguous weight, bias and ptr are taken as torch's own functions take them."""
    torch.manual_seed(5)
    x = torch.randn(7, 3, requires_grad=True)
    cases = [(lambda p: gt.pool(x, p, "mean"), "int64"), (lambda p: gt.pool(x, p, "logsumexp"), "int64"),
             (lambda p: gt.instance_norm(x, p), "int64"), (lambda p: gt.segment_softmax(x, p), "int32")]
    for f, dtype in cases:
        for kind in ("torch", "numpy", "memoryview"):
            base = (torch.tensor([0, 2, 2, 5, 7], dtype=getattr(torch, dtype)) if kind == "torch" else
                    np.array([0, 2, 2, 5, 7], dtype=dtype))
            ptr = memoryview(base) if kind == "memoryview" else base
            want = torch.autograd.grad((f(ptr) * torch.arange(1.0, 4.0)).sum(), x)[0]
            y = f(ptr)
            base[1:3] = 3
            got = torch.autograd.grad((y * torch.arange(1.0, 4.0)).sum(), x)[0]
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    wb = torch.randn(3, 2, requires_grad=True)
    w, b = wb[:, 0], wb[:, 1]  # (stride 2)
    ptr = torch.tensor([0, 4, 4, 7, 9, 11])[::2]  # [0, 4, 9], strided
    xs = torch.randn(9, 3, requires_grad=True)
    torch.testing.assert_close(gt.layer_norm(xs, w, b), torch.nn.functional.layer_norm(xs, (3,), w, b),
                               rtol=1e-5, atol=1e-5)
    y = gt.instance_norm(xs, ptr, w, b)
    want = torch.cat([torch.nn.functional.instance_norm(xs[a:e].t()[None], eps=1e-5)[0].t()
                      for a, e in [(0, 4), (4, 9)]]) * w + b
    torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-5)
    g = torch.autograd.grad(y.sum() + (y * y).sum(), wb)[0]
    torch.testing.assert_close(g, torch.autograd.grad(want.sum() + (want * want).sum(), wb)[0], rtol=1e-4, atol=1e-4)

def test_sage_reads_aggr_names_as_pyg_does():
    x, ei = inputs()
    for name, want in (("Mean", "mean"), ("SUM", "sum"), ("Add", "sum"), ("max", "max")):
        a, b = gt.SAGEConv(F, O, aggr=name), gt.SAGEConv(F, O, aggr=want)
        assert a.aggr == want
        b.load_state_dict(a.state_dict())
        torch.testing.assert_close(a(x, ei), b(x, ei), rtol=0, atol=0)


def test_layers_refuse_what_they_do_not_compute():
    x, ei = inputs()
    with pytest.raises(NotImplementedError, match="aggr"):
        gt.SAGEConv(F, O, aggr="lstm")
    with pytest.raises(ValueError, match="self-loops"):
        gt.GCNConv(F, O, normalize=False, add_self_loops=True)
    with pytest.raises(TypeError, match="float32"):
        gt.SAGEConv(F, O)(x.double(), ei)
    with pytest.raises(ValueError, match="edge_index must have shape"):
        gt.SAGEConv(F, O)(x, ei.t().contiguous())
    with pytest.raises(TypeError, match="pass edge_index"):
        gt.GATConv(F, O)(x, gt.graph_of(ei, N))
    with pytest.raises(ValueError, match="edge_weight must have shape"):
        gt.GCNConv(F, O)(x, ei, torch.ones(3))
    with pytest.raises(ValueError, match="heads must be >= 1, got 0"):
        gt.GATConv(F, O, heads=0)
    with pytest.raises(TypeError, match="heads must be an integer, got float"):
        gt.GATConv(F, O, heads=2.0)
    with pytest.raises(TypeError, match="heads must be an integer, got bool"):
        gt.GATConv(F, O, heads=True)
    assert gt.GATConv(F, O, heads=np.int64(2))(x, ei).shape == (N, 2 * O)  # NumPy integers, as PyG takes them


def test_gin_reset_parameters_resets_its_nn_as_pygs():
    """PyG's reset: the nn's own reset_parameters where it has one (a bare Linear, or a module with its own
    init), else its children's; a bare Linear was left as it was."""
    torch.manual_seed(3)
    for inner in (torch.nn.Linear(F, O), gin_mlp()):
        layer = gt.GINConv(inner, eps=0.5, train_eps=True)
        before = [p.detach().clone() for p in inner.parameters()]
        with torch.no_grad():
            layer.eps.fill_(2.0)
        layer.reset_parameters()
        assert all(not torch.equal(a, b) for a, b in zip(before, inner.parameters()))
        assert layer.eps.item() == 0.5

    class OwnInit(torch.nn.Module):  # its own reset_parameters, which the children's must not replace
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(F, O)

        def reset_parameters(self):
            torch.nn.init.constant_(self.lin.weight, 0.25)

        def forward(self, x):
            return self.lin(x)

    own = OwnInit()
    gt.GINConv(own).reset_parameters()
    assert torch.all(own.lin.weight == 0.25)


def test_layers_under_autocast_take_half_inputs_in_float32():
    """Under torch.autocast a layer's x @ W comes out bfloat16; gnn's kernels take it in float32 (torch's
    float32 ops' rule) instead of refusing it as "x must be float32"; outside autocast a half input is
    still refused."""
    x, ei = inputs()
    for name in ("gcn", "gat", "sage-sum-noroot", "gin"):
        m = make(gt, name)
        want = m(x, ei)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = m(x, ei)
        # float32 where a gnn kernel makes the output (GCN, GAT), bfloat16 where a torch Linear does (as PyG's)
        assert got.dtype == (torch.float32 if name in ("gcn", "gat") else torch.bfloat16)
        torch.testing.assert_close(got.float(), want, rtol=0.05, atol=0.05)  # (bf16 products)
        got.sum().backward()
        assert x.grad is not None and x.grad.dtype == torch.float32
        x.grad = None
    g = gt.graph_of(ei, N)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert gt.spmm(g, x.detach().bfloat16()).dtype == torch.float32
    with pytest.raises(TypeError, match="x must be float32, got torch.bfloat16"):
        gt.spmm(g, x.detach().bfloat16())
    with pytest.raises(ValueError, match=r"in_channels must be >= 0, or -1 \(sized at the first call\), got -2"):
        gt.GCNConv(-2, O)
    with pytest.raises(TypeError, match="GCN has no bipartite form"):
        gt.GCNConv((F, F), O)


@pytest.mark.parametrize("name", ["SAGEConv", "GCNConv", "GATConv", "GINConv"])
def test_layers_check_edge_index_and_x_by_name(name):
    """Every layer refuses a bad edge_index the way gnn.Graph does, before it adds or drops self-loops
    (which would hide an out-of-range loop or hand a negative id to Python's indexing); the layers that
    know in_channels name it when x does not match."""
    x, ei = inputs()
    m = gt.GINConv(gin_mlp()) if name == "GINConv" else getattr(gt, name)(F, O)
    for bad in ([[0, N], [1, N]], [[0, -1], [1, -1]], [[0, 1], [1, N + 5]]):
        with pytest.raises(gnn.Error, match=r"edge 1 .* has a node id outside \[0, %d\)" % N):
            m(x, torch.tensor(bad))
    with pytest.raises(TypeError, match="edge_index must be int64 or int32"):
        m(x, ei.float())
    with pytest.raises(TypeError, match="edge_index must be a torch.Tensor"):
        m(x, ei.numpy())
    with pytest.raises(ValueError, match=r"edge_index must have shape \(2, E\)"):
        m(x, torch.zeros(3, 4, dtype=torch.long))
    if name != "GINConv":  # (its nn decides what x it takes)
        want = r"x must have shape \(N, in_channels=%d\), got \(%d, %d\)" % (F, N, F + 1)
        with pytest.raises(ValueError, match=want):
            m(torch.randn(N, F + 1), ei)


def test_bench_runs(tmp_path):
    """python -m gnn.bench on a small graph: every case prints a line, and --overhead its table."""
    env_cmd = [sys.executable, "-m", "gnn.bench", "--nodes", "300", "--edges", "1500", "--features", "8", "--hidden",
               "8", "--heads", "2", "--repeat", "2"]
    out = subprocess.run(env_cmd, check=True, capture_output=True, text=True).stdout
    for case in ("spmm-sum", "spmm-mean", "spmm-max", "sage layer", "gcn layer", "gin layer", "gat layer"):
        assert case in out
    np.savez(tmp_path / "g.npz", edge_index=np.array([[0, 1, 2], [1, 2, 0]]).T, num_nodes=np.array([3]))
    out = subprocess.run(env_cmd[:3] + ["--edge-index", str(tmp_path / "g.npz"), "--only", "sage", "--repeat", "1"],
                         check=True, capture_output=True, text=True).stdout
    assert "N=3 E=3" in out and "sage layer" in out
    for args, says in [(["--heads", "0"], "--heads must be >= 1, got 0"), (["--nodes", "-1"], "--nodes must be >= 1"),
                       (["--only", "bogus"], "--only bogus: no case starts with it")]:
        r = subprocess.run(env_cmd[:3] + args, capture_output=True, text=True)
        assert r.returncode == 2 and says in r.stderr, r.stderr
    np.savez(tmp_path / "plain.npz", a=np.zeros(3))
    r = subprocess.run(env_cmd[:3] + ["--edge-index", str(tmp_path / "plain.npz")], capture_output=True, text=True)
    assert r.returncode == 1 and "plain.npz: no edge_index array (it holds a)" in r.stderr, r.stderr
    # A graph that cannot be one, or no npz at all: one line naming the file, no traceback.
    (tmp_path / "empty").write_bytes(b"")
    bad = {"flat": dict(edge_index=np.arange(6)), "fractions": dict(edge_index=np.full((2, 3), 0.5)),
           "negative": dict(edge_index=np.array([[0, -1], [1, 0]])),
           "past": dict(edge_index=np.array([[0, 5], [1, 0]]), num_nodes=np.array([3])),
           "no-size": dict(edge_index=np.zeros((2, 0), np.int64))}
    for name, arrays in bad.items():
        np.savez(tmp_path / f"{name}.npz", **arrays)
    for name in list(bad) + ["empty"]:
        path = str(tmp_path / (name if name == "empty" else f"{name}.npz"))
        r = subprocess.run(env_cmd[:3] + ["--edge-index", path], capture_output=True, text=True)
        assert r.returncode == 1 and r.stderr.startswith(f"--edge-index {path}: "), r.stderr
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    # --planetoid's arrays are checked as --edge-index's (a 0-d x_shape is its node count); a node count past
    # int32 and an --only of commas alone are refused, not run (a stack dump, or every case)
    np.savez(tmp_path / "p0.npz", edge_index=np.array([[0, 1], [1, 2]], np.int32), x_shape=np.array(3))
    np.savez(tmp_path / "p1.npz", edge_index=np.array([[0, 1], [1, 5]], np.int32), x_shape=np.array([3, 4]))
    np.savez(tmp_path / "big.npz", edge_index=np.array([[0, 1], [1, 2]]), num_nodes=np.array(1e30))
    out = subprocess.run(env_cmd[:3] + ["--planetoid", str(tmp_path / "p0.npz"), "--only", "spmm-sum", "--repeat",
                                        "1"], check=True, capture_output=True, text=True).stdout
    assert "N=3 E=4" in out
    for args, says in [(["--planetoid", str(tmp_path / "p1.npz")], "p1.npz: edge_index names node 5, and x_shape "
                                                                   "says 3 nodes"),
                       (["--edge-index", str(tmp_path / "big.npz")], "nodes; gnn's graphs hold at most 2^31 - 1"),
                       (["--nodes", str(3 * 10**9), "--edges", "5"], "3000000000 nodes; gnn's graphs hold at most")]:
        r = subprocess.run(env_cmd[:3] + args, capture_output=True, text=True)
        assert r.returncode == 1 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = subprocess.run(env_cmd[:3] + ["--only", ","], capture_output=True, text=True)
    assert r.returncode == 2 and "--only ',': no case named" in r.stderr, r.stderr
    out = subprocess.run(env_cmd + ["--only", "spmm-sum,"], check=True, capture_output=True, text=True).stdout
    assert "spmm-sum" in out and "gat layer" not in out
    # An edge list of whole floats, as np.loadtxt reads one, is a graph.
    np.savez(tmp_path / "loaded.npz", edge_index=np.array([[0.0, 1.0], [1.0, 2.0], [2.0, 0.0]]))
    out = subprocess.run(env_cmd[:3] + ["--edge-index", str(tmp_path / "loaded.npz"), "--only", "spmm-sum", "--repeat",
                                        "1"], check=True, capture_output=True, text=True).stdout
    assert "N=3 E=3" in out


def _unsized(m):
    return [n for n, p in m.named_parameters() if isinstance(p, torch.nn.parameter.UninitializedParameter)]


@pytest.mark.parametrize("name", ["SAGEConv", "GCNConv", "GATConv"])
def test_lazy_in_channels_as_pyg(name):
    """in_channels -1, PyG's lazy layers: the weights are sized by the first call's input and given the
    layer's own initialiser (SAGE and GCN draw what a layer built with the width draws under the same
    seed); the layer then computes what that layer computes with the same weights, takes gradients,
    refuses another width by name, and a state dict loads into a layer not yet called."""
    x, ei = inputs()
    lazy = getattr(gt, name)(-1, O)
    assert _unsized(lazy) and repr(lazy).startswith(f"{name}(-1, {O}")
    lazy.reset_parameters()  # (the unsized weights wait for the first call)
    torch.manual_seed(3)
    got = lazy(x, ei)
    assert not _unsized(lazy) and got.shape == (N, O)
    sized = getattr(gt, name)(F, O)
    sized.load_state_dict(lazy.state_dict())
    torch.testing.assert_close(sized(x, ei), got, rtol=0, atol=0)
    if name != "GATConv":  # (GAT's attention vectors are drawn when it is built, its maps at the first call)
        torch.manual_seed(3)
        built = getattr(gt, name)(F, O)
        for (n, p), (_, q) in zip(built.named_parameters(), lazy.named_parameters()):
            torch.testing.assert_close(q, p, rtol=0, atol=0, msg=n)
    else:
        bound = (6.0 / (F + O)) ** 0.5  # Glorot's
        assert 0 < lazy.lin.weight.abs().max() <= bound
    got.sum().backward()
    assert all(p.grad is not None for p in lazy.parameters())
    with pytest.raises(ValueError, match=rf"x must have shape \(N, in_channels={F}\), got \({N}, {F - 1}\)"
                       if name == "GCNConv" else rf"must have shape \(N, {F}\)|in_channels={F}"):
        lazy(x.detach()[:, :F - 1].contiguous(), ei)
    fresh = getattr(gt, name)(-1, O)
    fresh.load_state_dict(sized.state_dict())
    assert not _unsized(fresh)
    torch.testing.assert_close(fresh(x, ei), got, rtol=0, atol=0)
    torch.optim.Adam(fresh.parameters())  # (an optimiser takes the sized weights)


@pytest.mark.parametrize("name", ["SAGEConv", "GATConv"])
def test_lazy_in_channels_bipartite(name):
    """(-1, -1): the sources' and the targets' maps sized each by its own input, of different widths; a
    GATConv with one -1 has one map for both, so targets of another width are refused by name."""
    torch.manual_seed(0)
    xs, xd = torch.randn(N, F), torch.randn(N // 2, F + 3)
    ei = torch.stack([torch.randint(0, N, (E,)), torch.randint(0, N // 2, (E,))])
    m = getattr(gt, name)((-1, -1), O)
    out = m((xs, xd), ei)
    assert out.shape == (N // 2, O) and not _unsized(m)
    sized = getattr(gt, name)((F, F + 3), O)
    sized.load_state_dict(m.state_dict())
    torch.testing.assert_close(sized((xs, xd), ei), out, rtol=0, atol=0)
    if name == "GATConv":
        with pytest.raises(ValueError, match=r"x_dst must have shape \(N, in_channels=%d\)" % F):
            gt.GATConv(-1, O)((xs, xd), ei)
    with pytest.raises(ValueError, match="project needs the sources' in_channels"):
        gt.SAGEConv(-1, O, project=True)


@pytest.mark.parametrize("name", ["SAGEConv", "GCNConv", "GATConv"])
def test_lazy_state_dicts_as_pyg(name):
    """A layer not yet sized saves its unsized weights as they are (PyG's state dict); loading such a state
    dict leaves a lazy layer unsized and makes a sized one unsized again, as PyG's; an array of the wrong
    output size or rank is refused by name and sizes nothing; a weight a call left unsized (bipartite,
    x_dst None) is saved unsized; a first call under inference mode, or one refused for its edge_weight,
    leaves weights that train, or none sized."""
    x, ei = inputs()
    lazy = getattr(gt, name)(-1, O)
    sd = lazy.state_dict()
    assert any(isinstance(v, torch.nn.parameter.UninitializedParameter) for v in sd.values())
    other = getattr(gt, name)(-1, O)
    other.load_state_dict(sd)
    assert _unsized(other) == _unsized(lazy)
    sized = getattr(gt, name)(F, O)
    sized.load_state_dict(sd)
    assert _unsized(sized) == _unsized(lazy)
    assert sized(x, ei).shape == (N, O) and not _unsized(sized)
    weight = "lin_l.weight" if name == "SAGEConv" else "lin.weight"
    for bad in (torch.randn(O + 2, F), torch.randn(F)):
        fresh = getattr(gt, name)(-1, O)
        with pytest.raises(RuntimeError, match=rf"size mismatch for {weight}"):
            fresh.load_state_dict({**fresh.state_dict(), weight: bad})
        assert weight in _unsized(fresh)
    if name != "GCNConv":  # (bipartite, without the targets' features: their map stays unsized)
        m = getattr(gt, name)((-1, -1), O)
        m((x, None), ei, size=(N, N))
        left = _unsized(m)
        assert left and all(isinstance(m.state_dict()[k], torch.nn.parameter.UninitializedParameter) for k in left)
    m = getattr(gt, name)(-1, O)
    with torch.inference_mode():
        m(x.detach(), ei)
    m(x, ei).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    with torch.inference_mode():  # a layer made in inference mode is sized there (it failed to write its weight)
        m = getattr(gt, name)(-1, O)
        assert m(x.detach(), ei).shape == (N, O) and not _unsized(m)
    if name == "GCNConv":
        m = gt.GCNConv(-1, O)
        with pytest.raises(ValueError, match="edge_weight must have shape"):
            m(x, ei, torch.ones(3))
        assert _unsized(m) == ["lin.weight"]


def test_lazy_state_dicts_cross_pyg():
    """A PyG lazy layer's state dict, saved before its first call, loads into gnn's and back."""
    pyg = pytest.importorskip("torch_geometric.nn", reason=NO_PYG)
    x, ei = inputs()
    for name in ("SAGEConv", "GCNConv", "GATConv"):
        mine, theirs = getattr(gt, name)(-1, O), getattr(pyg, name)(-1, O)
        mine.load_state_dict(theirs.state_dict())
        assert _unsized(mine)
        theirs.load_state_dict(mine.state_dict())
        theirs(x, ei)
        mine.load_state_dict(theirs.state_dict())
        torch.testing.assert_close(mine(x, ei), theirs(x, ei), rtol=1e-5, atol=1e-6)
