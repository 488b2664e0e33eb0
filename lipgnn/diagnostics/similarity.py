r"""Inter-layer cosine similarity, Guan & He eq. (1) (§5, Fig. 2).

.. math::
    \mathrm{sim}(X^s, X^t) = \frac{1}{n} \sum_{i \in [n]} \frac{X^s(i) \cdot X^t(i)}{|X^s(i)|\,|X^t(i)|}
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

#: Rows with a norm below this count as zero vectors (their cosine with anything is 0, not nan).
EPS = 1e-12


def cosine_similarity_matrix(layers: Sequence[Tensor]) -> Tensor:
    r"""The matrix :math:`S_{st} = \mathrm{sim}(X^s, X^t)` of eq. (1) over the given layer representations.

    Args:
        layers: :math:`X^0, \dots, X^N`, each of shape ``[n, d]`` (the same ``n``; widths may differ only
            if no two layers of different width are compared, so in practice one width).

    Returns:
        a symmetric ``[N+1, N+1]`` float64 tensor with ones on the diagonal (for rows that are not zero).
    """
    if not layers:
        raise ValueError("cosine_similarity_matrix needs at least one layer representation")
    n = int(layers[0].size(0))
    rows = []
    for k, x in enumerate(layers):
        if x.dim() != 2 or x.size(0) != n or x.size(1) != layers[0].size(1):
            raise ValueError(f"layer {k} has shape {tuple(x.shape)}; all layers must be [{n}, {layers[0].size(1)}]")
        # Each row scaled to unit length once: sim(s, t) is then (1/n) <U_s, U_t> over all entries.
        rows.append(F.normalize(x.detach().to(torch.float64).cpu(), dim=1, eps=EPS).reshape(-1))
    units = torch.stack(rows)
    return units @ units.T / n


__all__ = ["cosine_similarity_matrix"]
