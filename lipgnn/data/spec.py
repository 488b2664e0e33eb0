"""What a dataset hands to the rest of lipgnn: the model-facing :class:`DataSpec` and the :class:`TaskData`
bundle of batch iterators (see docs/ARCHITECTURE.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch_geometric.data import Data


@dataclass
class DataSpec:
    """Shape of the inputs and outputs a model must accept/produce for one dataset."""

    num_features: int  # dense input width (0 when input == "embedding")
    num_classes: int  # output width (112 for proteins, 2**d + 1 for TREES: class 0 = empty, never a label)
    input: str = "dense"  # "dense" (float x [N, F]) | "embedding" (long x [N, K] of token ids)
    vocab_sizes: tuple[int, ...] = ()  # one per column of x when input == "embedding"
    edge_dim: int | None = None
    multilabel: bool = False  # proteins: BCE-with-logits over 112 labels
    task: str = "node"  # "node" | "tree"
    # Edges of the graph one training step sees (full batch: the graph's; mini-batches: the expected count);
    # 0 when unknown. model.impl=auto reads it on CUDA (lipgnn.models.builder.resolve_impl).
    step_edges: int = 0


def accuracy(logits: Tensor, y: Tensor) -> float:
    """Fraction of rows whose arg-max logit equals the integer label (rows already masked by the caller)."""
    if y.numel() == 0:
        return float("nan")
    return (logits.argmax(dim=-1) == y).float().mean().item()


@dataclass
class TaskData:
    """One loaded dataset: its spec, metric and batch iterators.

    ``train_batches(generator)`` yields one epoch of training batches (mini-batch datasets reshuffle with
    ``generator``); ``eval_batches()`` covers every evaluated node exactly once. Full-batch datasets yield
    their single graph from both. ``info`` is copied into the run record.
    """

    name: str
    spec: DataSpec
    metric: str  # "acc" | "rocauc"
    train_batches: Callable[[torch.Generator | None], Iterable[Data]]
    eval_batches: Callable[[], Iterable[Data]]
    info: dict = field(default_factory=dict)
    # Extension of the contract (optional, defaults keep it compatible): the dataset's official scorer,
    # e.g. ogb's Evaluator for ogbn-*. ``None`` means plain accuracy.
    score_fn: Callable[[Tensor, Tensor], float] | None = None

    def score(self, logits: Tensor, y: Tensor) -> float:
        """Metric ``self.metric`` of ``logits`` [M, C] against targets ``y`` of the same M (masked) nodes."""
        if self.score_fn is not None:
            return self.score_fn(logits, y)
        return accuracy(logits, y)
