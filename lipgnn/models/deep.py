r"""The deep GNN every experiment trains: encoder → ``depth`` message-passing blocks → linear head.

.. math::
    x_0 = \mathrm{Enc}(x), \qquad x_{l+1} = \mathrm{Block}_l(x_l, x_0), \qquad
    \hat y = W_{\mathrm{out}}\, x_L + b_{\mathrm{out}}

``Enc`` is ``Linear(num_features, hidden)`` for dense features or a sum of embeddings for token ids
(TREES); each block follows the authors' order (see :mod:`lipgnn.models.blocks`). The attention blocks
(GAT, GT) are eq. (4)/(5) of the paper, with the score normalised by eq. (17)/(19) when norm=lip.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint
from torch_geometric.utils import add_self_loops, remove_self_loops

from lipgnn.nn.fused import locality
from lipgnn.nn.fused.sparse_input import SparseInputLinear

if TYPE_CHECKING:
    from lipgnn.nn.fused.graph import CSRGraph
    from lipgnn.nn.fused.locality import Relabelled


class DeepGNN(nn.Module):
    r"""Encoder → ``depth`` blocks (:class:`~lipgnn.models.blocks.GNNBlock` or SAN blocks) → output ``Linear``.

    .. math::
        \hat y = W_{\mathrm{out}}\,\mathrm{Dropout}_{q}\big(\mathrm{Block}_{L-1} \circ \dots \circ
        \mathrm{Block}_0(\sigma_0(\mathrm{Enc}(\mathrm{Dropout}_{q_0}(x))))\big)

    :math:`\sigma_0`, :math:`q_0` and :math:`q` are identity/zero except for GCNII, whose own
    architecture is ``ReLU(Linear(Dropout(x)))`` in and ``Linear(Dropout(h))`` out.

    Args:
        encoder: input projection (``nn.Linear`` or :class:`~lipgnn.models.blocks.EmbeddingSum`).
        blocks: the message-passing blocks, in depth order.
        head: output ``nn.Linear``.
        input_activation: optional activation on the encoder output (GCNII's :math:`x_0`).
        input_dropout: dropout on dense input features before the encoder (GCNII); with a
            :class:`~lipgnn.nn.fused.sparse_input.SparseInputLinear` encoder drawn on the stored entries of sparse
            features (:meth:`~lipgnn.nn.fused.sparse_input.SparseInputLinear.dropped`, equal in distribution).
        head_dropout: dropout before the head (GCNII).
        dropout_fn: the head dropout's function, ``F.dropout`` or a twin equal in distribution (the fused
            models' compiled :func:`lipgnn.nn.fused.dropout.dropout`).
        uses_edge_attr: the attention convs were built with ``edge_dim``; otherwise ``edge_attr`` is
            dropped in :meth:`forward` (a dataset may carry edge features the model does not use).
        checkpoint_activations: recompute each block in the backward pass instead of storing its
            activations (``torch.utils.checkpoint``, non-reentrant; dropout masks are reproduced
            because the RNG state is saved and restored). Settable after construction.
        self_loops: replace the graph's self-loops by one per node before the blocks (SAN's softmax runs
            over the neighbours plus self); the result is cached for the edge-index tensor last seen.
        model_name / norm_name: recorded for ``repr`` and run records.

    ``locality_order`` (attribute, default on): run the blocks on the graph relabelled in reverse
    Cuthill–McKee order where :func:`lipgnn.nn.fused.locality.stack_graph` allows it (fused GAT/GT
    and SAN stacks on CPU, large graphs), with every dropout mask in the caller's coordinates, so outputs and
    gradients are those of the caller's order up to float summation order; only memory locality changes.

    ``forward(..., skip_blocks=...)`` leaves the given block indices out (each an identity), for
    single-layer pruning at evaluation (Guan & He Table 8).
    """

    def __init__(
        self,
        encoder: nn.Module,
        blocks: list[nn.Module],
        head: nn.Linear,
        *,
        input_activation: nn.Module | None = None,
        input_dropout: float = 0.0,
        head_dropout: float = 0.0,
        dropout_fn: Callable[[Tensor, float, bool], Tensor] = F.dropout,
        uses_edge_attr: bool = False,
        checkpoint_activations: bool = False,
        self_loops: bool = False,
        model_name: str = "",
        norm_name: str = "none",
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.input_activation = input_activation
        self.blocks = nn.ModuleList(blocks)
        self.head = head
        self.input_dropout = float(input_dropout)
        self.head_dropout = float(head_dropout)
        self.dropout_fn = dropout_fn
        self.uses_edge_attr = bool(uses_edge_attr)
        self.checkpoint_activations = bool(checkpoint_activations)
        self.self_loops = bool(self_loops)
        self._loops_cache: tuple[Tensor, Tensor] | None = None
        self.locality_order = True
        self.model_name = model_name
        self.norm_name = norm_name

    @property
    def depth(self) -> int:
        return len(self.blocks)

    def attention_layers(self) -> list[nn.Module]:
        """The conv modules that compute attention scores (GAT/GT), in depth order; empty otherwise."""
        return [block.conv for block in self.blocks if block.has_attention]

    def encode(self, x: Tensor) -> Tensor:
        """:math:`x_0`, the representation fed to the first block (and to every GCNII layer)."""
        if self.input_dropout > 0 and x.is_floating_point() and isinstance(self.encoder, SparseInputLinear):
            h = self.encoder.dropped(x, self.input_dropout, self.training)
        else:
            if self.input_dropout > 0 and x.is_floating_point():
                x = F.dropout(x, p=self.input_dropout, training=self.training)
            h = self.encoder(x)
        if self.input_activation is not None:
            h = self.input_activation(h)
        return h

    def prepare_edges(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        """The edge index the blocks see: ``edge_index`` itself, or with one self-loop per node."""
        if not self.self_loops:
            return edge_index
        cached = self._loops_cache
        if cached is not None and cached[0] is edge_index:
            return cached[1]
        looped, _ = add_self_loops(remove_self_loops(edge_index)[0], num_nodes=num_nodes)
        self._loops_cache = (edge_index, looped)
        return looped

    def _stack_inputs(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor | None,
                      ) -> tuple[Tensor, Tensor | CSRGraph, Tensor | None, Relabelled | None]:
        """``(x_0, edges, edge_attr, relabelled)``: the encoded input and the graph the blocks run on, relabelled
        for locality where :func:`~lipgnn.nn.fused.locality.stack_graph` says so (``relabelled`` then maps back)."""
        if not self.uses_edge_attr:
            edge_attr = None
        edge_index = self.prepare_edges(edge_index, x.size(0))
        h = self.encode(x)
        relabelled = None
        if self.locality_order and edge_attr is None:
            relabelled = locality.stack_graph(self.blocks, edge_index, h)
        if relabelled is None:
            return h, edge_index, edge_attr, None
        # The blocks run on the graph relabelled for locality, with the caller's dropout masks.
        return h.index_select(0, relabelled.graph.node_order), relabelled.graph, edge_attr, relabelled

    def _readout(self, h: Tensor, relabelled: Relabelled | None) -> Tensor:
        """The logits of the last block's output ``h`` (in the caller's node order)."""
        if relabelled is not None:
            h = h.index_select(0, relabelled.inverse)
        if self.head_dropout > 0:
            h = self.dropout_fn(h, self.head_dropout, self.training)
        return self.head(h)

    def forward(
        self, x: Tensor, edge_index: Tensor, edge_attr: Tensor | None = None, skip_blocks: Collection[int] = ()
    ) -> Tensor:
        x_0, edges, edge_attr, relabelled = self._stack_inputs(x, edge_index, edge_attr)
        h = x_0
        use_checkpoint = self.checkpoint_activations and self.training and torch.is_grad_enabled()
        for index, block in enumerate(self.blocks):
            if index in skip_blocks:
                continue
            if use_checkpoint:
                # Non-reentrant checkpointing supports inputs without grad (edge_index) and keyword
                # None inputs; preserve_rng_state (default) replays the same dropout masks.
                h = checkpoint(block, h, edges, edge_attr, x_0, use_reentrant=False)
            else:
                h = block(h, edges, edge_attr, x_0)
        return self._readout(h, relabelled)

    @torch.no_grad()
    def pruned_logits(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor | None = None,
                      skipped: Iterable[int] | None = None) -> Iterator[tuple[int | None, Tensor, list[Tensor]]]:
        """Guan & He §5's single-block pruning at evaluation: items ``(k, logits, states)``, first ``k = None`` (the
        whole model), then each block ``k`` of ``skipped`` (0-based, default every block, in that order) skipped, the
        logits equal to ``self(x, edge_index, edge_attr, skip_blocks={k})`` in the current mode; ``states`` is the
        unpruned model's encoder output and block outputs (``depth + 1`` tensors, in the blocks' node order), the
        same list each time.

        Skipping block ``k`` leaves blocks ``0..k-1`` as they are, so each pruned pass starts from the stored output
        of block ``k - 1`` and runs only blocks ``k+1..``: about half the block calls of ``depth`` separate passes,
        for ``depth + 1`` stored hidden states."""
        blocks = list(self.blocks)
        order = range(len(blocks)) if skipped is None else [int(k) for k in skipped]
        for k in order:
            if not 0 <= k < len(blocks):
                raise ValueError(f"cannot skip block {k}: the model has blocks 0..{len(blocks) - 1}")
        x_0, edges, edge_attr, relabelled = self._stack_inputs(x, edge_index, edge_attr)
        states = [x_0]
        for block in blocks:
            states.append(block(states[-1], edges, edge_attr, x_0))
        yield None, self._readout(states[-1], relabelled), states
        for k in order:
            h = states[k]
            for block in blocks[k + 1:]:
                h = block(h, edges, edge_attr, x_0)
            yield k, self._readout(h, relabelled), states

    def extra_repr(self) -> str:
        return (
            f"model={self.model_name}, norm={self.norm_name}, depth={self.depth}, "
            f"checkpoint_activations={self.checkpoint_activations}"
        )
