"""Does capturing the training step in a CUDA graph pay, and does it train the same? (``python -m lipgnn.bench
--probe cuda-graph``; CUDA only).

Small-graph steps on a GPU are bound by the host issuing kernels (the ``launches`` probe), and a CUDA graph replays a
captured step's kernels with one launch; ``train.cuda_graphs`` (:mod:`lipgnn.train.cuda_graph`) does so in training.
For each bench variant this probe captures ``zero_grad → forward → cross-entropy → backward → Adam`` (``fused=True,
capturable=True``, as ``torch.cuda.graphs`` requires) after three warm-up steps on a side stream, then times replays
against eager steps of an identical model (medians of ``repeats``, synchronised), and prints the largest parameter
difference between the two after the same steps beside that between two eager copies (the control: on CUDA eager
runs differ too, and Adam turns differences in near-zero gradients into steps of about the learning rate). A variant
that cannot be captured prints the error that stopped it (PyG's GAT, for one, reads a boolean mask's size on the
host). Last, the fused GAT-Lip stack with the authors' dropouts (0.6 on features and attention).
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from lipgnn.bench.graphs import BenchGraph, load_graph
from lipgnn.bench.probes import ProbeConfig, variants_on
from lipgnn.bench.variants import build_variant
from lipgnn.errors import ConfigError

#: The variants captured (on the graphs :func:`~lipgnn.bench.probes.variants_on` gives them).
CAPTURED: tuple[str, ...] = ("pyg_gat", "gat", "gat_lip", "gt_lip", "san", "san_lip")
#: Dropout of the last case (the authors' GAT-Lip setting).
DROPOUT = 0.6


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


def probe(name: str, model: nn.Module, g: BenchGraph, repeats: int, log: Callable[[str], None]) -> None:
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
        log(f"## {name}: capture failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
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
    log(f"## {name}: eager {eager_s * 1e3:.1f} ms, graph replay {replay_s * 1e3:.1f} ms "
        f"({eager_s / replay_s:.1f}x); loss {static_loss.item():.4f}; after 8 steps max |param diff| "
        f"captured vs eager {diff:.1e}, eager vs eager {control_diff:.1e}")


def run(cfg: ProbeConfig, device: torch.device, log: Callable[[str], None]) -> None:
    if device.type != "cuda":
        raise ConfigError(f"the cuda-graph probe needs a CUDA device, got --device {device.type}; run it on a GPU "
                          "machine with --device cuda (or auto)")
    graphs = {name: load_graph(name, seed=cfg.seed).to(device) for name in cfg.graphs}
    log(f"# cuda-graph on {torch.cuda.get_device_name(device)}")
    for depth in cfg.depths:
        for name, g in graphs.items():
            for variant in variants_on(name, CAPTURED):
                model = build_variant(variant, depth, g.x.size(1), g.num_classes, seed=cfg.seed).to(device)
                probe(f"{name} L={depth} {variant}", model, g, cfg.repeats, log)
        gat_graphs = [name for name in graphs if "gat_lip" in variants_on(name)]
        if gat_graphs:
            g = graphs[gat_graphs[0]]
            model = build_variant("gat_lip", depth, g.x.size(1), g.num_classes, seed=cfg.seed, dropout=DROPOUT)
            probe(f"{gat_graphs[0]} L={depth} gat_lip with dropouts {DROPOUT}", model.to(device), g, cfg.repeats, log)
