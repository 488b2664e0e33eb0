r"""Dense multi-head self-attention over a set: L2 (Kim, Papamakarios & Mnih, ICLR 2021 submission /
ICML 2021, eq. 10 and Appendix F) and dot-product (Vaswani et al., eq. 4–5 of Kim et al.).

Both modules map a set :math:`X \in \mathbb{R}^{N \times D}` (rows :math:`x_i^\top`) to
:math:`\mathbb{R}^{N \times D}`, take ``[N, D]`` or ``[B, N, D]`` and return the same shape. Heads use
:math:`d = D/H` columns each and the paper's row-vector convention (:math:`x_i^\top W`).

Neither has biases: a bias on queries/keys does not make dot-product attention Lipschitz (Appendix D)
and Theorem 3.2 is stated without them.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from lipgnn.errors import ConfigError


def _check_dims(embed_dim: int, num_heads: int, cls: str) -> None:
    if num_heads < 1 or embed_dim < 1 or embed_dim % num_heads != 0:
        raise ConfigError(
            f"{cls}(embed_dim={embed_dim}, num_heads={num_heads}): embed_dim must be a positive multiple of "
            "num_heads (each head uses embed_dim // num_heads columns)"
        )


def _as_batch(x: Tensor, embed_dim: int, cls: str) -> tuple[Tensor, bool]:
    if x.dim() not in (2, 3) or x.size(-1) != embed_dim:
        raise ValueError(f"{cls} expects [N, {embed_dim}] or [B, N, {embed_dim}], got {tuple(x.shape)}")
    return (x.unsqueeze(0), True) if x.dim() == 2 else (x, False)


def _head_weight(embed_dim: int, num_heads: int) -> nn.Parameter:
    """``[H, D, D/H]``, each head's matrix Glorot-uniform initialised as a ``D x D/H`` linear map."""
    weight = torch.empty(num_heads, embed_dim, embed_dim // num_heads)
    for h in range(num_heads):
        nn.init.xavier_uniform_(weight[h])
    return nn.Parameter(weight)


class L2MultiheadAttention(nn.Module):
    r"""L2 multi-head self-attention, L2-MHA (Kim et al., eq. 10; the map :math:`F` of Appendix F).

    For heads :math:`h = 1, \dots, H` with :math:`W^{Q,h}, W^{K,h}, W^{V,h} \in \mathbb{R}^{D \times D/H}`
    and :math:`W^O \in \mathbb{R}^{D \times D}`:

    .. math::
        P^h_{ij} = \mathrm{softmax}_j\!\left(-\frac{\|x_i^\top W^{Q,h} - x_j^\top W^{K,h}\|_2^2}
        {\sqrt{D/H}}\right) \qquad \text{(eq. 10)}

    .. math::
        f^h(X) = P^h X A^h, \qquad A^h = \frac{W^{Q,h} W^{Q,h\top}}{\sqrt{D/H}} \in \mathbb{R}^{D\times D},
        \qquad F(X) = \left[f^1(X) W^{V,1}, \dots, f^H(X) W^{V,H}\right] W^O.

    The logits are computed as eq. (16) does, :math:`\|q_i\|^2 - 2 q_i^\top k_j + \|k_j\|^2` (matrix
    products plus row norms, no pairwise differences).

    * ``tie_qk=True`` (default) sets :math:`W^{K,h} = W^{Q,h}` (one parameter): then :math:`F` is
      Lipschitz with Theorem 3.2's bounds (:func:`lipgnn.lipschitz.l2_mha_bound`). Untied, it is not
      (Lemma F.1); :math:`A^h` still uses :math:`W^{Q,h}`, as in :math:`F`'s definition.
    * ``contractive=True`` (needs ``tie_qk``) divides :math:`F` by Theorem 3.2's Lip∞ bound for the
      current weights and the input's :math:`N` (Contractive-L2-MHA, §4.2), so that
      :math:`x \mapsto x + c\,F(x)` is invertible for :math:`c < 1` by fixed-point iteration (§4.1).
      The bound is recomputed each forward pass (weights may change during training).

    Args:
        embed_dim: :math:`D`.
        num_heads: :math:`H` (divides :math:`D`).
        tie_qk: share query and key weights.
        contractive: divide by the Lip∞ upper bound.

    Shapes: ``x`` ``[N, D]`` or ``[B, N, D]`` → same shape. ``rows`` (optional, a 1-D index tensor or
    list) restricts the *outputs* to those query rows, ``[..., len(rows), D]`` (each output row still
    attends over all :math:`N` inputs): the Jacobian of one output row costs :math:`O(N)` instead of
    :math:`O(N^2)`, which is what the Lipschitz lower-bound search needs for large :math:`N`.
    """

    def __init__(self, embed_dim: int, num_heads: int, tie_qk: bool = True, contractive: bool = False) -> None:
        super().__init__()
        _check_dims(embed_dim, num_heads, type(self).__name__)
        if contractive and not tie_qk:
            raise ConfigError("L2MultiheadAttention(contractive=True) needs tie_qk=True: untied L2 attention "
                              "is not Lipschitz (Lemma F.1), so there is no bound to divide by")
        self.embed_dim = int(embed_dim)
        self.num_heads = int(num_heads)
        self.head_dim = self.embed_dim // self.num_heads
        self.tie_qk = bool(tie_qk)
        self.contractive = bool(contractive)
        self.q_weight = _head_weight(embed_dim, num_heads)
        self.k_weight = None if tie_qk else _head_weight(embed_dim, num_heads)
        self.v_weight = _head_weight(embed_dim, num_heads)
        self.o_weight = nn.Parameter(nn.init.xavier_uniform_(torch.empty(embed_dim, embed_dim)))

    @property
    def key_weight(self) -> Tensor:
        """:math:`W^{K,h}` for every head, ``[H, D, D/H]`` (the query weight when tied)."""
        return self.q_weight if self.k_weight is None else self.k_weight

    def logits(self, x: Tensor, rows: Tensor | list[int] | None = None) -> Tensor:
        r"""Softmax inputs :math:`L^h_{ij} = -\|x_i^\top W^{Q,h} - x_j^\top W^{K,h}\|^2/\sqrt{D/H}`, ``[B, H, N_q, N]``
        (``x`` batched ``[B, N, D]``)."""
        xq = x if rows is None else x[:, torch.as_tensor(rows, device=x.device)]
        q = torch.einsum("bnd,hde->bhne", xq, self.q_weight)
        k = torch.einsum("bnd,hde->bhne", x, self.key_weight)
        sq = (q * q).sum(-1, keepdim=True) - 2.0 * q @ k.transpose(-1, -2) + (k * k).sum(-1).unsqueeze(-2)
        return -sq / math.sqrt(self.head_dim)

    def attention_weights(self, x: Tensor) -> Tensor:
        """:math:`P^h`, ``[H, N, N]`` for ``[N, D]`` input or ``[B, H, N, N]`` for ``[B, N, D]``."""
        xb, single = _as_batch(x, self.embed_dim, type(self).__name__)
        p = torch.softmax(self.logits(xb), dim=-1)
        return p[0] if single else p

    def forward(self, x: Tensor, rows: Tensor | list[int] | None = None) -> Tensor:
        xb, single = _as_batch(x, self.embed_dim, type(self).__name__)
        p = torch.softmax(self.logits(xb, rows), dim=-1)  # [B, H, Nq, N]
        # f^h(X) W^{V,h} = P^h X A^h W^{V,h} with A^h = W^Q W^Q^T / sqrt(D/H); apply right to left on X.
        a_v = self.q_weight @ (self.q_weight.transpose(1, 2) @ self.v_weight) / math.sqrt(self.head_dim)
        xv = torch.einsum("bnd,hde->bhne", xb, a_v)  # X A^h W^{V,h}: [B, H, N, D/H]
        heads = p @ xv  # [B, H, Nq, D/H]
        out = heads.transpose(1, 2).reshape(xb.size(0), -1, self.embed_dim) @ self.o_weight
        if self.contractive:
            from lipgnn.nn.lipschitz_bounds import l2_mha_bound

            out = out / l2_mha_bound(self, xb.size(1), "inf")
        return out[0] if single else out

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, tie_qk={self.tie_qk}, "
                f"contractive={self.contractive}")


