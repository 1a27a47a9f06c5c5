"""gnn's functions on CUDA arrays: every kernel on device memory against its result on the host, run on
the caller's stream, writing in place, the same bits twice, and one clear error for a call that mixes
devices. On a machine without a GPU these run in the build against the CUDA emulator
(build/python_emu, ctest "emu: python: ..."), which executes the same CUDA kernels on the host; the
torch and CuPy cases need a real device and skip elsewhere, saying why."""
import os
import sys

import numpy as np
import pytest

import gnn
from conftest import random_graph

if not gnn.cuda.is_available() and os.environ.get("GNN_EXPECT_CUDA") == "1":
    raise RuntimeError(f"GNN_EXPECT_CUDA=1, but gnn has no CUDA device: {gnn.cuda.status()} (from {gnn.__file__})")
if not gnn.cuda.is_available():
    pytest.skip(f"no CUDA device for gnn ({gnn.cuda.status()}); the emulator build runs these",
                allow_module_level=True)

N, E, F = 40, 220, 6
dev, host = gnn.cuda.to_device, gnn.cuda.to_numpy


@pytest.fixture(autouse=True)
def stream():
    """Every case runs on a stream of its own (the emulator refuses the legacy default stream)."""
    with gnn.cuda.Stream() as s:
        yield s
    s.close()


@pytest.fixture
def graph():
    return gnn.Graph(random_graph(N, E, seed=1), num_nodes=N)


def close(device_array, expected, rtol=1e-5, atol=1e-6):
    got = host(device_array)
    assert got.dtype == np.asarray(expected).dtype and got.shape == np.asarray(expected).shape
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
@pytest.mark.parametrize("heads", [0, 1, 3])
def test_spmm_on_device_matches_host(graph, reduce, heads):
    rng = np.random.default_rng(2)
    W = F * max(heads, 1)
    x = rng.standard_normal((N, W)).astype(np.float32)
    w = None if heads == 0 else rng.uniform(0.5, 1.5, (E,) if heads == 1 else (E, heads)).astype(np.float32)
    dy = rng.standard_normal((N, W)).astype(np.float32)
    y, am = gnn.spmm(graph, x, reduce, w, return_argmax=True)
    gx, gw = gnn.spmm_backward(graph, dy, reduce, w, am, x, need_weight_grad=w is not None)
    dw = None if w is None else dev(w)
    yd, amd = gnn.spmm(graph, dev(x), reduce, dw, return_argmax=True)
    assert isinstance(yd, gnn.cuda.Array) and yd.shape == (N, W) and yd.device == 0
    close(yd, y)
    if reduce == "max":
        np.testing.assert_array_equal(host(amd), am)
    gxd, gwd = gnn.spmm_backward(graph, dev(dy), reduce, dw, amd, dev(x), need_weight_grad=w is not None)
    close(gxd, gx)
    if w is not None:
        close(gwd, gw, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bipartite", [False, True])
@pytest.mark.parametrize("H", [2, 3])  # the grouped kernels (a power of two) and the warp per head
def test_segment_softmax_and_gat_scores_on_device(graph, bipartite, H):
    rng = np.random.default_rng(3)
    U = N
    if bipartite:  # 55 sources: a_src over them, a_dst over the N targets
        U = 55
        graph = gnn.Graph(np.stack([rng.integers(0, U, E), rng.integers(0, N, E)]), num_nodes=N, num_src_nodes=U)
    a_src, a_dst = rng.standard_normal((U, H)).astype(np.float32), rng.standard_normal((N, H)).astype(np.float32)
    s = gnn.gat_scores(graph, a_src, a_dst, 0.2)
    sd = gnn.gat_scores(graph, dev(a_src), dev(a_dst), 0.2)
    close(sd, s)
    indptr = np.ascontiguousarray(graph.indptr)
    y = gnn.segment_softmax(s, indptr)
    yd = gnn.segment_softmax(sd, dev(indptr))
    close(yd, y)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    close(gnn.segment_softmax_backward(yd, dev(dy), dev(indptr)), gnn.segment_softmax_backward(y, dy, indptr))
    gs, gd = gnn.gat_scores_backward(graph, dy, a_src, a_dst, 0.2)
    gsd, gdd = gnn.gat_scores_backward(graph, dev(dy), dev(a_src), dev(a_dst), 0.2)
    close(gsd, gs)
    close(gdd, gd)


@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
@pytest.mark.parametrize("training", [False, True])
def test_sage_on_device(graph, activation, training):
    rng = np.random.default_rng(4)
    O = 5
    x = rng.standard_normal((N, F)).astype(np.float32)
    weight = rng.standard_normal((2 * F, O)).astype(np.float32) * 0.3
    bias = rng.standard_normal(O).astype(np.float32)
    out = gnn.sage(graph, x, weight, bias, activation, training=training)
    outd = gnn.sage(graph, dev(x), dev(weight), dev(bias), activation, training=training)
    if not training:
        close(outd, out, rtol=1e-5, atol=1e-5)
        return
    (y, z, h), (yd, zd, hd) = out, outd
    close(yd, y, atol=1e-5)
    close(hd, h)
    dy = rng.standard_normal((N, O)).astype(np.float32)
    for got, want in zip(gnn.sage_backward(graph, dev(dy), zd, hd, dev(weight), activation),
                         gnn.sage_backward(graph, dy, z, h, weight, activation)):
        close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "logsumexp"])
