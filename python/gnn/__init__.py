"""gnn.cpp's kernels from Python.

The functions here take NumPy arrays or PyTorch tensors (anything that speaks DLPack), read them where
they lie, and return new arrays of the input's own kind, written by the kernels in place: a NumPy caller
gets NumPy arrays back, a torch caller torch tensors, and nothing is copied on the way in or out. Every
array is float32 (features), int32 (CSR pointers, argmax) or int64 (graph pointers), C-contiguous, and
all of a call's arrays in host memory or all on one CUDA device; anything else raises a TypeError or
ValueError naming the argument. On the host the kernels run on ``num_threads()`` OpenMP threads with the
GIL released; on a CUDA device (a build with CUDA) they run on the caller's stream, torch's or CuPy's
current one (``gnn.cuda`` says how). Either way they give the same bits on every run and thread count
(no atomics in any backward). The forward functions also take ``out=``, an array to write the
result into (in place, returned as is): writable, not requiring grad, sharing no memory with an input.
These functions are the raw kernels: a torch tensor that requires grad is read, but the result is not
part of autograd (``gnn.torch`` has the differentiable versions).

Per-edge arrays (edge weights, attention scores) are in the graph's CSR order: ``values[graph.eid]``
reorders per-edge values given in ``edge_index`` order.

``gnn.torch`` (imported on its own, needs torch) wraps these as autograd functions and as PyG-style
layers: ``SAGEConv``, ``GCNConv``, ``GATConv``, ``GINConv``.
"""

from __future__ import annotations

import ctypes as _ct
import operator as _operator
import os as _os
import sys as _sys
import warnings as _warnings

import numpy as _np

from . import _gnn
from . import cuda
from ._gnn import Error, Graph, num_threads, set_num_threads

__version__ = _gnn.__version__
__all__ = [
    "Error", "Graph", "cuda", "load_npz", "load_tpugraph", "num_threads", "set_num_threads",
    "spmm", "spmm_backward", "segment_softmax", "segment_softmax_backward", "gat_scores",
    "gat_scores_backward", "sage", "sage_backward", "pool", "pool_backward", "instance_norm",
    "instance_norm_backward", "layer_norm", "layer_norm_backward",
]


def _path(path) -> str:
    """A path as str: a str, bytes or os.PathLike (as np.load takes), without the NUL byte that would cut
    it short where the OS reads it."""
    try:
        path = _os.fsdecode(_os.fspath(path))
    except TypeError:
        raise TypeError(f"path must be a str, bytes or os.PathLike, got {type(path).__name__}") from None
    if "\0" in path:
        raise ValueError(f"path contains a NUL byte: {path!r}")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # bytes that fsdecode kept as surrogates: the reader takes UTF-8 paths
        raise ValueError(f"path is not valid UTF-8: {path!r}") from None
    return path


def load_npz(path, keys=None) -> dict:
    """Reads an .npz (members in parallel, CRC-checked) into a dict of NumPy arrays, no copy after
    reading. keys: only these members (each must exist)."""
    if isinstance(keys, (str, bytes)):
        raise TypeError(f"keys must be a list of member names, got a {type(keys).__name__}: [{keys!r}]?")
    if keys is not None:
        try:
            keys = list(keys)
        except TypeError:
            raise TypeError(f"keys must be a list of member names, got {type(keys).__name__}") from None
        for k in keys:
            if not isinstance(k, str):
                raise TypeError(f"keys must be member names (str), got {type(k).__name__} {k!r}")
            try:
                k.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"keys: {k!r} is not valid UTF-8 (a member name a zip can hold)") from None
    return _gnn.load_npz(_path(path), keys)


def load_tpugraph(path, require_runtimes: bool = True) -> dict:
    """Reads and validates a TpuGraphs tile or layout .npz (every schema rule) into a dict of NumPy
    arrays."""
    if isinstance(require_runtimes, (str, bytes)):  # ('no' would be true)
        raise TypeError(f"require_runtimes must be True or False, got {type(require_runtimes).__name__} "
                        f"{require_runtimes!r}")
    return _gnn.load_tpugraph(_path(path), bool(require_runtimes))


