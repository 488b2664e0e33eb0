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
stored entries (:func:`lipgnn.nn.fused.sparse_kernels.csr_t_matmul`).

The CSR path runs on CPU, with the compiled loops available, for a feature tensor that needs no
gradient and has at most :data:`MAX_DENSITY` non-zero entries (above it, measured on PubMed's shape,
the dense GEMM is as fast). Everywhere else, CUDA included, it is exactly :class:`torch.nn.Linear`.
Its parameters and ``state_dict`` are those of :class:`torch.nn.Linear`.

**Dropout on the input features** (SAN's encoder, Guan & He §3.1: dropout, then the MLP):
:meth:`SparseInputLinear.dropped` is ``self(F.dropout(x, p))``. Dropout keeps a zero a zero, so only the stored
entries need a draw: each is kept with probability :math:`1 - p` and scaled by :math:`1 / (1 - p)`, as
``F.dropout`` does to every entry (:func:`csr_dropout`). On Cora's ``[2708, 1433]`` features (1.3 % stored),
``F.dropout`` draws 3.9 M Bernoulli variables and multiplies every entry (~60 ms a training step, one thread) and
its output, a new tensor each step, can only take the dense product; here 49 k draws and the CSR product.
"""

from __future__ import annotations

import warnings
import weakref

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lipgnn.nn.fused import kernels, sparse_kernels

__all__ = ["MAX_DENSITY", "SparseInputLinear", "csr_dropout"]

#: Largest fraction of non-zero features for the CSR path. PubMed's shape ([19717, 500] → 64, one
#: thread): forward + weight gradient take 19 ms sparse vs 47 ms dense at 10%, about even at 20%.
MAX_DENSITY = 0.15


def csr_dropout(x_csr: Tensor, p: float) -> Tensor:
    r"""``F.dropout(x, p)`` of the CSR matrix ``x_csr`` (training mode): each stored entry :math:`v` becomes
    :math:`v\, m / (1 - p)` with :math:`m \sim \mathrm{Bernoulli}(1 - p)` drawn from torch's generator, the
    unstored zeros stay zero; the result has the same sparsity pattern (dropped entries stored as zeros)."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must lie in [0, 1), got {p}")
    values = x_csr.values()
    kept = torch.empty_like(values).bernoulli_(1.0 - p).mul_(1.0 / (1.0 - p))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
        return torch.sparse_csr_tensor(x_csr.crow_indices(), x_csr.col_indices(), values * kept, x_csr.shape)


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
        grad_w = sparse_kernels.csr_t_matmul(ctx.x_csr, grad).t().contiguous() if ctx.needs_input_grad[1] else None
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

    def dropped(self, x: Tensor, p: float, training: bool = True) -> Tensor:
        """``self(F.dropout(x, p, training))``: where the CSR path takes ``x``, the dropout is drawn on its stored
        entries (:func:`csr_dropout`) and multiplied in CSR form, so the features stay the constant tensor whose
        CSR copy is kept; elsewhere exactly ``F.dropout`` and the dense product."""
        if not training or p == 0.0:
            return self(x)
        x_csr = self._csr(x)
        if x_csr is None:
            # nn.Linear's product directly: self(...) would take the freshly dropped tensor for the features
            # and forget x, whose CSR copy the next step builds.
            return super().forward(F.dropout(x, p, training))
        self.used_csr = True
        return _CSRLinear.apply(csr_dropout(x_csr, p), self.weight, self.bias)

    def seen(self, x: Tensor) -> None:
        """Count ``x`` as seen once, as a process that ran the epochs before a checkpoint has: a resumed run then
        takes the CSR product from its first step, as the uninterrupted run does from its second forward, and
        the two stay bit-identical (the dense and CSR products round differently)."""
        seen = self._seen
        if seen is None or seen[0]() is not x or seen[1] != x._version:
            self._seen = (weakref.ref(x), x._version, None, False)

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
