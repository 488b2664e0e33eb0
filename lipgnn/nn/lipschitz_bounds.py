r"""Upper bounds on Lipschitz constants of attention layers, for a module's current weights.

* Kim, Papamakarios & Mnih, *The Lipschitz Constant of Self-Attention*, Theorem 3.2 (L2-MHA):
  :func:`l2_mha_bound` (``p = inf`` and ``p = 2``), with :math:`\phi^{-1}(N-1)` from
  :func:`phi_inverse`.
* Dasoulas, Scaman & Virmaux, *Lipschitz Normalization for Self-Attention Layers* (ICML 2021),
  Theorem 3 / Corollary 1 (GAT-Lip, eq. 17) and Corollary 2 (GT-Lip, eq. 19):
  :func:`lipschitznorm_attention_bound` for one attention map, and :func:`graph_layer_bound` for a
  whole :class:`~lipgnn.nn.LipGATConv` / :class:`~lipgnn.nn.LipTransformerConv` on a given graph.

Norm conventions. ``p = inf``: the induced ∞-norm (max absolute row sum) of the ``ND x ND`` Jacobian of
:math:`\mathrm{vec}(X) \mapsto \mathrm{vec}(F(X))` (rows of :math:`X` stacked). ``p = 2`` and the
LipschitzNorm bounds: the Frobenius norm of inputs and outputs, i.e. the spectral norm of that Jacobian.
"""

from __future__ import annotations

import math

import torch
from scipy.special import lambertw
from torch import Tensor
from torch_geometric.utils import add_self_loops, remove_self_loops, scatter

P_NORMS: tuple[str, ...] = ("inf", "2")


def normalise_p(p: float | int | str) -> str:
    """``"inf"`` or ``"2"`` from ``inf``/``float('inf')``/``"inf"``/``2``/``"2"``; ``ValueError`` otherwise."""
    text = str(p).lower()
    if text in ("inf", "infinity", "∞"):
        return "inf"
    if text in ("2", "2.0"):
        return "2"
    raise ValueError(f"p={p!r} is not supported; use p=2 or p=inf")


def phi_inverse(n: int) -> float:
    r""":math:`\phi^{-1}(N - 1)` for :math:`\phi(x) = x e^{x+1}` (Theorem 3.2, Lemma F.2).

    :math:`x e^{x+1} = N - 1 \iff x e^x = (N-1)/e`, so :math:`\phi^{-1}(N-1) = W_0\big((N-1)/e\big)` with
    :math:`W_0` the principal branch of Lambert's W (``scipy.special.lambertw``). It grows as
    :math:`O(\log N - \log\log N)`. (The scanned text of the theorem reads "W₀(N)": the argument's
    fraction is lost; :math:`W_0(N)` would solve :math:`x e^x = N` instead, a looser value.)
    """
    if n < 1:
        raise ValueError(f"n={n}: a set has at least one element")
    return float(lambertw((n - 1) / math.e, 0).real)


def _inf_norm(m: Tensor) -> float:
    """Induced ∞-norm of a matrix: its maximum absolute row sum."""
    return float(m.detach().abs().sum(dim=-1).max())


def _spectral(m: Tensor) -> float:
    return float(torch.linalg.matrix_norm(m.detach().double(), ord=2))