def _is_torch(a) -> bool:
    """A torch tensor: torch's own classes, or a subclass defined anywhere (torch is imported by then)."""
    if type(a).__module__.startswith("torch"):
        return True
    if isinstance(a, _np.ndarray):
        return False
    torch = _sys.modules.get("torch")
    return torch is not None and isinstance(a, torch.Tensor)


def _is_cupy(a) -> bool:
    return type(a).__module__.startswith("cupy")


_torch_capsule = None  # torch.utils.dlpack.to_dlpack, looked up on the first torch call
_torch_plain = None  # (torch.Tensor, torch.nn.Parameter)
_no_data_types = {}


def _torch_plain_types():
    global _torch_plain
    if _torch_plain is None:
        import torch
        _torch_plain = (torch.Tensor, torch.nn.Parameter)
    return _torch_plain


class _NoData:
    """Stands in for a torch tensor subclass whose values live elsewhere (a FakeTensor, a wrapper): its
    DLPack export would point at no memory of its own. The extension refuses it by the argument's name,
    quoting __dlpack__'s message; the class is named after the subclass, which the message quotes too."""

    def __dlpack__(self, *args, **kwargs):
        raise BufferError("a tensor subclass whose values live elsewhere (no data of its own); pass a plain "
                          "tensor of its values")


def _storage_free(t) -> bool:
    """Whether a torch tensor of a subclass holds no storage of its own: its class dispatches in Python
    (FakeTensor, PyG's EdgeIndex and Index, torch's wrapper subclasses) and its data pointer does not lie
    in a storage with data (a wrapper's is 0 plus its offset, its storage "an invalid python storage")."""
    import torch
    try:
        if not torch._C._dispatch_keys(t).has(torch._C.DispatchKey.Python):
            return False
    except (AttributeError, RuntimeError):  # (a torch without these: read as it is)
        return False
    try:
        with _warnings.catch_warnings():
            _warnings.simplefilter("ignore")  # (a FakeTensor warns that its data pointer is asked for)
            storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()  # (torch < 2)
            start, size, p = storage.data_ptr(), storage.nbytes(), t.data_ptr()
            return t.numel() > 0 and not (start and start <= p < start + size)
    except Exception:  # whatever a subclass raises when asked: not read
        return True


def _holding_values(t):
    """A torch tensor of a subclass as what the extension may read: itself where it holds its storage,
    the tensor of its values where it has one (PyG's .as_tensor()), else a _NoData for the extension to
    refuse by the argument's name."""
    free = _storage_free(t)
    if free and hasattr(t, "as_tensor"):
        t = t.as_tensor()
        free = type(t) not in _torch_plain_types() and _storage_free(t)
    if not free:
        return t
    name = type(t).__name__
    if name not in _no_data_types:
        _no_data_types[name] = type(name, (_NoData,), {})
    return _no_data_types[name]()


def _raw(a):
    """What the extension reads: torch tensors lose their autograd history (DLPack refuses them) and go
    as torch's own DLPack capsule, gnn's own device arrays hand over their DLPack object.

    The capsule is the hand-over nanobind would ask Tensor.__dlpack__ for, without that method's Python
    code (about 2 us a tensor, most of a small call's cost; called as nanobind calls it, it waits for no
    stream either, and the extension runs on torch's current one). A tensor torch cannot export (on
    meta, sparse) goes as it is, for the extension to refuse by name. A tensor with its negative bit set
    (a lazy negation, such as a conjugate's imaginary part) is read through a copy of its values."""
    global _torch_capsule
    if a is None:
        return a
    if _is_torch(a):
        t = a.detach() if a.requires_grad else a
        if type(t) not in _torch_plain_types():  # a subclass: does it hold its data?
            t = _holding_values(t)
            if isinstance(t, _NoData):
                return t
        if t.is_neg():  # a lazy negation: its memory holds the values un-negated, and DLPack has no such bit
            t = t.resolve_neg()
        if _torch_capsule is None:
            try:
                from torch.utils.dlpack import to_dlpack as _torch_capsule
            except ImportError:
                _torch_capsule = False
        if _torch_capsule:
            try:
                return _torch_capsule(t)
            except Exception:  # (the extension names it)
                pass
        return t
    if isinstance(a, cuda.Array):
        return a._nd
    return a


