"""TREES / Tree-NeighborsMatch (Alon & Yahav 2021; LipschitzNorm paper §7.2).

Each example is a complete binary tree of depth ``d`` in heap order: node 0 is the root, node ``i`` has
children ``2i+1`` and ``2i+2``, the ``L = 2**d`` leaves are nodes ``L-1 .. 2L-2``. Edges go child -> parent,
so messages flow from the leaves to the root and a leaf is exactly ``d`` hops from it, plus one self-loop
per node, as Alon & Yahav add in their data (GGNN and GIN see the self-loop; GCN and GAT would add it
anyway). Node inputs are token pairs ``(key, value)``, 0 meaning "empty":

* root: ``(t, 0)`` with the target key ``t`` in ``1..L``;
* leaf ``k``: ``(k + 1, perm[k] + 1)``: keys and values both in ``1..L`` (``perm`` a permutation of ``0..L-1``);
* internal nodes: ``(0, 0)``.

The label, stored on the root, is the value of the leaf whose key is ``t``: ``perm[t - 1] + 1``. As in Alon
& Yahav the output has ``L + 1`` classes (class 0, "empty", never occurs); ``y = -1`` and all masks are false
on the other nodes.

Which examples (``dataset.sampling``):

* ``alon_yahav`` (their ``DictionaryLookupDataset``): ``P = min(1000, L!, 32000 // L)`` permutations
  (distinct ones for ``d <= 3``, independent draws beyond), each emitted once per target key ``t = 1..L``:
  ``P * L`` examples, i.e. 96, 8000, 16000, then 32000 for ``d >= 5``;
* ``trees`` (the LipschitzNorm paper's "5000 trees per depth"): ``dataset.num_trees`` trees, each with its own
  permutation and one uniformly drawn target key.

Split: stratified on the label, ``train_fraction`` (80%) for training as Alon & Yahav
(``sklearn.model_selection.train_test_split``); their held-out 20% (their test set) is split in two halves,
validation and test (stratified where every class has two members), so nothing is ever selected on test.
Only ``perm`` and ``target`` per example are generated (vectorised) and cached; batches are built lazily
from one template tree by offsetting node indices.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterator
from pathlib import Path

import torch
from sklearn.model_selection import train_test_split
from torch import Tensor
from torch_geometric.data import Data

from lipgnn.config_schema import TreesConfig
from lipgnn.data.common import make_generator, stable_seed
from lipgnn.data.spec import DataSpec, TaskData

CACHE_VERSION = 2
# Alon & Yahav's DictionaryLookupDataset constants: permutations per depth and examples per depth.
AY_PERMUTATIONS = 1000
AY_MAX_EXAMPLES = 32000
# Up to this many leaves, all L! permutations are listed and distinct ones sampled (A&Y: d <= 3, 8! = 40320).
AY_DISTINCT_LEAVES = 8


def tree_edge_index(depth: int, self_loops: bool = True) -> Tensor:
    """Edges child -> parent of one complete binary tree of ``depth`` in heap order, then one self-loop per
    node: shape [2, 2**(d+1)-2 (+ 2**(d+1)-1)]."""
    num_nodes = 2 ** (depth + 1) - 1
    child = torch.arange(1, num_nodes)
    edges = torch.stack([child, (child - 1) // 2])
    if self_loops:
        nodes = torch.arange(num_nodes)
        edges = torch.cat([edges, torch.stack([nodes, nodes])], dim=1)
    return edges


def ay_num_permutations(depth: int) -> int:
    """Alon & Yahav's permutation count ``min(1000, L!, 32000 // L)`` for ``L = 2**depth`` leaves."""
    leaves = 2**depth
    count = min(AY_PERMUTATIONS, AY_MAX_EXAMPLES // leaves)
    return count if leaves > 12 else min(count, math.factorial(leaves))  # 13! > 32000: no factorial needed


def num_examples(depth: int, sampling: str, num_trees: int) -> int:
    """Examples per depth: ``P * L`` for ``alon_yahav``, ``num_trees`` for ``trees``."""
    return ay_num_permutations(depth) * 2**depth if sampling == "alon_yahav" else num_trees


def _random_permutations(count: int, leaves: int, generator: torch.Generator) -> Tensor:
    # Row-wise argsort of uniform noise = an independent uniform permutation per row, in one call.
    # float64 makes ties (which would bias the permutation) practically impossible; stable makes it portable.
    noise = torch.rand(count, leaves, generator=generator, dtype=torch.float64)
    return noise.argsort(dim=1, stable=True)


def generate_trees(depth: int, num_trees: int, seed: int) -> tuple[Tensor, Tensor]:
    """``sampling=trees``: permutations ``perm`` [T, 2**d] of ``0..L-1`` and target keys ``target`` [T] in 1..L.

    Drawn from a generator seeded by (depth, seed) only: tree ``i`` is the same whatever ``num_trees``.
    """
    num_leaves = 2**depth
    generator = make_generator("trees", depth, int(seed))
    perm = _random_permutations(num_trees, num_leaves, generator)
    target = torch.randint(1, num_leaves + 1, (num_trees,), generator=generator)
    return perm, target


def generate_alon_yahav(depth: int, seed: int) -> tuple[Tensor, Tensor]:
    """``sampling=alon_yahav``: every target key ``1..L`` for each of ``P`` sampled permutations.

    Returns ``perm`` [P*L, L] (each permutation repeated L times, consecutively) and ``target`` [P*L]
    (``1..L`` per permutation). ``P`` distinct permutations for ``L <= 8`` (A&Y sample without replacement
    from all of them), independent uniform ones beyond (A&Y's ``np.random.permutation`` draws).
    """
    leaves = 2**depth
    count = ay_num_permutations(depth)
    generator = make_generator("trees-ay", depth, int(seed))
    if leaves <= AY_DISTINCT_LEAVES:
        every = torch.tensor(list(itertools.permutations(range(leaves))), dtype=torch.long)
        perm = every[torch.randperm(every.size(0), generator=generator)[:count]]
    else:
        perm = _random_permutations(count, leaves, generator)
    return perm.repeat_interleave(leaves, dim=0), torch.arange(1, leaves + 1).repeat(count)


def load_or_generate(depth: int, num_trees: int, seed: int, cache_dir: Path | None,
                     sampling: str = "trees") -> tuple[Tensor, Tensor]:
    """The generator of ``sampling`` with an on-disk cache keyed by (sampling, depth, num_trees, seed)."""
    count = num_examples(depth, sampling, num_trees)
    path = None
    if cache_dir is not None:
        tag = f"ay_d{depth}" if sampling == "alon_yahav" else f"d{depth}_n{num_trees}"
        path = cache_dir / "trees" / f"trees_v{CACHE_VERSION}_{tag}_seed{seed}.pt"
        if path.exists():
            try:
                stored = torch.load(path, weights_only=True)
                perm, target = stored["perm"].long(), stored["target"].long()
                if perm.shape == (count, 2**depth) and target.shape == (count,):
                    return perm, target
            except Exception:  # unreadable cache (e.g. interrupted write by an old version): regenerate
                pass
    if sampling == "alon_yahav":
        perm, target = generate_alon_yahav(depth, seed)
    else:
        perm, target = generate_trees(depth, num_trees, seed)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Atomic write: parallel runs (multirun) may create the same file at once.
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        small = torch.int16 if depth < 15 else torch.int32
        torch.save({"perm": perm.to(small), "target": target.to(small)}, tmp)
        os.replace(tmp, path)
    return perm, target


def _split(ids: Tensor, labels: Tensor, train_size: float, state: int) -> tuple[Tensor, Tensor]:
    """``train_test_split`` stratified on ``labels``; unstratified where sklearn cannot stratify (a class with
    one member, or fewer held-out places than classes: only tiny sets)."""
    try:
        first, second = train_test_split(ids.numpy(), train_size=train_size, shuffle=True,
                                         stratify=labels.numpy(), random_state=state)
    except ValueError:
        first, second = train_test_split(ids.numpy(), train_size=train_size, shuffle=True, random_state=state)
    return torch.from_numpy(first), torch.from_numpy(second)


def split_trees(labels: Tensor, train_fraction: float, depth: int, seed: int) -> Tensor:
    """Split code per example: 0 train, 1 val, 2 test.

    Stratified on ``labels`` as Alon & Yahav (``train_test_split(train_size=0.8, stratify=y)``); their
    held-out part is halved into val and test, stratified too where sklearn allows it.
    """
    count = labels.numel()
    split = torch.full((count,), 2, dtype=torch.long)
    ids = torch.arange(count)
    if train_fraction >= 1.0:
        split[:] = 0
        return split
    state = stable_seed("trees-split", depth, count, int(seed)) % 2**32
    train, held = _split(ids, labels, train_fraction, state)
    split[train] = 0
    if held.numel() >= 2:
        val, _ = _split(held, labels[held], 0.5, state)
        split[val] = 1
    return split


class TreeBatcher:
    """Builds PyG batches of whole trees from the per-example ``perm``/``target`` tensors."""

    def __init__(self, depth: int, perm: Tensor, target: Tensor, split: Tensor,
                 device: torch.device | str | None = None) -> None:
        self.depth = depth
        self.num_leaves = 2**depth
        self.nodes_per_tree = 2 ** (depth + 1) - 1
        self.perm, self.target, self.split = perm, target, split
        self.labels = tree_labels(perm, target)
        self.template = tree_edge_index(depth)
        self.device = device
        # Every batch of the same size has the same disjoint-union edge_index, so batches of one size share one
        # tensor: the fused layers' CSR graph (cached per edge_index tensor) is then built once per size instead
        # of once per batch (8 ms of a ~150 ms GAT batch at tree depth 4, 18 ms at depth 5). Read-only by
        # convention, as every edge_index in the suite.
        self._edge_index: dict[int, Tensor] = {}

    def batch(self, tree_ids: Tensor) -> Data:
        """Disjoint union of the trees ``tree_ids``; tree ``j`` of the batch owns nodes ``j*n .. (j+1)*n-1``."""
        count, n, leaves = tree_ids.numel(), self.nodes_per_tree, self.num_leaves
        x = torch.zeros(count, n, 2, dtype=torch.long)
        x[:, 0, 0] = self.target[tree_ids]
        x[:, leaves - 1:, 0] = torch.arange(1, leaves + 1)
        x[:, leaves - 1:, 1] = self.perm[tree_ids] + 1
        y = torch.full((count, n), -1, dtype=torch.long)
        y[:, 0] = self.labels[tree_ids]
        edge_index = self._edge_index.get(count)
        if edge_index is None:
            # A normal tensor even when the first batch of this size is made under torch.inference_mode
            # (an evaluation): later training batches reuse it, and autograd cannot save an inference tensor.
            with torch.inference_mode(False):
                offsets = (torch.arange(count) * n).view(1, count, 1)
                edge_index = self._edge_index[count] = (self.template.view(2, 1, -1) + offsets).reshape(2, -1)
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


def tree_labels(perm: Tensor, target: Tensor) -> Tensor:
    """Root labels ``perm[t - 1] + 1`` in ``1..L`` (the value of the leaf with the root's key)."""
    return perm.gather(1, (target - 1).view(-1, 1)).view(-1) + 1


def load_trees(cfg: TreesConfig, seed: int, device: torch.device | str | None = None) -> TaskData:
    """``TaskData`` for the TREES config: mini-batches of ``batch_size`` whole trees."""
    depth, num_trees, batch_size, sampling = cfg.tree_depth, cfg.num_trees, cfg.batch_size, cfg.sampling
    train_fraction = cfg.train_fraction
    cache_dir = Path(cfg.cache_dir).expanduser()

    perm, target = load_or_generate(depth, num_trees, seed, cache_dir, sampling)
    count = target.numel()
    split = split_trees(tree_labels(perm, target), float(train_fraction), depth, seed)
    batcher = TreeBatcher(depth, perm, target, split, device)
    train_ids = (split == 0).nonzero().view(-1)
    all_ids = torch.arange(count)

    def train_batches(generator: torch.Generator | None = None) -> Iterator[Data]:
        order = torch.randperm(train_ids.numel(), generator=generator)
        return batcher.iterate(train_ids[order], batch_size)

    def eval_batches() -> Iterator[Data]:
        return batcher.iterate(all_ids, batch_size)

    leaves = 2**depth
    spec = DataSpec(num_features=0, num_classes=leaves + 1, input="embedding",
                    vocab_sizes=(leaves + 1, leaves + 1), task="tree")
    info = {"tree_depth": depth, "sampling": sampling, "num_examples": count,
            "num_train": int((split == 0).sum()), "num_val": int((split == 1).sum()),
            "num_test": int((split == 2).sum())}
    return TaskData(name=cfg.name, spec=spec, metric="acc",
                    train_batches=train_batches, eval_batches=eval_batches, info=info)
