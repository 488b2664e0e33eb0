"""TREES / Tree-NeighborsMatch (Alon & Yahav 2021; LipschitzNorm paper §7.2).

Each example is a complete binary tree of depth ``d`` in heap order: node 0 is the root, node ``i`` has
children ``2i+1`` and ``2i+2``, the ``L = 2**d`` leaves are nodes ``L-1 .. 2L-2``. Edges go child -> parent
only, so messages flow from the leaves to the root and a leaf is exactly ``d`` hops from it (no self-loops
here: layers add their own). Node inputs are token pairs ``(key, value)``:

* root: ``(t, 0)`` with the target key ``t`` drawn uniformly from ``1..L``;
* leaf ``k``: ``(k + 1, perm[k])`` with ``perm`` a random permutation of ``0..L-1`` (the leaf values);
* internal nodes: ``(0, 0)``.

The label, stored on the root, is the value of the leaf whose key is ``t``: ``perm[t - 1]`` (``L`` classes);
``y = -1`` and all masks are false on the other nodes. Only the per-tree ``perm`` and ``t`` are generated
(vectorised) and cached; batches are built lazily from one template tree by offsetting node indices.

Split: the trees are shuffled and ``train_fraction`` (80%) go to training as in Alon & Yahav; the held-out
20% is split in two halves, validation and test (they only hold out one set).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from lipgnn.data.common import DEFAULT_CACHE, as_int, cfg_get, make_generator
from lipgnn.data.spec import DataSpec, TaskData
from lipgnn.errors import ConfigError

MAX_DEPTH = 16
CACHE_VERSION = 1


def tree_edge_index(depth: int) -> Tensor:
    """Edges child -> parent of one complete binary tree of ``depth`` in heap order, shape [2, 2**(d+1)-2]."""
    child = torch.arange(1, 2 ** (depth + 1) - 1)
    return torch.stack([child, (child - 1) // 2])


def generate_trees(depth: int, num_trees: int, seed: int) -> tuple[Tensor, Tensor]:
    """Leaf-value permutations ``perm`` [T, 2**d] and root target keys ``target`` [T] (in 1..2**d).

    Drawn from a generator seeded by (depth, seed) only: tree ``i`` is the same whatever ``num_trees``.
    """
    num_leaves = 2**depth
    generator = make_generator("trees", depth, int(seed))
    # Row-wise argsort of uniform noise = an independent uniform permutation per tree, in one call.
    # float64 makes ties (which would bias the permutation) practically impossible; stable makes it portable.
    noise = torch.rand(num_trees, num_leaves, generator=generator, dtype=torch.float64)
    perm = noise.argsort(dim=1, stable=True)
    target = torch.randint(1, num_leaves + 1, (num_trees,), generator=generator)
    return perm, target


def load_or_generate(depth: int, num_trees: int, seed: int, cache_dir: Path | None) -> tuple[Tensor, Tensor]:
    """``generate_trees`` with an on-disk cache keyed by (depth, num_trees, seed)."""
    path = None
    if cache_dir is not None:
        path = cache_dir / "trees" / f"trees_v{CACHE_VERSION}_d{depth}_n{num_trees}_seed{seed}.pt"
        if path.exists():
            try:
                stored = torch.load(path, weights_only=True)
                perm, target = stored["perm"].long(), stored["target"].long()
                if perm.shape == (num_trees, 2**depth) and target.shape == (num_trees,):
                    return perm, target
            except Exception:  # unreadable cache (e.g. interrupted write by an old version): regenerate
                pass
    perm, target = generate_trees(depth, num_trees, seed)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Atomic write: parallel runs (multirun) may create the same file at once.
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        small = torch.int16 if depth < 15 else torch.int32
        torch.save({"perm": perm.to(small), "target": target.to(small)}, tmp)
        os.replace(tmp, path)
    return perm, target


def split_trees(num_trees: int, train_fraction: float, depth: int, seed: int) -> Tensor:
    """Split code per tree: 0 train, 1 val, 2 test (random, seeded; val/test share the held-out part)."""
    order = torch.randperm(num_trees, generator=make_generator("trees-split", depth, num_trees, int(seed)))
    num_train = int(round(train_fraction * num_trees))
    num_val = (num_trees - num_train) // 2
    split = torch.full((num_trees,), 2, dtype=torch.long)
    split[order[:num_train]] = 0
    split[order[num_train:num_train + num_val]] = 1
    return split


class TreeBatcher:
    """Builds PyG batches of whole trees from the per-tree ``perm``/``target`` tensors."""

    def __init__(self, depth: int, perm: Tensor, target: Tensor, split: Tensor,
                 device: torch.device | str | None = None) -> None:
        self.depth = depth
        self.num_leaves = 2**depth
        self.nodes_per_tree = 2 ** (depth + 1) - 1
        self.perm, self.target, self.split = perm, target, split
        self.labels = perm.gather(1, (target - 1).view(-1, 1)).view(-1)
        self.template = tree_edge_index(depth)
        self.device = device

    def batch(self, tree_ids: Tensor) -> Data:
        """Disjoint union of the trees ``tree_ids``; tree ``j`` of the batch owns nodes ``j*n .. (j+1)*n-1``."""
        count, n, leaves = tree_ids.numel(), self.nodes_per_tree, self.num_leaves
        x = torch.zeros(count, n, 2, dtype=torch.long)
        x[:, 0, 0] = self.target[tree_ids]
        x[:, leaves - 1:, 0] = torch.arange(1, leaves + 1)
        x[:, leaves - 1:, 1] = self.perm[tree_ids]
        y = torch.full((count, n), -1, dtype=torch.long)
        y[:, 0] = self.labels[tree_ids]
        offsets = (torch.arange(count) * n).view(1, count, 1)
        edge_index = (self.template.view(2, 1, -1) + offsets).reshape(2, -1)
        masks = {}
        for key, code in (("train_mask", 0), ("val_mask", 1), ("test_mask", 2)):
            mask = torch.zeros(count, n, dtype=torch.bool)
            mask[:, 0] = self.split[tree_ids] == code
            masks[key] = mask.view(-1)
        batch = torch.arange(count).repeat_interleave(n)
        data = Data(x=x.view(-1, 2), edge_index=edge_index, y=y.view(-1), batch=batch,
                    root_index=torch.arange(count) * n, tree_id=tree_ids.clone(), **masks)
        return data.to(self.device) if self.device is not None else data

    def iterate(self, tree_ids: Tensor, batch_size: int) -> Iterator[Data]:
        for start in range(0, tree_ids.numel(), batch_size):
            yield self.batch(tree_ids[start:start + batch_size])


def load_trees(cfg: Any, seed: int, device: torch.device | str | None = None) -> TaskData:
    """``TaskData`` for the TREES config: mini-batches of ``batch_size`` whole trees."""
    depth = as_int(cfg_get(cfg, "tree_depth", 3), "tree_depth", 1, MAX_DEPTH)
    num_trees = as_int(cfg_get(cfg, "num_trees", 5000), "num_trees", 1)
    batch_size = as_int(cfg_get(cfg, "batch_size", 1024), "batch_size", 1)
    train_fraction = cfg_get(cfg, "train_fraction", 0.8)
    if isinstance(train_fraction, bool) or not isinstance(train_fraction, (int, float)) \
            or not 0 < train_fraction <= 1:
        raise ConfigError(f"dataset.train_fraction must be in (0, 1], got {train_fraction!r}")
    cache = cfg_get(cfg, "cache_dir", DEFAULT_CACHE)
    cache_dir = Path(str(cache)).expanduser() if cache else None

    perm, target = load_or_generate(depth, num_trees, seed, cache_dir)
    split = split_trees(num_trees, float(train_fraction), depth, seed)
    batcher = TreeBatcher(depth, perm, target, split, device)
    train_ids = (split == 0).nonzero().view(-1)
    all_ids = torch.arange(num_trees)

    def train_batches(generator: torch.Generator | None = None) -> Iterator[Data]:
        order = torch.randperm(train_ids.numel(), generator=generator)
        return batcher.iterate(train_ids[order], batch_size)

    def eval_batches() -> Iterator[Data]:
        return batcher.iterate(all_ids, batch_size)

    leaves = 2**depth
    spec = DataSpec(num_features=0, num_classes=leaves, input="embedding",
                    vocab_sizes=(leaves + 1, leaves), task="tree")
    info = {"tree_depth": depth, "num_trees": num_trees, "num_train": int((split == 0).sum()),
            "num_val": int((split == 1).sum()), "num_test": int((split == 2).sum())}
    return TaskData(name=str(cfg_get(cfg, "name", "trees")), spec=spec, metric="acc",
                    train_batches=train_batches, eval_batches=eval_batches, info=info)