def l2_mha_bound(attn: torch.nn.Module, n: int, p: float | int | str = "inf") -> float:
    r"""Theorem 3.2's upper bound on :math:`\mathrm{Lip}_p(F)` of an
    :class:`~lipgnn.nn.L2MultiheadAttention` (tied weights) on sets of ``n`` points.

    .. math::
        \mathrm{Lip}_\infty(F) \le \left(4\phi^{-1}(N-1) + \frac{1}{\sqrt{D/H}}\right)
        \max_h \|W^{Q,h}\|_\infty \|W^{Q,h\top}\|_\infty \,\max_h \|W^{V,h\top}\|_\infty\, \|W^{O\top}\|_\infty

    .. math::
        \mathrm{Lip}_2(F) \le \frac{\sqrt{N}}{\sqrt{D/H}} \left(4\phi^{-1}(N-1) + 1\right)
        \sqrt{\textstyle\sum_h \|W^{Q,h}\|_2^4 \|W^{V,h}\|_2^2}\; \|W^O\|_2

    The ∞ case bounds the induced ∞-norm of the ``ND x ND`` Jacobian. For p = 2 the per-head factor is
    :math:`\|W^{Q,h}\|_2^4 \|W^{V,h}\|_2^2` under the root: Appendix F.2.2's inequality (36) bounds
    :math:`\|J_{f^h}\|_2` by :math:`\sqrt{N}\|W^{Q,h}\|_2^2 (4\phi^{-1}(N-1) + 1)/\sqrt{D/H}` and (37)
    takes :math:`\sqrt{\sum_h \|J_{f^h}\|_2^2 \|W^{V,h}\|_2^2}\,\|W^O\|_2`.

    Raises ``ValueError`` for untied weights: such :math:`F` has no finite bound (Lemma F.1).
    """
    p = normalise_p(p)
    if not getattr(attn, "tie_qk", False):
        raise ValueError("l2_mha_bound needs tie_qk=True: untied L2 attention is not Lipschitz (Lemma F.1)")
    wq, wv, wo = attn.q_weight, attn.v_weight, attn.o_weight  # [H, D, d], [H, D, d], [D, D]
    d = attn.head_dim
    w = phi_inverse(n)
    if p == "inf":
        q = max(_inf_norm(wq[h]) * _inf_norm(wq[h].T) for h in range(wq.size(0)))
        v = max(_inf_norm(wv[h].T) for h in range(wv.size(0)))
        return (4.0 * w + 1.0 / math.sqrt(d)) * q * v * _inf_norm(wo.T)
    heads = sum(_spectral(wq[h]) ** 4 * _spectral(wv[h]) ** 2 for h in range(wq.size(0)))
    return math.sqrt(n) / math.sqrt(d) * (4.0 * w + 1.0) * math.sqrt(heads) * _spectral(wo)


def lipschitznorm_attention_bound(kind: str, m: float, n: float, alpha: float = 1.0) -> float:
    r"""LipschitzNorm's bound on the Frobenius Lipschitz constant of one normalised attention map
    with ``m`` outputs over ``n`` inputs.

    * ``kind="gat"`` (linear scores, eq. 17; Theorem 3, Corollary 1 at :math:`\alpha = 1`):
      :math:`e^{\alpha}\sqrt{m/n} + \alpha\sqrt{8}`.
    * ``kind="gt"`` (dot-product scores, eq. 19; Corollary 2 at :math:`\alpha = 1`):
      :math:`e^{\sqrt{3}\alpha}\sqrt{m/n} + 2\sqrt{6}\,\alpha`. Corollary 2's proof meets Theorem 2's
      assumptions with constants :math:`(1, \sqrt{2}, \sqrt{3}) \le \sqrt{3}`; scaling the scores by
      :math:`\alpha` scales each constant by :math:`\alpha`.
    """
    if n <= 0:
        return 0.0
    if kind == "gat":
        return math.exp(alpha) * math.sqrt(m / n) + alpha * math.sqrt(8.0)
    if kind == "gt":
        return math.exp(math.sqrt(3.0) * alpha) * math.sqrt(m / n) + 2.0 * math.sqrt(6.0) * alpha
    raise ValueError(f"kind={kind!r} is unknown; use gat or gt")


def _node_bounds(kind: str, in_degree: Tensor, alpha: float) -> Tensor:
    """Per target node, the single-output (m = 1) bound over its n_i = in-degree inputs; 0 without inputs."""
    deg = in_degree.double()
    base = torch.exp(torch.tensor(alpha if kind == "gat" else math.sqrt(3.0) * alpha, dtype=torch.float64))
    const = alpha * math.sqrt(8.0) if kind == "gat" else 2.0 * math.sqrt(6.0) * alpha
    bound = base * deg.clamp(min=1).rsqrt() + const
    return torch.where(deg > 0, bound, torch.zeros_like(bound))


