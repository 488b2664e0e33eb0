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


def _check_layers(layers: Sequence[int], depth: int) -> None:
    for k in layers:
        if not 1 <= int(k) <= depth:
            raise ValueError(f"cannot prune layer {k}: the model has layers 1..{depth}")


@contextmanager
def skip_blocks(model: nn.Module, layers: Sequence[int]) -> Iterator[nn.Module]:
    """Within the context, the 1-based blocks ``layers`` of ``model`` are the identity; restored on exit."""
    blocks = _blocks(model)
    _check_layers(layers, len(blocks))
    saved = {int(k): blocks[int(k) - 1] for k in layers}
    try:
        for k in saved:
            blocks[k - 1] = SkippedBlock()
        yield model
    finally:
        for k, block in saved.items():
            blocks[k - 1] = block


def _scores(task: Any, outputs: list[tuple[Tensor, Any]]) -> dict[str, float]:
    """Train/val/test scores of the logits of each evaluation batch, ``[(logits, batch), ...]``."""
    scores = {}
    for split in SPLITS:
        masks = [getattr(batch, f"{split}_mask") for _, batch in outputs]
        logits = torch.cat([out[mask].float().cpu() for (out, _), mask in zip(outputs, masks, strict=True)])
        targets = torch.cat([batch.y[mask].cpu() for (_, batch), mask in zip(outputs, masks, strict=True)])
        scores[split] = float(task.score(logits, targets))
    return scores


@torch.no_grad()
def evaluate(model: nn.Module, task: Any) -> dict[str, float]:
    """Train/val/test scores of ``model`` (eval mode) on a :class:`~lipgnn.data.spec.TaskData`."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    try:
        outputs = []
        for batch in task.eval_batches():
            batch = batch.to(device)
            outputs.append((model(batch.x, batch.edge_index, getattr(batch, "edge_attr", None)), batch))
    finally:
        model.train(was_training)
    return _scores(task, outputs)


def prune_single_layers(model: nn.Module, task: Any, layers: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Table 8: the unpruned scores (``pruned=None``) then, per layer k in ``layers`` (1-based, default all),
    the scores with only block k skipped. Each row: ``{"pruned": k, "train": …, "val": …, "test": …}``.

    A full-batch task (one evaluation batch) on a :class:`~lipgnn.models.DeepGNN` takes one pass that keeps every
    block's output and restarts each pruned pass after the skipped block (``DeepGNN.pruned_logits``: the same
    logits, about half the block calls); other models and mini-batched tasks run one pass per pruned layer."""
    depth = len(_blocks(model))
    chosen = list(range(1, depth + 1)) if layers is None else [int(k) for k in layers]
    _check_layers(chosen, depth)
    batches = iter(task.eval_batches())
    first = next(batches, None)
    if first is not None and next(batches, None) is None and hasattr(model, "pruned_logits"):
        return _pruned_in_one_pass(model, task, first, chosen)
    rows: list[dict[str, Any]] = [{"pruned": None, **evaluate(model, task)}]
    for k in chosen:
        with skip_blocks(model, [k]):
            rows.append({"pruned": k, **evaluate(model, task)})
    return rows


@torch.no_grad()
def _pruned_in_one_pass(model: nn.Module, task: Any, batch: Any, chosen: list[int]) -> list[dict[str, Any]]:
    was_training = model.training
    model.eval()
    try:
        batch = batch.to(next(model.parameters()).device)
        passes = model.pruned_logits(batch.x, batch.edge_index, getattr(batch, "edge_attr", None),
                                     skipped=[k - 1 for k in chosen])
        return [{"pruned": None if k is None else k + 1, **_scores(task, [(logits, batch)])}
                for k, logits, _ in passes]
    finally:
        model.train(was_training)


__all__ = ["SkippedBlock", "evaluate", "prune_single_layers", "skip_blocks"]