def _text(value, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


# What float() or int() would read as a number but is a mistake to: text, bytes, and truth values.
_NOT_NUMBERS = (str, bytes, bytearray, memoryview, bool, _np.bool_)


def _real(value, name: str) -> float:
    """A number as float: anything float() takes (NumPy scalars, 0-d arrays and tensors, Decimal) but
    text, bytes or a bool (_NOT_NUMBERS), which would be a mistake read as a number."""
    if not isinstance(value, _NOT_NUMBERS):
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    raise TypeError(f"{name} must be a real number, got {type(value).__name__}")


def _eps(value) -> float:
    """A norm's epsilon: finite and above 0 once in float32, the kernels' type (1e-50 would be 0 there),
    named with the value given."""
    eps = _real(value, "eps")
    with _np.errstate(over="ignore"):
        f32 = _np.float32(eps)
    if not (_np.isfinite(f32) and f32 > 0):
        raise ValueError(f"eps must be a finite number > 0 in float32, got {value!r}")
    return eps


def _count(value, name: str) -> int:
    """A size, >= 0: an integer (int, NumPy integer, anything with __index__) or a whole float."""
    n = None
    if not isinstance(value, _NOT_NUMBERS):
        try:
            n = _operator.index(value)
        except TypeError:
            f = _real(value, name)
            if f != f or f in (float("inf"), float("-inf")) or f != int(f):
                raise ValueError(f"{name} must be a whole number, got {value}") from None
            n = int(f)
    if n is None:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {n}")
    return n


def _last_host_entry(a):
    """The last entry of a 1-d host array of integers (NumPy, or a plain torch tensor), else None."""
    if isinstance(a, _np.ndarray):
        whole = a.dtype.kind in "iu"
    elif _is_torch(a) and type(a) in _torch_plain_types() and a.device.type == "cpu":
        import torch

        whole = a.dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
    else:
        return None
    return int(a[-1]) if whole and a.ndim == 1 and a.shape[0] else None


def _present(**arrays) -> None:
    """Required arrays that _dims does not read: None is named here (the extension's own refusal of None,
    nanobind's, names no argument)."""
    for name, a in arrays.items():
        if a is None:
            raise TypeError(f"{name} must be an array (NumPy, torch, CuPy, or DLPack), got None")


def _cuda_device(a):
    """The CUDA device index an array is on, or None for host memory (and anything else)."""
    if isinstance(a, _np.ndarray):
        return None
    if _is_torch(a):
        return a.device.index if a.is_cuda else None
    if _is_cupy(a):
        return a.device.id
    if isinstance(a, cuda.Array):
        return a.device
    dev = getattr(a, "__dlpack_device__", None)
    if dev is not None:
        kind, index = dev()
        return int(index) if int(kind) == 2 else None
    return None


def _stream(a) -> int:
    """The stream a call on a's device runs on: torch's or CuPy's current one for their arrays, else
    gnn.cuda's current one; 0 (unused) on the host."""
    device = _cuda_device(a)
    if device is None:
        return 0
    if _is_torch(a):
        import torch
        return torch.cuda.current_stream(device).cuda_stream
    if _is_cupy(a):
        import cupy
        with a.device:  # CuPy's current stream is per device: the array's device's
            return cupy.cuda.get_current_stream().ptr
    return cuda.current_stream(device)


_TORCH_DTYPES = {}


def _new(like, shape, dtype: str = "float32"):
    """An uninitialised array of like's framework and device."""
    if _is_torch(like):
        if not _TORCH_DTYPES:
            import torch
            _TORCH_DTYPES.update(float32=torch.float32, int32=torch.int32, int64=torch.int64)
        return like.new_empty(shape, dtype=_TORCH_DTYPES[dtype])
    if _is_cupy(like):
        import cupy
        with like.device:
            return cupy.empty(shape, dtype=dtype)
    device = _cuda_device(like)
    if device is not None:
        return cuda.empty(shape, dtype, device)
    return _np.empty(shape, dtype=dtype)


def _shape(a, name: str):
    shape = getattr(a, "shape", None)
    if shape is None and hasattr(a, "__dlpack__"):  # a producer with no shape attribute: ask DLPack
        shape = _gnn._shape(a, name)
    if shape is None:
        raise TypeError(f"{name} must be an array (NumPy, torch, CuPy, or DLPack), got {type(a).__name__}")
    if _is_torch(a) and a.device.type not in ("cpu", "cuda"):
        raise TypeError(f"{name} is on {a.device}; gnn's kernels run on host memory and CUDA devices")
    return shape


def _dims(a, name: str, ndim: int):
    shape = _shape(a, name)
    if len(shape) != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(shape)}")
    return shape


