"""gnn's kernels as torch autograd functions and PyG-style layers.

The layers take PyG's constructor and forward arguments (``forward(x, edge_index)``, and where PyG's
layer has them a pair ``x=(x_src, x_dst)``, ``size``, GAT's edge_attr), and hold their parameters
under PyG's names, so a PyG model swaps a layer by changing an import and a PyG state_dict loads as is:

    from gnn.torch import SAGEConv          # instead of: from torch_geometric.nn import SAGEConv

What differs from PyG, by design: float32 tensors only, on the CPU or (a build with CUDA) a CUDA device,
where the kernels run on torch's current stream; the backward sums in a fixed order (no atomics), so
gradients have the same bits on every run and thread count; the CSR/CSC graph built from ``edge_index``
is kept and reused while the same ``edge_index`` tensor (same storage and version) comes back, as it
does every step of full-graph training (an edit that torch does not count, through ``.numpy()`` or
``.data``, is not seen: pass a new tensor; an inference tensor, made under ``torch.inference_mode()``,
has no version, so its graph is built on every call); of equal edge features a GATConv 'max' or 'min'
self-loop's gradient goes to the first edge (torch's amax splits it); a bipartite GATConv with more
targets than sources gives an edge past the self-loops' nodes no loop features (PyG fails there); under
``torch.autocast`` gnn's kernels are of torch's float32 ops (as softmax and layer_norm are): a float16 or
bfloat16 input is taken in float32, and the output is float32.
Anything the kernels do not cover (SAGE's lstm and multiple aggregations) raises NotImplementedError
rather than computing something else.
"""

from __future__ import annotations

import functools
import math
import operator
from typing import Optional

import numpy as np
import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

import gnn as _g
from gnn import Graph

__all__ = ["Graph", "graph_of", "spmm", "sage", "gat_scores", "segment_softmax", "pool", "instance_norm",
           "layer_norm", "SAGEConv", "GCNConv", "GATConv", "GINConv"]


# ---- graphs ---------------------------------------------------------------------------------------

def _plain(edge_index: Tensor) -> Tensor:
    """edge_index's values as a plain tensor: PyG's EdgeIndex, a tensor subclass wrapping another (its
    DLPack export has no data), gives the tensor it holds; a lazy negation (the negative bit) a copy."""
    if type(edge_index) is not Tensor and hasattr(edge_index, "as_tensor"):
        edge_index = edge_index.as_tensor()
    return edge_index.resolve_neg() if edge_index.is_neg() else edge_index


def graph_of(edge_index, num_nodes: Optional[int] = None, num_src_nodes: Optional[int] = None) -> Graph:
    """A gnn.Graph from a PyG edge_index [2, E] (row 0 sources, row 1 targets; a tensor or PyG's
    EdgeIndex), of num_nodes targets and, for a bipartite graph, num_src_nodes sources; a Graph passes
    through."""
    if isinstance(edge_index, Graph):
        return _g._graph(edge_index, "edge_index")
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"edge_index must be a torch.Tensor or gnn.Graph, got {type(edge_index).__name__}")
    return Graph(_plain(edge_index).detach().cpu(), num_nodes=num_nodes, num_src_nodes=num_src_nodes)


class _GraphCache:
    """The last graph built from an edge_index, and what was derived from it, reused while the same
    tensor object comes back unchanged (torch's in-place version counter) with the same node count (a
    bipartite layer's: the targets and the sources).
    The tensor is held, so its memory cannot be reused by another edge_index meanwhile. Copies and
    pickles of a layer (deepcopy, torch.save) leave the cache behind: it is rebuilt on first use.
    Inference tensors have no version counter: their graph is built every call and not kept. What is
    kept is built outside inference mode even when the call is inside it (an evaluation under
    torch.inference_mode() before a training step must not leave inference tensors for autograd)."""

    def __init__(self):
        self.clear()

    def clear(self):
        self.ref = self.version = self.num_nodes = self.value = None

    def get(self, edge_index: Tensor, num_nodes: int, build, who: str, also: str = ""):
        if not isinstance(edge_index, Tensor):
            raise TypeError(f"{who}: edge_index must be a torch.Tensor{also}, got {type(edge_index).__name__}")
        if edge_index.device.type not in ("cpu", "cuda"):
            raise TypeError(f"{who}: edge_index is on {edge_index.device}; pass it on the CPU or a CUDA device")
        if edge_index.layout != torch.strided:
            raise TypeError(f"{who}: edge_index is a {edge_index.layout} tensor; pass a dense one")
        if edge_index.is_inference():
            return build()
        if not (self.ref is edge_index and self.version == edge_index._version and self.num_nodes == num_nodes):
            self.clear()
            with torch.inference_mode(False), torch.no_grad():  # (a tensor, not a graph of ops)
                self.value = build()
            self.ref, self.version, self.num_nodes = edge_index, edge_index._version, num_nodes
        return self.value

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        self.clear()

    def __deepcopy__(self, memo):
        return _GraphCache()


def _edge_index(edge_index, num_nodes: int, who: str, num_src_nodes: Optional[int] = None) -> Tensor:
    """edge_index as an int64 CPU tensor, checked as gnn.Graph checks it (shape (2, E), integer ids in
    [0, num_nodes), sources in [0, num_src_nodes) where given), for the layers that edit it (self-loops)
    before they build their graph."""
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"{who}: edge_index must be a torch.Tensor, got {type(edge_index).__name__}")
    if edge_index.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{who}: edge_index must be int64 or int32, got {edge_index.dtype}")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"{who}: edge_index must have shape (2, E) (row 0 sources, row 1 targets, as in PyG), "
                         f"got {tuple(edge_index.shape)}")
    ei = _plain(edge_index).detach().cpu().long()
    num_src = num_nodes if num_src_nodes is None else num_src_nodes
    bad = ((ei < 0) | (ei >= torch.tensor([[num_src], [num_nodes]]))).any(0).nonzero()
    if bad.numel():
        e = int(bad[0, 0])
        if num_src_nodes is None:
            raise _g.Error(f"{who}: edge_index: edge {e} ({int(ei[0, e])} -> {int(ei[1, e])}) has a node id outside "
                           f"[0, {num_nodes}) (x has {num_nodes} rows)")
        raise _g.Error(f"{who}: edge_index: edge {e} ({int(ei[0, e])} -> {int(ei[1, e])}) has a source outside "
                       f"[0, {num_src}) or a target outside [0, {num_nodes}) (x_src has {num_src} rows, the "
                       f"targets {num_nodes})")
    return ei


