"""The module's edges: graphs, files, bad arguments (one clear exception naming the argument, never a
crash), zero-copy views, and reference counts over many calls."""
import gc
import subprocess
import sys
import warnings

import numpy as np
import pytest

import gnn
from conftest import GNN_CLI, SHARED, random_graph, torch


def test_graph_matches_a_sort_of_the_edges():
    ei = random_graph(30, 200, seed=5)
    g = gnn.Graph(ei, num_nodes=30)
    assert (g.num_nodes, g.num_src_nodes, g.num_edges, g.is_bipartite) == (30, 30, 200, False)
    order = np.argsort(ei[1], kind="stable")  # CSR: by target, input order within a row
    np.testing.assert_array_equal(g.eid, order)
    np.testing.assert_array_equal(g.indices, ei[0][order])
    np.testing.assert_array_equal(g.indptr, np.concatenate([[0], np.cumsum(np.bincount(ei[1], minlength=30))]))
    csc = np.argsort(ei[0][order], kind="stable")
    np.testing.assert_array_equal(g.csc_to_csr, csc)
    np.testing.assert_array_equal(g.csc_indices, ei[1][order][csc])
    # int32 indices, a transposed (non-contiguous) view and a torch tensor build the same graph.
    for other in (ei.astype(np.int32), np.asfortranarray(ei)) + ((torch.as_tensor(ei),) if torch else ()):
        np.testing.assert_array_equal(gnn.Graph(other, num_nodes=30).indices, g.indices)
    assert repr(g) == "gnn.Graph(num_nodes=30, num_edges=200)"
    # num_nodes as a NumPy integer or a whole float, as the module's other sizes take
    for n in (np.int16(30), 30.0, np.float32(30)):
        assert gnn.Graph(ei, num_nodes=n).num_nodes == 30


def test_graph_arrays_are_copies_that_no_write_reaches_the_graph_through():
    g = gnn.Graph(random_graph(10, 40, seed=6))
    x = np.random.default_rng(0).standard_normal((g.num_src_nodes, 3)).astype(np.float32)
    want, indptr = gnn.spmm(g, x), g.indptr.copy()
    a = g.indptr
    a[1] = 10**8  # a copy: the graph keeps its rows
    if torch is not None:  # (DLPack has no read-only bit torch honours: a view would be written)
        torch.from_dlpack(g.indptr)[1] = 10**8
    np.testing.assert_array_equal(g.indptr, indptr)
    np.testing.assert_array_equal(gnn.spmm(g, x), want)
    b = g.csc_to_csr
    del g
    gc.collect()
    assert b.shape == (40,)  # an array outlives its graph


def test_bipartite_graph():
    ei = np.array([[0, 4, 4, 2], [0, 0, 1, 1]])
    g = gnn.Graph(ei, num_nodes=2, num_src_nodes=5)
    assert (g.num_nodes, g.num_src_nodes, g.is_bipartite) == (2, 5, True)
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    np.testing.assert_array_equal(gnn.spmm(g, x), [[8, 10], [12, 14]])


class NamedGraph(gnn.Graph):
    pass


def test_graph_pickles_and_copies_as_the_same_graph():
    import copy
    import pickle

    for g in (gnn.Graph(random_graph(10, 40, seed=7)), gnn.Graph(np.array([[0, 4, 4, 2], [1, 0, 1, 1]]), 3, 6),
              gnn.Graph(np.zeros((2, 0), np.int64), num_nodes=4)):
        ei = g.edge_index
        assert ei.dtype == np.int64 and ei.shape == (2, g.num_edges)
        for h in (pickle.loads(pickle.dumps(g)), copy.copy(g), copy.deepcopy(g)):
            assert repr(h) == repr(g)
            for name in ("indptr", "indices", "eid", "csc_indptr", "csc_indices", "csc_to_csr", "edge_index"):
                np.testing.assert_array_equal(getattr(h, name), getattr(g, name))
    ei = random_graph(10, 40, seed=8)
    np.testing.assert_array_equal(gnn.Graph(ei).edge_index, ei)  # the input order, not the CSR's
    n = NamedGraph(ei)  # a subclass keeps its class and attributes
    n.name = "g"
    m = pickle.loads(pickle.dumps(n))
    assert type(m) is NamedGraph and m.name == "g" and repr(m) == repr(n)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_pool_backward_checks_num_rows_against_a_torch_ptr_before_allocating():
    with pytest.raises(ValueError, match="num_rows must be the rows ptr splits, its last entry 8, got 1099511627776"):
        gnn.pool_backward(torch.ones(2, 3), torch.tensor([0, 2, 8]), 2**40)


def read_only(a):
    a.setflags(write=False)
    return a


