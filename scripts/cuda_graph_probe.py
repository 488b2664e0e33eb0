"""Would capturing the training step in a CUDA graph pay on small graphs? ``python scripts/cuda_graph_probe.py``.

A measurement, not a feature: small-graph steps on a GPU are bound by the host issuing kernels
(``scripts/cuda_launches.py``), and a CUDA graph replays a captured step's kernels with one launch. For each
bench variant it captures ``zero_grad → forward → cross-entropy → backward → Adam`` (``fused=True,
capturable=True``, as ``torch.cuda.graphs`` requires) after three warm-up steps on a side stream. It then times
replays against eager steps of an identical model (medians of ``--repeats``, synchronised), and prints the
largest parameter difference between the two after the same steps beside that between two eager copies (the
control: on CUDA eager runs differ too, and Adam turns differences in near-zero gradients into steps of about
the learning rate). A variant that cannot be captured
prints the error that stopped it, for example PyG's GAT, which reads a boolean mask's size on the host.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from lipgnn.bench.graphs import BenchGraph, load_graph
from lipgnn.bench.variants import build_variant
from lipgnn.models import build_model


def with_dropouts(depth: int, g: BenchGraph) -> nn.Module:
    """30-layer-style GAT-Lip with the authors' dropouts (0.6 on features and attention), fused."""
    model_cfg = SimpleNamespace(name="gat", hidden=64, heads=1, head_aggregation="concat", dropout=0.6,
                                attn_dropout=0.6, residual=False, impl="fused")
    norm_cfg = SimpleNamespace(name="lip", alpha=1.0, variant="paper")
    spec = SimpleNamespace(num_features=g.x.size(1), num_classes=g.num_classes, input="dense", vocab_sizes=(),
                           edge_dim=None, multilabel=False, task="node")
    torch.manual_seed(0)
    return build_model(model_cfg, norm_cfg, spec, depth)


def make_step(model: nn.Module, opt: torch.optim.Optimizer, g: BenchGraph) -> Callable[[], torch.Tensor]:
    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=False)  # gradients keep their addresses: a captured backward writes them
        loss = F.cross_entropy(model(g.x, g.edge_index), g.y)
        loss.backward()
        opt.step()
        return loss

    return step


def timed(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def probe(name: str, model: nn.Module, g: BenchGraph, repeats: int) -> None:
    eager_model, control = copy.deepcopy(model), copy.deepcopy(model)
    opt, eager_opt, control_opt = (torch.optim.Adam(m.parameters(), lr=0.005, fused=True, capturable=True)
                                   for m in (model, eager_model, control))
    step, eager_step = make_step(model, opt, g), make_step(eager_model, eager_opt, g)
    control_step = make_step(control, control_opt, g)
    for m in (model, eager_model, control):
        m.train()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    for _ in range(3):
        eager_step()
        control_step()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            static_loss = step()
    except Exception as exc:  # noqa: BLE001 - report what stops a capture, go on with the next variant
        print(f"## {name}: capture failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", flush=True)
        return
    for _ in range(5):  # the same number of further steps on both models, then compare
        graph.replay()
        eager_step()
        control_step()
    torch.cuda.synchronize()
    diff, control_diff = (max((a - b).abs().max().item() for a, b in zip(m.parameters(), eager_model.parameters(),
                                                                          strict=True))
                          for m in (model, control))
    replay_s, eager_s = timed(graph.replay, repeats), timed(eager_step, repeats)
    print(f"## {name}: eager {eager_s * 1e3:.1f} ms, graph replay {replay_s * 1e3:.1f} ms "
          f"({eager_s / replay_s:.1f}x); loss {static_loss.item():.4f}; after 8 steps max |param diff| "
          f"captured vs eager {diff:.1e}, eager vs eager {control_diff:.1e}",
          flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depth", type=int, default=10)
    p.add_argument("--repeats", type=int, default=20)
    a = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("cuda_graph_probe.py needs a CUDA device")
    dev = torch.device("cuda")
    graphs = {name: load_graph(name, seed=0).to(dev) for name in ("pubmed", "cora")}
    for graph_name, variant in (("pubmed", "pyg_gat"), ("pubmed", "gat"), ("pubmed", "gat_lip"),
                                ("pubmed", "gt_lip"), ("cora", "san"), ("cora", "san_lip")):
        g = graphs[graph_name]
        model = build_variant(variant, a.depth, g.x.size(1), g.num_classes).to(dev)
        probe(f"{graph_name} L={a.depth} {variant}", model, g, a.repeats)
    g = graphs["pubmed"]
    probe(f"pubmed L={a.depth} gat_lip with dropouts 0.6", with_dropouts(a.depth, g).to(dev), g, a.repeats)


if __name__ == "__main__":
    main()
