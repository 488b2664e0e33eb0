"""Is a training step bitwise reproducible on a device? (``python -m lipgnn.bench --probe determinism``).

For each bench variant (dropouts 0), after one warm-up call that builds the caches (sparse inputs, CSR graphs): the
same model's forward + backward twice, and a deep copy's. Then the single operations the PyG and fused paths are
built of (CSR SpMM, SDDMM, ``index_add_``, ``scatter_add_``, segment reductions, an index-select backward), on the
first graph's sizes, each run twice. Each line says whether outputs and gradients are bitwise equal and the largest
difference. On CPU every line is equal (``tests/test_reproducibility.py`` asserts the step); on CUDA cuSPARSE's
SpMM and the atomic scatter sums add in no fixed order, so lines of both paths differ
(``results/bench/cuda_h100_6ce21b9/determinism.txt``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lipgnn.bench.graphs import BenchGraph, load_graph
from lipgnn.bench.probes import ProbeConfig, variants_on
from lipgnn.bench.variants import build_variant
from lipgnn.nn.fused import get_csr_graph

Grads = tuple[Tensor, dict[str, Tensor]]


def forward_backward(model: nn.Module, g: BenchGraph) -> Grads:
    """The output and every parameter's gradient of one forward + backward (cross-entropy on all nodes)."""
    model.zero_grad(set_to_none=True)
    out = model(g.x, g.edge_index)
    F.cross_entropy(out, g.y).backward()
    return out.detach().clone(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def describe(tag: str, a: Grads, b: Grads) -> str:
    """One line: whether two forward + backward results are bitwise equal, and by how much they differ."""
    (out_a, grads_a), (out_b, grads_b) = a, b
    differing = [n for n in grads_a if not torch.equal(grads_a[n], grads_b[n])]
    grad_max = max(((grads_a[n] - grads_b[n]).abs().max().item() for n in grads_a), default=0.0)
    return (f"  {tag}: output bitwise {torch.equal(out_a, out_b)} (max |d| {(out_a - out_b).abs().max().item():.2e});"
            f" grads differing {len(differing)}/{len(grads_a)} (max |d| {grad_max:.2e})")


def probe_models(g: BenchGraph, depth: int, log: Callable[[str], None], seed: int = 0) -> None:
    for variant in variants_on(g.name):
        model = build_variant(variant, depth, g.x.size(1), g.num_classes, seed=seed).to(g.x.device).train()
        twin = copy.deepcopy(model)
        forward_backward(model, g), forward_backward(twin, g)
        log(f"## {g.name} L={depth} {variant}")
        log(describe("same model twice", forward_backward(model, g), forward_backward(model, g)))
        log(describe("deep copy", forward_backward(model, g), forward_backward(twin, g)))


def probe_ops(g: BenchGraph, log: Callable[[str], None], width: int = 64) -> None:
    device = g.x.device
    csr = get_csr_graph(g.edge_index, g.num_nodes, add_self_loops=True)
    gen = torch.Generator(device).manual_seed(0)
    n = g.num_nodes
    vals = torch.rand(csr.num_edges, generator=gen, device=device)
    x = torch.randn(n, width, generator=gen, device=device)
    a = torch.sparse_csr_tensor(csr.csr_ptr, csr.csr_col, vals, (n, n), check_invariants=False)
    pattern = torch.sparse_csr_tensor(csr.csr_ptr, csr.csr_col, torch.zeros_like(vals), (n, n),
                                      check_invariants=False)
    xg = x.clone().requires_grad_(True)
    ops: dict[str, Callable[[], Tensor]] = {
        "CSR addmm (SpMM)": lambda: torch.addmm(x.new_empty(n, width), a, x, beta=0.0),
        "CSR A @ x": lambda: a @ x,
        "sampled_addmm (SDDMM)": lambda: torch.sparse.sampled_addmm(pattern, x, x.t(), beta=0.0).values(),
        "index_add_": lambda: x.new_zeros(n, width).index_add_(0, csr.col, x[csr.row]),
        "scatter_add_": lambda: x.new_zeros(n, width).scatter_add_(0, csr.col.view(-1, 1).expand(-1, width),
                                                                   x[csr.row]),
        "segment_reduce sum": lambda: torch.segment_reduce(x[csr.col], "sum", offsets=csr.rowptr),
        "segment_reduce max": lambda: torch.segment_reduce(x[csr.col], "max", offsets=csr.rowptr, initial=0.0),
        "index-select backward": lambda: torch.autograd.grad(xg[csr.col].sum(), xg)[0],
    }
    log(f"## operations on {g.name}-sized inputs ({n} nodes, {csr.num_edges} edges, width {width}), each run twice")
    for name, op in ops.items():
        first, second = op(), op()
        log(f"  {name}: bitwise {torch.equal(first, second)}, max |d| {(first - second).abs().max().item():.2e}")


def run(cfg: ProbeConfig, device: torch.device, log: Callable[[str], None]) -> None:
    graphs = [load_graph(name, seed=cfg.seed).to(device) for name in cfg.graphs]
    log(f"# determinism on {device}")
    for depth in cfg.depths:
        for g in graphs:
            probe_models(g, depth, log, cfg.seed)
    probe_ops(graphs[0], log)