def _check_in(x: Tensor, in_channels: Optional[int], who: str, name: str = "x") -> None:
    """x [N, in_channels] (in_channels None: any), float32 on a device gnn runs on."""
    _check_x(x, name)
    if x.dim() != 2 or (in_channels is not None and x.shape[1] != in_channels):
        want = "(N, F)" if in_channels is None else f"(N, in_channels={in_channels})"
        raise ValueError(f"{who}: {name} must have shape {want}, got {tuple(x.shape)}")


def _positive_int(value, who: str, name: str) -> int:
    """value as an int >= 1 (a Python, NumPy or torch integer, not a bool), else a TypeError or ValueError
    naming the argument."""
    try:
        n = operator.index(value)
    except TypeError:
        n = None
    if n is None or isinstance(value, bool):
        raise TypeError(f"{who}: {name} must be an integer, got {type(value).__name__}")
    if n < 1:
        raise ValueError(f"{who}: {name} must be >= 1, got {n}")
    return n


def _in_channels(in_channels, who: str):
    """PyG's in_channels: an int, or a bipartite layer's pair (F_src, F_dst), -1 where the width is taken
    from the input at the first call (PyG's lazy layers). Returns (F_src, F_dst, pair)."""
    pair = isinstance(in_channels, (tuple, list)) and len(in_channels) == 2
    sizes = tuple(in_channels) if pair else (in_channels,)
    if not (isinstance(in_channels, int) or pair) or any(not isinstance(c, int) or isinstance(c, bool) for c in sizes):
        raise TypeError(f"{who}: in_channels must be an int or a pair of ints (F_src, F_dst), got {in_channels!r}")
    if any(c < -1 for c in sizes):
        raise ValueError(f"{who}: in_channels must be >= 0, or -1 (sized at the first call), got {in_channels!r}")
    return sizes[0], sizes[-1], pair


# PyG's lazy in_channels (-1): a weight stays unsized (torch's UninitializedParameter) until the layer's first
# call sizes it from its input and gives it the layer's initialiser, or a state dict's array sizes it.
def _unsized(p) -> bool:
    return isinstance(p, nn.parameter.UninitializedParameter)


def _width(weight) -> Optional[int]:
    """The input width a weight [out, in] takes; None (any) while it is unsized."""
    return None if _unsized(weight) else weight.shape[1]


class _SizedLater:
    """(A mixin of the modules that hold a layer's weight [rows, in], under PyG's name `weight`.) With in -1
    the weight is unsized until `size(x)`; in a state dict an unsized weight is the UninitializedParameter
    itself, as PyG's; loading one leaves the weight unsized (a sized one made unsized again, as PyG's), and
    loading an array into an unsized weight sizes it [rows, the array's width] first, so that torch's own
    load checks the rest and reports a mismatch."""

    rows: int

    def _unsize(self) -> None:
        self.weight = nn.parameter.UninitializedParameter()
        self._unsized_in_inference = torch.is_inference_mode_enabled()  # (the weight asks no questions unsized)
        if isinstance(self, nn.Linear):
            self.in_features = -1  # (as PyG's)

    def size(self, x: Optional[Tensor], init) -> None:
        """An unsized weight sized by x's width (x None: left unsized) and initialised by init(self); made
        outside inference mode, so that a first call under torch.inference_mode() leaves weights that train,
        unless the layer itself was made in inference mode (its weight an inference tensor, which cannot be
        written outside it: sized inside, as PyG's)."""
        if _unsized(self.weight) and x is not None:
            # (a layer pickled unsized by an older gnn.torch has no such attribute: made outside)
            with torch.inference_mode(getattr(self, "_unsized_in_inference", False)), torch.no_grad():
                self.weight.materialize((self.rows, x.shape[1]))
                if isinstance(self, nn.Linear):
                    self.in_features = x.shape[1]
                init(self)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, True)
        for name, p in self._parameters.items():
            if p is not None and not keep_vars and not _unsized(p):
                destination[prefix + name] = p.detach()

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        key = prefix + "weight"
        v = state_dict.get(key)
        if v is not None and (_unsized(v) or _unsized(self.weight)):
            if _unsized(v) or v.dim() != 2 or v.shape[0] != self.rows:
                if _unsized(v):
                    self._unsize()
                else:
                    error_msgs.append(f"size mismatch for {key}: copying a param with shape {tuple(v.shape)}, the "
                                      f"layer's is ({self.rows}, in_channels)")
                state_dict = {k: a for k, a in state_dict.items() if k != key}  # (torch's load skips it)
                super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                              unexpected_keys, error_msgs)
                if key in missing_keys:
                    missing_keys.remove(key)
                return
            self.weight.materialize((self.rows, v.shape[1]))
            if isinstance(self, nn.Linear):
                self.in_features = v.shape[1]
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)


class _Weight(_SizedLater, nn.Module):
    """A layer's weight [rows, cols] as PyG names it (module.weight, no bias); cols -1: unsized."""

    def __init__(self, rows: int, cols: int):
        super().__init__()
        self.rows = rows
        if cols == -1:
            self._unsize()
        else:
            self.weight = nn.Parameter(torch.empty(rows, cols))


class _Linear(_SizedLater, nn.Linear):
    """torch's Linear (its name, values and state dict), or with in_features -1 one whose weight is unsized,
    and its bias 0, until the first call."""

    def __init__(self, in_features: int, out_features: int, bias: bool):
        if in_features != -1:
            super().__init__(in_features, out_features, bias=bias)
        else:
            super().__init__(1, out_features, bias=bias, device="meta")  # (no values drawn, none kept)
            self._unsize()
            if bias:
                self.bias = nn.Parameter(torch.zeros(out_features))
        self.rows = out_features

    def _get_name(self) -> str:
        return "Linear"


def _glorot_weight(m: nn.Module) -> None:
    _glorot(m.weight)


def _linear_init(m: nn.Module) -> None:
    m.reset_parameters()