class _DLTensor(_ct.Structure):  # DLPack's DLTensor (dlpack.h), as a capsule's pointer holds it
    _fields_ = [("data", _ct.c_void_p), ("device_type", _ct.c_int32), ("device_id", _ct.c_int32),
                ("ndim", _ct.c_int32), ("code", _ct.c_uint8), ("bits", _ct.c_uint8), ("lanes", _ct.c_uint16),
                ("shape", _ct.POINTER(_ct.c_int64)), ("strides", _ct.POINTER(_ct.c_int64)),
                ("byte_offset", _ct.c_uint64)]


class _DLVersioned(_ct.Structure):  # DLManagedTensorVersioned (DLPack 1.0): the tensor after its header
    _fields_ = [("major", _ct.c_uint32), ("minor", _ct.c_uint32), ("manager_ctx", _ct.c_void_p),
                ("deleter", _ct.c_void_p), ("flags", _ct.c_uint64), ("tensor", _DLTensor)]


_capsule_valid = _ct.pythonapi.PyCapsule_IsValid
_capsule_valid.restype, _capsule_valid.argtypes = _ct.c_int, [_ct.py_object, _ct.c_char_p]
_capsule_pointer = _ct.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = _ct.c_void_p, [_ct.py_object, _ct.c_char_p]


