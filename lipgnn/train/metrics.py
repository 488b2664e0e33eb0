"""Training loss and finiteness checks. Scores come from the dataset (``TaskData.score``: OGB's Evaluator
for ogbn-*, accuracy otherwise)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def loss_fn(logits: Tensor, y: Tensor, multilabel: bool) -> Tensor:
    """Cross-entropy for single-label tasks, binary cross-entropy with logits for multi-label ones."""
    if multilabel:
        return F.binary_cross_entropy_with_logits(logits, y.to(logits.dtype))
    return F.cross_entropy(logits, y)


def is_finite(value: Tensor | float) -> bool:
    return bool(torch.isfinite(torch.as_tensor(value)).all())