def _layer_inputs(x, size, who: str, in_src: Optional[int], in_dst: Optional[int]):
    """A layer's x as PyG takes it: a tensor, or a pair (x_src, x_dst) whose x_dst may be None (no
    features of the targets), checked against in_src and in_dst features (None: any width; in_dst
    "x_src": x_src's), 2-D float32 tensors on one of gnn's devices, and PyG's `size` (num_src, num_dst),
    checked against the rows given. Returns (x_src, x_dst, num_src, num_dst, square), square where sources
    and targets are one node set (without x_dst and size, as PyG reads it, the sources)."""
    pair = isinstance(x, (tuple, list))
    if pair and len(x) != 2:
        raise ValueError(f"{who}: x must be a tensor or a pair (x_src, x_dst), got {len(x)} items")
    x_src, x_dst = x if pair else (x, x)
    _check_in(x_src, in_src, who, "x_src" if pair else "x")
    if x_dst is not None:
        _check_in(x_dst, x_src.shape[1] if in_dst == "x_src" else in_dst, who, "x_dst" if pair else "x")
    num_src, num_dst = x_src.shape[0], (x_src if x_dst is None else x_dst).shape[0]
    if size is not None:
        try:
            size = tuple(operator.index(n) for n in size)
        except TypeError:
            raise TypeError(f"{who}: size must be a pair of ints (num_src, num_dst), got {size!r}") from None
        if len(size) != 2 or size[0] != num_src or (x_dst is not None and size[1] != num_dst) or size[1] < 0:
            raise ValueError(f"{who}: size {size} does not match the inputs (x_src has {num_src} rows"
                             + (")" if x_dst is None else f", x_dst {num_dst})"))
        num_dst = size[1]
    return x_src, x_dst, num_src, num_dst, not pair or x_dst is x_src or (size is None and x_dst is None)


def _layer_graph(cache, edge_index, num_src: int, num_dst: int, square: bool, who: str) -> Graph:
    """The graph a layer aggregates over (_layer_inputs' counts): a gnn.Graph given, checked against
    them, or one built from edge_index and kept in the layer's cache."""
    want = (num_dst, num_dst if square else num_src)
    if isinstance(edge_index, Graph):
        _g._graph(edge_index, "edge_index")
        if (edge_index.num_nodes, edge_index.num_src_nodes) != want:
            raise ValueError(f"{who}: the gnn.Graph has {edge_index.num_nodes} targets and {edge_index.num_src_nodes} "
                             f"sources; the inputs have {want[0]} and {want[1]}")
        return edge_index
    src_nodes = None if square else num_src
    return cache.get(edge_index, (num_dst, src_nodes), lambda: graph_of(edge_index, num_dst, src_nodes), who,
                     " or gnn.Graph")


def _kept(cache: dict, key: str, make) -> Tensor:
    """cache[key], made on first use outside inference mode and autograd (kept for later calls, which
    may train)."""
    if key not in cache:
        with torch.inference_mode(False), torch.no_grad():
            cache[key] = make()
    return cache[key]


def _edge_ids(graph: Graph) -> Tensor:
    """The graph's edge ids as int64: for each CSR position, the edge_index column it came from."""
    return torch.from_numpy(graph.eid.astype("int64"))


def _on(cache: dict, key: str, t: Tensor, device) -> Tensor:
    """t on device, copied there once and kept in cache (a graph's derived arrays, reused every step)."""
    if t.device == device:
        return t
    k = (key, str(device))
    if k not in cache:
        with torch.inference_mode(False), torch.no_grad():  # kept for later calls, which may train
            cache[k] = t.to(device)
    return cache[k]


def _check_x(x: Tensor, name: str = "x") -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.device.type not in ("cpu", "cuda"):
        raise TypeError(f"{name} is on {x.device}; gnn's kernels run on CPU and CUDA tensors")
    if x.layout != torch.strided:
        raise TypeError(f"{name} is a {x.layout} tensor; gnn's kernels read dense ones ({name}.to_dense())")
    if x.is_cuda and not _g._gnn.with_cuda:
        raise TypeError(f"{name} is on {x.device}, and this build of gnn has no CUDA (build it where nvcc is on PATH)")
    if x.dtype != torch.float32:
        raise TypeError(f"{name} must be float32, got {x.dtype}")


def _autocast_on(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # (torch before 2.4: no device argument)
        return torch.is_autocast_cpu_enabled() if device_type == "cpu" else torch.is_autocast_enabled()


def _f32(t):
    """t in float32 where autocast made it float16 or bfloat16 (x @ W in a layer under torch.autocast), as
    torch's float32-listed ops take their inputs; anything else as it is, for _check_x to judge."""
    if isinstance(t, Tensor) and t.dtype in (torch.float16, torch.bfloat16) and _autocast_on(t.device.type):
        return t.float()
    return t


def _check_optional(**arrays) -> None:
    """_check_x for each of the optional arguments given (not None), by its name."""
    for name, a in arrays.items():
        if a is not None:
            _check_x(a, name)


# ---- autograd functions ---------------------------------------------------------------------------

def _first_order(op: str):
    """The backward of gnn op `op`, once_differentiable, and refused by name where torch's decorator would
    drop terms unsaid: under create_graph=True (grad mode on in the backward) a gradient that depends on an
    input that requires grad (a gradient penalty differentiates it again) gets no such dependence from these
    kernels, while once_differentiable objects only when the incoming gradient requires grad, and then only
    if the result is differentiated again (its own message, which names no op: a gradient used as a value,
    or one of several not differentiated, goes on). ctx.linear (set by the forward): the gradient does not
    depend on the inputs (or only piecewise, as max's choice), so nothing is dropped there."""
    def wrap(backward):
        inner = once_differentiable(backward)

        @functools.wraps(backward)
        def run(ctx, *grads):
            if torch.is_grad_enabled() and not getattr(ctx, "linear", False) and any(ctx.needs_input_grad):
                raise RuntimeError(f"gnn.torch.{op}: no double backward: under create_graph=True its gradient "
                                   "would depend on the inputs, which gnn's kernels do not differentiate; take "
                                   "torch's or PyG's op where a gradient is differentiated again")
            return inner(ctx, *grads)
        return run
    return wrap


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, graph, x, edge_weight, reduce):
        out, argmax = _g.spmm(graph, x.contiguous(), reduce, None if edge_weight is None else edge_weight.contiguous(),
                              return_argmax=True)
        ctx.graph, ctx.reduce = graph, reduce
        # (x's gradient A^T g depends on the weights, theirs on x: on neither where the other is fixed)
        ctx.linear = not (ctx.needs_input_grad[1] and ctx.needs_input_grad[2])
        ctx.save_for_backward(x if edge_weight is not None and edge_weight.requires_grad else None, edge_weight,
                              argmax)
        return out

    @staticmethod
    @_first_order("spmm")
    def backward(ctx, grad_out):
        x, edge_weight, argmax = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        gx, gw = _g.spmm_backward(ctx.graph, grad_out.contiguous(), ctx.reduce,
                                  None if edge_weight is None else edge_weight.contiguous(), argmax,
                                  None if x is None else x.contiguous(), need_x_grad=need_x, need_weight_grad=need_w)
        return None, gx, gw, None