@pytest.mark.parametrize("call, kind, match", [
    (lambda g, x: gnn.Graph(np.zeros((3, 4), np.int64)), ValueError, r"edge_index must have shape \(2, E\)"),
    (lambda g, x: gnn.Graph(np.zeros((2, 4), np.float32)), TypeError, "edge_index must be int64 or int32"),
    (lambda g, x: gnn.Graph(np.array([[0, 1], [1, 9]]), num_nodes=4), gnn.Error, "outside"),
    (lambda g, x: gnn.Graph(np.array([[0, -1], [1, 0]])), gnn.Error, "outside"),
    (lambda g, x: gnn.spmm(g, x.astype(np.float64)), TypeError, "x must be float32, got float64"),
    (lambda g, x: gnn.spmm(g, x[:5]), ValueError, r"x must have shape \(8, 3\), got \(5, 3\)"),
    (lambda g, x: gnn.spmm(g, np.asfortranarray(x)), ValueError, "x is not C-contiguous"),
    (lambda g, x: gnn.spmm(g, x, "min"), ValueError, "reduce must be 'sum', 'mean' or 'max'"),
    (lambda g, x: gnn.spmm(g, x, "sum", np.ones(3, np.float32)), ValueError, r"edge_weight must have shape"),
    (lambda g, x: gnn.spmm(g, x, "sum", np.ones((g.num_edges, 2), np.float32)), ValueError, "do not split into 2"),
    (lambda g, x: gnn.spmm(g, x, out=np.zeros((8, 3), np.float32)[:, :2]), ValueError, "out must have shape"),
    (lambda g, x: gnn.spmm(g, x, out=np.zeros((8, 3), np.float32)[::-1]), ValueError, "out is not C-contiguous"),
    (lambda g, x: gnn.spmm(g, x, out=np.broadcast_to(np.float32(0), (8, 3))), TypeError, "out is read-only"),
    (lambda g, x: gnn.spmm(g, x, out=read_only(np.zeros((8, 3), np.float32))), TypeError, "out is read-only"),
    (lambda g, x: gnn.spmm(g, [[1.0]]), TypeError, "x must be an array"),
    (lambda g, x: gnn.sage(g, x, np.ones((5, 2), np.float32)), ValueError, r"weight must have shape \(6, 2\)"),
    (lambda g, x: gnn.sage(g, x, np.ones((6, 2), np.float32), activation="swish"), ValueError, "activation must be"),
    (lambda g, x: gnn.segment_softmax(x, np.array([0, 3, 9], np.int32)), ValueError, "indptr must start at 0 and end"),
    (lambda g, x: gnn.segment_softmax(x, np.array([0, 6, 3, 8], np.int32)), ValueError, "indptr must not decrease"),
    (lambda g, x: gnn.segment_softmax(x, np.array([0, 8], np.int64)), TypeError, "indptr must be int32"),
    (lambda g, x: gnn.pool(x, np.array([0, 9], np.int64)), ValueError, "ptr must start at 0 and end"),
    (lambda g, x: gnn.layer_norm(x, eps=0.0), ValueError, "eps must be a finite number > 0"),
    (lambda g, x: gnn.layer_norm(x, eps=float("inf")), ValueError, "eps must be a finite number > 0 in float32, got inf"),
    (lambda g, x: gnn.instance_norm(x, np.array([0, 8]), eps=float("inf")), ValueError, "eps must be a finite"),
    (lambda g, x: gnn.spmm(None, x), TypeError, "graph must be a gnn.Graph"),
    (lambda g, x: gnn.sage(np.array([[0], [1]]), x, np.ones((6, 2), np.float32)), TypeError, "graph must be a gnn"),
    (lambda g, x: gnn.pool_backward(x, np.array([0, 8]), -1), ValueError, "num_rows must be >= 0, got -1"),
    (lambda g, x: gnn.Graph(np.array([[0, 1], [1, 0]]), num_src_nodes=-2), ValueError, "num_src_nodes must be >= 0"),
    (lambda g, x: gnn.Graph(None), TypeError, "edge_index must be an array .*, got None"),
    (lambda g, x: gnn.Graph(np.array([[0], [1]]), "3"), TypeError, "num_nodes must be an integer or None, got str"),
    (lambda g, x: gnn.Graph(np.array([[0], [1]]), 2.5), ValueError, "num_nodes must be a whole number, got 2.5"),
    (lambda g, x: gnn.Graph(np.array([[0], [1]]), True), TypeError, "num_nodes must be an integer or None, got bool"),
    (lambda g, x: gnn.Graph(np.array([[0], [1]]), num_src_nodes=float("nan")), ValueError, "num_src_nodes must be a"),
    (lambda g, x: gnn.Graph(np.array([[0], [1]]), 2**70), ValueError, "num_nodes is out of range"),
    (lambda g, x: gnn.Graph(np.array([[0], [1]]), 1e19), ValueError, "num_nodes is out of range"),
    (lambda g, x: gnn.Graph(np.array([[0], [1]]), bytearray(b"3")), TypeError, "num_nodes must be an integer"),
    (lambda g, x: gnn.Graph(np.array([[0], [1]]), np.True_), TypeError, "num_nodes must be an integer or None"),
    (lambda g, x: gnn.pool_backward(x[:1], np.array([0, 8]), memoryview(b"8")), TypeError, "num_rows must be an int"),
    (lambda g, x: gnn.layer_norm(x, np.ones(4, np.float32)), ValueError, r"weight must have shape \(3,\)"),
    (lambda g, x: gnn.set_num_threads(0), ValueError, r"n must be in \[1, "),
    (lambda g, x: gnn.set_num_threads(100000), ValueError, r"n must be in \[1, "),
    (lambda g, x: gnn.spmm(g, x, "sum", np.ones((g.num_edges, 0), np.float32)), ValueError, "H >= 1"),
    (lambda g, x: gnn.spmm(g, x, out=x), ValueError, "out overlaps an input"),
    # out over a pointer array (the kernel would read the rows it is overwriting)
    (lambda g, x: (lambda p: gnn.pool(x, p, out=p.view(np.float32).reshape(2, 3)))(np.array([0, 2, 4])), ValueError,
     "out overlaps an input"),
    (lambda g, x: (lambda p: gnn.segment_softmax(x, p, out=p.view(np.float32).reshape(8, 3)))(np.zeros(24, np.int32)),
     ValueError, "out overlaps an input"),
    (lambda g, x: (lambda p: gnn.instance_norm(x, p, out=p.view(np.float32).reshape(8, 3)))(np.zeros(12, np.int64)),
     ValueError, "out overlaps an input"),
    # through a memoryview or a DLPack export of the same memory, on either side
    (lambda g, x: gnn.spmm(g, x, out=memoryview(x)), ValueError, "out overlaps an input"),
    (lambda g, x: (lambda y: gnn.spmm(g, memoryview(y), out=y))(x.copy()), ValueError, "out overlaps an input"),
    (lambda g, x: (lambda y: gnn.spmm(g, y, out=y.__dlpack__()))(x.copy()), ValueError, "out overlaps an input"),
    (lambda g, x: (lambda b: gnn.layer_norm(b[:4], out=b[3:7].__dlpack__()))(np.ones((9, 3), np.float32)), ValueError,
     "out overlaps an input"),
    (lambda g, x: gnn.spmm(g, x, out=memoryview(np.zeros((8, 3), np.float32)).toreadonly()), TypeError,
     "out is read-only"),
    (lambda g, x: gnn.Graph(np.array([[0], [2**63 - 1]])), gnn.Error, "does not fit int32 indices"),
    # a broadcast view of 2^31 edges: refused by its count before its rows are copied out (32 GB)
    (lambda g, x: gnn.Graph(np.broadcast_to(np.zeros((2, 1), np.int64), (2, 2**31)), num_nodes=1), gnn.Error,
     "edge_index: 2147483648 edges does not fit int32 indices"),
    (lambda g, x: gnn.pool_backward(x, np.array([[0, 8]]), 2**40), ValueError, "ptr must have 1 dimensions"),
    (lambda g, x: gnn.pool_backward(x, np.array([0.0, 8.0]), 2**40), TypeError, "ptr must be int64, got float64"),
    (lambda g, x: gnn.set_num_threads(2**40), ValueError, r"n must be in \[1, .*got 1099511627776"),
    (lambda g, x: gnn.set_num_threads(2**70), ValueError, "n is out of range"),
    (lambda g, x: gnn.set_num_threads("2"), TypeError, "n must be an integer or None, got str"),
    (lambda g, x: gnn.spmm(g, x.astype(np.uint32)), TypeError, "x must be float32, got uint32"),
    (lambda g, x: gnn.spmm(g, x.astype(np.int16)), TypeError, "x must be float32, got int16"),
    (lambda g, x: gnn.spmm(g, x.astype(np.complex64)), TypeError, "x must be float32, got complex64"),
    (lambda g, x: gnn.load_tpugraph("x.npz", require_runtimes="no"), TypeError,
     "require_runtimes must be True or False, got str 'no'"),
    (lambda g, x: gnn.Graph(np.array([[-5], [-5]])), gnn.Error, r"edge 0 \(-5 -> -5\) has a node id outside"),
    (lambda g, x: gnn.pool_backward(x[:2], np.array([0, 2, 8]), 2**40), ValueError,
     "num_rows must be the rows ptr splits, its last entry 8, got 1099511627776"),
    (lambda g, x: gnn.layer_norm(x, eps=1e-50), ValueError, r"eps must be a finite number > 0 in float32, got 1e-50"),
    (lambda g, x: gnn.layer_norm(x, eps=1e300), ValueError, r"eps must be a finite number > 0 in float32, got 1e\+300"),
    (lambda g, x: gnn.load_npz("x.npz", keys=["\udcff"]), ValueError, "is not valid UTF-8"),
    (lambda g, x: (lambda b: gnn.layer_norm(b[:8], out=b[1:]))(np.ones((9, 3), np.float32)), ValueError,
     "out overlaps an input"),
    (lambda g, x: (lambda b: gnn.spmm(g, x, out=b[:8], edge_weight=b[7:].ravel()[:4]))(np.ones((10, 3), np.float32)),
     ValueError, "out overlaps an input"),
    (lambda g, x: gnn.load_npz("/nonexistent/file.npz"), gnn.Error, "/nonexistent/file.npz"),
    (lambda g, x: gnn.load_npz("/nonexistent/file.npz\0.npz"), ValueError, "path contains a NUL byte"),
    (lambda g, x: gnn.load_npz(3), TypeError, "path must be a str, bytes or os.PathLike, got int"),
    (lambda g, x: gnn.load_npz(b"/nonexistent/\xff.npz"), ValueError, "path is not valid UTF-8"),
    (lambda g, x: gnn.load_tpugraph(None), TypeError, "path must be a str, bytes or os.PathLike"),
    # Arrays that DLPack and the buffer protocol cannot describe: refused by name, not by nanobind's
    # "incompatible function arguments".
    (lambda g, x: gnn.Graph(np.array([[0, 1], [1, 0]], ">i8")), TypeError, "edge_index is a ndarray of dtype >i8, "
     "not in this machine's byte order"),
    (lambda g, x: gnn.Graph(np.array([[0, 1], [1, 0]], object)), TypeError, "edge_index is a ndarray of dtype object"),
    (lambda g, x: gnn.spmm(g, x.astype(">f4")), TypeError, "x is a ndarray of dtype >f4, not in this machine's"),
    (lambda g, x: gnn.spmm(g, x, "sum", np.ones(4, ">f4")), TypeError, "edge_weight is a ndarray of dtype >f4"),
    (lambda g, x: gnn.spmm(g, x, out=np.zeros((8, 3), ">f4")), TypeError, "out is a ndarray of dtype >f4"),
    (lambda g, x: gnn.segment_softmax(x, np.array([0, 8], ">i4")), TypeError, "indptr is a ndarray of dtype >i4"),
    (lambda g, x: gnn.pool(x, np.array([0, 8], object)), TypeError, "ptr is a ndarray of dtype object"),
    (lambda g, x: gnn.layer_norm(x, np.ones(3, ">f4")), TypeError, "weight is a ndarray of dtype >f4"),
    # What is not an array, or not of its kind, where the module's own checks name it.
    (lambda g, x: gnn.Graph([[0, 1], [1, 0]]), TypeError, "edge_index must be an array .*, got list"),
    (lambda g, x: gnn.spmm(g, x, "sum", [1.0] * 4), TypeError, "edge_weight must be an array .*, got list"),
    (lambda g, x: gnn.spmm(g, x, out=[0.0]), TypeError, "out must be an array .*, got list"),
    (lambda g, x: gnn.segment_softmax(x, [0, 8]), TypeError, "indptr must be an array .*, got list"),
    (lambda g, x: gnn.spmm(g, x, reduce=3), TypeError, "reduce must be a str, got int"),
    (lambda g, x: gnn.pool(x, np.array([0, 8]), reduce=None), TypeError, "reduce must be a str, got NoneType"),
    (lambda g, x: gnn.sage(g, x, np.ones((6, 2), np.float32), activation=1), TypeError, "activation must be a str"),
    (lambda g, x: gnn.sage(g, x, np.ones((6, 2), np.float32), negative_slope="a"), TypeError,
     "negative_slope must be a real number, got str"),
    (lambda g, x: gnn.gat_scores(g, x, x, negative_slope=None), TypeError, "negative_slope must be a real number"),
    (lambda g, x: gnn.layer_norm(x, eps="1e-5"), TypeError, "eps must be a real number, got str"),
    (lambda g, x: gnn.instance_norm(x, np.array([0, 8]), eps=True), TypeError, "eps must be a real number, got bool"),
    (lambda g, x: gnn.pool_backward(x, np.array([0, 8]), 2.5), ValueError, "num_rows must be a whole number"),
    (lambda g, x: gnn.pool_backward(x, np.array([0, 8]), "8"), TypeError, "num_rows must be an integer, got str"),
    (lambda g, x: gnn.pool_backward(x, np.array([0, 8]), True), TypeError, "num_rows must be an integer, got bool"),
    (lambda g, x: gnn.pool_backward(x, None, 8), TypeError, "ptr must be an array .*, got None"),
    (lambda g, x: gnn.segment_softmax(x, None), TypeError, "indptr must be an array .*, got None"),
    (lambda g, x: gnn.segment_softmax([[1.0]] * 4, g), TypeError, "x must be an array .*, got list"),
    (lambda g, x: gnn.gat_scores(g, x, None), TypeError, "a_dst must be an array .*, got None"),
    (lambda g, x: gnn.layer_norm_backward(x, x, None, None), TypeError, "mean must be an array .*, got None"),
    (lambda g, x: gnn.spmm(g, x, edge_weight=g), TypeError, "edge_weight must be an array .*, got Graph"),
    (lambda g, x: gnn.Graph(g), TypeError, "edge_index must be an array .*, got Graph"),
    (lambda g, x: gnn.spmm_backward(g, x, edge_weight=[1.0] * 4, x=x, need_weight_grad=True), TypeError,
     "edge_weight must be an array .*, got list"),
    (lambda g, x: gnn.load_npz("/nonexistent/file.npz", keys=[1]), TypeError, "keys must be member names .str."),
    (lambda g, x: gnn.load_npz("/nonexistent/file.npz", keys=3), TypeError, "keys must be a list of member names"),
    (lambda g, x: gnn.spmm(gnn.Graph.__new__(gnn.Graph), x), ValueError, "graph is a gnn.Graph that was never built"),
    (lambda g, x: gnn.segment_softmax(x, gnn.Graph.__new__(gnn.Graph)), ValueError,
     "indptr is a gnn.Graph that was never built"),
    # an argmax that is not the forward's: its gradients would go nowhere, or to another graph's rows
    (lambda g, x: gnn.pool_backward(x[:2], np.array([0, 3, 8]), 8, "max", argmax=np.full((2, 3), 8, np.int32)),
     ValueError, r"argmax: entry 0 is 8, outside its graph 0's positions \[0, 3\) and not -1"),
    (lambda g, x: gnn.pool_backward(x[:2], np.array([0, 3, 8]), 8, "max", argmax=np.full((2, 3), 2, np.int32)),
     ValueError, r"argmax: entry 3 is 2, outside its graph 1's positions \[3, 8\)"),
    (lambda g, x: gnn.spmm_backward(g, x, "max", argmax=np.full((1, 8, 3), 3, np.int32)), ValueError,
     r"argmax: entry 0 is 3, outside its node 0's positions \[0, 1\) and not -1"),
    (lambda g, x: gnn.cuda.empty((2, 2), device=2**40), ValueError, "device must be a CUDA device index below 2"),
    (lambda g, x: gnn.cuda.empty((2, 2), device=1.5), ValueError, "device must be a whole number, got 1.5"),
    (lambda g, x: gnn.cuda.to_device(x, device=-1), ValueError, "device must be >= 0, got -1"),
    (lambda g, x: gnn.cuda.Stream(device="0"), TypeError, "device must be an integer, got str"),
    (lambda g, x: gnn.cuda.empty((2, -2)), ValueError, "shape must be >= 0, got -2"),
])