def test_pool_on_device(reduce):
    rng = np.random.default_rng(5)
    ptr = np.array([0, 7, 7, 30, 41], np.int64)  # an empty graph among them
    x = rng.standard_normal((41, 9)).astype(np.float32)
    y, am = gnn.pool(x, ptr, reduce, return_argmax=True)
    yd, amd = gnn.pool(dev(x), dev(ptr), reduce, return_argmax=True)
    close(yd, y)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    want = gnn.pool_backward(dy, ptr, 41, reduce, am, x, y)
    got = gnn.pool_backward(dev(dy), dev(ptr), 41, reduce, amd, dev(x), yd)
    close(got, want)


@pytest.mark.parametrize("affine", [False, True])
def test_norms_on_device(affine):
    rng = np.random.default_rng(6)
    ptr = np.array([0, 12, 12, 40], np.int64)
    x = rng.standard_normal((40, 7)).astype(np.float32) * 3 + 1
    wgt = rng.standard_normal(7).astype(np.float32) if affine else None
    b = rng.standard_normal(7).astype(np.float32) if affine else None
    dwgt, db = (None, None) if not affine else (dev(wgt), dev(b))
    dy = rng.standard_normal(x.shape).astype(np.float32)
    y, m, r = gnn.instance_norm(x, ptr, wgt, b)
    yd, md, rd = gnn.instance_norm(dev(x), dev(ptr), dwgt, db)
    for got, want in zip((yd, md, rd), (y, m, r)):
        close(got, want, rtol=1e-5, atol=1e-5)
    want = gnn.instance_norm_backward(dy, x, ptr, m, r, wgt, need_affine_grad=affine)
    got = gnn.instance_norm_backward(dev(dy), dev(x), dev(ptr), md, rd, dwgt, need_affine_grad=affine)
    for g_, w_ in zip(got, want):
        assert (g_ is None) == (w_ is None)
        if w_ is not None:
            close(g_, w_, rtol=1e-4, atol=1e-5)
    y, m, r = gnn.layer_norm(x, wgt, b)
    yd, md, rd = gnn.layer_norm(dev(x), dwgt, db)
    for got, want in zip((yd, md, rd), (y, m, r)):
        close(got, want, rtol=1e-5, atol=1e-5)
    want = gnn.layer_norm_backward(dy, x, m, r, wgt, need_affine_grad=affine)
    got = gnn.layer_norm_backward(dev(dy), dev(x), md, rd, dwgt, need_affine_grad=affine)
    for g_, w_ in zip(got, want):
        if w_ is not None:
            close(g_, w_, rtol=1e-4, atol=1e-5)


