"""Fused SAN block (``lipgnn.nn.fused.san``) against the generic fused conv path it replaces, and where a
layer's time goes.

1. Training steps (zero_grad + forward + cross-entropy + backward + Adam) of deep SANs on Cora
   (``conf/model/san.yaml``: hidden 32, 4 heads, FFN 64; dropouts off), Post-LN, Pre-LN and nonlocal
   Post-LN, each once with the fused block (``block``) and once with the block's fast path switched
   off (``conv``: the generic ``FusedLipTransformerConv`` forward, the path ``model.impl=fused`` took
   before), same weights, interleaved in one process; process CPU time and wall time, medians.
2. With ``--parts``: forward + backward of each part of one Post-LN layer on Cora-sized tensors
   (QKV GEMM, attention, attention with the nonlocal energy, output projection, LayerNorm of a residual
   sum, FFN) and Adam over one layer's parameters, interleaved, CPU-time medians and minima.

    OMP_NUM_THREADS=1 python scripts/bench_san_fused.py --depth 256 --repeats 3 --parts
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from lipgnn.bench.graphs import load_graph
from lipgnn.data.spec import DataSpec
from lipgnn.models import build_model
from lipgnn.models.san import SANBlock
from lipgnn.nn.fused import get_csr_graph
from lipgnn.nn.fused.san import san_attention

CONF = Path(__file__).resolve().parents[1] / "conf"
NONE = OmegaConf.create({"name": "none"})
MODELS = {"post": ("post", False), "pre": ("pre", False), "nonlocal": ("post", True)}


@contextlib.contextmanager
def mode(name: str) -> Iterator[None]:
    """``conv``: the SAN block never takes its fused path (it calls the generic fused conv)."""
    if name == "block":
        yield
        return
    saved = SANBlock.fused_path
    SANBlock.fused_path = lambda self, x, edge_attr: False  # type: ignore[method-assign]
    try:
        yield
    finally:
        SANBlock.fused_path = saved  # type: ignore[method-assign]


def san(placement: str, use_nonlocal: bool, depth: int, num_features: int, num_classes: int) -> torch.nn.Module:
    cfg = OmegaConf.load(CONF / "model" / "san.yaml")
    cfg.impl, cfg.layer_norm, cfg["nonlocal"] = "fused", placement, use_nonlocal
    cfg.dropout = cfg.attn_dropout = 0.0
    torch.manual_seed(0)
    return build_model(cfg, NONE, DataSpec(num_features=num_features, num_classes=num_classes), depth)


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def bench_steps(depth: int, repeats: int) -> None:
    graph = load_graph("cora", seed=0)
    runs = {}
    for name, (placement, use_nonlocal) in MODELS.items():
        base = san(placement, use_nonlocal, depth, graph.x.size(1), graph.num_classes).train()
        for m in ("conv", "block"):
            net = copy.deepcopy(base)
            runs[(name, m)] = (net, torch.optim.Adam(net.parameters(), lr=0.005))
    times: dict[tuple[str, str], list[tuple[float, float]]] = {k: [] for k in runs}
    for rep in range(repeats + 1):  # round 0 warms up (CSR graph, compiled loops, allocator)
        keys = list(runs) if rep % 2 == 0 else list(runs)[::-1]
        for key in keys:
            net, opt = runs[key]

            def step(net=net, opt=opt) -> None:
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(net(graph.x, graph.edge_index), graph.y).backward()
                opt.step()

            with mode(key[1]):
                t = timed(step)
            if rep:
                times[key].append(t)
    print(f"{depth}-layer SAN training step on Cora, {repeats} interleaved repeats (medians; CPU = process time)")
    for name in MODELS:
        conv, block = times[(name, "conv")], times[(name, "block")]
        c_cpu, c_wall = statistics.median(t[0] for t in conv), statistics.median(t[1] for t in conv)
        b_cpu, b_wall = statistics.median(t[0] for t in block), statistics.median(t[1] for t in block)
        print(f"  {name:9s} conv path {c_cpu:6.2f} s CPU ({c_wall:6.2f} s wall) | fused block {b_cpu:6.2f} s CPU "
              f"({b_wall:6.2f} s wall) | {c_cpu / b_cpu:.2f}x CPU ({c_wall / b_wall:.2f}x wall) | "
              f"{b_cpu / depth * 1e3:.2f} ms CPU per layer")


def bench_parts(repeats: int) -> None:
    graph = load_graph("cora", seed=0)
    n, heads, width, dim, ffn = graph.num_nodes, 4, 8, 32, 64
    from torch_geometric.utils import add_self_loops, remove_self_loops

    looped, _ = add_self_loops(remove_self_loops(graph.edge_index)[0], num_nodes=n)
    csr = get_csr_graph(looped, n, False)
    gen = torch.Generator().manual_seed(0)

    def leaf(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * scale).requires_grad_(True)

    x, heads_out = leaf(n, dim), leaf(n, dim)
    qkv = leaf(n, 3 * dim, scale=0.3)
    w_qkv, w_o, b_o = leaf(3 * dim, dim), leaf(dim, dim), leaf(dim)
    a1, b1, a2, b2 = leaf(ffn, dim), leaf(ffn), leaf(dim, ffn), leaf(dim)
    norm = torch.nn.LayerNorm(dim)
    g32, g96 = torch.randn(n, dim, generator=gen), torch.randn(n, 3 * dim, generator=gen)
    layer = san("post", False, 1, dim, 2).blocks[0]
    for p in layer.parameters():
        p.grad = torch.randn_like(p)
    adam = torch.optim.Adam(layer.parameters(), lr=1e-3)

    def attention_energy() -> None:
        out, energy = san_attention(qkv, csr, heads, width, x)
        ((out * g32).sum() + energy.sum()).backward()

    parts: dict[str, Callable[[], None]] = {
        "QKV GEMM (one [32, 96] projection)": lambda: F.linear(x, w_qkv).backward(g96),
        "attention (all heads)": lambda: san_attention(qkv, csr, heads, width)[0].backward(g32),
        "attention + nonlocal energy": attention_energy,
        "output projection W": lambda: F.linear(heads_out, w_o, b_o).backward(g32),
        "LayerNorm(x + m)": lambda: norm(x + heads_out).backward(g32),
        "FFN (32 -> 64 -> 32, ReLU)": lambda: F.linear(F.relu(F.linear(x, a1, b1)), a2, b2).backward(g32),
        "Adam step (one layer's 13 tensors)": adam.step,
    }
    res: dict[str, list[float]] = {k: [] for k in parts}
    for fn in parts.values():
        fn()
    for _ in range(repeats):
        for k, fn in parts.items():
            res[k].append(timed(fn)[0])
    print(f"parts of one layer on Cora-sized tensors, forward + backward, {repeats} interleaved repeats (CPU time)")
    for k, v in res.items():
        print(f"  {k:36s} median {statistics.median(v) * 1e3:6.3f} ms   min {min(v) * 1e3:6.3f} ms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depth", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--parts", action="store_true", help="also time the parts of one layer")
    p.add_argument("--part-repeats", type=int, default=50)
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.depth:
        bench_steps(a.depth, a.repeats)
    if a.parts:
        bench_parts(a.part_repeats)


if __name__ == "__main__":
    main()
