r"""LipschitzNorm maths as pure functions (Dasoulas, Scaman, Virmaux, ICML 2021, §5).

Every function takes tensors plus an edge index and returns tensors; no module state. The layers
(:class:`~lipgnn.nn.LipGATConv`, :class:`~lipgnn.nn.LipTransformerConv`) call them, the tests check
them against hand-computed values, and this module is the one definition of the formulas: the fused
fast path (:mod:`lipgnn.nn.fused`) reuses its helpers and, where it must restate a formula for speed
(per-node denominators, compiled loops), is tested equal to it in values and gradients.

Tie rule of every maximum here (neighbour maxima, eq. (19)'s maximum of products): the gradient goes
to the maximising argument, split evenly between tied ones (``scatter(reduce="max")`` and
``torch.maximum`` both do so); the fast copies follow it.

Conventions:

* Projected features are ``[N, H, C]`` (nodes, heads, channels per head); per-edge tensors are
  ``[E, H, C]`` or ``[E, H]``.
* An edge ``j -> i`` has source ``j`` (``edge_index[0]``) and target ``i`` (``edge_index[1]``); the
  neighbourhood :math:`\mathcal{N}(i)` is the set of sources of the edges entering ``i`` (PyG's
  ``source_to_target`` flow), self-loops included when the layer adds them.
* Every returned denominator is already safe to divide by: it is ``>= eps`` (GAT, linear in the
  inputs) or ``>= eps**2`` (GT, quadratic), and every square root is taken as
  :math:`\sqrt{s + \epsilon^2}`, whose gradient is finite at :math:`s = 0`. A plain
  :math:`\sqrt{\sum x^2}` has an infinite derivative at zero, which turns into NaN in backward as soon
  as a node outputs an exactly-zero row (attention dropout can drop all of a node's edges) and a whole
  neighbourhood is zero.
* ``eps`` must stay representable in the working dtype: the default ``1e-12`` (so ``eps**2 = 1e-24``)
  suits float32/float64, not float16.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.utils import scatter

EPS: float = 1e-12
"""Default stabiliser: ``eps**2`` under every square root, ``eps`` (GAT) or ``eps**2`` (GT) added to
the denominators."""

VARIANTS: tuple[str, ...] = ("paper", "reference")

# The authors' code multiplies the GAT denominator by this constant (``att_norm=4`` in
# gdasoulas/LipschitzNorm, normalizations/lipschitznorm.py); the paper's eq. 17 has no such factor.
REFERENCE_GAT_FACTOR: float = 4.0


def check_variant(variant: str) -> str:
    """Return ``variant`` if it is a known LipschitzNorm variant, else raise ``ValueError``."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown LipschitzNorm variant {variant!r}; use one of {VARIANTS}")
    return variant


def safe_sqrt(x: Tensor, eps: float = EPS) -> Tensor:
    r""":math:`\sqrt{x + \epsilon^2}` for ``x >= 0``: equals :math:`\sqrt{x}` up to ``eps`` and has a
    finite gradient (``1 / (2 eps)``) at ``x = 0``, where :math:`\sqrt{x}` has none."""
    return torch.sqrt(x + eps * eps)


def sq_norm(x: Tensor, dim: int = -1) -> Tensor:
    r"""Squared Euclidean norm :math:`\sum x^2` along ``dim`` (smooth everywhere, unlike the norm)."""
    return (x * x).sum(dim=dim)


def safe_norm(x: Tensor, dim: int | tuple[int, ...] = -1, keepdim: bool = False, eps: float = EPS) -> Tensor:
    r"""Euclidean norm :math:`\sqrt{\sum x^2 + \epsilon^2}` along ``dim`` with finite gradients at 0
    (its gradient at ``x = 0`` is exactly 0)."""
    return safe_sqrt((x * x).sum(dim=dim, keepdim=keepdim), eps)


def neighbour_max(src: Tensor, index: Tensor, num_nodes: int | None = None) -> Tensor:
    r"""Per-target maximum :math:`m_i = \max_{e:\, \mathrm{index}(e) = i} \mathrm{src}_e`.

    ``src`` is ``[E, ...]`` and non-negative (squared norms or norms); ``index`` is ``[E]`` (the
    target of each edge). Returns ``[num_nodes, ...]``; a node without incoming edges gets 0. Uses a
    scatter max (O(E) time and memory, no dense matrix); its backward sends the gradient to the
    maximising edges (split evenly between ties), so it stays finite when all values are 0.
    """
    return scatter(src, index, dim=0, dim_size=num_nodes, reduce="max")