class DotProductMultiheadAttention(nn.Module):
    r"""Dot-product multi-head self-attention, DP-MHA (Kim et al., eq. 4–5; Vaswani et al.):

    .. math::
        \mathrm{DP}^h(X) = \mathrm{softmax}\!\left(\frac{X W^{Q,h} (X W^{K,h})^\top}{\sqrt{D/H}}\right)
        X W^{V,h}, \qquad \mathrm{MHA}(X) = \left[\mathrm{DP}^1(X), \dots, \mathrm{DP}^H(X)\right] W^O.

    Equal to ``torch.nn.MultiheadAttention(D, H, bias=False)`` with ``in_proj_weight`` the transposed,
    head-stacked :math:`W^Q, W^K, W^V` and ``out_proj.weight`` :math:`W^{O\top}` (tested); kept as its
    own class so its parameters have the same layout as :class:`L2MultiheadAttention` and it takes the
    same ``[N, D]`` / ``[B, N, D]`` inputs and ``rows``. Not Lipschitz (Theorem 3.1).
    """

    def __init__(self, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        _check_dims(embed_dim, num_heads, type(self).__name__)
        self.embed_dim = int(embed_dim)
        self.num_heads = int(num_heads)
        self.head_dim = self.embed_dim // self.num_heads
        self.q_weight = _head_weight(embed_dim, num_heads)
        self.k_weight = _head_weight(embed_dim, num_heads)
        self.v_weight = _head_weight(embed_dim, num_heads)
        self.o_weight = nn.Parameter(nn.init.xavier_uniform_(torch.empty(embed_dim, embed_dim)))

    def forward(self, x: Tensor, rows: Tensor | list[int] | None = None) -> Tensor:
        xb, single = _as_batch(x, self.embed_dim, type(self).__name__)
        xq = xb if rows is None else xb[:, torch.as_tensor(rows, device=xb.device)]
        q = torch.einsum("bnd,hde->bhne", xq, self.q_weight)
        k = torch.einsum("bnd,hde->bhne", xb, self.k_weight)
        v = torch.einsum("bnd,hde->bhne", xb, self.v_weight)
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.head_dim), dim=-1)
        out = (p @ v).transpose(1, 2).reshape(xb.size(0), -1, self.embed_dim) @ self.o_weight
        return out[0] if single else out

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"