def spmm(graph: Graph, x: Tensor, reduce: str = "sum", edge_weight: Optional[Tensor] = None) -> Tensor:
    """Differentiable gnn.spmm (x and edge_weight get gradients; edge_weight in CSR order)."""
    x, edge_weight = _f32(x), _f32(edge_weight)
    _check_x(x)
    _check_optional(edge_weight=edge_weight)
    return _SpMM.apply(graph, x, edge_weight, reduce)


class _SAGE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, graph, x, weight, bias, activation, negative_slope):
        training = x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
        res = _g.sage(graph, x.contiguous(), weight.contiguous(), None if bias is None else bias.contiguous(),
                      activation, negative_slope, training=training)
        if not training:
            return res
        out, z, h = res
        ctx.graph, ctx.activation, ctx.negative_slope, ctx.has_bias = graph, activation, negative_slope, bias is not None
        ctx.save_for_backward(z, h, weight)
        return out

    @staticmethod
    @_first_order("sage")
    def backward(ctx, grad_out):
        z, h, weight = ctx.saved_tensors
        gx, gw, gb = _g.sage_backward(ctx.graph, grad_out.contiguous(), z, h, weight.contiguous(), ctx.activation,
                                      ctx.negative_slope, need_bias_grad=ctx.has_bias)
        return None, gx, gw, gb, None, None


def sage(graph: Graph, x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, activation: str = "none",
         negative_slope: float = 0.01) -> Tensor:
    """Differentiable fused SAGE layer: act([mean_{j->i} x_j | x_i] @ weight + bias), weight [2F, O]."""
    x, weight, bias = _f32(x), _f32(weight), _f32(bias)
    _check_x(x)
    _check_x(weight, "weight")
    _check_optional(bias=bias)
    return _SAGE.apply(graph, x, weight, bias, activation, _g._real(negative_slope, "negative_slope"))


class _GatScores(torch.autograd.Function):
    @staticmethod
    def forward(ctx, graph, a_src, a_dst, negative_slope):
        a_src, a_dst = a_src.contiguous(), a_dst.contiguous()
        ctx.graph, ctx.negative_slope = graph, negative_slope
        ctx.linear = True  # (g times 1 or the slope, by the score's sign)
        ctx.save_for_backward(a_src, a_dst)
        return _g.gat_scores(graph, a_src, a_dst, negative_slope)

    @staticmethod
    @_first_order("gat_scores")
    def backward(ctx, grad_out):
        a_src, a_dst = ctx.saved_tensors
        gs, gd = _g.gat_scores_backward(ctx.graph, grad_out.contiguous(), a_src, a_dst, ctx.negative_slope)
        return None, gs, gd, None


def gat_scores(graph: Graph, a_src: Tensor, a_dst: Tensor, negative_slope: float = 0.2) -> Tensor:
    """Differentiable GAT scores [E, H] in CSR order: leaky_relu(a_src[j] + a_dst[i]) for each edge j -> i."""
    a_src, a_dst = _f32(a_src), _f32(a_dst)
    _check_x(a_src, "a_src")
    _check_x(a_dst, "a_dst")
    return _GatScores.apply(graph, a_src, a_dst, _g._real(negative_slope, "negative_slope"))


def _as_read(index):
    """An index array (ptr, indptr) as the forward read it, for the backward: a copy, so that a change in
    place between the two (which torch's version check does not see on an attribute of ctx) cannot give
    wrong gradients; a Graph, which does not change, as it is."""
    if isinstance(index, Tensor):
        return index.detach().clone(memory_format=torch.contiguous_format)
    if isinstance(index, memoryview):
        return np.array(index)  # (a copy of the memory it views)
    return index if isinstance(index, Graph) or not hasattr(index, "copy") else index.copy()


def _dense(t):
    """A tensor argument made contiguous (differentiably) where the kernels need it; other values as they are."""
    return t.contiguous() if isinstance(t, Tensor) else t


class _SegmentSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, indptr):
        y = _g.segment_softmax(x.contiguous(), indptr)
        ctx.indptr = _as_read(indptr)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    @_first_order("segment_softmax")
    def backward(ctx, grad_out):
        (y,) = ctx.saved_tensors
        return _g.segment_softmax_backward(y, grad_out.contiguous(), ctx.indptr), None


def segment_softmax(x: Tensor, indptr) -> Tensor:
    """Differentiable softmax of x [E, H] over the row segments indptr (int32), or a Graph's rows."""
    x = _f32(x)
    _check_x(x)
    return _SegmentSoftmax.apply(x, _dense(indptr))


class _Pool(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, ptr, reduce):
        x = x.contiguous()
        y, argmax = _g.pool(x, ptr, reduce, return_argmax=True)
        ctx.ptr, ctx.reduce, ctx.rows = _as_read(ptr), reduce, x.shape[0]
        ctx.linear = reduce != "logsumexp"
        ctx.save_for_backward(argmax, x if reduce == "logsumexp" else None, y if reduce == "logsumexp" else None)
        return y

    @staticmethod
    @_first_order("pool")
    def backward(ctx, grad_out):
        argmax, x, y = ctx.saved_tensors
        return _g.pool_backward(grad_out.contiguous(), ctx.ptr, ctx.rows, ctx.reduce, argmax, x, y), None, None


def pool(x: Tensor, ptr: Tensor, reduce: str = "sum") -> Tensor:
    """Differentiable readout per graph: ptr (int64 [G+1]) as PyG's Batch.ptr; sum, mean, max or logsumexp (a
    graph of no rows gives 0 whatever the reduce, as PyG's pools; torch.logsumexp over nothing is -inf)."""
    x = _f32(x)
    _check_x(x)
    return _Pool.apply(x, _dense(ptr), reduce)


