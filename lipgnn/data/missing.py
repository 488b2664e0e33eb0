"""Missing-vector setting (Zhao & Akoglu 2020, PairNorm; LipschitzNorm paper §7.1).

The features of a fraction of the nodes outside the training set are erased: their rows of ``x`` become zero
while the nodes, their labels and their edges stay. With ``pool`` the sorted indices of non-training nodes,
``int(|pool| * rate / 100)`` of them are erased (the authors' formula).

Which nodes are erased depends only on (dataset name, seed) and the rate: a dedicated generator seeded from a
hash of (dataset name, seed) draws ONE permutation of the pool and rate ``r`` erases its first
``int(|pool| * r / 100)`` entries. The rate is deliberately left out of the hash so that the erased sets are
nested (lower rates erase subsets of higher rates), which makes a curve over rates compare like with like;
every model and normalisation sees the same erased set because the generator never touches global RNG state.
The authors draw these indices unseeded and cache them per (dataset, rate); here they are reproducible.
"""

from __future__ import annotations

import math
from numbers import Real

import torch
from torch import Tensor
from torch_geometric.data import Data

from lipgnn.data.common import make_generator
from lipgnn.errors import ConfigError


def check_rate(rate: object) -> float:
    """Validate a missing rate in percent (0..100)."""
    if isinstance(rate, bool) or not isinstance(rate, Real) or not math.isfinite(float(rate)):
        raise ConfigError(f"dataset.missing_rate must be a number in [0, 100], got {rate!r}")
    if not 0 <= rate <= 100:
        raise ConfigError(f"dataset.missing_rate={rate} is outside [0, 100]; it is a percentage of non-train nodes")
    return float(rate)


def erased_nodes(train_mask: Tensor, rate: float, dataset: str, seed: int) -> Tensor:
    """Indices of the nodes whose features are erased, in draw order (a prefix of one fixed permutation)."""
    rate = check_rate(rate)
    pool = (~train_mask).nonzero().view(-1)
    count = int(pool.numel() * rate / 100)
    generator = make_generator("missing-vector", dataset.lower(), int(seed))
    order = torch.randperm(pool.numel(), generator=generator)
    return pool[order[:count]]


def apply_missing_vector(data: Data, rate: float, dataset: str, seed: int) -> tuple[Data, dict]:
    """Zero the feature rows of the erased nodes of ``data`` (in place); returns ``(data, info)``."""
    erased = erased_nodes(data.train_mask, rate, dataset, seed)
    if erased.numel():
        data.x = data.x.clone()
        data.x[erased] = 0
    info = {
        "missing_rate": float(rate),
        "num_erased": int(erased.numel()),
        "missing_pool": int((~data.train_mask).sum()),
    }
    return data, info