def test_bad_arguments_raise_one_clear_error(call, kind, match):
    g = gnn.Graph(np.array([[0, 1, 2, 3], [1, 2, 3, 0]]), num_nodes=8)
    x = np.ones((8, 3), np.float32)
    with pytest.raises(kind, match=match):
        call(g, x)


def test_scalars_take_what_float_and_int_take():
    # Numbers of any kind a user may hold (NumPy scalars, 0-d arrays and tensors, whole floats for a
    # size) are read as numbers; only a str, bytes, bool or (for a size) a fraction is refused.
    x = np.random.default_rng(1).standard_normal((8, 3)).astype(np.float32)
    expect = gnn.layer_norm(x, eps=1e-5)[0]
    eps_kinds = [np.float32(1e-5), np.float64(1e-5), np.array(1e-5)] + ([torch.tensor(1e-5)] if torch else [])
    for eps in eps_kinds:
        np.testing.assert_array_equal(gnn.layer_norm(x, eps=eps)[0], expect)
    ptr = np.array([0, 8])
    grad = gnn.pool_backward(x[:1], ptr, 8)
    for n in (8.0, np.int64(8), np.float64(8), np.array(8)):
        np.testing.assert_array_equal(gnn.pool_backward(x[:1], ptr, n), grad)


def test_a_refused_array_says_why_without_a_traceback(need_torch):
    g = gnn.Graph(np.array([[0, 1, 2, 3], [1, 2, 3, 0]]), num_nodes=8)
    with pytest.raises(TypeError) as e:
        gnn.spmm(g, torch.ones(8, 3).to_sparse())
    assert str(e.value).startswith("x (a Tensor of dtype torch.float32) cannot be read as an array")
    assert "layout" in str(e.value) and "Traceback" not in str(e.value)


