"""glibc ``malloc`` settings for a training process (``train.malloc_tuning``, on by default).

A training step allocates its activations and gradients afresh and frees them at its end. With glibc's
defaults the allocator hands large freed blocks back to the kernel (``munmap``, or trimming the top of the
heap), so the next step faults the same memory in again, page by page, zero-filled. Three settings keep it:

* ``M_MMAP_THRESHOLD`` = 32 MiB: blocks below it come from the heap, not from their own ``mmap``. 32 MiB is
  the ceiling glibc's own adaptive threshold stops at, so very large tensors still go back to the kernel.
* ``M_TRIM_THRESHOLD`` = 2 GiB − 1: free memory at the top of the heap is kept up to this size.
* ``M_TOP_PAD`` = 256 MiB: each heap extension asks for this much extra address space (only the pages a
  step touches become resident).

Measured (``docs/performance.md``, "The allocator"): Fig. 5 GAT training batches at tree depth 4 (1024
trees, 31,744 nodes) ran ~1.2x faster, with ~40 % fewer minor page faults; full-batch PubMed runs showed no
difference beyond the host's noise. The cost is memory: the process keeps up to 2 GiB of freed heap instead
of returning it, so a process's resident size stays near its peak step.

The settings are process-wide and cannot be undone by a later job of the same process; glibc has no way to
restore its adaptive threshold once a value is set. Not glibc (macOS, musl) or ``mallopt`` refusing a value:
nothing is changed and :func:`tune_malloc` returns ``False``. Why by hand: neither torch nor the standard
library exposes ``mallopt``; ``ctypes`` calls the C library directly.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["MALLOC_SETTINGS", "is_tuned", "tune_malloc"]

# mallopt parameter numbers from glibc's <malloc.h>
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
# (parameter, value): mallopt takes a C int, so every value must stay below 2**31
MALLOC_SETTINGS: tuple[tuple[int, int], ...] = (
    (_M_MMAP_THRESHOLD, 32 << 20),
    (_M_TRIM_THRESHOLD, (1 << 31) - 1),
    (_M_TOP_PAD, 256 << 20),
)

_tuned = False


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it (musl has mallopt as a no-op stub)
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


def tune_malloc(libc: ctypes.CDLL | None = None) -> bool:
    """Apply :data:`MALLOC_SETTINGS` to this process (once); whether they are in effect."""
    global _tuned
    if _tuned:
        return True
    libc = libc if libc is not None else _glibc()
    if libc is None:
        return False
    ok = True
    for param, value in MALLOC_SETTINGS:
        ok = libc.mallopt(param, value) == 1 and ok
    _tuned = ok
    return ok


def is_tuned() -> bool:
    """Whether :func:`tune_malloc` has applied the settings in this process (they stay for its lifetime)."""
    return _tuned
