r"""ELU for the fused path (``model.impl=fused``), equal to ``torch.nn.ELU`` within float rounding.

.. math::
    \mathrm{ELU}(x) = \begin{cases} x & x > 0 \\ \alpha\,(e^{x} - 1) & x \le 0 \end{cases}, \qquad
    \frac{\partial\,\mathrm{ELU}}{\partial x} = \begin{cases} 1 & x > 0 \\ \mathrm{ELU}(x) + \alpha & x \le 0
    \end{cases}

(Clevert et al. 2016, eq. (1); the activation of the deep GAT/GT blocks, :mod:`lipgnn.models.blocks`.)
Why not ``torch.nn.ELU``: on one CPU thread its kernel costs more than the fused layer's projection
GEMM on PubMed's ``[19717, 64]`` hidden features; here it is one compiled loop forward and one backward
(:func:`lipgnn.nn.fused.elementwise_kernels.bias_elu`), the backward reading the saved output only. A fused GAT layer
followed by an ELU applies it together with its bias (:func:`bias_elu`, through ``FusedLipGATConv.forward``'s
``activation=``): one pass over ``[N, F]`` instead of two each way. CUDA tensors,
float64, ``inplace=True`` and ``LIPGNN_KERNELS=eager`` use ``torch.nn.ELU``'s own forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lipgnn.nn.fused import elementwise_kernels, kernels

__all__ = ["ELU", "bias_elu"]


class _BiasELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, bias: Tensor | None, alpha: float) -> Tensor:  # type: ignore[override]
        out = elementwise_kernels.bias_elu(x, bias, alpha)
        ctx.alpha, ctx.with_bias = alpha, bias is not None
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor | None, None]:  # type: ignore[override]
        (out,) = ctx.saved_tensors
        with_bias = ctx.with_bias and ctx.needs_input_grad[1]
        return (*elementwise_kernels.bias_elu_backward(grad, out, ctx.alpha, with_bias), None)


def _compiled(x: Tensor, bias: Tensor | None) -> bool:
    # float32 only: the loop's exp is a float32 polynomial (float64 keeps torch's full precision).
    tensors = (x,) if bias is None else (x, bias)
    return x.dtype == torch.float32 and x.dim() >= 1 and x.size(-1) > 0 and kernels.available(*tensors)


def bias_elu(x: Tensor, bias: Tensor | None, alpha: float = 1.0) -> Tensor:
    r""":math:`\mathrm{ELU}(x + b)` with ``bias`` ``b`` broadcast over the last dimension of ``x`` (``None``:
    no bias), in one pass each way on CPU; ``F.elu(x + bias, alpha)`` elsewhere."""
    if not _compiled(x, bias) or (bias is not None and (bias.dim() != 1 or bias.numel() != x.size(-1))):
        return F.elu(x if bias is None else x + bias, alpha)
    if x.dim() == 2:
        return _BiasELU.apply(x, bias, float(alpha))
    return _BiasELU.apply(x.reshape(-1, x.size(-1)), bias, float(alpha)).view(x.shape)


class ELU(nn.ELU):
    r""":class:`torch.nn.ELU` (same constructor, no parameters) computed by a compiled loop on CPU; see the
    module docstring for the formula."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002 - nn.ELU's argument name
        if self.inplace or not _compiled(input, None):
            return super().forward(input)
        return bias_elu(input, None, float(self.alpha))
