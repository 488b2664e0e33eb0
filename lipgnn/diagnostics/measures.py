r"""Per-layer measures of node features :math:`X \in \mathbb{R}^{n \times d}` on a graph, raw and scale-free.

Raw (they scale with :math:`\|X\|`):

* ``dirichlet``, ``laplacian``: Guan & He's :math:`\mathcal{E}_1`, :math:`\mathcal{E}_2` per entry
  (:mod:`lipgnn.diagnostics.energy`, :math:`\omega = 1`, :math:`\mu = \deg + 1`, ``normalise="entries"``);
  :math:`\mathcal{E}_1(X) = \frac{1}{n d} \sum_i \sum_{j \sim i} |X_j - X_i|^2 = \frac{2}{n d}
  \mathrm{tr}(X^\top L X)` with :math:`L = D - A`;
* ``feature_norm``: :math:`\sqrt{\|X\|_F^2 / n}`, the root-mean-square row norm;
* ``group_distance_ratio``: PyG's ``DiffGroupNorm.group_distance_ratio`` (Zhou et al. 2020) as it is, whose
  fixed ``eps = 1e-5`` in the denominator dominates when the features are small.

Scale-free (:math:`X \mapsto cX` leaves them unchanged):

* ``rayleigh``: the Rayleigh quotient of the graph Laplacian, the normalised Dirichlet energy
  (Rusch, Bronstein & Mishra 2023, *A survey on oversmoothing in GNNs*; Cai & Wang 2020, *A note on
  over-smoothing for GNNs*, whose energy :math:`\mathrm{tr}(X^\top \Delta X)` is the numerator):

  .. math:: \mathcal{R}(X) = \frac{\sum_i \sum_{j \sim i} |X_j - X_i|^2}{\|X\|_F^2}
            = \frac{2\, \mathrm{tr}(X^\top L X)}{\mathrm{tr}(X^\top X)} \in [0, 2 \lambda_{\max}(L)],

  0 exactly when every connected component's rows are equal (over-smoothing in the scale-free sense);
* ``mad``: Chen et al.'s mean average distance (AAAI 2020), cosine-based;
* ``group_ratio``: PyG's group distance ratio without its ``eps``: both its numerator and denominator scale
  with :math:`c`, so their quotient does not.

The no-separation baseline of the group ratio (:func:`no_separation_baseline`). PyG computes
:math:`R = \frac{(C-1)^{-2} \sum_i \bar d(X_i, X_{\neg i})}{C^{-1} \sum_i \bar d(X_i, X_i)}` where
:math:`\bar d(A, B)` is the mean distance over all pairs of :math:`A \times B` (diagonal included for
:math:`A = B`). If the features carry no class information, every distance between two different nodes
has the same mean :math:`\delta`, so :math:`\bar d(X_i, X_{\neg i}) = \delta` and
:math:`\bar d(X_i, X_i) = \delta (1 - 1/|X_i|)` (its :math:`|X_i|` zero diagonal terms), giving

.. math:: R_0 = \frac{C^2}{(C-1)^2 \sum_i (1 - 1/|X_i|)} \;\to\; \frac{C}{(C-1)^2} \quad (|X_i| \to \infty),

e.g. :math:`7/36 \approx 0.194` for Cora's 7 classes. :math:`R > R_0`: classes further apart than within;
:math:`R \approx R_0`: no separation.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lipgnn.diagnostics.energy import GraphMeasure

#: Cosine distances below this count as 0 in MAD (rounding of 1 - cos(h, h) in float64).
ZERO_DISTANCE = 1e-12


def mean_average_distance(h: Tensor, rows: Tensor | None = None, *, chunk: int = 512) -> float:
    r"""Chen et al.'s global MAD: :math:`\frac{1}{|R|}\sum_{i \in R} \sum_j D_{ij} / \#\{j: D_{ij} > 0\}` with
    :math:`D_{ij} = 1 - \cos(h_i, h_j)` (below :data:`ZERO_DISTANCE`: 0), over rows ``R`` (default all nodes)."""
    h = h.detach().to(dtype=torch.float64, device="cpu")
    unit = h / h.norm(dim=1, keepdim=True).clamp_min(1e-300)
    unit[h.norm(dim=1) == 0] = 0.0  # a zero vector: cosine 0, distance 1 (sklearn's convention)
    index = torch.arange(h.size(0)) if rows is None else rows
    total = 0.0
    for start in range(0, index.numel(), chunk):
        dist = 1.0 - unit[index[start:start + chunk]] @ unit.T
        dist[dist < ZERO_DISTANCE] = 0.0  # a node and its copies (itself included) are at distance 0
        nonzero = (dist > 0).sum(dim=1)
        total += float((dist.sum(dim=1) / (nonzero + 1e-8)).sum())
    return total / max(index.numel(), 1)


def feature_norm(h: Tensor) -> float:
    r""":math:`\sqrt{\|X\|_F^2 / n}`: the root-mean-square norm of a node's feature vector."""
    h = h.detach().to(dtype=torch.float64, device="cpu")
    return math.sqrt(float((h * h).sum()) / max(h.size(0), 1))


