"""Input arrays as Canopy reads them (shared by the trees in __init__.py and forest.py): C-ordered
float32 rows on the host (numpy) or the device (cupy, torch, anything with
__cuda_array_interface__ or a CUDA DLPack capsule), and results in the input's kind of array."""
import sys
import threading

import numpy as np

_F32 = np.dtype(np.float32)


def _on_device(x):
    if hasattr(x, "__cuda_array_interface__"):
        return True
    if hasattr(x, "__dlpack_device__") and not isinstance(x, np.ndarray):
        return x.__dlpack_device__()[0] in (2, 13)  # kDLCUDA, kDLCUDAManaged
    return False


_cupy_module = None
_cupy_ndarray = None  # cupy.ndarray once cupy is imported: the serving loop's type test


def _cupy():
    global _cupy_module, _cupy_ndarray
    if _cupy_module is None:  # (an import statement per call costs a serving loop's call ~0.5 us)
        try:
            import cupy
        except ImportError as e:  # a CUDA array without cupy: say what is needed
            raise ValueError("CUDA arrays need cupy to hold Canopy's results on the device "
                             "(pass a numpy array instead)") from e
        _cupy_module, _cupy_ndarray = cupy, cupy.ndarray
    return _cupy_module


def _as_cupy(x):
    """A CUDA array as a cupy array over the same memory (no copy)."""
    cp = _cupy()
    return cp.asarray(x) if hasattr(x, "__cuda_array_interface__") else cp.from_dlpack(x)


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def _like(x, a):
    """A host result as the device array kind of the input x: cupy, or a torch tensor on the same
    device for torch inputs; a is returned unchanged when x is not a CUDA array or a is no array."""
    if not isinstance(a, np.ndarray) or not _on_device(x):
        return a
    d = _cupy().asarray(a)
    if _is_torch(x):
        import torch
        return torch.from_dlpack(d)
    return d


class _Input:
    """One input array as Canopy reads it: C-ordered float32 rows, on the host or the device.
    numeric=False takes float32 and float64 only; numeric=True (forests) also bool and integer
    arrays, converted to float32 like the others."""

    def __init__(self, x, name, width=None, rows_ok_1d=False, numeric=False):
        if self._ready(x, width):  # a serving loop's rows: nothing to convert or check
            return
        self.device = _on_device(x)
        self.torch = _is_torch(x)
        xp = _cupy() if self.device else np
        a = _as_cupy(x) if self.device else np.asarray(x)
        if numeric and a.dtype.kind == "O":  # lists with None, say: numbers or a clear error
            try:
                a = a.astype(np.float64)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{name}: values that are not numbers ({e})") from None
        if numeric:
            if a.dtype.kind not in "biuf":
                raise ValueError(f"{name}: dtype {a.dtype} is not a number type (bool, int, float)")
        elif a.dtype not in (xp.float32, xp.float64):
            raise ValueError(f"{name}: dtype {a.dtype} is not float32 or float64")
        self.single = rows_ok_1d and a.ndim == 1
        if self.single:
            a = a.reshape(1, -1)
        if a.ndim != 2:
            raise ValueError(f"{name}: shape {a.shape} is not (n, dims)")
        if width is not None and a.shape[1] != width:
            raise ValueError(f"{name}: {a.shape[1]} columns, the tree has {width}")
        self.array = xp.ascontiguousarray(a, dtype=xp.float32)  # no copy when already so
        self.xp = xp
        self.n, self.dims = self.array.shape
        self.ptr = self.array.data.ptr if self.device else self.array  # (see empty)

    def _ready(self, x, width):
        """Rows already as Canopy reads them (a numpy or cupy float32 C-ordered 2-d array)."""
        t = type(x)
        if t is np.ndarray:
            self.xp, self.device = np, False
        elif t is _cupy_ndarray or (t.__name__ == "ndarray" and t.__module__.startswith("cupy")):
            self.xp, self.device = _cupy(), True
        else:
            return False
        if (x.dtype is not _F32 and x.dtype != _F32) or x.ndim != 2 or not x.flags.c_contiguous or (
                width is not None and x.shape[1] != width):
            return False
        self.torch = self.single = False
        self.array = x
        self.n, self.dims = x.shape
        self.ptr = x.data.ptr if self.device else x
        return True

    def empty(self, shape, dtype, slots=None):
        """A result array and its address for the C++ side: the numpy array itself (the binding
        reads its data pointer), or a device array's pointer. slots: an _OutputSlots to take a
        small device result from."""
        out = slots.empty(self.xp, shape, dtype) if slots is not None else self.xp.empty(shape, dtype=dtype)
        return out, (out.data.ptr if self.device else out)

    def result(self, a):
        """A result in the input's kind of array: torch in, torch out (no copy, DLPack)."""
        if not self.torch:
            return a
        import torch
        return torch.from_dlpack(a) if self.device else torch.from_numpy(np.ascontiguousarray(a))


def _count_in_loop(items):
    for a in items:
        return sys.getrefcount(a)


# What sys.getrefcount says of a list's element that nothing else refers to, read in the loop that
# _OutputSlots uses (measured, not assumed: interpreters count borrowed references differently).
_ALONE = _count_in_loop([object()]) if hasattr(sys, "getrefcount") else None


class _OutputSlots:
    """Small device results of a serving loop, reused: a cupy allocation costs a call ~4 us (a
    tenth of a 10,000-row forest call on the H100). A result is handed out again only once nothing
    but these slots refers to it (the caller dropped it and every view of it: a view, a DLPack or
    __cuda_array_interface__ consumer holds a reference), so no result the caller can still see is
    ever overwritten: the same rule as cupy's own memory pool, whose freed blocks the next
    allocation takes. Two slots: a loop keeps its last result while making the next. Results above
    LARGEST bytes are allocated each time (the allocation is nothing beside their call) and not
    kept, so a forest holds at most 2 x LARGEST bytes here."""

    LARGEST = 4 << 20

    def __init__(self):
        self._slots = []
        self._lock = threading.Lock()  # (two threads must not take the same free slot)

    def empty(self, xp, shape, dtype):
        if xp is np or _ALONE is None:  # (numpy rows: nothing more on their path)
            return xp.empty(shape, dtype=dtype)
        size = np.dtype(dtype).itemsize
        for d in shape:
            size *= d
        if size > self.LARGEST:
            return xp.empty(shape, dtype=dtype)
        with self._lock:
            for a in self._slots:
                if sys.getrefcount(a) == _ALONE and a.shape == shape and a.dtype == dtype:
                    return a
            a = xp.empty(shape, dtype=dtype)
            self._slots = [a] + self._slots[:1]
            return a
