r"""Single-layer pruning (Guan & He §5, Table 8): skip one block of a trained deep GNN at evaluation, re-score.

With block :math:`k` pruned the forward pass becomes

.. math::
    X^{j+1} = \mathrm{Block}_j(X^j) \;(j \neq k - 1), \qquad X^{k} = X^{k-1},

i.e. block :math:`k` (1-based: the block producing :math:`X^k`) is replaced by the identity; nothing is
retrained. A deep layer that contributes little (the curse of depth, Definition 2.2) changes the score little.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from lipgnn.diagnostics.tracing import _blocks

SPLITS = ("train", "val", "test")


class SkippedBlock(nn.Module):
    """Identity with a block's call signature: ``forward(x, *args) -> x``."""

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return x


@contextmanager
def skip_blocks(model: nn.Module, layers: Sequence[int]) -> Iterator[nn.Module]:
    """Within the context, the 1-based blocks ``layers`` of ``model`` are the identity; restored on exit."""
    blocks = _blocks(model)
    depth = len(blocks)
    for k in layers:
        if not 1 <= int(k) <= depth:
            raise ValueError(f"cannot prune layer {k}: the model has layers 1..{depth}")
    saved = {int(k): blocks[int(k) - 1] for k in layers}
    try:
        for k in saved:
            blocks[k - 1] = SkippedBlock()
        yield model
    finally:
        for k, block in saved.items():
            blocks[k - 1] = block


@torch.no_grad()
def evaluate(model: nn.Module, task: Any) -> dict[str, float]:
    """Train/val/test scores of ``model`` (eval mode) on a :class:`~lipgnn.data.spec.TaskData`."""
    was_training = model.training
    model.eval()
    logits: dict[str, list[Tensor]] = {s: [] for s in SPLITS}
    targets: dict[str, list[Tensor]] = {s: [] for s in SPLITS}
    device = next(model.parameters()).device
    try:
        for batch in task.eval_batches():
            batch = batch.to(device)
            out = model(batch.x, batch.edge_index, getattr(batch, "edge_attr", None))
            for split in SPLITS:
                mask = getattr(batch, f"{split}_mask")
                logits[split].append(out[mask].float().cpu())
                targets[split].append(batch.y[mask].cpu())
    finally:
        model.train(was_training)
    return {s: float(task.score(torch.cat(logits[s]), torch.cat(targets[s]))) for s in SPLITS}


def prune_single_layers(model: nn.Module, task: Any, layers: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Table 8: the unpruned scores (``pruned=None``) then, per layer k in ``layers`` (1-based, default all),
    the scores with only block k skipped. Each row: ``{"pruned": k, "train": …, "val": …, "test": …}``."""
    depth = len(_blocks(model))
    chosen = list(range(1, depth + 1)) if layers is None else [int(k) for k in layers]
    rows: list[dict[str, Any]] = [{"pruned": None, **evaluate(model, task)}]
    for k in chosen:
        with skip_blocks(model, [k]):
            rows.append({"pruned": k, **evaluate(model, task)})
    return rows


__all__ = ["SkippedBlock", "evaluate", "prune_single_layers", "skip_blocks"]
