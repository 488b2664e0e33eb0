"""Peak memory of one training step, measured honestly on CPU and on CUDA.

CUDA: ``torch.cuda.max_memory_allocated`` above the pre-step level (tensor bytes; allocator caching
excluded).

CPU: torch has no allocation statistics for CPU tensors (and ``tracemalloc`` does not see them), so
the step is measured at the process level, which is what a user runs out of: the heap is trimmed
(``malloc_trim``) so freed memory is returned to the OS, the kernel's peak-RSS counter is reset
(``echo 5 > /proc/self/clear_refs``, Linux ≥ 4.0), the step runs, and the peak is ``VmHWM`` minus
the resident size just before the step. This counts activations, gradients, optimizer state and
allocator overhead, i.e. everything the step adds on top of the resident model and data. Where the
peak counter cannot be reset, ``ru_maxrss`` minus the pre-step RSS is used instead; it can only
overestimate (an earlier, higher peak of the same process would show through), and the method name
says so.

The process-level number includes what the C allocator keeps after ``free`` inside the step (heap
fragmentation) and library workspaces, so it understates what activation checkpointing saves. The
tensor-level peak (:class:`TensorPeak`: the largest total size of the tensor storages created in the
step and still alive, the CPU analogue of CUDA's ``max_memory_allocated``) is therefore recorded
alongside it. Measured here (PubMed size, 30 layers): glibc's default allocator kept the process peak
of a checkpointed step at 484 MiB for 163 MiB of tensors; with ``MALLOC_MMAP_THRESHOLD_=1048576`` in
the environment (large blocks always mmap'ed, so freed at once) it was 231 MiB.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import resource
import sys
import weakref
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kb(field: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


_LIBC = _libc()


def _trim_heap() -> None:
    gc.collect()
    if _LIBC is not None and hasattr(_LIBC, "malloc_trim"):
        _LIBC.malloc_trim(0)


def _reset_peak_rss() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def memory_method(device: torch.device) -> str:
    """Name of the method :func:`measure_peak_mb` uses on ``device`` (recorded with the results)."""
    if device.type == "cuda":
        return "cuda max_memory_allocated delta"
    if sys.platform.startswith("linux") and _STATUS.exists() and _reset_peak_rss():
        return "VmHWM delta after clear_refs reset + malloc_trim"
    return "ru_maxrss delta (upper bound)"


def measure_peak_mb(step: Callable[[], object], device: torch.device) -> float:
    """Run ``step()`` once and return the memory it added at its peak, in MiB (see module docstring)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        step()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - base) / 2**20
    _trim_heap()
    base_kb = _status_kb("VmRSS")
    if base_kb is not None and _reset_peak_rss():
        step()
        peak_kb = _status_kb("VmHWM")
        if peak_kb is not None:
            return max(peak_kb - base_kb, 0) / 1024
    # Fallback: ru_maxrss (KiB on Linux, bytes on macOS), against the pre-step RSS when known.
    unit = 1 if sys.platform == "darwin" else 1024
    base = base_kb * 1024 if base_kb is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit
    step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit
    return max(peak - base, 0) / 2**20


class TensorPeak(TorchDispatchMode):
    """Peak bytes of tensor storages allocated while the mode is active and still alive.

    Every op's outputs are registered once per storage (views share it); a weak finalizer on the
    storage (torch keeps one Python object per live storage) subtracts it when freed. Works on any
    device; memory that is not a tensor (allocator slack, library workspaces) is not counted.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            if t.layout != torch.strided:  # sparse outputs: count their freshly made values
                if t.layout in (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc):
                    t = t.values()
                else:
                    continue
            self._register(t)
        return out

    def _register(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if not key or key in self._sizes:
            return
        self._sizes[key] = storage.nbytes()
        self.live += storage.nbytes()
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.live -= self._sizes.pop(key, 0)


def measure_step_memory(step: Callable[[], object], device: torch.device) -> tuple[float, float]:
    """``(process peak MiB, tensor peak MiB)`` of one ``step()`` (see the module docstring)."""
    tracker = TensorPeak()

    def tracked() -> None:
        with tracker:
            step()

    process = measure_peak_mb(tracked, device)
    return process, tracker.peak / 2**20
