"""Is a training step bit-reproducible on a device? ``python scripts/cuda_determinism.py [cuda|cpu] [--depth 30]``.

For each bench model (``lipgnn.bench.variants.build_variant``, dropouts 0), after one warm-up call that builds
the caches (sparse inputs, CSR graphs): the same model's forward + backward twice, and a deep copy's. Then the
single operations the two paths are built of, on PubMed-sized inputs, each run twice. Prints whether outputs
and gradients are bitwise equal and the largest difference. Exit status 0 always: it measures, it does not
judge (on CUDA cuSPARSE's SpMM and atomic scatter sums are expected to differ).
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lipgnn.bench.graphs import BenchGraph, load_graph
from lipgnn.bench.variants import build_variant
from lipgnn.nn.fused import get_csr_graph

CASES: dict[str, tuple[str, ...]] = {
    "pubmed": ("pyg_gat", "gat", "gat_lip", "pyg_gt", "gt", "gt_lip"),
    "cora": ("pyg_san", "san", "san_lip"),
}


def forward_backward(model: nn.Module, g: BenchGraph) -> tuple[Tensor, dict[str, Tensor]]:
    model.zero_grad(set_to_none=True)
    out = model(g.x, g.edge_index)
    F.cross_entropy(out, g.y).backward()
    return out.detach().clone(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def describe(tag: str, a: tuple[Tensor, dict[str, Tensor]], b: tuple[Tensor, dict[str, Tensor]]) -> str:
    (out_a, grads_a), (out_b, grads_b) = a, b
    differing = [n for n in grads_a if not torch.equal(grads_a[n], grads_b[n])]
    grad_max = max(((grads_a[n] - grads_b[n]).abs().max().item() for n in grads_a), default=0.0)
    return (f"  {tag}: output bitwise {torch.equal(out_a, out_b)} (max |d| {(out_a - out_b).abs().max().item():.2e});"
            f" grads differing {len(differing)}/{len(grads_a)} (max |d| {grad_max:.2e})")


def probe_models(device: torch.device, depth: int, graphs: list[str]) -> None:
    for name in graphs:
        g = load_graph(name, seed=0).to(device)
        for variant in CASES[name]:
            model = build_variant(variant, depth, g.x.size(1), g.num_classes).to(device).train()
            twin = copy.deepcopy(model)
            forward_backward(model, g), forward_backward(twin, g)
            print(f"## {name} L={depth} {variant}")
            print(describe("same model twice", forward_backward(model, g), forward_backward(model, g)))
            print(describe("deep copy", forward_backward(model, g), forward_backward(twin, g)), flush=True)


def probe_ops(device: torch.device) -> None:
    g = load_graph("pubmed", seed=0).to(device)
    csr = get_csr_graph(g.edge_index, g.num_nodes, add_self_loops=True)
    gen = torch.Generator(device).manual_seed(0)
    n = g.num_nodes
    vals = torch.rand(csr.num_edges, generator=gen, device=device)
    x = torch.randn(n, 64, generator=gen, device=device)
    a = torch.sparse_csr_tensor(csr.csr_ptr, csr.csr_col, vals, (n, n), check_invariants=False)
    pattern = torch.sparse_csr_tensor(csr.csr_ptr, csr.csr_col, torch.zeros_like(vals), (n, n),
                                      check_invariants=False)
    xg = x.clone().requires_grad_(True)
    ops: dict[str, Callable[[], Tensor]] = {
        "CSR addmm (SpMM)": lambda: torch.addmm(x.new_empty(n, 64), a, x, beta=0.0),
        "CSR A @ x": lambda: a @ x,
        "sampled_addmm (SDDMM)": lambda: torch.sparse.sampled_addmm(pattern, x, x.t(), beta=0.0).values(),
        "index_add_": lambda: x.new_zeros(n, 64).index_add_(0, csr.col, x[csr.row]),
        "scatter_add_": lambda: x.new_zeros(n, 64).scatter_add_(0, csr.col.view(-1, 1).expand(-1, 64), x[csr.row]),
        "segment_reduce sum": lambda: torch.segment_reduce(x[csr.col], "sum", offsets=csr.rowptr),
        "segment_reduce max": lambda: torch.segment_reduce(x[csr.col], "max", offsets=csr.rowptr, initial=0.0),
        "index-select backward": lambda: torch.autograd.grad(xg[csr.col].sum(), xg)[0],
    }
    print("## operations on PubMed-sized inputs, each run twice")
    for name, op in ops.items():
        first, second = op(), op()
        print(f"  {name}: bitwise {torch.equal(first, second)}, max |d| {(first - second).abs().max().item():.2e}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("device", nargs="?", default="cuda")
    p.add_argument("--depth", type=int, default=30)
    p.add_argument("--graphs", default="pubmed,cora", help="comma-separated: pubmed (GAT/GT), cora (SAN)")
    p.add_argument("--no-ops", action="store_true", help="skip the single-operation probe")
    a = p.parse_args()
    device = torch.device(a.device)
    probe_models(device, a.depth, [name for name in a.graphs.split(",") if name])
    if not a.no_ops:
        probe_ops(device)


if __name__ == "__main__":
    main()