def test_runs_on_the_callers_stream_and_writes_in_place(graph, stream):
    """The output starts as NaN and the kernel is queued on the caller's stream. The emulator runs a
    stream's work only when something waits for that stream (or frees memory, which waits for all of
    them: every array here stays alive until the end), so a copy queued on another stream still sees
    NaN, and one queued on the caller's stream sees the result."""
    x = np.random.default_rng(7).standard_normal((N, F)).astype(np.float32)
    xd = dev(x)
    warm = gnn.spmm(graph, xd, "sum")  # the graph's first copy to the device (waited for), kept alive
    assert warm.shape == (N, F)
    other = gnn.cuda.Stream()
    with other:
        out = dev(np.full((N, F), np.nan, np.float32))
        before = out.data_ptr()
        assert gnn.spmm(graph, xd, "mean", out=out) is out
        assert out.data_ptr() == before
        assert np.isnan(host(out, stream=stream.handle)).all()  # not run: queued on `other`
        got = host(out, stream=other.handle)
    np.testing.assert_allclose(got, gnn.spmm(graph, x, "mean"), rtol=1e-5, atol=1e-6)
    # with the fixture's stream current again, gnn runs there
    out2 = dev(np.full((N, F), np.nan, np.float32))
    gnn.spmm(graph, xd, "sum", out=out2)
    assert np.isnan(host(out2, stream=other.handle)).all()
    np.testing.assert_allclose(host(out2), gnn.spmm(graph, x, "sum"), rtol=1e-5, atol=1e-6)
    # a gnn.cuda.Array handed out through DLPack waits for the stream it is written on
    with other:
        out3 = gnn.cuda.empty((N, F))
        gnn.spmm(graph, xd, "sum", out=out3)
    out3.__dlpack__(stream=None)
    np.testing.assert_allclose(host(out3, stream=stream.handle), gnn.spmm(graph, x, "sum"), rtol=1e-5, atol=1e-6)
    other.close()


def test_segment_softmax_over_a_graphs_rows(graph):
    s = np.random.default_rng(13).standard_normal((E, 2)).astype(np.float32)
    want = gnn.segment_softmax(s, np.ascontiguousarray(graph.indptr))
    np.testing.assert_array_equal(gnn.segment_softmax(s, graph), want)
    close(gnn.segment_softmax(dev(s), graph), want)
    dy = np.ones_like(s)
    close(gnn.segment_softmax_backward(dev(want), dev(dy), graph),
          gnn.segment_softmax_backward(want, dy, np.ascontiguousarray(graph.indptr)))


def test_any_dlpack_producer_on_a_device(graph):
    """An array of a library gnn does not know (here the raw DLPack object under gnn.cuda.Array): read
    where it lies, the result handed back as a gnn.cuda.Array."""
    x = np.random.default_rng(8).standard_normal((N, F)).astype(np.float32)
    raw = dev(x)._nd
    assert not isinstance(raw, gnn.cuda.Array) and raw.__dlpack_device__() == (2, 0)
    y = gnn.spmm(graph, raw, "sum")
    assert isinstance(y, gnn.cuda.Array)
    close(y, gnn.spmm(graph, x, "sum"))


def test_same_bits_twice_on_device(graph):
    x = dev(np.random.default_rng(9).standard_normal((N, 33)).astype(np.float32))
    runs = []
    for _ in range(2):
        y = gnn.spmm(graph, x, "mean")
        gx, _ = gnn.spmm_backward(graph, y, "mean")
        runs.append((host(y).tobytes(), host(gx).tobytes()))
    assert runs[0] == runs[1]


def test_mixed_devices_and_bad_pointers_raise_one_clear_error(graph):
    x = np.ones((N, F), np.float32)
    with pytest.raises(ValueError, match="out is on host memory, the call's other arrays on cuda:0"):
        gnn.spmm(graph, dev(x), "sum", out=np.empty((N, F), np.float32))
    with pytest.raises(ValueError, match="edge_weight is on cuda:0, the call's other arrays on host memory"):
        gnn.spmm(graph, x, "sum", dev(np.ones(E, np.float32)))
    with pytest.raises(ValueError, match="indptr must start at 0"):
        gnn.segment_softmax(dev(np.ones((5, 1), np.float32)), dev(np.array([1, 5], np.int32)))
    with pytest.raises(ValueError, match="ptr must not decrease"):
        gnn.pool(dev(np.ones((5, 2), np.float32)), dev(np.array([0, 4, 2, 5], np.int64)))
    with pytest.raises(TypeError, match="x must be float32, got int32"):
        gnn.spmm(graph, dev(np.ones((N, F), np.int32)), "sum")
    with pytest.raises(ValueError, match="dtype must be 'float32', 'int32' or 'int64'"):
        gnn.cuda.empty((2,), "float16")
    with pytest.raises(TypeError, match="array must be a device array .*, got int"):
        gnn.cuda.to_numpy(5)
    for shape in ((2**32, 2**32), (1, 2**62)):  # (the byte count wrapped: a small block described as huge)
        with pytest.raises(ValueError, match="holds more bytes than an int64 counts"):
            gnn.cuda.empty(shape)
    assert gnn.cuda.empty((2**62, 0)).shape == (2**62, 0)  # no bytes, whatever the other sizes


