r"""Node relabelling for memory locality (``dataset.reorder``): reverse Cuthill–McKee.

A relabelling :math:`\pi` renumbers the nodes; with :math:`P` its permutation matrix the graph becomes

.. math::
    A' = P A P^\top, \qquad X' = P X, \qquad y' = P y, \qquad M' = P M \ \text{(every node mask)},

so node :math:`i` of the new graph is node :math:`\pi^{-1}(i)` of the old one. Every model in the suite is
equivariant to :math:`P` (message passing sums over neighbours whatever their labels), so accuracies are
unchanged up to float rounding. What changes is where each node's row sits in memory: reverse Cuthill–McKee
(Cuthill & McKee 1969; George 1971) numbers a node's neighbours close to it (it reduces the matrix
bandwidth :math:`\max_{(i, j) \in E} |\pi(i) - \pi(j)|`), so the sparse products that gather the rows of
a node's neighbours read memory that is close together.

Why it is opt-in and part of a run's identity: the same seed then draws a different dropout mask for each
*node* (the masks are drawn per row position), and sums over a node's neighbours run in another order,
so a run with ``dataset.reorder=rcm`` is not the run without it, only one equal in distribution.

The ordering is scipy's :func:`~scipy.sparse.csgraph.reverse_cuthill_mckee` on the symmetrised adjacency
(PyG has no reordering transform); the relabelling itself is PyG's :meth:`~torch_geometric.data.Data.subgraph`
with the node order as its subset, which permutes every node attribute and relabels ``edge_index``
(edges keep their order, so edge attributes stay aligned).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

__all__ = ["REORDERINGS", "ReorderNodes", "apply_reorder", "bandwidth", "rcm_order"]

#: ``dataset.reorder`` values: ``none`` keeps the dataset's own node order.
REORDERINGS = ("none", "rcm")


def rcm_order(edge_index: Tensor, num_nodes: int) -> Tensor:
    """The reverse Cuthill–McKee order of the undirected version of the graph: ``order[k]`` is the old
    label of the node that gets label ``k``."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    src, dst = edge_index.cpu().numpy()
    ones = np.ones(src.shape[0], dtype=np.int8)
    adj = sp.coo_matrix((ones, (src, dst)), shape=(num_nodes, num_nodes)).tocsr()
    order = reverse_cuthill_mckee((adj + adj.T).tocsr(), symmetric_mode=True)
    return torch.from_numpy(np.ascontiguousarray(order, dtype=np.int64))


def bandwidth(edge_index: Tensor) -> tuple[int, float]:
    r"""``(max, mean)`` of :math:`|i - j|` over the edges: the matrix bandwidth and its average."""
    if edge_index.numel() == 0:
        return 0, 0.0
    gap = (edge_index[0] - edge_index[1]).abs()
    return int(gap.max()), float(gap.double().mean())


class ReorderNodes(BaseTransform):
    r"""Relabel the nodes of a single graph in reverse Cuthill–McKee order (see the module docstring).

    The result carries ``node_order`` (``[N]``, the old label of every new node), so predictions can be
    mapped back: ``out_old[node_order] = out_new``.
    """

    def __init__(self, method: str = "rcm") -> None:
        if method != "rcm":
            raise ValueError(f"ReorderNodes method must be 'rcm', got {method!r}")
        self.method = method

    def forward(self, data: Data) -> Data:
        num_nodes = int(data.num_nodes)
        order = rcm_order(data.edge_index, num_nodes)
        if order.numel() != num_nodes:  # scipy returns every node, isolated ones included
            raise RuntimeError(f"reverse Cuthill-McKee returned {order.numel()} of {num_nodes} nodes")
        out = data.subgraph(order)
        out.node_order = order
        return out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.method!r})"


def apply_reorder(data: Data, method: str) -> tuple[Data, dict[str, object]]:
    """``data`` relabelled by ``method`` (one of :data:`REORDERINGS`; ``none`` returns it unchanged) and
    what a record says about it: the method and the mean ``|i - j|`` over edges before and after."""
    from lipgnn.errors import ConfigError

    if method not in REORDERINGS:
        raise ConfigError(f"dataset.reorder={method!r} is unknown; use one of {', '.join(REORDERINGS)}")
    if method == "none":
        return data, {}
    before = bandwidth(data.edge_index)[1]
    data = ReorderNodes(method)(data)
    return data, {"reorder": method, "edge_gap_mean_before": round(before, 1),
                  "edge_gap_mean_after": round(bandwidth(data.edge_index)[1], 1)}