def rayleigh_quotient(graph: GraphMeasure, h: Tensor) -> float:
    r""":math:`\sum_i \sum_{j \sim i} |X_j - X_i|^2 / \|X\|_F^2` on ``graph`` (module docstring); ``nan`` for
    :math:`X = 0`."""
    squared = float((h.detach().to(dtype=torch.float64, device="cpu") ** 2).sum())
    if not squared > 0:
        return math.nan
    # E_1 with the 1/n prefactor is (1/n) sum_i sum_{j~i} |X_j - X_i|^2 (the mu_i cancel).
    return graph.energy(h, 1, normalise="nodes") * graph.num_nodes / squared


def _classes(y: Tensor) -> tuple[Tensor, int]:
    """``y`` relabelled 0..C-1 over the classes present (a class without nodes has no mean distance)."""
    present, inverse = torch.unique(y.detach().cpu(), return_inverse=True)
    return inverse, int(present.numel())


def group_distances(h: Tensor, y: Tensor, rows: Tensor | None = None) -> tuple[float, float]:
    r"""PyG's numerator and denominator of the group distance ratio (module docstring),
    :math:`(C-1)^{-2} \sum_i \bar d(X_i, X_{\neg i})` and :math:`C^{-1} \sum_i \bar d(X_i, X_i)`, over the
    classes present; ``(nan, nan)`` with fewer than two. With ``rows`` each class's mean distances are taken
    from its nodes among ``rows`` (all its nodes where none is) to every node: unbiased for PyG's means, at
    :math:`O(|rows|\, n d)` instead of :math:`O(n^2 d)`. Hand-written because PyG returns only the ratio,
    with its ``eps``, and costs :math:`O(n^2 d)`; equal to it for ``rows=None`` (tested)."""
    labels, classes = _classes(y)
    if classes < 2:
        return math.nan, math.nan
    x = h.detach().to(dtype=torch.float64, device="cpu")
    x = x - x.mean(dim=0, keepdim=True)  # distances unchanged; keeps cdist's matrix-product path accurate
    sampled = torch.zeros(labels.numel(), dtype=torch.bool)
    sampled[slice(None) if rows is None else rows.cpu()] = True
    inter = intra = 0.0
    for c in range(classes):
        member = labels == c
        chosen = member & sampled
        dist = torch.cdist(x[chosen if bool(chosen.any()) else member], x)
        inter += float(dist[:, ~member].mean())
        intra += float(dist[:, member].mean())
    return inter / (classes - 1) ** 2, intra / classes


#: PyG's ``DiffGroupNorm.group_distance_ratio`` default ``eps``.
PYG_EPS = 1e-5


def group_distance_ratio(h: Tensor, y: Tensor, rows: Tensor | None = None) -> float:
    """PyG's ``DiffGroupNorm.group_distance_ratio``: numerator / (denominator + 1e-5) of
    :func:`group_distances` (``nan`` with fewer than two classes)."""
    numerator, denominator = group_distances(h, y, rows)
    return numerator / (denominator + PYG_EPS)


def group_ratio(h: Tensor, y: Tensor, rows: Tensor | None = None) -> float:
    r"""The group distance ratio without ``eps``: numerator / denominator of :func:`group_distances`, so
    :math:`X \mapsto cX` leaves it unchanged; ``nan`` with fewer than two classes or equal rows."""
    numerator, denominator = group_distances(h, y, rows)
    return numerator / denominator if denominator > 0 else math.nan


def no_separation_baseline(y: Tensor) -> float:
    r""":math:`R_0 = C^2 / ((C-1)^2 \sum_i (1 - 1/|X_i|))`: the group ratio of features that carry no class
    information (module docstring); ``nan`` with fewer than two classes."""
    labels, classes = _classes(y)
    if classes < 2:
        return math.nan
    sizes = torch.bincount(labels, minlength=classes).double()
    return classes ** 2 / ((classes - 1) ** 2 * float((1 - 1 / sizes).sum()))


__all__ = ["PYG_EPS", "ZERO_DISTANCE", "feature_norm", "group_distance_ratio", "group_distances", "group_ratio",
           "mean_average_distance",
           "no_separation_baseline", "rayleigh_quotient"]