def every_call_with_its_arrays():
    """One valid call of each function: (function, keyword arguments)."""
    g = gnn.Graph(np.array([[0, 1, 2, 3], [1, 2, 3, 0]]), num_nodes=4)
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((4, 3)).astype(np.float32), np.ones(4, np.float32)
    y, argmax = gnn.spmm(g, x, "max", return_argmax=True)
    a = rng.standard_normal((4, 2)).astype(np.float32)
    s = gnn.gat_scores(g, a, a)
    indptr, ptr = g.indptr, np.array([0, 2, 4], np.int64)
    weight, gamma = rng.standard_normal((6, 2)).astype(np.float32), np.ones(3, np.float32)
    out, z, h = gnn.sage(g, x, weight, training=True)
    p, pa = gnn.pool(x, ptr, "max", return_argmax=True)
    n, mean, rstd = gnn.instance_norm(x, ptr, gamma, gamma), *gnn.instance_norm(x, ptr)[1:]
    _, lmean, lrstd = gnn.layer_norm(x, gamma, gamma)[0], *gnn.layer_norm(x)[1:]
    return [
        (gnn.spmm, dict(graph=g, x=x, edge_weight=w, out=np.empty((4, 3), np.float32))),
        (gnn.spmm_backward, dict(graph=g, grad_out=y, reduce="max", argmax=argmax)),
        (gnn.spmm_backward, dict(graph=g, grad_out=y, edge_weight=w, x=x, need_weight_grad=True)),
        (gnn.segment_softmax, dict(x=s, indptr=indptr, out=np.empty_like(s))),
        (gnn.segment_softmax_backward, dict(y=s, grad_out=s, indptr=indptr)),
        (gnn.gat_scores, dict(graph=g, a_src=a, a_dst=a, out=np.empty_like(s))),
        (gnn.gat_scores_backward, dict(graph=g, grad_out=s, a_src=a, a_dst=a)),
        (gnn.sage, dict(graph=g, x=x, weight=weight, bias=np.ones(2, np.float32), out=np.empty((4, 2), np.float32))),
        (gnn.sage_backward, dict(graph=g, grad_out=out, z=z, h=h, weight=weight)),
        (gnn.pool, dict(x=x, ptr=ptr, out=np.empty((2, 3), np.float32))),
        (gnn.pool_backward, dict(grad_out=p, ptr=ptr, num_rows=4, reduce="max", argmax=pa)),
        (gnn.instance_norm, dict(x=x, ptr=ptr, weight=gamma, bias=gamma, out=np.empty_like(x))),
        (gnn.instance_norm_backward, dict(grad_out=x, x=x, ptr=ptr, mean=mean, rstd=rstd, weight=gamma)),
        (gnn.layer_norm, dict(x=x, weight=gamma, bias=gamma, out=np.empty_like(x))),
        (gnn.layer_norm_backward, dict(grad_out=x, x=x, mean=lmean, rstd=lrstd, weight=gamma)),
    ]