def query_sq_norm_per_head(*atts: Tensor | None) -> Tensor:
    r"""Per-head squared norm ``[H]`` of the concatenation of attention vectors of shape ``[1, H, C]``
    (``None`` entries skipped): :math:`\|\mathbf{a}_h\|^2` of eq. 17."""
    total: Tensor | None = None
    for att in atts:
        if att is None:
            continue
        part = sq_norm(att.reshape(-1, att.size(-2), att.size(-1)), dim=-1).sum(dim=0)  # [H]
        total = part if total is None else total + part
    if total is None:
        raise ValueError("at least one attention vector is needed to normalise GAT scores")
    return total


def gat_lipschitz_denominator(
    x_src: Tensor,
    x_dst: Tensor | None,
    att_src: Tensor,
    att_dst: Tensor | None,
    edge_index: Tensor,
    num_nodes: int | None = None,
    *,
    edge_proj: Tensor | None = None,
    att_edge: Tensor | None = None,
    variant: str = "paper",
    eps: float = EPS,
) -> Tensor:
    r"""Per-edge, per-head LipschitzNorm denominator of GAT scores (eq. 17 of the paper).

    GAT's raw score of edge :math:`j \to i` in head :math:`h` is linear in the input vector
    :math:`X_{ij} = [\mathbf{W}x_i \,\|\, \mathbf{W}x_j \,\|\, \mathbf{W}_e e_{ij}]` with query
    :math:`\mathbf{a} = [\mathbf{a}_{dst} \,\|\, \mathbf{a}_{src} \,\|\, \mathbf{a}_{e}]`:
    :math:`e_{ij} = \mathbf{a}^\top X_{ij}`. Eq. 17 divides it by
    :math:`\|\mathbf{a}\|_F \, \|X^\top\|_{(\infty,2)}` taken neighbour-wise:

    ``variant="paper"``:

    .. math::
        c_i = \|\mathbf{a}_h\| \sqrt{\|\mathbf{W}x_i\|^2 + \max_{j \in \mathcal{N}(i)}
        \left(\|\mathbf{W}x_j\|^2 + \|\mathbf{W}_e e_{ij}\|^2\right)}
        = \|\mathbf{a}_h\| \max_{j \in \mathcal{N}(i)} \|X_{ij}\|,

    one value per target node and head (norms taken within head :math:`h`), so that
    :math:`|e_{ij}| \le c_i` by Cauchy–Schwarz and the normalised scores :math:`\alpha\, e_{ij}/c_i`
    lie in :math:`[-\alpha, \alpha]` (Theorem 3, condition (1)).

    ``variant="reference"`` (gdasoulas/LipschitzNorm, ``normalizations/lipschitznorm.py``, with the
    per-head maximum their ``.view(-1, 1)`` mixes across heads done per head here):

    .. math::
        c_{ij} = 4\, \|\mathbf{a}\|_F \sqrt{\max_{k \in \mathcal{N}(i)} \|\mathbf{W}x_k\|^2
        + \|\mathbf{W}x_j\|^2 + \|\mathbf{W}_e e_{ij}\|^2}.

    Differences from the paper: the factor 4; the *source* norm :math:`\|\mathbf{W}x_j\|` of each
    edge where eq. 17 has the target norm (so the denominator varies along the edges of one target);
    :math:`\|\mathbf{a}\|_F` is one norm over all heads (their ``lipschitznorm`` option), not per
    head. Their code has no edge features: the edge term here joins the per-edge part. Scores stay
    within :math:`[-\alpha/4, \alpha/4]` whenever :math:`i \in \mathcal{N}(i)` (self-loops).

    Args:
        x_src: ``[N_src, H, C]`` projected source features :math:`\mathbf{W}x_j`.
        x_dst: ``[N_dst, H, C]`` projected target features, or ``None`` when the layer has no
            target term (then :math:`\mathbf{W}x_i` and :math:`\mathbf{a}_{dst}` are left out).
        att_src, att_dst: ``[1, H, C]`` attention vectors (``att_dst`` ignored when ``x_dst`` is None).
        edge_index: ``[2, E]``, row 0 the sources ``j``, row 1 the targets ``i``.
        num_nodes: number of target nodes (default: ``x_dst.size(0)`` or ``max(target) + 1``).
        edge_proj: ``[E, H, C]`` projected edge features :math:`\mathbf{W}_e e_{ij}` (optional).
        att_edge: ``[1, H, C]`` edge attention vector (needed with ``edge_proj``).
        variant: ``"paper"`` or ``"reference"``.
        eps: stabiliser (see module docstring).

    Returns:
        ``[E, H]`` denominators (``>= eps``); divide the raw scores by them.
    """
    check_variant(variant)
    src, dst = edge_index[0], edge_index[1]
    if num_nodes is None:
        num_nodes = x_dst.size(0) if x_dst is not None else (int(dst.max()) + 1 if dst.numel() else 0)
    if x_dst is None:
        att_dst = None
    if edge_proj is None:
        att_edge = None
    elif att_edge is None:
        raise ValueError("edge_proj was given without att_edge")

    sq_src = sq_norm(x_src)[src]  # [E, H]: ||W x_j||^2 per edge
    sq_edge = sq_norm(edge_proj) if edge_proj is not None else None  # [E, H]

    if variant == "paper":
        per_edge = sq_src if sq_edge is None else sq_src + sq_edge
        edge_sq = neighbour_max(per_edge, dst, num_nodes)[dst]  # [E, H]: max_j, gathered per edge
        if x_dst is not None:
            edge_sq = edge_sq + sq_norm(x_dst)[dst]
        query_norm = safe_sqrt(query_sq_norm_per_head(att_src, att_dst, att_edge), eps)  # [H]
        return query_norm * safe_sqrt(edge_sq, eps) + eps

    # Reference: the max runs over node norms only; the source (and edge) norm is added per edge.
    max_k = neighbour_max(sq_src, dst, num_nodes)[dst]  # [E, H]
    per_edge = max_k + sq_src if sq_edge is None else max_k + sq_src + sq_edge
    query_norm = safe_sqrt(query_sq_norm_per_head(att_src, att_dst, att_edge).sum(), eps)  # scalar
    return REFERENCE_GAT_FACTOR * query_norm * safe_sqrt(per_edge, eps) + eps