def graph_layer_bound(conv: torch.nn.Module, edge_index: Tensor, num_nodes: int) -> float:
    r"""Upper bound on the Frobenius Lipschitz constant of a LipschitzNorm graph layer
    :math:`X \mapsto \mathrm{conv}(X, \mathcal{E})` on a fixed graph (``math.inf`` when none holds).

    On a graph each target :math:`i` is one attention map with :math:`m = 1` output over its
    :math:`n_i` neighbours (norms and maxima taken neighbour-wise), so it is
    :math:`L_i`-Lipschitz in its own input matrix :math:`X_i` with :math:`L_i` from
    :func:`lipschitznorm_attention_bound` (``m = 1, n = n_i``). Summing
    :math:`\|D\mathrm{Att}_i(H)\|^2 \le L_i^2 \|DX_i(H)\|_F^2` over targets, a node :math:`j` enters
    the bound once per target it feeds:

    * GAT-Lip (eq. 17; :math:`X_{ij} = [W_{dst}x_i \| W_{src}x_j]` for :math:`j \in \mathcal{N}(i)`,
      self-loops added as the layer adds them), per head
      :math:`B_h^2 = \max_j \big(n_j L_j^2 \|W^h_{dst}\|_2^2 + S_j \|W^h_{src}\|_2^2\big)`;
    * GT-Lip (eq. 19; :math:`X_i = (q_i \| K_{\mathcal{N}(i)} \| V_{\mathcal{N}(i)})`), per head
      :math:`B_h^2 = \max_j \big(L_j^2 \|W^h_Q\|_2^2 + S_j (\|W^h_K\|_2^2 + \|W^h_V\|_2^2)\big)`,

    with :math:`S_j = \sum_{i:\, j \in \mathcal{N}(i)} L_i^2`. Heads: :math:`\sqrt{\sum_h B_h^2}`
    (concat) or :math:`\frac1H \sum_h B_h` (mean); GT adds the root weight's :math:`\|W_r\|_2`.
    Biases do not change Lipschitz constants.

    Only LipschitzNorm's ``variant="paper"`` has this guarantee; layers without LipschitzNorm
    (dot-product or GAT scores are not Lipschitz), the ``reference`` variant, L2 scores, ``beta`` gating
    and edge features return ``math.inf``.
    """
    from lipgnn.nn.lip_gat_conv import LipGATConv
    from lipgnn.nn.lip_transformer_conv import LipTransformerConv

    if not getattr(conv, "lipschitz_norm", False) or getattr(conv, "variant", "paper") != "paper":
        return math.inf
    if getattr(conv, "score", "dot") != "dot" or getattr(conv, "lin_edge", None) is not None:
        return math.inf
    heads, channels = int(conv.heads), int(conv.out_channels)
    ei = edge_index
    if isinstance(conv, LipGATConv):
        kind = "gat"
        if conv.add_self_loops:
            ei, _ = remove_self_loops(ei)
            ei, _ = add_self_loops(ei, num_nodes=num_nodes)
    elif isinstance(conv, LipTransformerConv):
        kind = "gt"
        if conv.beta:
            return math.inf
    else:
        raise TypeError(f"graph_layer_bound supports LipGATConv and LipTransformerConv, not {type(conv).__name__}")
    src, dst = ei[0], ei[1]
    ones = torch.ones(src.numel(), dtype=torch.float64)
    in_deg = scatter(ones, dst, dim=0, dim_size=num_nodes, reduce="sum")
    node_l = _node_bounds(kind, in_deg, float(conv.alpha))  # L_i
    feeds = scatter((node_l ** 2)[dst], src, dim=0, dim_size=num_nodes, reduce="sum")  # S_j

    def head_rows(weight: Tensor, h: int) -> Tensor:
        return weight[h * channels:(h + 1) * channels]

    per_head = []
    for h in range(heads):
        if kind == "gat":
            w_src = conv.lin.weight if conv.lin is not None else conv.lin_src.weight
            w_dst = conv.lin.weight if conv.lin is not None else conv.lin_dst.weight
            s_src, s_dst = _spectral(head_rows(w_src, h)), _spectral(head_rows(w_dst, h))
            sq = in_deg * node_l ** 2 * s_dst ** 2 + feeds * s_src ** 2
        else:
            s_q = _spectral(head_rows(conv.lin_query.weight, h))
            s_kv = (_spectral(head_rows(conv.lin_key.weight, h)) ** 2
                    + _spectral(head_rows(conv.lin_value.weight, h)) ** 2)
            sq = node_l ** 2 * s_q ** 2 + feeds * s_kv
        per_head.append(math.sqrt(float(sq.max())))
    total = math.sqrt(sum(b * b for b in per_head)) if conv.concat else sum(per_head) / heads
    if kind == "gt" and getattr(conv, "lin_skip", None) is not None and conv.root_weight:
        total += _spectral(conv.lin_skip.weight)
    return total