def test_arrays_no_protocol_can_read_are_refused_by_name():
    # A big-endian or object array cannot cross DLPack or the buffer protocol: each argument of each
    # function, swapped for one, raises a TypeError naming that argument (not nanobind's "incompatible
    # function arguments", and not another argument).
    for fn, kwargs in every_call_with_its_arrays():
        fn(**kwargs)  # valid as given
        for name, value in kwargs.items():
            if not isinstance(value, np.ndarray):
                continue
            swapped = value.astype(value.dtype.newbyteorder(">"))
            with pytest.raises(TypeError, match=rf"^{name} is a ndarray of dtype >[fi][48], not in this machine's"):
                fn(**{**kwargs, name: swapped})
            with pytest.raises(TypeError, match=rf"^{name} is a ndarray of dtype object"):
                fn(**{**kwargs, name: value.astype(object)})
    ei = np.array([[0, 1], [1, 0]])
    with pytest.raises(TypeError, match=r"^edge_index is a ndarray of dtype >i8"):
        gnn.Graph(ei.astype(">i8"))


def test_every_function_gives_numpys_bits_on_torch_tensors(need_torch):
    # torch tensors reach the extension as DLPack capsules (read once): each function, each of its array
    # arguments a tensor, against the same call on NumPy arrays. (A capsule read by one overload that then
    # failed left nothing to the next: segment_softmax with an array indptr failed that way.)
    def as_numpy(r):
        if isinstance(r, tuple):
            return tuple(as_numpy(a) for a in r)
        return None if r is None else np.asarray(r)

    for fn, kwargs in every_call_with_its_arrays():
        kwargs.pop("out", None)
        want = as_numpy(fn(**kwargs))
        got = fn(**{k: torch.from_numpy(v.copy()) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()})
        assert isinstance(got, tuple) == isinstance(want, tuple), fn.__name__
        for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert (a is None) == (b is None), fn.__name__
            if a is not None:
                assert isinstance(a, torch.Tensor), fn.__name__
                np.testing.assert_array_equal(a.numpy(), b, err_msg=fn.__name__)


