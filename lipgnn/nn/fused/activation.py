r"""ELU for the fused path (``model.impl=fused``), equal to ``torch.nn.ELU`` within float rounding.

.. math::
    \mathrm{ELU}(x) = \begin{cases} x & x > 0 \\ \alpha\,(e^{x} - 1) & x \le 0 \end{cases}, \qquad
    \frac{\partial\,\mathrm{ELU}}{\partial x} = \begin{cases} 1 & x > 0 \\ \mathrm{ELU}(x) + \alpha & x \le 0
    \end{cases}

(Clevert et al. 2016, eq. (1); the activation of the deep GAT/GT blocks, :mod:`lipgnn.models.blocks`.)
Why not ``torch.nn.ELU``: on one CPU thread its kernel costs more than the fused layer's projection
GEMM on PubMed's ``[19717, 64]`` hidden features; here it is one compiled loop forward and one backward
(:func:`lipgnn.nn.fused.kernels.elu`), the backward reading the saved output only. CUDA tensors,
float64, ``inplace=True`` and ``LIPGNN_KERNELS=eager`` use ``torch.nn.ELU``'s own forward.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lipgnn.nn.fused import kernels

__all__ = ["ELU"]


class _ELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, alpha: float) -> Tensor:  # type: ignore[override]
        out = kernels.elu(x, alpha)
        ctx.alpha = alpha
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        (out,) = ctx.saved_tensors
        return kernels.elu_backward(grad, out, ctx.alpha), None


class ELU(nn.ELU):
    r""":class:`torch.nn.ELU` (same constructor, no parameters) computed by a compiled loop on CPU; see the
    module docstring for the formula."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002 - nn.ELU's argument name
        # float32 only: the loop's exp is a float32 polynomial (float64 keeps torch's full precision).
        if self.inplace or input.dtype != torch.float32 or not kernels.available(input):
            return super().forward(input)
        return _ELU.apply(input, float(self.alpha))
