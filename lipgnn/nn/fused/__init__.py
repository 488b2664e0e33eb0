r"""CSR fast path for the attention layers (``model.impl=fused``).

PyG's ``MessagePassing`` computes a GAT/GT layer edge by edge: it gathers ``x_j`` for every edge
(``index_select``, an ``[E, H, C]`` tensor), multiplies it by the attention weight and scatters it
back; the backward pass repeats both gathers. On CPU those ``E×C`` passes are about 60 % of a deep
stack's time. Here every ``E×C`` operation is a sparse-matrix product instead, with the attention
weights as the values of a CSR matrix whose rows are the target nodes; everything else is per node
(``[N, H, C]``) or per edge and head (``[E, H]`` scalars).

Layout (one job per module, as PyG splits ``torch_geometric.nn.conv`` from ``torch_geometric.utils``):

==========================  ===========================================================================
``graph``                   :class:`CSRGraph` (self-loops as ``GATConv`` adds them, edges sorted by
                            target, the transposed CSR) and its cache keyed by the ``edge_index`` tensor
``sparse``                  SpMM, SDDMM, the row softmax, gathers of per-node terms to the edges and
                            scatters back, each with a hand-written backward
``norms``                   fast squared norms and their in-place gradients
``lipschitz_csr``           LipschitzNorm's eq. (17)/(19) denominators per target node; the definition
                            is :mod:`lipgnn.nn.lipschitz`, which the tests hold these equal to
``dropout``                 dropout equal in distribution to ``F.dropout``, without a stored mask
``locality``                deep stacks on large graphs run relabelled in reverse Cuthill–McKee order
                            (memory locality), every dropout decision in the caller's coordinates
``activation``              ELU (the deep GAT/GT blocks' activation) as one compiled loop each way
``kernels``                 what the compiled CPU loops (numba) share: the switch to their eager twins
                            (each in the module that calls it; CUDA, or ``LIPGNN_KERNELS=eager``), the
                            decorators. The loops themselves live in ``*_kernels`` modules, one per layer
                            family (``gat_kernels``, ``san_kernels`` + ``san_vector_kernels``,
                            ``gru_kernels``, ``pair_norm_kernels``) or per family of operations that
                            several layers share (``sparse_kernels``: SDDMM, row softmax, SpMM;
                            ``score_kernels``: attention scores and LipschitzNorm; ``elementwise_kernels``:
                            dropout, ELU); the convention is :mod:`lipgnn.nn.fused.kernels`' docstring
``gat_conv``                :class:`FusedLipGATConv`
``gcn_conv``                :class:`FusedGCNConv` (GCN's normalised propagation as one CSR product)
``gcn2_conv``               :class:`FusedGCN2Conv` (GCNII: the same propagation, PyG's initial residual)
``gated_graph_conv``        :class:`FusedGatedGraphConv` (GGNN: the message sum as one CSR product)
``gin_conv``                :class:`FusedGINConv` (GIN: the neighbour sum as one CSR product)
``gru``                     GGNN's GRU cell as one compiled loop each way around its gate GEMMs
``gat_small``,              a whole GAT or GAT-Lip layer as one autograd operation (small graphs; one
``gat_one_head``            head on larger graphs), their loops in ``gat_kernels``
``pair_norm``               :class:`FusedPairNorm` (PairNorm as one autograd operation, compiled passes)
``transformer_conv``        :class:`FusedLipTransformerConv`
``san``                     the SAN block's attention (all heads, the nonlocal energy) as one operation
                            (``model=san``), its loops in ``san_kernels`` and ``san_vector_kernels``
==========================  ===========================================================================

The layers are drop-in subclasses of :class:`~lipgnn.nn.LipGATConv` and
:class:`~lipgnn.nn.LipTransformerConv`: same constructor, parameters and ``state_dict``, results equal
within 1e-5 (values and gradients).
"""

from lipgnn.nn.fused import kernels
from lipgnn.nn.fused.activation import ELU
from lipgnn.nn.fused.dropout import dropout
from lipgnn.nn.fused.gat_conv import FusedLipGATConv
from lipgnn.nn.fused.gated_graph_conv import FusedGatedGraphConv
from lipgnn.nn.fused.gcn2_conv import FusedGCN2Conv
from lipgnn.nn.fused.gcn_conv import FusedGCNConv
from lipgnn.nn.fused.gin_conv import FusedGINConv
from lipgnn.nn.fused.graph import CSRGraph, clear_csr_cache, get_csr_graph
from lipgnn.nn.fused.lipschitz_csr import (
    gat_denominator_csr,
    gat_node_denominator_csr,
    neighbour_max_csr,
    transformer_denominator_csr,
    transformer_scale_csr,
)
from lipgnn.nn.fused.norms import add_sq_norm_grad_, row_sq_norm, with_sq_norm
from lipgnn.nn.fused.pair_norm import FusedPairNorm
from lipgnn.nn.fused.sparse import (
    MAX_SHIFT_FREE_BOUND,
    csr_residual_energy,
    csr_sddmm,
    csr_sddmm_with_norms,
    csr_softmax,
    csr_spmm,
    csr_spmm_shared,
)
from lipgnn.nn.fused.transformer_conv import FusedLipTransformerConv

# The layers' public home is this package (pickles and reprs name it, and model code imports it).
FusedLipGATConv.__module__ = __name__
FusedLipTransformerConv.__module__ = __name__

__all__ = [
    "MAX_SHIFT_FREE_BOUND",
    "CSRGraph",
    "ELU",
    "FusedGCN2Conv",
    "FusedGCNConv",
    "FusedGatedGraphConv",
    "FusedGINConv",
    "FusedPairNorm",
    "FusedLipGATConv",
    "FusedLipTransformerConv",
    "add_sq_norm_grad_",
    "clear_csr_cache",
    "csr_residual_energy",
    "csr_sddmm",
    "csr_sddmm_with_norms",
    "csr_softmax",
    "csr_spmm",
    "csr_spmm_shared",
    "dropout",
    "gat_denominator_csr",
    "gat_node_denominator_csr",
    "get_csr_graph",
    "kernels",
    "neighbour_max_csr",
    "row_sq_norm",
    "transformer_denominator_csr",
    "transformer_scale_csr",
    "with_sq_norm",
]
