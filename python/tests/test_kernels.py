"""gnn's functional API: values against torch (float64) references, gradients against torch autograd
and finite differences, the same bits on every thread count, outputs in the caller's framework."""
import numpy as np
import pytest

import gnn
from conftest import NEED_TORCH, directional_fd, random_graph, ref_spmm

torch = pytest.importorskip("torch", reason=NEED_TORCH)

N, E, F = 40, 220, 6


@pytest.fixture
def graph_and_edges():
    ei = random_graph(N, E, seed=1)
    return gnn.Graph(ei, num_nodes=N), ei


def t64(a):
    return torch.as_tensor(np.asarray(a)).double()


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
@pytest.mark.parametrize("heads", [0, 1, 3])
def test_spmm_forward_backward(graph_and_edges, reduce, heads):
    g, ei = graph_and_edges
    rng = np.random.default_rng(2)
    W = F * max(heads, 1)
    x = rng.standard_normal((N, W)).astype(np.float32)
    w_in = None if heads == 0 else rng.uniform(0.5, 1.5, (E,) if heads == 1 else (E, heads)).astype(np.float32)
    w = None if w_in is None else np.ascontiguousarray(w_in[g.eid])  # CSR order
    y, argmax = gnn.spmm(g, x, reduce, w, return_argmax=True)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == (N, W)
    xt = t64(x).requires_grad_()
    wt = None if w_in is None else t64(w_in).requires_grad_()
    ref = ref_spmm(ei, xt, N, reduce, wt)
    np.testing.assert_allclose(y, ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    dy = rng.standard_normal((N, W)).astype(np.float32)
    gx, gw = gnn.spmm_backward(g, dy, reduce, w, argmax, x, need_weight_grad=w is not None)
    ref.backward(t64(dy))
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-5, atol=1e-5)
    if w is not None:
        np.testing.assert_allclose(gw, wt.grad.numpy()[g.eid], rtol=1e-4, atol=1e-4)
    if reduce != "max":  # max is piecewise linear: a finite difference may cross a switch
        v = rng.standard_normal(x.shape).astype(np.float32)
        fd = directional_fd(lambda xx: (gnn.spmm(g, xx, reduce, w).astype(np.float64) * dy).sum(), x, v)
        assert abs(fd - float((gx.astype(np.float64) * v).sum())) < 1e-3 * max(1.0, abs(fd))


def test_spmm_same_bits_on_any_thread_count(graph_and_edges):
    g, _ = graph_and_edges
    x = np.random.default_rng(3).standard_normal((N, 33)).astype(np.float32)
    outs = []
    for threads in (1, 2, 3):
        gnn.set_num_threads(threads)
        y = gnn.spmm(g, x, "mean")
        gx, _ = gnn.spmm_backward(g, y, "mean")
        outs.append((y.tobytes(), gx.tobytes()))
    assert outs[0] == outs[1] == outs[2]


