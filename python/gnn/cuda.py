"""CUDA arrays and streams for gnn's kernels, where no framework provides them.

gnn's functions take CUDA arrays from any library that speaks DLPack and run their kernels on the
caller's stream, as the library's own ops do: torch's current stream for torch tensors
(``torch.cuda.current_stream()``), CuPy's current stream for CuPy arrays, and for any other producer
the stream of the innermost ``with gnn.cuda.Stream():`` block, else the legacy default stream (0). The
results come back as arrays of the input's own library; for a producer gnn does not know they are
``gnn.cuda.Array`` objects, which any library imports with its ``from_dlpack``.

This module's own arrays and streams (``to_device``, ``empty``, ``Stream``) serve callers without torch
or CuPy on the GPU, and gnn's tests. A call that takes pointer arrays (``indptr``, ``ptr``) on a device
copies them to the host once to check them, so it waits for the caller's stream there.
"""

from __future__ import annotations

import threading
from typing import Optional, Sequence

from . import _gnn

__all__ = ["is_available", "device_count", "status", "Array", "Stream", "current_stream", "empty", "to_device",
           "to_numpy"]

_DLPACK_CUDA = 2


def _count(value, name: str) -> int:
    """The package's size check (gnn._count), which int() is not: int(1.5) is 1, int(-2) a size."""
    from . import _count as count  # (the package has loaded by the time a call needs it)

    return count(value, name)


def _device(device) -> int:
    """A CUDA device index (an index past the extension's int would fail in nanobind's words)."""
    d = _count(device, "device")
    if d >= 2**31:
        raise ValueError(f"device must be a CUDA device index below 2**31, got {d}")
    return d


def is_available() -> bool:
    """Whether this build of gnn has CUDA and a device is usable."""
    return bool(_gnn.with_cuda) and _gnn.cuda_available()


def device_count() -> int:
    return _gnn.cuda_device_count() if _gnn.with_cuda else 0


def status() -> str:
    """One line: the CUDA devices, or why CUDA cannot be used."""
    return _gnn.cuda_status()


class Array:
    """A C-contiguous array in CUDA device memory that gnn allocated, exchanged through DLPack.

    ``shape``, ``dtype`` ('float32', 'int32', 'int64') and ``device`` describe it; ``data_ptr()`` is its
    address; ``torch.from_dlpack(a)`` or ``cupy.from_dlpack(a)`` views it without a copy. Its memory is
    freed when the last reference goes, after the device has finished all its work.
    """

    __slots__ = ("_nd", "shape", "dtype", "device", "_stream", "__weakref__")

    def __init__(self, nd, shape: Sequence[int], dtype: str, device: int, stream: int = 0):
        self._nd, self.shape, self.dtype, self.device = nd, tuple(int(d) for d in shape), dtype, int(device)
        self._stream = int(stream)  # the stream gnn writes it on (0: written before it is handed out)

    def __dlpack__(self, stream=None, **kwargs):
        # The consumer reads on a stream of its own: let the work gnn queued on this array's stream finish.
        if self._stream and stream != self._stream:
            _gnn._stream_synchronize(self._stream, self.device)
        return self._nd.__dlpack__()

    def __dlpack_device__(self):
        return (_DLPACK_CUDA, self.device)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def data_ptr(self) -> int:
        return _gnn._data_ptr(self._nd)

    def numpy(self):
        """A host copy (waits for the current stream's work)."""
        return to_numpy(self)

    def __repr__(self) -> str:
        return f"gnn.cuda.Array(shape={self.shape}, dtype={self.dtype}, device=cuda:{self.device})"


_local = threading.local()


def current_stream(device: int = 0) -> int:
    """The stream handle gnn runs on for arrays of no known framework on ``device``: the innermost
    ``with Stream()`` block's for that device, else 0 (the legacy default stream)."""
    device = _device(device)
    for dev, handle in reversed(getattr(_local, "streams", ())):
        if dev == device:
            return handle
    return 0


class Stream:
    """A CUDA stream of gnn's (non-blocking), and a context in which gnn's calls on arrays of no known
    framework run on it. ``handle`` is the cudaStream_t as an integer."""

    def __init__(self, device: int = 0):
        self.device = _device(device)
        self.handle = _gnn._stream_create(self.device)

    def synchronize(self) -> None:
        """Waits until the work queued on the stream is done."""
        _gnn._stream_synchronize(self.handle, self.device)

    def close(self) -> None:
        if self.handle:
            _gnn._stream_destroy(self.handle, self.device)
            self.handle = 0

    def __enter__(self) -> "Stream":
        if not hasattr(_local, "streams"):
            _local.streams = []
        _local.streams.append((self.device, self.handle))
        return self

    def __exit__(self, *exc) -> None:
        _local.streams.pop()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def empty(shape: Sequence[int], dtype: str = "float32", device: int = 0) -> Array:
    """An uninitialised device array, to be written on the device's current stream (``current_stream``):
    handed to another library through DLPack, it waits for that stream first."""
    shape, device = tuple(_count(d, "shape") for d in shape), _device(device)
    return Array(_gnn._device_empty(list(shape), dtype, device), shape, dtype, device, current_stream(device))


def to_device(array, device: int = 0) -> Array:
    """A device copy of a host (NumPy) array of float32, int32 or int64; complete when this returns."""
    import numpy as np

    a, device = np.ascontiguousarray(array), _device(device)
    return Array(_gnn._device_from_host(a, device), a.shape, str(a.dtype), device)


def to_numpy(array, stream: Optional[int] = None):
    """A NumPy copy of a device array, taken behind the work queued on ``stream`` (default: the current
    one, as for gnn's calls) and waited for."""
    if not isinstance(array, Array) and not hasattr(array, "__dlpack_device__"):
        raise TypeError(f"array must be a device array (gnn.cuda.Array, a CUDA torch tensor, CuPy), got "
                        f"{type(array).__name__}")
    nd = array._nd if isinstance(array, Array) else array
    device = array.device if isinstance(array, Array) else int(array.__dlpack_device__()[1])
    return _gnn._device_to_host(nd, current_stream(device) if stream is None else int(stream))