def gatv2_lipschitz_denominator(
    x_i: Tensor,
    x_j: Tensor,
    att: Tensor,
    index: Tensor,
    num_nodes: int | None = None,
    *,
    edge_proj: Tensor | None = None,
    eps: float = EPS,
) -> Tensor:
    r"""Per-edge, per-head LipschitzNorm denominator of GATv2 scores (docs/reference.md, "LipschitzNorm for
    GATv2"; the paper's eq. 15 for a Lipschitz score function).

    GATv2's score of edge :math:`j \to i` is :math:`\tilde g_{ij} = \mathbf{a}^\top
    \mathrm{LeakyReLU}(\mathbf{W}_r x_i + \mathbf{W}_l x_j\,(+\,\mathbf{W}_e e_{ij}))`, a function of the
    column :math:`X_{ij} = [\mathbf{W}_r x_i \,\|\, \mathbf{W}_l x_j \,(\|\, \mathbf{W}_e e_{ij})]` that is
    Lipschitz with constant :math:`\sqrt{k}\,\|\mathbf{a}\|` (:math:`k` = 2 parts, 3 with edge features)
    and bounded by the same constant times :math:`\|X_{ij}\|`. Eq. 15 then reduces to

    .. math::
        c_i = \sqrt{k}\,\|\mathbf{a}_h\| \max_{j \in \mathcal{N}(i)} \sqrt{\|\mathbf{W}_r x_i\|^2
        + \|\mathbf{W}_l x_j\|^2 \,(+\, \|\mathbf{W}_e e_{ij}\|^2)}.

    Args:
        x_i, x_j: ``[E, H, C]`` target (``lin_r``) and source (``lin_l``) projections per edge.
        att: ``[1, H, C]`` attention vector :math:`\mathbf{a}`.
        index: ``[E]`` target of each edge.
        num_nodes: number of targets (default: ``index.max() + 1``).
        edge_proj: optional ``[E, H, C]`` projected edge features :math:`\mathbf{W}_e e_{ij}`.

    Returns:
        ``[E, H]`` denominators (``>= eps``); :math:`|\tilde g_{ij}| \le c_i`, so
        :math:`\alpha \tilde g_{ij} / c_i \in [-\alpha, \alpha]`.
    """
    if num_nodes is None:
        num_nodes = int(index.max()) + 1 if index.numel() else 0
    per_edge = sq_norm(x_i) + sq_norm(x_j)  # [E, H]
    parts = 2
    if edge_proj is not None:
        per_edge = per_edge + sq_norm(edge_proj)
        parts = 3
    column_sq = neighbour_max(per_edge, index, num_nodes)[index]  # [E, H]: max_j ||X_ij||^2
    query_norm = safe_sqrt(query_sq_norm_per_head(att), eps)  # [H]
    return (parts ** 0.5) * query_norm * safe_sqrt(column_sq, eps) + eps


