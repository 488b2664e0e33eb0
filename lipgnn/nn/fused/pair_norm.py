r"""PairNorm (Zhao & Akoglu, ICLR 2020, eq. (5); ``norm=pairnorm``) as one autograd operation with compiled passes.

PyG's ``PairNorm`` (``scale_individually=False``, no ``batch``), for :math:`x \in \mathbb{R}^{N \times C}`:

.. math::
    \tilde x = x - \tfrac{1}{N}\textstyle\sum_i x_i, \qquad
    r = \sqrt{\epsilon + \tfrac{1}{N}\textstyle\sum_i \|\tilde x_i\|^2}, \qquad y = s\,\tilde x / r,

and its gradient, with :math:`G = \partial L/\partial y` and :math:`D = \sum_{i,c} G_{ic} \tilde x_{ic}`:

.. math::
    \partial L/\partial x = \tfrac{s}{r}\Big(G - \tfrac{1}{N}\textstyle\sum_i G_i - \tilde x\,\tfrac{D}{N r^2}\Big).

Forward: one compiled call, a pass of column sums of :math:`x` and :math:`x^2` (float64;
:math:`\frac1N\sum\|\tilde x_i\|^2 = \frac1N\sum x^2 - \|\mu\|^2`), then one output pass; backward: one call, a pass of
column sums of :math:`G` and :math:`G \tilde x`, then one gradient pass. Why: PyG's version is about eight tensor
operations forward and more backward, whose fixed cost dominates on Fig. 5's small tree batches (fwd + bwd
0.52 ms on ``[960, 32]``, 14.4 ms on ``[31744, 32]``, one thread; ``docs/performance.md``).

:class:`FusedPairNorm` is a drop-in subclass: other options (``scale_individually``, a ``batch`` vector), other
devices and ``LIPGNN_KERNELS=eager`` run PyG's forward. Equal to it within float rounding, values and gradients
(``tests/test_fused_pair_norm.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.nn.norm import PairNorm

from lipgnn.nn.fused import kernels, pair_norm_kernels

__all__ = ["FusedPairNorm"]


class _PairNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, scale: float, eps: float) -> Tensor:  # type: ignore[override]
        out, mean, r, k = pair_norm_kernels.pair_norm_forward(x, scale, eps)
        ctx.save_for_backward(x, mean)
        ctx.k, ctx.r = k, r
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        x, mean = ctx.saved_tensors
        return pair_norm_kernels.pair_norm_backward(grad, x, mean, ctx.k, ctx.r), None, None


class FusedPairNorm(PairNorm):
    """:class:`torch_geometric.nn.norm.PairNorm` computed as one autograd operation (module docstring)."""

    def forward(self, x: Tensor, batch: Tensor | None = None,  # type: ignore[override]
                batch_size: int | None = None) -> Tensor:
        if (batch is not None or self.scale_individually or x.dim() != 2 or x.size(0) == 0
                or not kernels.available(x)):
            return super().forward(x, batch, batch_size)
        return _PairNorm.apply(x.contiguous(), float(self.scale), float(self.eps))
