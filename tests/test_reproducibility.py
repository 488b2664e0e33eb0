"""On CPU a training step is bit-reproducible (docs/usage.md: a seed reproduces a run bit for bit on CPU).

``python -m lipgnn.bench --probe determinism`` measures the same on a GPU, where cuSPARSE's SpMM and atomic scatter
sums make it false for PyG's path and the fused one alike (``results/bench/cuda_h100_6ce21b9/determinism.txt``).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lipgnn.bench import build_variant
from lipgnn.bench.graphs import BenchGraph, GraphSize, random_graph
from lipgnn.nn.fused import locality

# Large and deep enough that a fused stack takes the locality order (MIN_NODES_DEEP, DEEP_STACK).
SIZE = GraphSize(nodes=2304, edges=9000, features=24, classes=5)
DEPTH = 8


def _step(model: nn.Module, g: BenchGraph) -> tuple[Tensor, list[Tensor]]:
    model.zero_grad(set_to_none=True)
    out = model(g.x, g.edge_index)
    F.cross_entropy(out, g.y).backward()
    # Parameters a model leaves unused (SAN's unused projections) have no gradient.
    return out.detach().clone(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.cpu_only
@pytest.mark.parametrize("variant", ["pyg_gat", "gat", "gat_lip", "gt_lip", "san", "san_lip"])
def test_a_cpu_training_step_is_bitwise_reproducible(variant: str) -> None:
    assert SIZE.nodes >= locality.MIN_NODES_DEEP and DEPTH >= locality.DEEP_STACK
    x, edge_index, y = random_graph(SIZE, seed=1)
    g = BenchGraph("random", x, edge_index, y, SIZE.classes, "random")
    model = build_variant(variant, DEPTH, SIZE.features, SIZE.classes, hidden=16).train()
    twin = copy.deepcopy(model)
    _step(model, g)  # the first call builds the caches (CSR graph, locality order)
    first, again, copied = _step(model, g), _step(model, g), _step(twin, g)
    for other in (again, copied):
        assert torch.equal(first[0], other[0])
        assert first[1] and all(torch.equal(a, b) for a, b in zip(first[1], other[1], strict=True))