def transformer_lipschitz_denominator(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    index: Tensor,
    num_nodes: int | None = None,
    *,
    variant: str = "paper",
    eps: float = EPS,
) -> Tensor:
    r"""Per-edge, per-head LipschitzNorm denominator of dot-product scores (eq. 19 of the paper).

    Inputs are per edge :math:`j \to i`: ``query`` holds :math:`q_i`, ``key`` :math:`k_j` and
    ``value`` :math:`v_j` (each ``[E, H, C]``, already including any edge embedding that the layer
    adds to keys/values); ``index`` ``[E]`` holds the targets :math:`i`.

    ``variant="paper"`` (eq. 19 applied to the single-output attention of each target node, whose
    query matrix is :math:`q_i`, so :math:`\|Q\|_F = \|q_i\|`; maxima neighbour-wise, per head):

    .. math::
        u_i = \|q_i\|,\quad v_i = \max_{j \in \mathcal{N}(i)} \|k_j\|,\quad
        w_i = \max_{j \in \mathcal{N}(i)} \|v_j\|,\quad
        c_i = \max\{u_i v_i,\; u_i w_i,\; v_i w_i\}.

    Then :math:`|q_i^\top k_j| \le u_i v_i \le c_i`, so :math:`\alpha\, q_i^\top k_j / c_i \in
    [-\alpha, \alpha]`.

    ``variant="reference"`` (gdasoulas/LipschitzNorm, ``normalizations/quadratic_lipschitznorm.py``):
    :math:`u = \|Q\|_F` per head over the queries of *all* edges of the graph (a global value that
    counts node :math:`i`'s query once per incoming edge), :math:`v_i, w_i` as above. It is applied
    there to logits already divided by :math:`\sqrt{C}`; the caller does that.

    Returns:
        ``[E, H]`` denominators :math:`c` gathered per edge, plus ``eps**2`` (``>= eps**2``).
    """
    check_variant(variant)
    if num_nodes is None:
        num_nodes = int(index.max()) + 1 if index.numel() else 0
    v_i = neighbour_max(safe_norm(key, eps=eps), index, num_nodes)[index]  # [E, H]
    w_i = neighbour_max(safe_norm(value, eps=eps), index, num_nodes)[index]
    if variant == "paper":
        u = safe_norm(query, eps=eps)  # [E, H]: ||q_i|| on each edge entering i
    else:
        u = safe_sqrt(sq_norm(query).sum(dim=0), eps).unsqueeze(0)  # [1, H]: ||Q||_F per head
    return eq19_denominator(u, v_i, w_i, eps)


def eq19_denominator(u: Tensor, v: Tensor, w: Tensor, eps: float = EPS) -> Tensor:
    r"""Eq. 19's denominator from the three norms: :math:`\max\{u v,\, u w,\, v w\} + \epsilon^2`.

    ``u`` (query norm), ``v`` (key-norm maximum), ``w`` (value-norm maximum) broadcast together. The
    gradient follows ``torch.maximum``: each of two equal products gets half of it.
    """
    # The denominator is quadratic in the inputs, so its stabiliser is eps**2 (each factor is already
    # >= eps): a linear eps would bias scores of inputs with norms below ~sqrt(eps) and break the
    # invariance to scaling queries, keys and values together.
    return torch.maximum(torch.maximum(u * v, u * w), v * w) + eps * eps

