r"""Node-similarity energies of Guan & He, *Solving Over-Smoothing in GNNs via Nonlocal Message Passing* (§2).

A graph :math:`G = (V, E, \omega, \mu)` carries symmetric edge weights :math:`\omega_{ij} > 0` and a vertex
measure :math:`\mu_i > 0`. For features :math:`X \in \mathbb{R}^{n \times d}` (§2):

.. math::
    \Delta_\mu X(i) = \sum_{j \sim i} \frac{\omega_{ij}}{\mu_i} (X(j) - X(i)), \qquad
    \nabla_\mu X \cdot \nabla_\mu Y(i) = \sum_{j \sim i} \frac{\omega_{ij}}{\mu_i} (X(j) - X(i)) \cdot (Y(j) - Y(i)),

    \int_G f \, d\mu = \sum_i f(i)\, \mu_i, \qquad
    \mathcal{E}_m(X) = \frac{1}{n} \int_G |\nabla_\mu^m X|^2 \, d\mu, \qquad
    |\nabla_\mu^m X|^2 = \begin{cases} |(-\Delta_\mu)^{m/2} X|^2 & m \text{ even} \\
                                       |\nabla_\mu (-\Delta_\mu)^{(m-1)/2} X|^2 & m \text{ odd} \end{cases}

:math:`m = 1` is the Dirichlet energy, :math:`m = 2` the Laplacian energy
:math:`\frac{1}{n} \sum_i |\Delta_\mu X(i)|^2 \mu_i` (the quantity of the paper's Tables 2, 4 and 6).
The defaults are the paper's: :math:`\omega_{ij} = 1`, :math:`\mu_i = \deg_i + 1`.

The paper's prefactor is :math:`1/n`. Its tables agree instead with an average over the :math:`n \cdot d`
entries of :math:`X` (a factor :math:`d` = hidden width smaller); that is the separate option
``normalise="entries"`` and never the default.

Hand-written because no library has this operator: PyG's ``get_laplacian`` gives :math:`D - A` or the
symmetric/random-walk normalisations, none with the measure :math:`\mu = \deg + 1` on the diagonal and
without self loops in the sum; the sparse products themselves are torch's.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import Tensor
from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

#: Prefactors of the energy: ``nodes`` = the paper's definition 1/n; ``entries`` = 1/(n·d).
NORMALISATIONS: tuple[str, ...] = ("nodes", "entries")


class GraphMeasure:
    r"""The weighted graph :math:`(V, E, \omega, \mu)` of §2, built once and reused for many features.

    ``edge_index`` is made undirected (§2 assumes :math:`\omega_{ij} = \omega_{ji}`), self loops are
    dropped (:math:`j \sim i` means a neighbour :math:`j \neq i`) and duplicate edges merged (their weights
    are summed). ``weights`` defaults to :math:`\omega_{ij} = 1`; ``mu`` to
    :math:`\mu_i = \sum_{j \sim i} \omega_{ij} + 1` (= :math:`\deg_i + 1` for unit weights, so that
    :math:`P_\mu = \Delta_\mu + I` is an aggregation matrix, the condition of §2).
    """

    def __init__(self, edge_index: Tensor, num_nodes: int, *, weights: Tensor | None = None,
                 mu: Tensor | None = None, dtype: torch.dtype = torch.float64) -> None:
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError(f"edge_index must have shape [2, E], got {tuple(edge_index.shape)}")
        n = int(num_nodes)
        edge_index = edge_index.long().cpu()
        w = None if weights is None else weights.detach().reshape(-1).to(dtype=dtype, device="cpu")
        if w is not None:
            if w.numel() != edge_index.size(1):
                raise ValueError(f"weights has {w.numel()} entries for {edge_index.size(1)} edges")
            if not bool((w > 0).all()):
                raise ValueError("edge weights omega_ij must be > 0 (§2)")
        edge_index, w = remove_self_loops(edge_index, w)
        if w is None:
            edge_index = coalesce(to_undirected(edge_index, num_nodes=n), num_nodes=n)
            w = torch.ones(edge_index.size(1), dtype=dtype)
        else:
            # Symmetric input weights keep their value; the mean makes a one-sided edge symmetric.
            edge_index, w = to_undirected(edge_index, w, num_nodes=n, reduce="mean")
        self.num_nodes = n
        self.dtype = dtype
        self.edge_index = edge_index
        self.weights = w
        strength = torch.zeros(n, dtype=dtype).index_add_(0, edge_index[1], w)
        if mu is None:
            mu = strength + 1.0
        else:
            mu = mu.detach().reshape(-1).to(dtype=dtype, device="cpu")
            if mu.numel() != n or not bool((mu > 0).all()):
                raise ValueError(f"mu must hold {n} positive node masses")
        self.mu = mu
        self.strength = strength
        # A[i, j] = omega_ij: row i sums over its neighbours j (target i, source j). CSR: its product with a
        # dense matrix is ~2x faster than COO's, and a 256-layer profile applies it at every layer.
        # torch flags CSR as beta on every construction; this use (a product with a dense matrix) is stable, and
        # the warning would otherwise print once per energy run.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
            self.adjacency = torch.sparse_coo_tensor(
                torch.stack([edge_index[1], edge_index[0]]), w, (n, n), check_invariants=True
            ).coalesce().to_sparse_csr()

    def laplacian(self, x: Tensor) -> Tensor:
        r""":math:`\Delta_\mu X(i) = \frac{1}{\mu_i} \big(\sum_{j \sim i} \omega_{ij} X(j) - s_i X(i)\big)`,
        :math:`s_i = \sum_{j \sim i} \omega_{ij}` (§2)."""
        x = self._features(x)
        # addmm with beta=0 into an empty tensor: MKL's CSR product without the zero-fill and copies of `@`.
        out = torch.addmm(x.new_empty(x.shape), self.adjacency, x, beta=0.0, out=x.new_empty(x.shape))
        return out.sub_(self.strength[:, None] * x).div_(self.mu[:, None])

    def gradient_sq(self, x: Tensor) -> Tensor:
        r""":math:`|\nabla_\mu X|^2(i) = \sum_{j \sim i} \frac{\omega_{ij}}{\mu_i} |X(j) - X(i)|^2` (§2), shape [n]."""
        x = self._features(x)
        src, dst = self.edge_index
        diff = ((x[src] - x[dst]) ** 2).sum(dim=1) * self.weights
        return torch.zeros(self.num_nodes, dtype=self.dtype).index_add_(0, dst, diff) / self.mu

    def energy(self, x: Tensor, m: int = 2, *, normalise: str | None = None) -> float:
        r""":math:`\mathcal{E}_m(X) = \frac{1}{n} \int_G |\nabla_\mu^m X|^2 d\mu` (§2, the m-th derivative
        energy); with ``normalise="entries"`` the prefactor is :math:`\frac{1}{n d}` instead."""
        if isinstance(m, bool) or int(m) != m or m < 1:
            raise ValueError(f"m={m!r}: the m-th derivative energy is defined here for integers m >= 1")
        scale = _prefactor(normalise, self.num_nodes, x)
        h = self._features(x)
        for _ in range(int(m) // 2):
            h = -self.laplacian(h)
        pointwise = self.gradient_sq(h) if m % 2 else (h ** 2).sum(dim=1)
        return float((pointwise * self.mu).sum()) * scale

    def _features(self, x: Tensor) -> Tensor:
        if x.dim() == 1:
            x = x[:, None]
        if x.dim() != 2 or x.size(0) != self.num_nodes:
            raise ValueError(f"features must have shape [{self.num_nodes}, d], got {tuple(x.shape)}")
        return x.detach().to(dtype=self.dtype, device="cpu")


def _prefactor(normalise: str | None, n: int, x: Tensor) -> float:
    mode = "nodes" if normalise is None else str(normalise)
    if mode not in NORMALISATIONS:
        raise ValueError(f"normalise={normalise!r} is unknown; use one of {', '.join(NORMALISATIONS)} (or None)")
    d = 1 if x.dim() == 1 else int(x.size(1))
    return 1.0 / n if mode == "nodes" else 1.0 / (n * d)


def energy(x: Tensor, edge_index: Tensor, m: int = 2, *, weights: Tensor | None = None, mu: Tensor | None = None,
           normalise: str | None = None) -> float:
    r"""The m-th derivative energy of Guan & He §2 (Dirichlet for m = 1, Laplacian for m = 2).

    .. math::
        \mathcal{E}_m(X) = \frac{1}{n} \int_G |\nabla_\mu^m X|^2 \, d\mu, \qquad
        \mathcal{E}_2(X) = \frac{1}{n} \sum_{i} |\Delta_\mu X(i)|^2 \mu_i, \qquad
        \mathcal{E}_1(X) = \frac{1}{n} \sum_i \sum_{j \sim i} \omega_{ij} |X(j) - X(i)|^2

    with :math:`\omega_{ij} = 1` and :math:`\mu_i = \deg_i + 1` unless ``weights`` / ``mu`` are given.

    Args:
        x: node features :math:`X`, shape ``[n, d]`` (or ``[n]``).
        edge_index: the graph, shape ``[2, E]`` (made undirected, self loops dropped).
        m: derivative order, an integer >= 1.
        weights: optional edge weights :math:`\omega`, one per column of ``edge_index``.
        mu: optional vertex measure :math:`\mu`, shape ``[n]``.
        normalise: ``None`` or ``"nodes"`` (the paper's :math:`1/n`), or ``"entries"`` (:math:`1/(n d)`,
            the normalisation under which the paper's tables are reproduced; see the report).
    """
    graph = GraphMeasure(edge_index, int(x.size(0)), weights=weights, mu=mu)
    return graph.energy(x, m, normalise=normalise)


def relative_energy(energies: Sequence[float]) -> list[float]:
    r"""The relative node similarity of Definition 2.2, for :math:`k = 1, \dots, N`:

    .. math::
        \mathcal{R}(X^k) = \frac{\mathcal{E}(X^k) - \mathcal{E}(X^{k-1})}{\mathcal{E}(X^{k-1})}

    ``energies[k]`` is :math:`\mathcal{E}(X^k)`; the result has one entry fewer (``nan`` where
    :math:`\mathcal{E}(X^{k-1}) = 0`).
    """
    values = [float(e) for e in energies]
    return [(b - a) / a if a != 0 else float("nan") for a, b in zip(values[:-1], values[1:], strict=True)]


__all__ = ["NORMALISATIONS", "GraphMeasure", "energy", "relative_energy"]