class _InstanceNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, ptr, weight, bias, eps):
        x = x.contiguous()
        y, mean, rstd = _g.instance_norm(x, ptr, weight, bias, eps)
        ctx.ptr, ctx.affine = _as_read(ptr), weight is not None
        ctx.save_for_backward(x, mean, rstd, weight)
        return y

    @staticmethod
    @_first_order("instance_norm")
    def backward(ctx, grad_out):
        x, mean, rstd, weight = ctx.saved_tensors
        gx, gw, gb = _g.instance_norm_backward(grad_out.contiguous(), x, ctx.ptr, mean, rstd, weight,
                                               need_affine_grad=ctx.affine)
        return gx, None, gw, gb, None


def instance_norm(x: Tensor, ptr: Tensor, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
                  eps: float = 1e-5) -> Tensor:
    """Differentiable per-graph, per-channel normalisation (PyG's InstanceNorm without running stats)."""
    x, weight, bias = _f32(x), _f32(weight), _f32(bias)
    _check_x(x)
    if (weight is None) != (bias is None):
        raise ValueError("weight and bias: pass both or neither")
    _check_optional(weight=weight, bias=bias)
    return _InstanceNorm.apply(x, _dense(ptr), _dense(weight), _dense(bias), _g._real(eps, "eps"))


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        x = x.contiguous()
        y, mean, rstd = _g.layer_norm(x, weight, bias, eps)
        ctx.affine = weight is not None
        ctx.save_for_backward(x, mean, rstd, weight)
        return y

    @staticmethod
    @_first_order("layer_norm")
    def backward(ctx, grad_out):
        x, mean, rstd, weight = ctx.saved_tensors
        gx, gw, gb = _g.layer_norm_backward(grad_out.contiguous(), x, mean, rstd, weight, need_affine_grad=ctx.affine)
        return gx, gw, gb, None


def layer_norm(x: Tensor, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
               eps: float = 1e-5) -> Tensor:
    """Differentiable row normalisation of x [R, F] (torch.nn.functional.layer_norm over the last dim)."""
    x, weight, bias = _f32(x), _f32(weight), _f32(bias)
    _check_x(x)
    if (weight is None) != (bias is None):
        raise ValueError("weight and bias: pass both or neither")
    _check_optional(weight=weight, bias=bias)
    return _LayerNorm.apply(x, _dense(weight), _dense(bias), _g._real(eps, "eps"))


# ---- layers ---------------------------------------------------------------------------------------

def _glorot(t: Tensor) -> None:
    bound = math.sqrt(6.0 / (t.size(-2) + t.size(-1)))
    with torch.no_grad():
        t.uniform_(-bound, bound)


class SAGEConv(nn.Module):
    """GraphSAGE (PyG's SAGEConv): out_i = lin_l(aggr_{j -> i} x_j) + lin_r(x_i).

    aggr 'mean' with root_weight (one node set, no project) runs gnn's fused layer (one GEMM over
    [mean | x]); otherwise gnn.spmm aggregates and the two linear maps follow. normalize l2-normalises the output;
    project maps the sources through ReLU(lin(x_j)) first, as PyG's.
    Bipartite, as in PyG: in_channels (F_src, F_dst) and x a pair (x_src, x_dst) (x_dst None: no root
    term), the sources aggregated by gnn.spmm over a graph of x_dst's rows as targets; `size` (num_src,
    num_dst) as PyG's, checked against the inputs' rows.
    """

    def __init__(self, in_channels, out_channels: int, aggr: str = "mean", normalize: bool = False,
                 root_weight: bool = True, project: bool = False, bias: bool = True):
        super().__init__()
        in_src, in_dst, _ = _in_channels(in_channels, "SAGEConv")
        if project and in_src == -1:  # (its map is [F_src, F_src]: PyG's cannot size it either)
            raise ValueError("SAGEConv: project needs the sources' in_channels, got -1")
        # (PyG's resolver reads a name in any case, without '-', '_' or spaces: "Mean" and "SUM" too)
        name = aggr.lower().replace("-", "").replace("_", "").replace(" ", "") if isinstance(aggr, str) else aggr
        if name not in ("mean", "sum", "add", "max"):
            raise NotImplementedError(f"SAGEConv: aggr must be mean, sum or max, got {aggr!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.aggr, self.normalize, self.root_weight = "sum" if name == "add" else name, normalize, root_weight
        self.project = project  # (PyG's: the sources through ReLU(lin(x_src)) before they are aggregated)
        self.lin = nn.Linear(in_src, in_src, bias=True) if project else None
        self.lin_l = _Linear(in_src, out_channels, bias)
        self.lin_r = _Linear(in_dst, out_channels, False) if root_weight else None
        self._cache = _GraphCache()

    def reset_parameters(self) -> None:
        for lin in (self.lin, self.lin_l, self.lin_r):
            if lin is not None and not _unsized(lin.weight):
                lin.reset_parameters()

    def forward(self, x, edge_index, size=None) -> Tensor:
        in_dst = _width(self.lin_r.weight) if self.lin_r is not None else None
        x_src, x_dst, num_src, num_dst, square = _layer_inputs(x, size, "SAGEConv", _width(self.lin_l.weight), in_dst)
        graph = _layer_graph(self._cache, edge_index, num_src, num_dst, square, "SAGEConv")
        self.lin_l.size(x_src, _linear_init)
        if self.lin_r is not None:
            self.lin_r.size(x_dst, _linear_init)
        if self.lin is not None:  # (the targets' own term reads x_dst as given)
            x_src = nn.functional.relu(self.lin(x_src))
        elif square and x_dst is not None and self.aggr == "mean" and self.root_weight and not graph.is_bipartite:
            weight = torch.cat([self.lin_l.weight.t(), self.lin_r.weight.t()], 0)
            out = sage(graph, x_src, weight, self.lin_l.bias)
            return nn.functional.normalize(out, p=2.0, dim=-1) if self.normalize else out
        out = self.lin_l(spmm(graph, x_src, self.aggr))
        if self.root_weight and x_dst is not None:
            out = out + self.lin_r(x_dst)
        if self.normalize:
            out = nn.functional.normalize(out, p=2.0, dim=-1)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, aggr={self.aggr})"