@pytest.mark.parametrize("bipartite", [False, True])
def test_segment_softmax_and_gat_scores(graph_and_edges, bipartite):
    g, ei = graph_and_edges
    rng = np.random.default_rng(4)
    H, U = 3, N
    if bipartite:  # 55 sources, N targets: a_src over the sources, a_dst over the targets
        U = 55
        g = gnn.Graph(np.stack([rng.integers(0, U, E), rng.integers(0, N, E)]), num_nodes=N, num_src_nodes=U)
        with pytest.raises(ValueError, match=r"a_src must have shape \(55, 3\)"):
            gnn.gat_scores(g, rng.standard_normal((N, H)).astype(np.float32), np.zeros((N, H), np.float32))
    a_src = rng.standard_normal((U, H)).astype(np.float32)
    a_dst = rng.standard_normal((N, H)).astype(np.float32)
    s = gnn.gat_scores(g, a_src, a_dst, 0.2)
    alpha = gnn.segment_softmax(s, g.indptr)
    ts, td = t64(a_src).requires_grad_(), t64(a_dst).requires_grad_()
    src = torch.as_tensor(g.indices.astype(np.int64))
    dst = torch.repeat_interleave(torch.arange(N), torch.as_tensor(np.diff(g.indptr).astype(np.int64)))
    ref_s = torch.nn.functional.leaky_relu(ts[src] + td[dst], 0.2)
    mx = torch.full((N, H), -1e300, dtype=torch.float64).scatter_reduce(0, dst[:, None].expand(-1, H), ref_s, "amax")
    ex = torch.exp(ref_s - mx[dst])
    ref_alpha = ex / torch.zeros(N, H, dtype=torch.float64).index_add(0, dst, ex)[dst]
    np.testing.assert_allclose(s, ref_s.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(alpha, ref_alpha.detach().numpy(), rtol=1e-5, atol=1e-6)
    da = rng.standard_normal(alpha.shape).astype(np.float32)
    ds = gnn.segment_softmax_backward(alpha, da, g.indptr)
    gs, gd = gnn.gat_scores_backward(g, ds, a_src, a_dst, 0.2)
    ref_alpha.backward(t64(da))
    np.testing.assert_allclose(gs, ts.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gd, td.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("activation", ["none", "relu", "gelu", "tanh"])
def test_sage(graph_and_edges, activation):
    g, ei = graph_and_edges
    rng = np.random.default_rng(5)
    O = 7
    x = rng.standard_normal((N, F)).astype(np.float32)
    W = (rng.standard_normal((2 * F, O)) * 0.3).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    y, z, h = gnn.sage(g, x, W, b, activation, training=True)
    np.testing.assert_array_equal(y, gnn.sage(g, x, W, b, activation))  # inference gives the same bits
    xt, Wt, bt = t64(x).requires_grad_(), t64(W).requires_grad_(), t64(b).requires_grad_()
    act = {"none": lambda t: t, "relu": torch.relu, "gelu": torch.nn.functional.gelu, "tanh": torch.tanh}[activation]
    ref = act(torch.cat([ref_spmm(ei, xt, N, "mean"), xt], 1) @ Wt + bt)
    np.testing.assert_allclose(y, ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    dy = rng.standard_normal((N, O)).astype(np.float32)
    gx, gW, gb = gnn.sage_backward(g, dy, z, h, W, activation)
    ref.backward(t64(dy))
    for got, want in ((gx, xt.grad), (gW, Wt.grad), (gb, bt.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)
    v = rng.standard_normal(W.shape).astype(np.float32)
    fd = directional_fd(lambda ww: (gnn.sage(g, x, ww, b, activation).astype(np.float64) * dy).sum(), W, v, 1e-3)
    assert abs(fd - float((gW.astype(np.float64) * v).sum())) < 2e-2 * max(1.0, abs(fd))


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "logsumexp"])
def test_pool(reduce):
    rng = np.random.default_rng(6)
    ptr = np.array([0, 5, 5, 17, 30], dtype=np.int64)  # graph 1 has no rows
    x = rng.standard_normal((30, 4)).astype(np.float32)
    y, argmax = gnn.pool(x, ptr, reduce, return_argmax=True)
    xt = t64(x).requires_grad_()
    parts = []
    for g in range(4):
        seg = xt[ptr[g]:ptr[g + 1]]
        if seg.shape[0] == 0:
            parts.append(torch.zeros(4, dtype=torch.float64) if reduce != "logsumexp" else
                         torch.full((4,), float("-inf"), dtype=torch.float64))
            continue
        parts.append({"sum": lambda s: s.sum(0), "mean": lambda s: s.mean(0), "max": lambda s: s.max(0).values,
                      "logsumexp": lambda s: torch.logsumexp(s, 0)}[reduce](seg))
    ref = torch.stack(parts)
    keep = np.isfinite(ref.detach().numpy())
    np.testing.assert_allclose(y[keep], ref.detach().numpy()[keep], rtol=1e-5, atol=1e-6)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    gx = gnn.pool_backward(dy, ptr, 30, reduce, argmax, x, y)
    (ref[torch.as_tensor(keep)] * t64(dy)[torch.as_tensor(keep)]).sum().backward()
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_instance_and_layer_norm():
    rng = np.random.default_rng(7)
    ptr = np.array([0, 9, 25], dtype=np.int64)
    x = (rng.standard_normal((25, 5)) * 3 + 1).astype(np.float32)
    gamma, beta = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    xt, gt_, bt = t64(x).requires_grad_(), t64(gamma).requires_grad_(), t64(beta).requires_grad_()
    ref_in = torch.cat([torch.nn.functional.instance_norm(xt[ptr[g]:ptr[g + 1]].t()[None], eps=1e-5)[0].t()
                        for g in range(2)]) * gt_ + bt
    y, mean, rstd = gnn.instance_norm(x, ptr, gamma, beta, 1e-5)
    np.testing.assert_allclose(y, ref_in.detach().numpy(), rtol=1e-4, atol=1e-5)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    gx, gg, gb = gnn.instance_norm_backward(dy, x, ptr, mean, rstd, gamma)
    ref_in.backward(t64(dy))
    for got, want in ((gx, xt.grad), (gg, gt_.grad), (gb, bt.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)
    xt.grad = gt_.grad = bt.grad = None
    ref_ln = torch.nn.functional.layer_norm(xt, (5,), gt_, bt, 1e-5)
    y, mean, rstd = gnn.layer_norm(x, gamma, beta, 1e-5)
    np.testing.assert_allclose(y, ref_ln.detach().numpy(), rtol=1e-4, atol=1e-5)
    gx, gg, gb = gnn.layer_norm_backward(dy, x, mean, rstd, gamma)
    ref_ln.backward(t64(dy))
    for got, want in ((gx, xt.grad), (gg, gt_.grad), (gb, bt.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)


def test_torch_in_torch_out_without_copies(graph_and_edges):
    g, _ = graph_and_edges
    x = torch.randn(N, F)
    y = gnn.spmm(g, x, "sum")
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    out = torch.empty(N, F)
    assert gnn.spmm(g, x, "sum", out=out) is out
    np.testing.assert_array_equal(out.numpy(), y.numpy())
    # An out view of a numpy buffer is written in place: the kernels never copy in or out.
    buf = np.zeros((N, F), dtype=np.float32)
    res = gnn.spmm(g, x.numpy(), "sum", out=buf)
    assert res is buf and res.__array_interface__["data"][0] == buf.__array_interface__["data"][0]
    np.testing.assert_array_equal(buf, y.numpy())
    # A torch out that is a view of a numpy buffer: the result is that memory.
    tbuf = torch.from_numpy(np.zeros((N, F), dtype=np.float32))
    assert gnn.spmm(g, x, "sum", out=tbuf).data_ptr() == tbuf.data_ptr()
    np.testing.assert_array_equal(tbuf.numpy(), y.numpy())
