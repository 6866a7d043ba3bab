"""Output allocation and stream choice for the array types tileattn knows by name.

Inputs are never copied; outputs the caller does not pass are allocated by the inputs' own
framework: torch tensors for torch inputs (PyTorch's allocator), CuPy arrays for CuPy inputs,
numpy arrays for numpy and other CPU inputs. torch and cupy are looked up in ``sys.modules``
only, so importing tileattn never imports them.
"""

import sys

import numpy as np

from ._options import fail

_DLPACK_CPU, _DLPACK_CUDA, _DLPACK_CUDA_HOST = 1, 2, 3


def _torch_tensor(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _cupy_array(x):
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(x, cupy.ndarray)


def dlpack_device(x):
    """(device type, index) of an array: DLPack's codes (1 CPU, 2 CUDA), (1, 0) when unknown."""
    get = getattr(x, "__dlpack_device__", None)
    if get is None:
        return (_DLPACK_CPU, 0)
    kind, index = get()
    return (int(kind), int(index))


def detach(x):
    """torch tensors that require grad cannot be exported through DLPack: use their data."""
    if _torch_tensor(x) and x.requires_grad:
        return x.detach()
    return x


def exported(x):
    """torch tensors go to the extension as DLPack capsules (``torch.utils.dlpack.to_dlpack``,
    a C function): nanobind then skips ``Tensor.__dlpack__``'s Python-level stream and version
    handling, about 3 us a tensor. The calls run on the tensors' current stream anyway."""
    if _torch_tensor(x):
        return sys.modules["torch"].utils.dlpack.to_dlpack(x)
    return x


class Allocator:
    """Makes outputs like a reference input ``like`` (shape given, dtype like's or float32)."""

    def __init__(self, like, argument: str):
        self.like = like
        self.argument = argument

    def empty(self, shape, float32: bool = False, name: str = "out"):
        like = self.like
        if _torch_tensor(like):
            import torch
            dtype = torch.float32 if float32 else like.dtype
            return torch.empty(shape, dtype=dtype, device=like.device)
        if isinstance(like, np.ndarray):
            return np.empty(shape, dtype=np.float32 if float32 else like.dtype)
        if _cupy_array(like):
            import cupy
            with cupy.cuda.Device(like.device.id):
                return cupy.empty(shape, dtype=cupy.float32 if float32 else like.dtype)
        kind, _ = dlpack_device(like)
        if kind in (_DLPACK_CPU, _DLPACK_CUDA_HOST):
            if float32:
                return np.empty(shape, dtype=np.float32)
            try:
                dtype = np.dtype(like.dtype)
            except TypeError:
                dtype = None
            if dtype is not None and dtype.kind == "f":
                return np.empty(shape, dtype=dtype)
        fail(name, f"pass it: tileattn allocates outputs for numpy, torch and cupy arrays and "
                   f"numpy-typed CPU arrays, not for {type(like).__module__}."
                   f"{type(like).__qualname__} ({self.argument}'s type)")


    def full_i32(self, shape, value: int, name: str):
        """An int32 array of ``value`` on like's device (an int argument the library takes as an
        int32 array, e.g. ``cache_seqlens=5``)."""
        like = self.like
        if _torch_tensor(like):
            import torch
            return torch.full(shape, value, dtype=torch.int32, device=like.device)
        if _cupy_array(like):
            import cupy
            with cupy.cuda.Device(like.device.id):
                return cupy.full(shape, value, dtype=cupy.int32)
        if dlpack_device(like)[0] in (_DLPACK_CPU, _DLPACK_CUDA_HOST):
            return np.full(shape, value, dtype=np.int32)
        fail(name, f"pass an int32 array: tileattn makes one from an int for numpy, torch and "
                   f"cupy arrays and CPU arrays, not for {type(like).__module__}."
                   f"{type(like).__qualname__} ({self.argument}'s type)")


def workspace_allocator(x):
    """For torch CUDA tensors, the CUDA backward's workspace from PyTorch's caching allocator
    (None: the library's own stream-ordered pool)."""
    if _torch_tensor(x) and x.is_cuda:
        import torch
        device = x.device
        return lambda nbytes: torch.empty(((nbytes + 3) // 4,), dtype=torch.float32,
                                          device=device)
    return None


def default_stream(x) -> int:
    """The stream a CUDA call runs on when none is given: the framework's current stream."""
    if dlpack_device(x)[0] != _DLPACK_CUDA:
        return 0
    if _torch_tensor(x):
        import torch
        return torch.cuda.current_stream(x.device).cuda_stream
    if _cupy_array(x):
        import cupy
        with cupy.cuda.Device(x.device.id):
            return cupy.cuda.get_current_stream().ptr
    return 0  # the legacy default stream
