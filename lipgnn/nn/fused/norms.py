r"""Fast copies of the squared norm :math:`\|x\|^2` (eq. (17)/(19)) and of its gradient :math:`2 g x`.

The definition is :func:`lipgnn.nn.lipschitz.sq_norm`; tests/test_fused.py checks every function here
against it (values and gradients). Why copies exist: the reference ``(x * x).sum(-1)`` writes an
``[N, H, C]`` temporary forward and lets autograd allocate ``2 g x`` and add it to the other gradient
of ``x`` backward; here the norm is one read of ``x`` (a compiled loop on CPU, ``vector_norm``
otherwise) and its gradient is added in place to a buffer the caller owns.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lipgnn.nn.fused import kernels, score_kernels

__all__ = ["SPARSE_NORM_GRAD_SHARE", "add_sq_norm_grad_", "row_sq_norm", "sq_norm_nograd", "with_sq_norm"]


def sq_norm_nograd(x: Tensor) -> Tensor:
    """``‖x‖²`` over the last dim, outside autograd (the functions below define its gradient)."""
    if x.dim() == 3 and kernels.available(x):
        return score_kernels.sq_norm(x)
    return torch.linalg.vector_norm(x, dim=-1).square_()


class _RowSqNorm(torch.autograd.Function):
    """``‖x‖²`` over the last dim: one read forward, one fused ``2 g x`` backward (autograd's
    ``(x * x).sum(-1)`` stores and re-reads more)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        return sq_norm_nograd(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        return x * (2 * grad).unsqueeze(-1)


# Below this share of non-zero rows the gradient of ‖x‖² is added row by row (measured on CPU,
# PubMed-sized [N, 64]: a full in-place pass ~0.3-1 ms, the indexed one ~0.1 ms at 25 % of rows).
SPARSE_NORM_GRAD_SHARE = 0.5


def add_sq_norm_grad_(grad_x: Tensor, x: Tensor, grad_sq: Tensor, row_sparse: bool = False) -> Tensor:
    """``grad_x += 2 grad_sq x`` in place (``[N, H, C]``, ``[N, H]``), the gradient of ``‖x‖²``.

    Why the row-sparse branch: eq. (19) uses the key and value norms only through neighbour maxima,
    so ``grad_sq`` is zero except on the nodes that are some target's maximising neighbour (about a
    quarter of PubMed's nodes); on CPU the full pass over ``[N, H, C]`` costs several times the
    indexed update of those rows. ``row_sparse`` says the caller expects that (counting the rows costs
    a pass of its own); GPUs always take the dense pass (no host sync to count the rows).
    """
    if grad_x.is_contiguous() and kernels.available(grad_x, x, grad_sq):
        return score_kernels.add_sq_norm_grad_(grad_x, x, grad_sq)  # skips zero rows itself
    term = 2 * grad_sq
    if row_sparse and not grad_x.is_cuda and grad_x.dim() == 3:
        rows = term.abs().sum(dim=1).nonzero().squeeze(1)
        if rows.numel() < SPARSE_NORM_GRAD_SHARE * grad_x.size(0):
            update = x.index_select(0, rows).mul_(term.index_select(0, rows).unsqueeze(-1))
            return grad_x.index_add_(0, rows, update)
    return grad_x.addcmul_(x, term.unsqueeze(-1))


class _WithSqNorm(torch.autograd.Function):
    """``(x, ‖x‖²)``: ``x`` passed through with its squared norm over the last dim. Why: when ``x`` also
    feeds another op (GT's values feed the SpMM), a separate :class:`_RowSqNorm` makes autograd
    allocate ``2 g x`` and add it to the SpMM's gradient, two extra ``[N, H, C]`` passes and an
    allocation; here the whole gradient of ``x`` arrives in one backward, which adds ``2 g x`` to it
    in place (one fused pass)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        ctx.save_for_backward(x)
        return x.view_as(x), sq_norm_nograd(x)

    @staticmethod
    def backward(ctx, grad_x: Tensor, grad_sq: Tensor) -> Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        # Neither gradient is None (autograd materialises unused outputs' gradients as zeros).
        # grad_x is the SpMM backward's own fresh buffer (nothing else holds it): add in place.
        return add_sq_norm_grad_(grad_x if grad_x.is_contiguous() else grad_x.contiguous(), x, grad_sq, True)


def with_sq_norm(x: Tensor) -> tuple[Tensor, Tensor]:
    """A view of ``x`` to use downstream instead of ``x``, and ``‖x‖²`` over the last dimension; the
    gradients of both reach ``x`` in one fused backward.

    Contract: the view may only feed operations whose backward returns a fresh gradient buffer (such
    as :func:`csr_spmm`), because that buffer is updated in place; an op that hands one gradient
    tensor to several inputs (``view + y``) would see the update in ``y``'s gradient too."""
    return _WithSqNorm.apply(x)


def row_sq_norm(x: Tensor) -> Tensor:
    """Squared Euclidean norm over the last dimension (same value as ``lipschitz.sq_norm``)."""
    return _RowSqNorm.apply(x)