def test_tensor_subclasses_without_storage_are_refused_or_read_through(need_torch):
    # A FakeTensor (and any tensor class dispatching in Python) holds no storage: its DLPack export points
    # at address 0 plus its offset, which gnn.Graph read (a segmentation fault). Refused by name, however
    # far the slice; PyG's Index, which holds a tensor of its values, is read through it.
    from torch._subclasses.fake_tensor import FakeTensorMode
    g = gnn.Graph(np.array([[0, 1, 2, 3], [1, 2, 3, 0]]), num_nodes=4)
    with FakeTensorMode():
        far = torch.zeros(2, 200_000, dtype=torch.int64)[:, 150_000:]
        x = torch.ones(5, 3)[1:]
    with pytest.raises(TypeError, match="edge_index has no data of its own"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's own, as nanobind asks the FakeTensor for its DLPack export)
        gnn.Graph(far, num_nodes=4)
    with pytest.raises(TypeError, match=r"x \(a FakeTensor\) cannot be read .*no data of its own"):
        gnn.spmm(g, x)
    tg = pytest.importorskip("torch_geometric", reason="torch_geometric is not installed")
    if hasattr(tg, "Index"):
        ptr = tg.Index(torch.tensor([0, 2, 4]))
        torch.testing.assert_close(gnn.pool(torch.arange(12.0).reshape(4, 3), ptr),
                                   gnn.pool(torch.arange(12.0).reshape(4, 3), torch.tensor([0, 2, 4])))


def test_tensor_subclasses_by_their_storage_not_their_name(need_torch):
    # What decides is whether the tensor holds storage: a class dispatching in Python over storage of its
    # own is read as any tensor; a wrapper without storage is refused even when its class is named Tensor
    # and lives in a torch module (a check by name let it through to a read at address 0 + its offset).
    class Logged(torch.Tensor):
        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            with torch._C._DisableTorchDispatch():
                return func(*args, **(kwargs or {}))

    class Tensor(torch.Tensor):
        __module__ = "torch.wrapped"

        @staticmethod
        def __new__(cls, e):
            r = torch.Tensor._make_wrapper_subclass(cls, e.shape, dtype=e.dtype, strides=e.stride(),
                                                    storage_offset=e.storage_offset())
            r.elem = e
            return r

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            unwrap = lambda t: t.elem if isinstance(t, Tensor) else t  # noqa: E731
            out = func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in (kwargs or {}).items()})
            return Tensor(out) if isinstance(out, torch.Tensor) else out

    g = gnn.Graph(np.array([[0, 1, 2, 3], [1, 2, 3, 0]]), num_nodes=4)
    x = torch.arange(12.0).reshape(4, 3)
    if hasattr(torch._C._DisableTorchDispatch, "__enter__"):  # (torch 2: Logged's dispatch can call torch's)
        logged = torch.Tensor._make_subclass(Logged, x.clone())
        y = gnn.spmm(g, logged)  # (a torch tensor back, as for torch's own classes)
        assert isinstance(y, torch.Tensor) and torch.equal(y.as_subclass(torch.Tensor), gnn.spmm(g, x))
        assert gnn.Graph(torch.Tensor._make_subclass(Logged, torch.tensor([[0, 1], [1, 0]]))).num_edges == 2
    far = Tensor(torch.ones(200_000, 3))[150_000:150_004]
    with pytest.raises(TypeError, match="x .a Tensor. cannot be read .*no data of its own"):
        gnn.spmm(g, far, out=torch.empty(4, 3))
    with pytest.raises(TypeError, match="edge_index has no data of its own"):
        gnn.Graph(Tensor(torch.zeros(2, 100_000, dtype=torch.int64))[:, 60_000:60_004], num_nodes=4)

    class Forwarding(Tensor):  # a wrapper that answers with the wrapped tensor's storage
        def untyped_storage(self):
            return self.elem.untyped_storage()

        def storage(self):
            return self.elem.storage()

    with pytest.raises(TypeError, match="x .a Forwarding. cannot be read .*no data of its own"):
        gnn.spmm(g, Forwarding(torch.ones(200_000, 3)[150_000:150_004]), out=torch.empty(4, 3))
    with pytest.raises(TypeError, match="edge_index has no data of its own"):
        gnn.Graph(Forwarding(torch.zeros(2, 100_000, dtype=torch.int64)[:, 60_000:60_004]), num_nodes=4)