def _capsule_span(capsule):
    """The bytes a DLPack capsule's tensor spans (read, not consumed), or None for another capsule."""
    for name, versioned in ((b"dltensor", False), (b"dltensor_versioned", True)):
        if _capsule_valid(capsule, name):
            at = _capsule_pointer(capsule, name)
            t = _DLVersioned.from_address(at).tensor if versioned else _DLTensor.from_address(at)
            item = max(1, (t.bits * t.lanes + 7) // 8)
            shape = [t.shape[d] for d in range(t.ndim)]
            start = (t.data or 0) + t.byte_offset
            if any(n == 0 for n in shape):
                return start, start
            if not t.strides:  # (compact, row-major)
                n = 1
                for d in shape:
                    n *= d
                return start, start + n * item
            lo = sum(min(0, (n - 1) * t.strides[d]) for d, n in enumerate(shape))
            hi = sum(max(0, (n - 1) * t.strides[d]) for d, n in enumerate(shape))
            return start + lo * item, start + (hi + 1) * item
    return None


def _span(a):
    """The [start, end) bytes of an array's memory, or None where it cannot be told."""
    if isinstance(a, memoryview):
        a = _np.asarray(a)  # (a view of the same memory)
    if isinstance(a, _np.ndarray):
        lo, hi = _np.lib.array_utils.byte_bounds(a) if hasattr(_np.lib, "array_utils") else _np.byte_bounds(a)
        return lo, hi
    if _is_torch(a):
        if str(a.layout) != "torch.strided":  # (a sparse tensor: the call refuses it, naming the argument)
            return None
        start = a.data_ptr()
        return start, start + a.numel() * a.element_size()
    if _is_cupy(a):
        return a.data.ptr, a.data.ptr + a.nbytes
    if isinstance(a, cuda.Array):
        start = a.data_ptr()
        n = 1
        for d in a.shape:
            n *= d
        return start, start + n * (8 if a.dtype == "int64" else 4)
    if type(a).__name__ == "PyCapsule":
        return _capsule_span(a)
    if hasattr(a, "__dlpack__"):  # (another library's array: its export read, then dropped)
        try:
            return _capsule_span(a.__dlpack__())
        except Exception:  # noqa: BLE001 (an export it refuses: the call itself will say why)
            return None
    return None


def _out(out, *inputs, name: str = "out"):
    """A caller's output array, checked before the kernel writes it: writable, outside autograd, and
    sharing no memory with the inputs (the kernels read and write in one pass)."""
    if (isinstance(out, _np.ndarray) and not out.flags.writeable) or (isinstance(out, memoryview) and out.readonly):
        raise TypeError(f"{name} is read-only; pass a writable array")
    if _is_torch(out) and out.requires_grad:
        raise TypeError(f"{name} requires grad: gnn writes it outside autograd (use gnn.torch for gradients)")
    if _is_torch(out) and out.is_neg():
        raise TypeError(f"{name} is a negated view (its negative bit is set: its memory holds the values "
                        "un-negated); pass a plain tensor")
    span = None
    for a in inputs:
        if a is None:
            continue
        if isinstance(out, _np.ndarray) and isinstance(a, _np.ndarray):  # (NumPy's own test of the same bounds)
            overlap = _np.may_share_memory(out, a)
        else:
            span = span or _span(out)
            other = _span(a)
            overlap = span and other and span[0] < other[1] and other[0] < span[1] and span[0] != span[1]
        if overlap:
            raise ValueError(f"{name} overlaps an input; pass a separate array")
    return out


def _graph(graph, name: str = "graph") -> Graph:
    if not isinstance(graph, Graph):
        raise TypeError(f"{name} must be a gnn.Graph (gnn.Graph(edge_index)), got {type(graph).__name__}")
    if not _gnn._graph_ready(graph):
        raise ValueError(f"{name} is a gnn.Graph that was never built (Graph.__new__ without __init__): make it "
                         f"with gnn.Graph(edge_index)")
    return graph


def _heads(edge_weight) -> int:
    if edge_weight is None:
        return 1
    shape = getattr(edge_weight, "shape", ())
    heads = int(shape[1]) if len(shape) == 2 else 1
    if heads < 1:
        raise ValueError(f"edge_weight must have shape (E,) or (E, H) with H >= 1, got {tuple(shape)}")
    return heads


def spmm(graph: Graph, x, reduce: str = "sum", edge_weight=None, return_argmax: bool = False, out=None):
    """Aggregates x [num_src_nodes, F] over the graph's edges into [num_nodes, F].

    reduce: 'sum', 'mean' or 'max' (an empty row gives 0; a NaN term makes max NaN, as torch's amax).
    edge_weight: (E,) or (E, H) in CSR order, multiplying each message (H heads split F into H blocks, one
    weight column each). With return_argmax, also returns the int32 (H, num_nodes, F / H) CSR position
    each max came from (-1: none), which spmm_backward needs for 'max'. out: an array to write into
    (returned as is).
    """
    _graph(graph)
    _text(reduce, "reduce")
    _, F = _dims(x, "x", 2)
    H = _heads(edge_weight)
    out = _new(x, (graph.num_nodes, F)) if out is None else _out(out, x, edge_weight)
    argmax = _new(x, (H, graph.num_nodes, F // H), "int32") if reduce == "max" else None
    _gnn.spmm_forward(graph, _raw(x), _raw(edge_weight), reduce, _raw(out), _raw(argmax), _stream(x))
    return (out, argmax) if return_argmax else out


def spmm_backward(graph: Graph, grad_out, reduce: str = "sum", edge_weight=None, argmax=None, x=None,
                  need_x_grad: bool = True, need_weight_grad: bool = False):
    """Gradients of spmm with respect to x and (need_weight_grad, which needs x) edge_weight.

    Each grad_x row is a sum over the node's outgoing edges in a fixed order (the CSC), never an
    atomic add: the same bits on every run. Returns (grad_x or None, grad_weight or None).
    """
    _graph(graph)
    _text(reduce, "reduce")
    _, F = _dims(grad_out, "grad_out", 2)
    grad_x = _new(grad_out, (graph.num_src_nodes, F)) if need_x_grad else None
    if need_weight_grad and edge_weight is None:
        raise ValueError("need_weight_grad: the forward had no edge_weight")
    grad_w = _new(grad_out, tuple(_shape(edge_weight, "edge_weight"))) if need_weight_grad else None
    _gnn.spmm_backward(graph, _raw(grad_out), _raw(edge_weight), reduce, _raw(argmax), _raw(x), _raw(grad_x),
                       _raw(grad_w), _stream(grad_out))
    return grad_x, grad_w


def segment_softmax(x, indptr, out=None):
    """Softmax of x [E, H] over each segment of rows indptr[s] .. indptr[s+1] (int32), per column.

    indptr may be a Graph: its CSR rows (checked when it was built, so a CUDA call copies nothing to the
    host to check them). Any other indptr is checked first, which on a device waits for the stream once.
    """
    E, H = _dims(x, "x", 2)
    _present(indptr=indptr)
    out = _new(x, (E, H)) if out is None else _out(out, x, None if isinstance(indptr, Graph) else indptr)
    if isinstance(indptr, Graph):
        _gnn.segment_softmax_forward_graph(_raw(x), _graph(indptr, "indptr"), _raw(out), _stream(x))
    else:
        _gnn.segment_softmax_forward(_raw(x), _raw(indptr), _raw(out), _stream(x))
    return out


def segment_softmax_backward(y, grad_out, indptr):
    """The gradient of segment_softmax from its output y (indptr: an int32 array or a Graph)."""
    E, H = _dims(y, "y", 2)
    _present(grad_out=grad_out, indptr=indptr)
    grad_x = _new(y, (E, H))
    if isinstance(indptr, Graph):
        _gnn.segment_softmax_backward_graph(_raw(y), _raw(grad_out), _graph(indptr, "indptr"), _raw(grad_x),
                                            _stream(y))
    else:
        _gnn.segment_softmax_backward(_raw(y), _raw(grad_out), _raw(indptr), _raw(grad_x), _stream(y))
    return grad_x


def gat_scores(graph: Graph, a_src, a_dst, negative_slope: float = 0.2, out=None):
    """GAT's raw scores, in CSR order: s[p, h] = leaky_relu(a_src[j, h] + a_dst[i, h]) for edge p: j -> i.

    a_src [num_src_nodes, H] over the sources, a_dst [num_nodes, H] over the targets (one node set unless
    the graph is bipartite)."""
    _graph(graph)
    negative_slope = _real(negative_slope, "negative_slope")
    _, H = _dims(a_src, "a_src", 2)
    _present(a_dst=a_dst)
    out = _new(a_src, (graph.num_edges, H)) if out is None else _out(out, a_src, a_dst)
    _gnn.gat_scores_forward(graph, _raw(a_src), _raw(a_dst), float(negative_slope), _raw(out), _stream(a_src))
    return out


def gat_scores_backward(graph: Graph, grad_out, a_src, a_dst, negative_slope: float = 0.2):
    """Gradients of gat_scores: (grad_a_src, grad_a_dst), each a fixed-order sum over a node's edges."""
    _graph(graph)
    negative_slope = _real(negative_slope, "negative_slope")
    U, H = _dims(a_src, "a_src", 2)
    _present(grad_out=grad_out, a_dst=a_dst)
    grad_src, grad_dst = _new(a_src, (U, H)), _new(a_src, (graph.num_nodes, H))
    _gnn.gat_scores_backward(graph, _raw(grad_out), _raw(a_src), _raw(a_dst), float(negative_slope), _raw(grad_src),
                             _raw(grad_dst), _stream(a_src))
    return grad_src, grad_dst


def sage(graph: Graph, x, weight, bias=None, activation: str = "none", negative_slope: float = 0.01,
         training: bool = False, out=None):
    """The fused GraphSAGE layer: act([mean_{j->i} x_j | x_i] @ weight + bias).

    weight: [2F, O], rows 0..F-1 act on the mean of the neighbours, F..2F-1 on the node itself.
    activation: none, relu, leaky_relu, elu, gelu, sigmoid or tanh. With training, returns (y, z, h):
    the pre-activation z and the joined input h that sage_backward reads; else y alone.
    """
    _graph(graph)
    _text(activation, "activation")
    negative_slope = _real(negative_slope, "negative_slope")
    N, F = _dims(x, "x", 2)
    _, O = _dims(weight, "weight", 2)
    out = _new(x, (N, O)) if out is None else _out(out, x, weight, bias)
    z = _new(x, (N, O)) if training else None
    h = _new(x, (N, 2 * F)) if training else None
    _gnn.sage_forward(graph, _raw(x), _raw(weight), _raw(bias), activation, float(negative_slope), _raw(out), _raw(z),
                      _raw(h), _stream(x))
    return (out, z, h) if training else out


def sage_backward(graph: Graph, grad_out, z, h, weight, activation: str = "none", negative_slope: float = 0.01,
                  need_bias_grad: bool = True):
    """Gradients of sage: (grad_x, grad_weight, grad_bias or None), from the forward's z and h."""
    _graph(graph)
    _text(activation, "activation")
    negative_slope = _real(negative_slope, "negative_slope")
    F2, O = _dims(weight, "weight", 2)
    _present(grad_out=grad_out, z=z, h=h)
    grad_x = _new(grad_out, (graph.num_nodes, F2 // 2))
    grad_w = _new(grad_out, (F2, O))
    grad_b = _new(grad_out, (O,)) if need_bias_grad else None
    _gnn.sage_backward(graph, _raw(grad_out), _raw(z), _raw(h), _raw(weight), activation, float(negative_slope),
                       _raw(grad_x), _raw(grad_w), _raw(grad_b), _stream(grad_out))
    return grad_x, grad_w, grad_b


def pool(x, ptr, reduce: str = "sum", return_argmax: bool = False, out=None):
    """Readout of x [N, F] per graph (rows ptr[g] .. ptr[g+1], int64) into [G, F].

    reduce: 'sum', 'mean', 'max' or 'logsumexp'; a graph of no rows gives 0 whatever the reduce (PyG's
    pools' convention; torch.logsumexp over nothing is -inf). With return_argmax and 'max', also the int32
    [G, F] row each max came from (pool_backward needs it).
    """
    _text(reduce, "reduce")
    _, F = _dims(x, "x", 2)
    G = _dims(ptr, "ptr", 1)[0] - 1
    out = _new(x, (max(G, 0), F)) if out is None else _out(out, x, ptr)
    argmax = _new(x, (max(G, 0), F), "int32") if reduce == "max" else None
    _gnn.pool_forward(_raw(x), _raw(ptr), reduce, _raw(out), _raw(argmax), _stream(x))
    return (out, argmax) if return_argmax else out


def pool_backward(grad_out, ptr, num_rows: int, reduce: str = "sum", argmax=None, x=None, y=None):
    """The gradient of pool with respect to x [num_rows, F]; 'max' needs argmax, 'logsumexp' x and y."""
    _text(reduce, "reduce")
    _, F = _dims(grad_out, "grad_out", 2)
    _present(ptr=ptr)
    n = _count(num_rows, "num_rows")
    # (a host ptr names a wrong num_rows before the gradient is allocated: 2**40 rows would ask for TiBs; a
    # device ptr is read by the extension, which checks it against the gradient's rows; so ptr's own shape
    # and dtype are checked first, or a ptr whose last entry cannot be read would let the allocation go)
    _dims(ptr, "ptr", 1)
    if isinstance(ptr, _np.ndarray):
        whole = ptr.dtype.kind not in "fcb"  # (an object or byte-swapped array: the extension names it)
    elif _is_torch(ptr):
        whole = not (ptr.dtype.is_floating_point or ptr.dtype.is_complex or str(ptr.dtype) == "torch.bool")
    else:
        whole = True  # (the extension names any other dtype)
    if not whole:
        raise TypeError(f"ptr must be int64, got {str(ptr.dtype).replace('torch.', '')}")
    last = _last_host_entry(ptr)
    if last is not None and last != n:
        raise ValueError(f"num_rows must be the rows ptr splits, its last entry {last}, got {n}")
    grad_x = _new(grad_out, (n, F))
    _gnn.pool_backward(_raw(grad_out), _raw(ptr), reduce, _raw(argmax), _raw(x), _raw(y), _raw(grad_x),
                       _stream(grad_out))
    return grad_x


def instance_norm(x, ptr, weight=None, bias=None, eps: float = 1e-5, out=None):
    """Per graph and channel normalisation of x [N, F] (graphs: rows ptr[g] .. ptr[g+1], int64).

    Returns (y, mean, rstd), mean and rstd [G, F] for instance_norm_backward.
    """
    eps = _eps(eps)
    N, F = _dims(x, "x", 2)
    G = _dims(ptr, "ptr", 1)[0] - 1
    out = _new(x, (N, F)) if out is None else _out(out, x, weight, bias, ptr)
    mean, rstd = _new(x, (max(G, 0), F)), _new(x, (max(G, 0), F))
    _gnn.instance_norm_forward(_raw(x), _raw(ptr), _raw(weight), _raw(bias), float(eps), _raw(out), _raw(mean),
                               _raw(rstd), _stream(x))
    return out, mean, rstd


def instance_norm_backward(grad_out, x, ptr, mean, rstd, weight=None, need_affine_grad: bool = True):
    """Gradients of instance_norm: (grad_x, grad_weight, grad_bias); the last two None unless asked."""
    N, F = _dims(x, "x", 2)
    _present(grad_out=grad_out, ptr=ptr, mean=mean, rstd=rstd)
    grad_x = _new(x, (N, F))
    grad_w = _new(x, (F,)) if need_affine_grad else None
    grad_b = _new(x, (F,)) if need_affine_grad else None
    _gnn.instance_norm_backward(_raw(grad_out), _raw(x), _raw(ptr), _raw(mean), _raw(rstd), _raw(weight),
                                _raw(grad_x), _raw(grad_w), _raw(grad_b), _stream(x))
    return grad_x, grad_w, grad_b


def layer_norm(x, weight=None, bias=None, eps: float = 1e-5, out=None):
    """Per row normalisation of x [R, F]. Returns (y, mean, rstd), mean and rstd [R]."""
    eps = _eps(eps)
    R, F = _dims(x, "x", 2)
    out = _new(x, (R, F)) if out is None else _out(out, x, weight, bias)
    mean, rstd = _new(x, (R,)), _new(x, (R,))
    _gnn.layer_norm_forward(_raw(x), _raw(weight), _raw(bias), float(eps), _raw(out), _raw(mean), _raw(rstd),
                            _stream(x))
    return out, mean, rstd


def layer_norm_backward(grad_out, x, mean, rstd, weight=None, need_affine_grad: bool = True):
    """Gradients of layer_norm: (grad_x, grad_weight, grad_bias); the last two None unless asked."""
    R, F = _dims(x, "x", 2)
    _present(grad_out=grad_out, mean=mean, rstd=rstd)
    grad_x = _new(x, (R, F))
    grad_w = _new(x, (F,)) if need_affine_grad else None
    grad_b = _new(x, (F,)) if need_affine_grad else None
    _gnn.layer_norm_backward(_raw(grad_out), _raw(x), _raw(mean), _raw(rstd), _raw(weight), _raw(grad_x),
                             _raw(grad_w), _raw(grad_b), _stream(x))
    return grad_x, grad_w, grad_b