def test_no_reference_leaks_over_many_device_calls(graph):
    x = dev(np.random.default_rng(10).standard_normal((N, 4)).astype(np.float32))
    out = gnn.cuda.empty((N, 4))
    refs = sys.getrefcount(x), sys.getrefcount(out), sys.getrefcount(graph)
    for _ in range(2000):
        gnn.spmm(graph, x, "sum", out=out)
    assert (sys.getrefcount(x), sys.getrefcount(out), sys.getrefcount(graph)) == refs


def test_torch_cuda_tensors(graph):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here (a CPU build of torch, or no GPU)")
    import gnn.torch as gt

    rng = np.random.default_rng(11)
    x = torch.as_tensor(rng.standard_normal((N, F)).astype(np.float32))
    ei = torch.as_tensor(random_graph(N, E, seed=1))
    layers = (gt.SAGEConv(F, 5), gt.GCNConv(F, 5), gt.GATConv(F, 3, heads=2), gt.GINConv(torch.nn.Linear(F, 5)),
              gt.GATConv((F, F), 3, heads=2, residual=True))  # (lin_src and lin_dst, a residual map)
    for layer in layers:
        xc, xd = x.clone().requires_grad_(), x.cuda().requires_grad_()
        on_gpu = __import__("copy").deepcopy(layer).cuda()
        yc, yd = layer(xc, ei), on_gpu(xd, ei.cuda())
        assert yd.is_cuda
        np.testing.assert_allclose(yd.detach().cpu().numpy(), yc.detach().numpy(), rtol=1e-4, atol=1e-5)
        yc.square().sum().backward()
        yd.square().sum().backward()
        np.testing.assert_allclose(xd.grad.cpu().numpy(), xc.grad.numpy(), rtol=1e-4, atol=1e-4)
    gat = gt.GATConv(F, 3, heads=2)  # the attention weights in PyG's edge order, from the device
    yc, (ec, ac) = gat(x, ei, return_attention_weights=True)
    yd, (ed, ad) = __import__("copy").deepcopy(gat).cuda()(x.cuda(), ei.cuda(), return_attention_weights=True)
    assert ed.is_cuda and ad.is_cuda and torch.equal(ed.cpu(), ec)
    np.testing.assert_allclose(ad.detach().cpu().numpy(), ac.detach().numpy(), rtol=1e-4, atol=1e-6)
    for fill in ("mean", "add", "max", "min", "mul"):  # edge features: the self-loops' and the scores' term
        gat = gt.GATConv(F, 3, heads=2, edge_dim=2, fill_value=fill)
        on_gpu = __import__("copy").deepcopy(gat).cuda()
        ea = torch.as_tensor(rng.standard_normal((E, 2)).astype(np.float32))
        eac = ea.clone().requires_grad_()
        yc = gat(x, ei, eac)
        yc.square().sum().backward()
        runs = []
        for _ in range(2):  # the same bits on each run (the loops' sums in a fixed order, no atomics)
            ead = ea.cuda().requires_grad_()
            yd = on_gpu(x.cuda(), ei.cuda(), ead)
            yd.square().sum().backward()
            runs.append((yd.detach().cpu(), ead.grad.cpu()))
        assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
        np.testing.assert_allclose(runs[0][0].numpy(), yc.detach().numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(runs[0][1].numpy(), eac.grad.numpy(), rtol=1e-4, atol=1e-4)
    s = torch.cuda.Stream()
    xd = x.cuda()
    with torch.cuda.stream(s):  # the caller's current stream is the one gnn runs on
        assert gnn._stream(xd) == s.cuda_stream
        y = gnn.spmm(graph, xd, "sum")
    s.synchronize()
    np.testing.assert_allclose(y.cpu().numpy(), gnn.spmm(graph, x.numpy(), "sum"), rtol=1e-5, atol=1e-6)


def test_cupy_arrays(graph):
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    x = np.random.default_rng(12).standard_normal((N, F)).astype(np.float32)
    xd = cupy.asarray(x)
    y = gnn.spmm(graph, xd, "mean")
    assert isinstance(y, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(y), gnn.spmm(graph, x, "mean"), rtol=1e-5, atol=1e-6)
    out = cupy.empty_like(xd)
    assert gnn.spmm(graph, xd, "mean", out=out) is out
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        assert gnn._stream(xd) == s.ptr