def test_negated_views_are_read_with_their_sign(need_torch):
    # A tensor with torch's negative bit set (a lazy negation: a conjugate's imaginary part) holds its
    # values un-negated in memory, and DLPack carries no such bit: it was read with the wrong sign, a
    # silently wrong result. Inputs are read through a copy of their values; an out= is refused, as is a
    # negated edge_index handed to the extension's Graph directly; gnn.torch's layers take one.
    g = gnn.Graph(np.array([[0, 1, 2, 3], [1, 2, 3, 0]]), num_nodes=4)
    x = torch.arange(12.0).reshape(4, 3) - 5
    neg = torch.conj(torch.complex(torch.zeros_like(x), -x)).imag  # x's values, as a negated view
    assert neg.is_neg() and torch.equal(neg, x)
    assert torch.equal(gnn.spmm(g, neg, "max"), gnn.spmm(g, x, "max"))
    assert torch.equal(gnn.layer_norm(neg)[0], gnn.layer_norm(x)[0])
    with pytest.raises(TypeError, match="out is a negated view"):
        gnn.spmm(g, x, out=torch.conj(torch.complex(torch.zeros(4, 3), torch.zeros(4, 3))).imag)
    ei = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    ei_neg = torch._neg_view(-ei)
    assert ei_neg.is_neg() and torch.equal(ei_neg, ei)
    with pytest.raises(TypeError, match="edge_index is a negated view"):
        gnn.Graph(ei_neg)
    tg = None
    try:
        import torch_geometric as tg
    except ImportError:
        pass
    if tg is not None and hasattr(tg, "Index"):  # a subclass whose values are a negated view
        ptr = torch.tensor([0, 2, 4])
        torch.testing.assert_close(gnn.pool(x, tg.Index(torch._neg_view(-ptr))), gnn.pool(x, ptr))
    import gnn.torch as gt
    np.testing.assert_array_equal(gt.graph_of(ei_neg).indices, gt.graph_of(ei).indices)
    conv = gt.SAGEConv(3, 2)
    torch.testing.assert_close(conv(neg, ei_neg), conv(x, ei), rtol=0, atol=0)


