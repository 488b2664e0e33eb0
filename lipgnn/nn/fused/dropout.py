r"""Dropout for the fused path, equal in distribution to ``torch.nn.functional.dropout``.

.. math::
    y_n = \frac{m_n}{1 - p}\, x_n, \qquad m_n \sim \mathrm{Bernoulli}(1 - p) \text{ i.i.d.}

Why not ``F.dropout``: on one CPU thread it costs 15 ms on a ``[19717, 64]`` tensor (a float drawn per
element by torch's generator, a stored mask, a multiply), more than a whole fused GAT-Lip layer
forward. On CPU :func:`dropout` decides each element in the loop that writes the output, with a
counter-based generator (SplitMix64) seeded by one 63-bit draw from torch's default generator, and its
backward regenerates the same decisions from that seed, so nothing the size of ``x`` is stored. Runs
are reproducible under ``torch.manual_seed`` and activation checkpointing (which replays torch's
generator) replays the same masks. Other devices, and ``LIPGNN_KERNELS=eager``, use ``F.dropout``.

``rows`` serves a tensor whose rows are a permutation of the caller's (``x[i]`` is row ``rows[i]`` of the
tensor in its original order, :mod:`lipgnn.nn.fused.locality`): every element then gets the decision
that element had in the original order, so the permuted computation drops exactly what the
unpermuted one drops.
tests/test_fused.py checks the keep rate, the scaling, the independence of the decisions (within a
call, between neighbouring elements and between calls) and the gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from lipgnn.nn.fused import elementwise_kernels, kernels

__all__ = ["dropout"]


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, keep: float, seed: int, rows: Tensor | None) -> Tensor:  # type: ignore[override]
        ctx.keep, ctx.seed, ctx.rows = keep, seed, rows
        return _apply(x, torch.empty_like(x, memory_format=torch.contiguous_format), seed, keep, rows)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None, None]:  # type: ignore[override]
        # d y_n / d x_n = m_n / (1 - p): the forward's map applied to the gradient, same seed.
        grad = grad.contiguous()
        return _apply(grad, torch.empty_like(grad), ctx.seed, ctx.keep, ctx.rows), None, None, None


def _apply(x: Tensor, out: Tensor, seed: int, keep: float, rows: Tensor | None) -> Tensor:
    if rows is None:
        return elementwise_kernels.dropout_(x, out, seed, keep)
    return elementwise_kernels.dropout_rows_(x, out, rows, seed, keep)


def dropout(x: Tensor, p: float, training: bool = True, rows: Tensor | None = None) -> Tensor:
    """``F.dropout(x, p, training)`` in distribution (see the module docstring); same argument order.
    ``rows`` (int64 ``[x.size(0)]``): the original row of each row of ``x``, whose decisions it keeps."""
    if not training or p == 0.0:
        return x
    if not 0.0 < p < 1.0 or not kernels.available(x):
        if rows is not None:
            raise ValueError("dropout with a row map needs the compiled CPU kernels (a CPU float tensor, "
                             "LIPGNN_KERNELS not 'eager')")
        return F.dropout(x, p=p, training=training)
    if rows is not None and rows.numel() != x.size(0):
        raise ValueError(f"rows has {rows.numel()} entries for a tensor of {x.size(0)} rows")
    seed = int(torch.randint(0, 2**63 - 1, (1,), dtype=torch.int64))
    return _Dropout.apply(x, 1.0 - p, seed, rows)
