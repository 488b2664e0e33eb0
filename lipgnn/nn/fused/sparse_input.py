r"""The input projection for sparse node features: :class:`torch.nn.Linear` with a CSR product.

.. math::
    x_0 = X W^\top + b, \qquad \frac{\partial \mathcal{L}}{\partial W} = \Big(X^\top
    \frac{\partial \mathcal{L}}{\partial x_0}\Big)^{\!\top}, \qquad
    \frac{\partial \mathcal{L}}{\partial b} = \mathbf{1}^\top \frac{\partial \mathcal{L}}{\partial x_0}

The bag-of-words features of the citation and co-authorship graphs are mostly zeros (Cora 1.3% of
entries are non-zero, CiteSeer 0.9%, PubMed 10%; Fig. 4's missing-feature runs erase every row
outside the training set). A dense encoder multiplies all of them: on PubMed, one thread, 24 ms
forward and 22 ms for the weight gradient, more than a whole fused attention layer, and for shallow
models the largest part of an epoch. The features are a constant input (no gradient), so the CSR
copy is built once per feature tensor and reused every epoch.

Why by hand: torch's CSR × dense product (MKL) is fast for the forward, but its transposed product,
needed for :math:`\partial W`, is 2-7x *slower* than the dense GEMM on this shape (a few hundred
output rows with thousands of entries each), so the weight gradient is one compiled pass over the
stored entries (:func:`lipgnn.nn.fused.kernels.csr_t_matmul`).

The CSR path runs on CPU, with the compiled loops available, for a feature tensor that needs no
gradient and has at most :data:`MAX_DENSITY` non-zero entries (above it, measured on PubMed's shape,
the dense GEMM is as fast). Everywhere else, CUDA included, it is exactly :class:`torch.nn.Linear`.
Its parameters and ``state_dict`` are those of :class:`torch.nn.Linear`.
"""

from __future__ import annotations

import warnings
import weakref

import torch
from torch import Tensor, nn

from lipgnn.nn.fused import kernels

__all__ = ["MAX_DENSITY", "SparseInputLinear"]

#: Largest fraction of non-zero features for the CSR path. PubMed's shape ([19717, 500] → 64, one
#: thread): forward + weight gradient take 19 ms sparse vs 47 ms dense at 10%, about even at 20%.
MAX_DENSITY = 0.15


class _CSRLinear(torch.autograd.Function):
    """``x_csr Wᵀ + b``; gradients for ``W`` and ``b`` only (the features are data)."""

    @staticmethod
    def forward(ctx, x_csr: Tensor, weight: Tensor, bias: Tensor | None):  # type: ignore[override]
        ctx.x_csr = x_csr
        if bias is None:
            return torch.sparse.mm(x_csr, weight.t())
        return torch.addmm(bias, x_csr, weight.t())

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[None, Tensor | None, Tensor | None]:  # type: ignore[override]
        grad = grad.contiguous()
        grad_w = kernels.csr_t_matmul(ctx.x_csr, grad).t().contiguous() if ctx.needs_input_grad[1] else None
        grad_b = grad.sum(0) if ctx.needs_input_grad[2] else None
        return None, grad_w, grad_b


class SparseInputLinear(nn.Linear):
    r""":class:`torch.nn.Linear` that multiplies sparse, constant input features in CSR form.

    .. math:: x_0 = X W^\top + b

    Same arguments, parameters and ``state_dict`` as :class:`torch.nn.Linear`; only the product
    differs, and only where the module docstring says. A feature tensor goes sparse from the second
    forward that receives it (the same object, unmodified); its CSR copy is kept while the tensor lives
    and rebuilt if it is modified in place.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, **kwargs) -> None:
        super().__init__(in_features, out_features, bias=bias, **kwargs)
        self._seen: tuple[weakref.ref, int, Tensor | None, bool] | None = None  # (x, version, CSR, decided)
        self.used_csr = False  # whether a CSR product has run (a run's record says so)

    def forward(self, x: Tensor) -> Tensor:
        x_csr = self._csr(x)
        if x_csr is None:
            return super().forward(x)
        self.used_csr = True
        return _CSRLinear.apply(x_csr, self.weight, self.bias)

    def _csr(self, x: Tensor) -> Tensor | None:
        if (x.requires_grad or x.dim() != 2 or x.layout != torch.strided
                or not kernels.available(x, self.weight)):
            return None
        seen = self._seen
        if seen is None or seen[0]() is not x or seen[1] != x._version:
            # First sight of this tensor: dense. A tensor made afresh for every forward (an encoder
            # behind dropout, as SAN's) would pay the conversion each time and lose (measured 0.85x
            # on PubMed); the dataset's own features come back every epoch and convert once.
            self._seen = (weakref.ref(x), x._version, None, False)
            return None
        if seen[3]:
            return seen[2]
        x_csr = None
        if int(torch.count_nonzero(x)) <= MAX_DENSITY * x.numel():
            # Outside inference mode, so that an evaluation forward may build the copy that training uses.
            with warnings.catch_warnings(), torch.inference_mode(False):
                # torch's once-per-process "CSR support is in beta" notice
                warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
                x_csr = x.to_sparse_csr()
        self._seen = (seen[0], seen[1], x_csr, True)
        return x_csr

    def __getstate__(self) -> dict:
        # A weak reference cannot be pickled or deep-copied; the copy rebuilds its CSR on first use.
        state = self.__dict__.copy()
        state["_seen"] = None
        return state