def _remaining_self_loops(edge_index: Tensor, num_nodes: int):
    """PyG's add_remaining_self_loops on the edges: existing loops removed, one loop per node appended.
    Returns the new edge_index and, per node, the position of its last existing loop (-1: none), whose
    weight the new loop takes."""
    loops = edge_index[0] == edge_index[1]
    last = torch.full((num_nodes,), -1, dtype=torch.long)
    pos = torch.nonzero(loops).flatten()
    last[edge_index[0][pos]] = pos  # (positions ascend: the last loop of a node wins, as in PyG)
    node = torch.arange(num_nodes, dtype=edge_index.dtype)
    return torch.cat([edge_index[:, ~loops], torch.stack([node, node])], 1), ~loops, last


class GCNConv(nn.Module):
    """Kipf and Welling's GCN (PyG's GCNConv): out = D^-1/2 (A + I) D^-1/2 (x W^T) + bias.

    As PyG 2.8 computes it: with add_self_loops (by default, when normalize), existing self-loops are
    replaced by one loop per node (add_remaining_self_loops) that keeps the weight of the node's last
    loop, or takes 1 (2 with improved) when it had none; without edge weights every loop weighs 1, even
    with improved (PyG fills the loops' weight only when weights are given). Degrees are in-degrees at the
    targets (flow source_to_target). Self-loops without normalize are refused, as in PyG. One departure:
    of a node's repeated self-loops only the one whose weight is used gets a gradient (PyG's index
    assignment hands it to each of them). The graph, and
    without edge_weight its normalised weights, are kept while the same edge_index comes back; cached
    adds nothing to that (PyG's reuses the first call's normalised graph for any later edge_index).
    """

    def __init__(self, in_channels: int, out_channels: int, improved: bool = False, cached: bool = False,
                 add_self_loops: Optional[bool] = None, normalize: bool = True, bias: bool = True):
        super().__init__()
        _, _, pair = _in_channels(in_channels, "GCNConv")
        if pair:
            raise TypeError(f"GCNConv: in_channels must be an int (GCN has no bipartite form), got {in_channels!r}")
        add_self_loops = normalize if add_self_loops is None else add_self_loops
        if add_self_loops and not normalize:
            raise ValueError("GCNConv does not support adding self-loops to the graph when no normalization is "
                             "applied (as PyG)")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.improved, self.cached, self.normalize, self.add_self_loops = improved, cached, normalize, add_self_loops
        self.lin = _Weight(out_channels, in_channels)
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self._cache = _GraphCache()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if not _unsized(self.lin.weight):
            _glorot(self.lin.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def _graph(self, edge_index: Tensor, num_nodes: int):
        """(graph, CSR order as input edge ids, kept-edge mask, last loop per node, weights without
        edge_weight in CSR order)."""
        ei = _edge_index(edge_index, num_nodes, "GCNConv")
        keep = last = None
        if self.add_self_loops:
            ei, keep, last = _remaining_self_loops(ei, num_nodes)
        graph = Graph(ei, num_nodes=num_nodes)
        eid = torch.from_numpy(graph.eid.astype("int64"))
        n = graph.num_nodes
        rows = {"eid": eid, "keep": keep, "last": last,
                "row_of": torch.repeat_interleave(torch.arange(n), torch.from_numpy(graph.indptr.astype("int64")).diff()),
                "src": torch.from_numpy(graph.indices.astype("int64"))}
        return graph, rows, {}, self._norm(graph, rows, {}, torch.ones(ei.shape[1]))

    def _norm(self, graph: Graph, rows: dict, memo: dict, w: Tensor) -> Tensor:
        """The edge weights w (input order, on any device) in CSR order, normalised."""
        on = lambda key: _on(memo, key, rows[key], w.device)  # noqa: E731
        w = w[on("eid")]  # CSR order
        if self.normalize:
            row_of = on("row_of")
            if w.is_cuda:  # index_add sums with atomics there: a fixed-order sum over each row instead
                deg = spmm(graph, torch.ones(graph.num_src_nodes, 1, device=w.device), "sum", w)[:, 0]
            else:
                deg = torch.zeros(graph.num_nodes, dtype=w.dtype, device=w.device).index_add(0, row_of, w)
            dinv = deg.pow(-0.5)
            dinv = torch.where(torch.isinf(dinv), torch.zeros_like(dinv), dinv)
            w = dinv[on("src")] * w * dinv[row_of]
        return w.contiguous()

    def forward(self, x: Tensor, edge_index, edge_weight: Optional[Tensor] = None) -> Tensor:
        _check_in(x, _width(self.lin.weight), "GCNConv")
        if isinstance(edge_index, Graph):
            raise TypeError("GCNConv: pass edge_index (the layer adds self-loops and normalises)")
        N = x.shape[0]
        graph, rows, memo, w = self._cache.get(edge_index, (N, bool(self.add_self_loops), bool(self.normalize)),
                                               lambda: self._graph(edge_index, N), "GCNConv")
        w = _on(memo, "w", w, x.device)
        if edge_weight is not None:
            _check_x(edge_weight, "edge_weight")
            if edge_weight.shape != (edge_index.shape[1],):
                raise ValueError(f"edge_weight must have shape ({edge_index.shape[1]},), got {tuple(edge_weight.shape)}")
            ew = edge_weight
            if self.add_self_loops:
                last = _on(memo, "last", rows["last"], ew.device)
                fill = torch.full((x.shape[0],), 2.0 if self.improved else 1.0, device=ew.device)
                # (no edges: every node's loop is a new one, and there is nothing to index)
                kept = edge_weight[last.clamp(min=0)] if edge_weight.numel() else fill
                loop_w = torch.where(last >= 0, kept, fill)
                ew = torch.cat([edge_weight[_on(memo, "keep", rows["keep"], ew.device)], loop_w])
            w = self._norm(graph, rows, memo, ew)
        self.lin.size(x, _glorot_weight)
        out = spmm(graph, x @ self.lin.weight.t(), "sum", w)
        return out + self.bias if self.bias is not None else out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels})"


