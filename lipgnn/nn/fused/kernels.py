r"""Compiled CPU loops (numba) for the per-node and per-row passes of the fused attention layers.

Why by hand: eager PyTorch runs each elementary step as its own pass over memory, and several
places of :mod:`lipgnn.nn.fused` are chains of such passes that one loop does at once (each family module
lists its loops and what they replace).

The convention: every compiled loop lives in a ``*_kernels`` module beside the layers that call it, one module per
family, and no module passes 600 lines (``tests/test_kernels.py``, ``tests/test_layout.py``):

- loops that one layer family uses live in that family's module: :mod:`~lipgnn.nn.fused.gat_kernels` (a whole GAT
  or GAT-Lip layer as one operation: :mod:`~lipgnn.nn.fused.gat_small`, :mod:`~lipgnn.nn.fused.gat_one_head`),
  :mod:`~lipgnn.nn.fused.san_kernels` (the SAN block; its per-edge vector code, which would take the module past
  600 lines, in :mod:`~lipgnn.nn.fused.san_vector_kernels`), :mod:`~lipgnn.nn.fused.gru_kernels` (GGNN's GRU cell),
  :mod:`~lipgnn.nn.fused.pair_norm_kernels` (PairNorm);
- loops that several families share live in a module named by what they compute:
  :mod:`~lipgnn.nn.fused.sparse_kernels` (SDDMM, row softmax, SpMM, the sparse input's transposed product),
  :mod:`~lipgnn.nn.fused.score_kernels` (attention scores, LipschitzNorm's neighbour maxima, norms and eq. (19)
  factor), :mod:`~lipgnn.nn.fused.elementwise_kernels` (dropout, ELU);
- the autograd operation that calls a loop, and the loop's eager twin, stay in the layer or operation module
  (``gat_small.py``, ``dropout.py``, ``sparse.py``, ...).

This module holds what they share and no loop: the switch between the compiled loops and their eager twins
(:func:`available`, :func:`disabled`), the zero-copy views and the numba decorators.

numba compiles each loop on first use (cached on disk next to the module that defines it), so no C++ toolchain is
needed. Every kernel has an eager twin in the module that calls it, which runs for CUDA tensors, without
numba, or with ``LIPGNN_KERNELS=eager``; the tests check both paths against each other and against
the PyG reference. The loops are serial: on this 2-core machine a second thread only contends (GPUs
use the eager path).

The ``zero`` arguments are ``0`` in the tensors' dtype, so that numba compiles float32 arithmetic for
float32 data (a literal ``0.0`` would make it float64, ~2x slower).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor

try:
    import numba
except ImportError:  # pragma: no cover - numba is a dependency; the eager path runs without it
    numba = None

__all__ = ["available", "disabled"]

_FLOATS = (torch.float32, torch.float64)
_disabled = False


def available(*tensors: Tensor) -> bool:
    """Whether the compiled loops apply: numba present, CPU float tensors of one dtype, not disabled
    (``LIPGNN_KERNELS=eager`` or :func:`disabled`)."""
    if numba is None or _disabled or os.environ.get("LIPGNN_KERNELS", "numba") == "eager":
        return False
    dtype = tensors[0].dtype
    if dtype not in _FLOATS:
        return False
    for t in tensors:
        if not t.is_cpu or t.dtype != dtype:
            return False
    return True


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Run the eager twins inside the block (the tests compare both paths)."""
    global _disabled
    previous, _disabled = _disabled, True
    try:
        yield
    finally:
        _disabled = previous


_ZEROS = {torch.float32: np.float32(0), torch.float64: np.float64(0)}


def _np(t: Tensor) -> np.ndarray:
    """Zero-copy NumPy view (a contiguous copy first if needed; no autograd). Every compiled call
    converts its arguments, so new tensor objects are made only where needed."""
    if t.requires_grad:
        t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.numpy()


def _zero(t: Tensor) -> np.generic:
    """A zero of ``t``'s float type (the compiled loops take their float type from it)."""
    return _ZEROS.get(t.dtype, _ZEROS[torch.float64])


if numba is not None:
    _jit = numba.njit(cache=True, nogil=True, fastmath=False)
    # Reassociated sums and fused multiply-adds let LLVM vectorise the reductions; no "no NaN/inf"
    # assumptions, so a diverging run still shows its NaN (the trainer stops on it).
    _jit_fast = numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
    # numba's default (Python) error model checks every float division for a zero divisor, to raise
    # ZeroDivisionError, and that branch keeps LLVM from vectorising the loop; loops whose divisors cannot
    # be zero take numpy's model (IEEE results, no check).
    _jit_fast_div = numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, error_model="numpy")
    # Row helpers shared by several loops, inlined into each caller's IR: called as functions, LLVM kept
    # their loops scalar and the callers ran about a third slower.
    _jit_inline = numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, inline="always")
    _jit_inline_div = numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, error_model="numpy",
                                 inline="always")
else:  # pragma: no cover - numba is a dependency
    _jit = _jit_fast = _jit_fast_div = _jit_inline = _jit_inline_div = None
