"""Seeded random node splits (``dataset.split=random``), for datasets without masks or fully supervised runs.

Policy: one permutation of the labelled nodes, drawn from a generator seeded by (dataset name, seed) only,
so every model sees the same split for a seed. With ``train_per_class`` = k, the first k nodes of each
class in that permutation train, and the remaining nodes are divided between validation and test in the
ratio ``val_fraction : test_fraction`` (Shchur et al.'s per-class protocol). Otherwise the first
``train_fraction`` of the permutation trains, the next ``val_fraction`` validates and the next
``test_fraction`` tests (e.g. 0.6/0.2/0.2, fully supervised); fractions summing below 1 leave nodes unused.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lipgnn.config_schema import RandomSplitMixin
from lipgnn.data.common import make_generator
from lipgnn.errors import ConfigError


def random_split(y: Tensor, name: str, seed: int, *, train_per_class: int | None, train_fraction: float,
                 val_fraction: float, test_fraction: float) -> tuple[Tensor, Tensor, Tensor]:
    """Boolean (train, val, test) masks over ``y``'s nodes; nodes with a negative label are never used."""
    labelled = (y >= 0).nonzero().view(-1)
    order = labelled[torch.randperm(labelled.numel(), generator=make_generator("split", name.lower(), int(seed)))]
    n = order.numel()
    if train_per_class is not None:
        chosen = torch.zeros(y.numel(), dtype=torch.bool)
        for c in y[order].unique().tolist():
            of_class = order[y[order] == c]
            if of_class.numel() <= train_per_class:
                raise ConfigError(f"dataset.train_per_class={train_per_class} leaves no validation/test node of "
                                  f"class {c} ({of_class.numel()} nodes); lower it")
            chosen[of_class[:train_per_class]] = True
        train = order[chosen[order]]
        rest = order[~chosen[order]]
        n_val = round(rest.numel() * val_fraction / (val_fraction + test_fraction))
        val, test = rest[:n_val], rest[n_val:]
    else:
        n_train, n_val = round(n * train_fraction), round(n * val_fraction)
        n_test = min(round(n * test_fraction), n - n_train - n_val)
        end = n_train + n_val
        train, val, test = order[:n_train], order[n_train:end], order[end:end + n_test]
    masks = []
    for idx in (train, val, test):
        mask = torch.zeros(y.numel(), dtype=torch.bool)
        mask[idx] = True
        masks.append(mask)
    return masks[0], masks[1], masks[2]


def apply_split(data: Any, cfg: RandomSplitMixin, name: str, seed: int, has_masks: bool) -> dict[str, Any]:
    """Set ``data``'s masks by ``dataset.split`` (public = the dataset's own masks); returns the split's info."""
    if cfg.split == "public":
        if not has_masks:
            raise ConfigError(f"dataset {name} has no split masks of its own; use dataset.split=random "
                              "(with dataset.train_per_class=<k> or the train/val/test fractions)")
        return {"split": "public"}
    per_class = cfg.train_per_class
    fractions = {"train_fraction": float(cfg.train_fraction), "val_fraction": float(cfg.val_fraction),
                 "test_fraction": float(cfg.test_fraction)}
    data.train_mask, data.val_mask, data.test_mask = random_split(
        data.y.view(-1), name, seed, train_per_class=None if per_class is None else int(per_class), **fractions)
    policy = {"train_per_class": per_class} if per_class is not None else fractions
    return {"split": "random", "split_seed": int(seed), **policy}