class GINConv(nn.Module):
    """The graph isomorphism layer (PyG's GINConv): out = nn((1 + eps) x + sum_{j -> i} x_j). Bipartite
    as PyG's: x a pair (x_src, x_dst) of one width (x_dst None: the sum alone), `size` (num_src, num_dst)."""

    def __init__(self, nn: torch.nn.Module, eps: float = 0.0, train_eps: bool = False):
        super().__init__()
        self.nn = nn
        self.initial_eps = eps
        if train_eps:
            self.eps = torch.nn.Parameter(torch.tensor([float(eps)]))
        else:
            self.register_buffer("eps", torch.tensor([float(eps)]))
        self._cache = _GraphCache()

    def reset_parameters(self) -> None:
        def reset(m):  # (PyG's: a module's own reset_parameters where it has one, else its children's)
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()
            else:
                for child in m.children():
                    reset(child)

        reset(self.nn)
        self.eps.data.fill_(self.initial_eps)

    def forward(self, x, edge_index, size=None) -> Tensor:
        x_src, x_dst, num_src, num_dst, square = _layer_inputs(x, size, "GINConv", None, "x_src")
        graph = _layer_graph(self._cache, edge_index, num_src, num_dst, square, "GINConv")
        out = spmm(graph, x_src, "sum")
        return self.nn(out if x_dst is None else out + (1 + self.eps) * x_dst)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(nn={self.nn})"


