r"""The GRU cell of gated graph networks (GGNN's update) as one compiled loop each way on CPU.

``torch.nn.GRUCell``'s equations (Cho et al. 2014, eqs. (5)–(8), in PyTorch's form, as Li et al.'s GGNN,
eqs. (3)–(6), use them), for the message :math:`m` and the state :math:`h`:

.. math::
    r &= \sigma(W_{ir} m + b_{ir} + W_{hr} h + b_{hr}), \qquad
    z = \sigma(W_{iz} m + b_{iz} + W_{hz} h + b_{hz}), \\
    n &= \tanh\big(W_{in} m + b_{in} + r \odot (W_{hn} h + b_{hn})\big), \qquad
    h' = (1 - z) \odot n + z \odot h.

The two gate products :math:`g_i = W_i m + b_i`, :math:`g_h = W_h h + b_h` (``[N, 3C]``) stay GEMMs; everything
between them and :math:`h'` is one loop forward (:func:`lipgnn.nn.fused.gru_kernels.gru_cell`), which also
keeps :math:`r, z, n, g_{h,n}` for the backward, and one loop backward giving :math:`\partial g_i`,
:math:`\partial g_h` and the direct part :math:`z \odot \partial h'` of :math:`\partial h`; the weight, bias
and input gradients are then four GEMMs and two column sums. Why: torch's CPU cell runs about ten
elementwise passes forward and backward and concatenates the gate gradients from chunks (Fig. 5's
tree-depth-5 batches, ``[64512, 32]``: 115 ms forward + backward against 73 ms, ``docs/performance.md``).

float32 on CPU only (the loop's exponentials are a float32 polynomial); other dtypes and devices, and
``LIPGNN_KERNELS=eager``, call the module itself. Equal to ``torch.nn.GRUCell`` within float rounding,
values and every gradient (``tests/test_fused_ggnn.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lipgnn.nn.fused import gru_kernels, kernels

__all__ = ["gru_cell"]


class _GRUCell(torch.autograd.Function):
    @staticmethod
    def forward(ctx, m: Tensor, h: Tensor, w_ih: Tensor, w_hh: Tensor,  # type: ignore[override]
                b_ih: Tensor | None, b_hh: Tensor | None) -> Tensor:
        gi = torch.addmm(b_ih, m, w_ih.t()) if b_ih is not None else m @ w_ih.t()
        gh = torch.addmm(b_hh, h, w_hh.t()) if b_hh is not None else h @ w_hh.t()
        out, saved = gru_kernels.gru_cell(gi, gh, h)
        ctx.save_for_backward(m, h, w_ih, w_hh, saved)
        ctx.with_bias = (b_ih is not None, b_hh is not None)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        m, h, w_ih, w_hh, saved = ctx.saved_tensors
        d_gi, d_gh, d_h = gru_kernels.gru_cell_backward(grad.contiguous(), h, saved)
        need = ctx.needs_input_grad
        d_m = d_gi @ w_ih if need[0] else None
        d_h = d_h.addmm_(d_gh, w_hh) if need[1] else None
        d_w_ih = d_gi.t() @ m if need[2] else None
        d_w_hh = d_gh.t() @ h if need[3] else None
        d_b_ih = d_gi.sum(0) if ctx.with_bias[0] and need[4] else None
        d_b_hh = d_gh.sum(0) if ctx.with_bias[1] and need[5] else None
        return d_m, d_h, d_w_ih, d_w_hh, d_b_ih, d_b_hh


def gru_cell(m: Tensor, h: Tensor, cell: nn.GRUCell) -> Tensor:
    """``cell(m, h)`` (module docstring): compiled on CPU for float32 ``[N, C]`` inputs, ``cell`` itself else."""
    tensors = (m, h, cell.weight_ih, cell.weight_hh)
    if (m.dim() != 2 or h.dim() != 2 or m.dtype != torch.float32 or h.size(1) == 0
            or not kernels.available(*tensors)):
        return cell(m, h)
    return _GRUCell.apply(m.contiguous(), h.contiguous(), cell.weight_ih, cell.weight_hh, cell.bias_ih,
                          cell.bias_hh)
