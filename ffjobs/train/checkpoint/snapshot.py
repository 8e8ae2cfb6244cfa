"""The asynchronous checkpoint's host snapshot: one shared-memory buffer another process can read.

Every tensor of a training state is copied into one flat buffer of host memory, allocated at
the first save and reused while the state keeps its shapes and dtypes. The buffer lives in
shared memory (``share_memory_()``), so the writer process maps it instead of receiving a
copy, and where CUDA is in use it is page-locked (``cudaHostRegister``) so device tensors are
copied at the link's speed with one synchronisation at the end. One buffer, not one per
tensor: a state of a few thousand tensors would otherwise hold a file descriptor each.

:func:`encode` pickles a snapshot with its tensors replaced by their place in the buffer;
:func:`decode` rebuilds it on the other side from the same buffer.
"""

from __future__ import annotations

import io
import os
import pickle
import weakref
from typing import Any

import torch

from ffjobs.train.tensors import map_tensors

ALIGN = 64  # bytes: every dtype's view starts on a boundary of its element size
SHARED_MEMORY = "/dev/shm"  # where Linux keeps POSIX shared memory (shm_open)


class SharedMemoryTooSmall(RuntimeError):
    """The host snapshot does not fit in the free shared memory."""


def shared_memory_free() -> int | None:
    """Bytes free in ``/dev/shm``, or ``None`` where there is no such mount."""
    try:
        stats = os.statvfs(SHARED_MEMORY)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


class HostSnapshot:
    """Copies of a state's tensors in one shared (and, with CUDA, page-locked) host buffer.

    The buffer is reused from one save to the next, so a snapshot must be written before the
    next one is taken (the checkpointer waits for the write in flight first). Training goes on
    updating its tensors in place after :meth:`take` returns. Tensors are copied contiguous.
    """

    def __init__(self) -> None:
        self.buffer: torch.Tensor | None = None
        self._layout: list[tuple[torch.Size, torch.dtype]] = []
        self._views: list[torch.Tensor] = []
        self._offsets: dict[int, int] = {}  # id(view) -> its byte offset in the buffer
        self._unregister: weakref.finalize | None = None

    def take(self, obj: Any) -> Any:
        """A copy of ``obj`` whose tensors are views of the shared buffer, containers rebuilt.

        Raises :class:`SharedMemoryTooSmall` (before touching the buffer) when a new buffer
        would not fit in ``/dev/shm``: a mapping past its end kills the process with SIGBUS.
        """
        tensors: list[torch.Tensor] = []
        map_tensors(obj, tensors.append)
        layout = [(t.shape, t.dtype) for t in tensors]
        if layout != self._layout:
            self._allocate(layout)
        views = iter(self._views)
        device_copies = False

        def copy(tensor: torch.Tensor) -> torch.Tensor:
            nonlocal device_copies
            view = next(views)
            on_device = tensor.device.type == "cuda"
            device_copies |= on_device
            return view.copy_(tensor.detach(), non_blocking=on_device and self.pinned)

        copied = map_tensors(obj, copy)
        if device_copies:
            torch.cuda.synchronize()
        return copied

    def offset(self, view: torch.Tensor) -> int | None:
        """Byte offset of ``view`` in the buffer if it is one of this snapshot's views."""
        return self._offsets.get(id(view))

    def _allocate(self, layout: list[tuple[torch.Size, torch.dtype]]) -> None:
        offsets, total = [], 0
        for shape, dtype in layout:
            offsets.append(total)
            nbytes = shape.numel() * dtype.itemsize
            total += -(-nbytes // ALIGN) * ALIGN
        self.release()
        free = shared_memory_free()
        if free is not None and total > free:
            raise SharedMemoryTooSmall(
                f"the checkpoint's host snapshot needs {total / 2**20:.0f} MiB of shared memory "
                f"and {SHARED_MEMORY} has {free / 2**20:.0f} MiB free"
            )
        buffer = torch.empty(max(total, ALIGN), dtype=torch.uint8).share_memory_()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            cudart = torch.cuda.cudart()
            torch.cuda.check_error(cudart.cudaHostRegister(buffer.data_ptr(), buffer.numel(), 0))
            # unpinned when the snapshot goes: a range freed while still registered cannot be
            # registered again once the allocator hands the same addresses out
            self._unregister = weakref.finalize(self, _unregister, buffer.data_ptr())
        self.buffer, self._layout = buffer, layout
        self._views = [
            buffer[offset:].view(dtype)[: shape.numel()].view(shape)
            for offset, (shape, dtype) in zip(offsets, layout, strict=True)
        ]
        self._offsets = {id(v): o for v, o in zip(self._views, offsets, strict=True)}

    @property
    def pinned(self) -> bool:
        return self._unregister is not None and self._unregister.alive

    def release(self) -> None:
        """Unpin and drop the buffer (the next :meth:`take` allocates a new one)."""
        if self._unregister is not None:
            self._unregister()
            self._unregister = None
        self.buffer, self._layout, self._views, self._offsets = None, [], [], {}


def _unregister(pointer: int) -> None:
    torch.cuda.check_error(torch.cuda.cudart().cudaHostUnregister(pointer))


# --------------------------------------------------------------------------- crossing processes


def encode(snapshot: HostSnapshot, obj: Any) -> bytes:
    """Pickle ``obj`` (taken by ``snapshot``) with its tensors named by place in the buffer."""

    class _Pickler(pickle.Pickler):
        def persistent_id(self, value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                offset = snapshot.offset(value)
                if offset is None:
                    raise ValueError("encode() takes only tensors of the snapshot's buffer")
                return (offset, str(value.dtype).removeprefix("torch."), tuple(value.shape))
            return None

    out = io.BytesIO()
    _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return out.getvalue()


def decode(data: bytes, buffer: torch.Tensor) -> Any:
    """Inverse of :func:`encode` against the same (mapped) buffer: tensors alias the buffer."""

    storage = buffer.untyped_storage()

    class _Unpickler(pickle.Unpickler):
        def persistent_load(self, pid: Any) -> torch.Tensor:
            offset, dtype_name, shape = pid
            dtype = getattr(torch, dtype_name)
            nbytes = torch.Size(shape).numel() * dtype.itemsize
            if nbytes == 0:  # an empty storage would share its address with the next tensor's
                return torch.empty(shape, dtype=dtype)
            # a storage of its own bytes, no copy: torch.save writes each tensor alone, not the
            # whole buffer, so the file is the same as from a synchronous save
            return torch.empty(0, dtype=dtype).set_(storage[offset : offset + nbytes], 0, shape)

    return _Unpickler(io.BytesIO(data)).load()