class GATConv(nn.Module):
    """Graph attention (PyG's GATConv, Velickovic et al.): per head h,
    alpha_ij = softmax_j(leaky_relu(a_src . W x_j + a_dst . W x_i)), out_i = sum_j alpha_ij W x_j,
    heads concatenated (concat) or averaged, plus bias. Existing self-loops are replaced by one per node
    (add_self_loops), dropout applies to alpha in training. Scores, softmax and aggregation are gnn's
    kernels. Edge features as PyG's: with edge_dim, edge_attr [E, edge_dim] (or [E]) adds
    a_edge . W_e e_ij to each score, and a self-loop's features are fill_value ('mean', 'add', 'max',
    'min' or 'mul' of the node's incoming edges', a number, a tensor, or None for 1). Bipartite, as in
    PyG: in_channels (F_src, F_dst) gives lin_src and lin_dst, and x a pair (x_src, x_dst) (x_dst None:
    scores from the sources alone) aggregates the sources into x_dst's rows; self-loops then join node i
    to i for i below min(num_src, num_dst); `size` (num_src, num_dst) as PyG's. PyG's forward arguments
    in PyG's order, return_attention_weights and `residual` as PyG's (edge_attr without edge_dim is not
    read, as in PyG).
    """

    def __init__(self, in_channels, out_channels: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, dropout: float = 0.0, add_self_loops: bool = True,
                 edge_dim: Optional[int] = None, fill_value="mean", bias: bool = True, residual: bool = False):
        super().__init__()
        in_src, in_dst, pair = _in_channels(in_channels, "GATConv")
        if edge_dim is not None:  # (fill_value is read only with edge features, as in PyG)
            edge_dim = _positive_int(edge_dim, "GATConv", "edge_dim")
            if not (fill_value is None or isinstance(fill_value, (int, float, Tensor)) or isinstance(fill_value, str)
                    and fill_value in ("mean", "add", "sum", "max", "min", "mul", "amax", "amin")):
                raise ValueError(f"GATConv: fill_value must be 'mean', 'add', 'sum', 'max', 'min', 'mul', a number, "
                                 f"a tensor or None, got {fill_value!r}")
        heads = _positive_int(heads, "GATConv", "heads")
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.negative_slope, self.dropout, self.add_self_loops = negative_slope, dropout, add_self_loops
        self.lin = self.lin_src = self.lin_dst = None  # (PyG's names: lin shared, or lin_src and lin_dst)
        for name, fan_in in (("lin_src", in_src), ("lin_dst", in_dst)) if pair else (("lin", in_src),):
            setattr(self, name, _Weight(heads * out_channels, fan_in))
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        self.edge_dim, self.fill_value, self.lin_edge, self.att_edge = edge_dim, fill_value, None, None
        if edge_dim is not None:  # (PyG's names and order: lin_edge, att_edge)
            self.lin_edge = _Weight(heads * out_channels, edge_dim)
            self.att_edge = nn.Parameter(torch.empty(1, heads, out_channels))
        total = heads * out_channels if concat else out_channels
        self.residual, self.res = residual, None  # (PyG's: a bias-free map of the targets' input, added)
        if residual:
            self.res = _Weight(total, in_dst)
        self.bias = nn.Parameter(torch.empty(total)) if bias else None
        self._cache = _GraphCache()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.lin, self.lin_src, self.lin_dst, self.lin_edge, self.res):
            if lin is not None and not _unsized(lin.weight):
                _glorot(lin.weight)
        for att in (self.att_src, self.att_dst, self.att_edge):
            if att is not None:
                _glorot(att)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def _prepare(self, edge_index: Tensor, num_dst: int, num_src: Optional[int]):
        """(graph, rows: its edges in PyG's order and, with self-loops, the input edges they keep, memo of
        device copies)."""
        ei = _edge_index(edge_index, num_dst, "GATConv", num_src)
        rows = {"kept": ei.shape[1], "given": ei.shape[1]}
        if self.add_self_loops:  # (keep as positions: selecting by them on CUDA needs no sync)
            rows["keep"] = (ei[0] != ei[1]).nonzero()[:, 0]
            ei = ei.index_select(1, rows["keep"])
            rows["kept"] = ei.shape[1]
            loop = torch.arange(num_dst if num_src is None else min(num_src, num_dst))
            ei = torch.cat([ei, torch.stack([loop, loop])], 1)
        rows["edge_index"] = ei
        return Graph(ei, num_nodes=num_dst, num_src_nodes=num_src), rows, {}

    def _edge_scores(self, graph: Graph, rows: dict, memo: dict, edge_attr) -> Tensor:
        """a_edge . W_e e per edge and head [E, H], in the graph's CSR order: edge_attr [E_in, edge_dim]
        (or [E_in]) in the caller's edge order, self-loops' rows from fill_value, as PyG's. The loops'
        sums, means and maxima are gnn's SpMM over a graph from each kept edge to its node (fixed order:
        the same bits every run on CUDA too, where torch's scatter adds by atomics); 'mul' runs torch's
        scatter on the CPU (a copy there and back on CUDA). Where a bipartite layer's loops stop short of
        an edge's target (more targets than sources), that edge gives no loop features (PyG fails there).
        Of equal features a 'max' or 'min' loop's gradient goes to the first edge (torch's amax, PyG's
        on the CPU, splits it among them)."""
        _check_x(edge_attr, "edge_attr")
        n_in = rows["given"]  # the caller's edges
        width = None if edge_attr.dim() not in (1, 2) else 1 if edge_attr.dim() == 1 else edge_attr.shape[1]
        if width != self.edge_dim or edge_attr.shape[0] != n_in:
            raise ValueError(f"GATConv: edge_attr must have shape (E, edge_dim={self.edge_dim}) for the edge_index's "
                             f"{n_in} edges, got {tuple(edge_attr.shape)}")
        if edge_attr.device != self.att_edge.device:
            raise TypeError(f"GATConv: edge_attr is on {edge_attr.device}, the layer on {self.att_edge.device}")
        ea = edge_attr
        if "keep" in rows:
            dev, fill = ea.device, self.fill_value
            ea = ea.index_select(0, _on(memo, "keep", rows["keep"], dev))
            n = rows["edge_index"].shape[1] - rows["kept"]
            col = rows["edge_index"][1, :rows["kept"]]  # the kept edges' targets
            if isinstance(fill, str):  # over the node's incoming edges (none: 0, or 1 for 'mul'), PyG's scatter
                e2 = ea.view(-1, self.edge_dim)
                if fill == "mul":
                    inside = col < n
                    src = e2.cpu()[inside]
                    loop = src.new_ones(n, e2.shape[1]).scatter_reduce(0, col[inside][:, None].expand_as(src), src,
                                                                        "prod", include_self=True).to(dev)
                else:
                    def fill_graph():  # kept edge p -> its node, for the n nodes that get a loop
                        inside = (col < n).nonzero()[:, 0]
                        return Graph(torch.stack([inside, col[inside]]), num_nodes=n, num_src_nodes=rows["kept"])
                    g = _kept(rows, "fill_graph", fill_graph)
                    how = {"add": "sum", "sum": "sum", "mean": "mean", "max": "max", "amax": "max"}.get(fill)
                    loop = spmm(g, e2, how) if how else 0.0 - spmm(g, 0.0 - e2, "max")  # min: -max(-x), +0 if none
                loop = loop.view((n,) + tuple(ea.shape[1:]))
            else:  # a number (None: 1) or a tensor, as PyG's compute_loop_attr
                loop = torch.as_tensor(1.0 if fill is None else fill, dtype=ea.dtype, device=dev)
                if isinstance(fill, Tensor) and loop.dim() != ea.dim():
                    loop = loop.unsqueeze(0)
                loop = loop.expand((n,) + tuple(ea.shape[1:]))
            ea = torch.cat([ea, loop], 0)
        ea = ea.view(-1, 1) if ea.dim() == 1 else ea
        H, C = self.heads, self.out_channels
        a_edge = ((ea @ self.lin_edge.weight.t()).view(-1, H, C) * self.att_edge).sum(-1)
        return a_edge.index_select(0, _on(memo, "csr", _kept(rows, "csr", lambda: _edge_ids(graph)), a_edge.device))

    def forward(self, x, edge_index, edge_attr=None, size=None, return_attention_weights=None):
        """PyG's GATConv.forward. With return_attention_weights, also (edge_index, alpha) as PyG gives
        them: the edges after the self-loops are replaced, alpha [E, heads] (after dropout) in their
        order."""
        # (a bipartite layer given one tensor maps it by lin_src as sources and lin_dst as targets, as PyG)
        lin_src, lin_dst = (self.lin, self.lin) if self.lin is not None else (self.lin_src, self.lin_dst)
        # (one unsized map for both: the targets as wide as the sources)
        in_dst = "x_src" if lin_dst is lin_src and _unsized(lin_src.weight) else _width(lin_dst.weight)
        x_src, x_dst, num_src, num_dst, square = _layer_inputs(x, size, "GATConv", _width(lin_src.weight), in_dst)
        if isinstance(edge_index, Graph):
            raise TypeError("GATConv: pass edge_index (the layer replaces self-loops by one per node)")
        src_nodes = None if square else num_src
        graph, rows, memo = self._cache.get(edge_index, (num_dst, src_nodes, bool(self.add_self_loops)),
                                            lambda: self._prepare(edge_index, num_dst, src_nodes), "GATConv")
        H, C = self.heads, self.out_channels
        if self.res is not None:  # (PyG's order of first draws: the residual map's, then the others')
            self.res.size(x_dst, _glorot_weight)
        lin_src.size(x_src, _glorot_weight)
        lin_dst.size(x_dst, _glorot_weight)
        xw = x_src @ lin_src.weight.t()  # [num_src, H*C]
        a_src = (xw.view(-1, H, C) * self.att_src).sum(-1)
        if x_dst is None:  # (PyG: the sources' scores alone)
            a_dst = xw.new_zeros(num_dst, H)
        else:
            xd = xw if x_dst is x_src and lin_dst is lin_src else x_dst @ lin_dst.weight.t()
            a_dst = (xd.view(-1, H, C) * self.att_dst).sum(-1)
        # over the graph's own rows: already checked, so a CUDA step copies nothing to the host
        if edge_attr is not None and self.lin_edge is not None:  # (a_src + a_dst from the kernel, slope 1)
            scores = gat_scores(graph, a_src, a_dst, 1.0) + self._edge_scores(graph, rows, memo, edge_attr)
            scores = nn.functional.leaky_relu(scores, self.negative_slope)
        else:
            scores = gat_scores(graph, a_src, a_dst, self.negative_slope)
        alpha = segment_softmax(scores, graph)
        alpha = nn.functional.dropout(alpha, p=self.dropout, training=self.training)
        out = spmm(graph, xw, "sum", alpha)
        out = out if self.concat else out.view(num_dst, H, C).mean(1)
        if self.res is not None and x_dst is not None:
            out = out + x_dst @ self.res.weight.t()
        if self.bias is not None:
            out = out + self.bias
        if not return_attention_weights:
            return out
        def order():  # each edge's place in the graph's CSR order (the edge ids' inverse)
            eid = _edge_ids(graph)
            return torch.empty_like(eid).scatter_(0, eid, torch.arange(eid.numel()))
        alpha = alpha.index_select(0, _on(memo, "order", _kept(rows, "order", order), alpha.device))
        if not self.add_self_loops:
            return out, (edge_index, alpha)
        return out, (_on(memo, "edge_index", rows["edge_index"], x_src.device).clone(), alpha)  # (not the kept one)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"