def test_torch_arguments_are_checked_by_name(need_torch):
    g = gnn.Graph(np.array([[0, 1, 2, 3], [1, 2, 3, 0]]), num_nodes=8)
    x = torch.ones(8, 3)
    with pytest.raises(TypeError, match="x is on meta"):
        gnn.spmm(g, torch.zeros(8, 3, device="meta"))
    with pytest.raises(TypeError, match="edge_index is on meta"):
        gnn.Graph(torch.zeros(2, 3, dtype=torch.int64, device="meta"))
    import gnn.torch as gt
    with pytest.raises(TypeError, match="SAGEConv: edge_index is on meta"):
        gt.SAGEConv(3, 2)(x, torch.zeros(2, 3, dtype=torch.int64, device="meta"))
    with pytest.raises(TypeError, match="x is a torch.sparse_coo tensor"):
        gt.SAGEConv(3, 2)(x.to_sparse(), torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(TypeError, match="out requires grad"):
        gnn.spmm(g, x, out=torch.zeros(8, 3, requires_grad=True))
    with pytest.raises(ValueError, match="out overlaps an input"):
        gnn.spmm(g, x, out=x)
    with pytest.raises(ValueError, match="out overlaps an input"):
        gnn.spmm(g, x, out=torch.utils.dlpack.to_dlpack(x))  # (a raw capsule, read without being consumed)
    with pytest.raises(ValueError, match="out overlaps an input"):
        b = torch.ones(10, 3)
        gnn.spmm(g, b[:8], out=torch.utils.dlpack.to_dlpack(b[2:]))  # (rows that overlap, one side a capsule)
    y = torch.zeros(8, 3)
    gnn.spmm(g, x, out=torch.utils.dlpack.to_dlpack(y))  # (apart: written through the capsule)
    torch.testing.assert_close(y, torch.from_numpy(gnn.spmm(g, x.numpy())))
    # Empty arrays (torch reports odd strides for them) are fine wherever a size may be 0.
    empty = gnn.Graph(np.zeros((2, 0), np.int64), num_nodes=0)
    assert tuple(gnn.spmm(empty, torch.zeros(0, 3)).shape) == (0, 3)
    assert tuple(gnn.spmm(g, torch.zeros(8, 0)).shape) == (8, 0)
    assert tuple(gnn.pool(torch.zeros(0, 4), torch.zeros(1, dtype=torch.int64)).shape) == (0, 4)


def test_no_reference_leaks_over_many_calls(need_torch):
    g = gnn.Graph(random_graph(100, 500, seed=7), num_nodes=100)
    x = np.random.default_rng(0).standard_normal((100, 4)).astype(np.float32)
    xt = torch.from_numpy(x.copy()).requires_grad_()
    import gnn.torch as gt
    conv = gt.SAGEConv(4, 4)
    ei = torch.as_tensor(random_graph(100, 500, seed=7))

    def calls():
        y = gnn.spmm(g, x, "max", return_argmax=True)
        gnn.spmm_backward(g, y[0], "max", argmax=y[1])
        gnn.sage(g, x, np.ones((8, 4), np.float32), training=True)
        conv(xt, ei).sum().backward()

    for _ in range(100):  # warm-up: caches, lazily created objects
        calls()
    gc.collect()
    refs = (sys.getrefcount(g), sys.getrefcount(x), sys.getrefcount(xt))
    objects = len(gc.get_objects())
    for _ in range(10_000):
        calls()
    gc.collect()
    assert (sys.getrefcount(g), sys.getrefcount(x), sys.getrefcount(xt)) == refs
    assert len(gc.get_objects()) - objects < 100


def test_load_npz_reads_what_numpy_writes(tmp_path):
    rng = np.random.default_rng(8)
    arrays = {"f": rng.standard_normal((50, 7)).astype(np.float32), "d": rng.standard_normal(9),
              "i": rng.integers(-5, 5, (4, 3)).astype(np.int32), "l": np.arange(11, dtype=np.int64),
              "u": rng.integers(0, 255, 17).astype(np.uint8), "b": rng.random(5) > 0.5,
              "fortran": np.asfortranarray(rng.standard_normal((6, 4)).astype(np.float32))}
    for save in (np.savez, np.savez_compressed):
        path = tmp_path / f"{save.__name__}.npz"
        save(path, **arrays)
        got = gnn.load_npz(str(path))
        assert set(got) == set(arrays)
        for k, v in arrays.items():
            np.testing.assert_array_equal(got[k], v)
        assert set(gnn.load_npz(str(path), keys=["f", "l"])) == {"f", "l"}
        # a pathlib.Path and bytes, as np.load takes them
        assert set(gnn.load_npz(path)) == set(gnn.load_npz(bytes(path))) == set(arrays)
    with pytest.raises(TypeError, match="keys must be a list of member names"):
        gnn.load_npz(path, keys="f")
    with pytest.raises(gnn.Error, match="nope"):
        gnn.load_npz(str(tmp_path / "savez.npz"), keys=["nope"])
    corrupt = tmp_path / "corrupt.npz"
    data = bytearray((tmp_path / "savez.npz").read_bytes())
    data[200] ^= 0xFF  # inside the first member's data: its CRC-32 no longer matches
    corrupt.write_bytes(bytes(data))
    with pytest.raises(gnn.Error, match="corrupt.npz"):
        gnn.load_npz(str(corrupt))


def test_load_tpugraph_validates_a_generated_file(tmp_path):
    if not GNN_CLI.exists():
        pytest.skip(f"{GNN_CLI} is not built (cmake --build build --target gnn_cli)")
    subprocess.run([str(GNN_CLI), "synth", "--collection", "layout", "--graphs", "1", "--nodes", "200",
                    "--configs", "20", "--split", "train", "--out", str(tmp_path)], check=True,
                   stdout=subprocess.DEVNULL)
    path = next((tmp_path / "npz").rglob("*.npz"))
    d = gnn.load_tpugraph(str(path))
    ref = np.load(path)
    for k in ("node_feat", "node_opcode", "edge_index", "node_config_ids", "node_config_feat", "config_runtime"):
        np.testing.assert_array_equal(d[k].reshape(ref[k].shape), ref[k].astype(d[k].dtype))
    broken = tmp_path / "broken.npz"
    np.savez(broken, **{k: ref[k] for k in ref.files if k != "node_opcode"})
    with pytest.raises(gnn.Error, match="node_opcode"):
        gnn.load_tpugraph(str(broken))


def test_load_tpugraph_on_real_files():
    files = sorted((SHARED / "tpugraphs" / "tile" / "xla").glob("*.npz"))
    if not files:
        pytest.skip(f"{SHARED / 'tpugraphs'} is absent (../shared/data holds real TpuGraphs files)")
    d = gnn.load_tpugraph(str(files[0]))
    ref = np.load(files[0])
    np.testing.assert_array_equal(d["config_feat"], ref["config_feat"].astype(np.float32))


def test_cora_sage_layer_matches_plain_torch(cora, need_torch):
    import gnn.torch as gt
    d = gnn.load_npz(str(cora))
    ei = torch.as_tensor(d["edge_index"].astype(np.int64)).t()
    ei = torch.cat([ei, ei.flip(0)], 1)  # undirected, as PyG's Planetoid
    n = int(d["x_shape"][0])
    torch.manual_seed(0)
    x = torch.randn(n, 16, requires_grad=True)
    conv = gt.SAGEConv(16, 8)
    y = conv(x, ei)
    agg = torch.zeros(n, 16).index_add(0, ei[1], x[ei[0]])
    deg = torch.zeros(n).index_add(0, ei[1], torch.ones(ei.shape[1])).clamp(min=1)
    torch.testing.assert_close(y, conv.lin_l(agg / deg[:, None]) + conv.lin_r(x), rtol=1e-4, atol=1e-5)
