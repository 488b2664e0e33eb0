"""The bench's variants: each one's model (same seed, same weights for every variant of a kind), its
training step and its eval output, shared by the in-process table (:mod:`lipgnn.bench.runner`) and the
worker processes (:mod:`lipgnn.bench.isolated`); the table of variants is in :mod:`lipgnn.bench.runner`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from lipgnn.bench.graphs import BenchGraph
from lipgnn.train.trainer import adam

VARIANTS: tuple[str, ...] = ("pyg_gat", "gat", "gat_lip", "pyg_gt", "gt", "gt_lip")
CKPT_VARIANT = "gat_lip_ckpt"

SAN_VARIANTS: tuple[str, ...] = ("pyg_san", "san", "san_lip", "pyg_san_pre", "san_pre", "pyg_san_nonlocal",
                                 "san_nonlocal")


def attention_kind(variant: str) -> str:
    if variant in SAN_VARIANTS:
        return "san"
    return "gt" if variant in ("pyg_gt", "gt", "gt_lip") else "gat"


def baseline_of(variant: str) -> str:
    if variant in SAN_VARIANTS:  # the same SAN on the PyG path (LipschitzNorm's baseline: the plain SAN)
        return "pyg_" + variant.removeprefix("pyg_").removesuffix("_lip")
    return f"pyg_{attention_kind(variant)}"



def build_variant(variant: str, depth: int, num_features: int, num_classes: int, *, hidden: int = 64,
                  heads: int = 1, seed: int = 0, dropout: float = 0.0) -> nn.Module:
    """The ``depth``-layer stack of ``variant`` (same seed → same weights for every variant of a kind); dropouts off,
    or ``dropout`` on the features and the attention weights of a GAT or GT stack (the authors' 0.6)."""
    from lipgnn.models import build_model
    from lipgnn.seeding import seed_run

    if attention_kind(variant) == "san":
        return _build_san(variant, depth, num_features, num_classes, seed)
    kind = attention_kind(variant.removesuffix("_ckpt"))
    lip = variant.removesuffix("_ckpt").endswith("_lip")
    model_cfg = SimpleNamespace(name=kind, hidden=hidden, heads=heads, head_aggregation="concat", dropout=dropout,
                                attn_dropout=dropout, residual=False, impl="fused")
    norm_cfg = SimpleNamespace(name="lip" if lip else "none", alpha=1.0, formula="paper")
    spec = SimpleNamespace(num_features=num_features, num_classes=num_classes, input="dense", vocab_sizes=(),
                           edge_dim=None, multilabel=False, task="node")
    seed_run(seed)
    model = build_model(model_cfg, norm_cfg, spec, depth)
    if variant.startswith("pyg_"):
        for block in model.blocks:
            block.conv = _stock_conv(kind, block.conv)
            if isinstance(block.act, nn.ELU):  # the stock stack's own activation, not the fused path's
                block.act = nn.ELU(block.act.alpha)
    if variant.endswith("_ckpt"):
        if not hasattr(model, "checkpoint_activations"):
            raise RuntimeError("lipgnn.models.DeepGNN has no checkpoint_activations switch")
        model.checkpoint_activations = True
    return model


def _build_san(variant: str, depth: int, num_features: int, num_classes: int, seed: int) -> nn.Module:
    """Guan & He's SAN with ``conf/model/san.yaml``'s settings (dropouts off, as for every variant);
    ``*_pre``: Pre-LN, ``*_nonlocal``: nonlocal message passing."""
    from omegaconf import OmegaConf

    from lipgnn.config import CONF_DIR
    from lipgnn.models import build_model
    from lipgnn.seeding import seed_run

    model_cfg = OmegaConf.load(Path(CONF_DIR) / "model" / "san.yaml")
    model_cfg.impl = "pyg" if variant.startswith("pyg_") else "fused"
    model_cfg.dropout, model_cfg.attn_dropout = 0.0, 0.0
    if variant.endswith("_pre"):
        model_cfg.layer_norm = "pre"
    model_cfg["nonlocal"] = variant.endswith("_nonlocal")
    norm_cfg = SimpleNamespace(name="lip" if variant.endswith("_lip") else "none", alpha=1.0, formula="paper")
    spec = SimpleNamespace(num_features=num_features, num_classes=num_classes, input="dense", vocab_sizes=(),
                           edge_dim=None, multilabel=False, task="node")
    seed_run(seed)
    return build_model(model_cfg, norm_cfg, spec, depth)


def _stock_conv(kind: str, ours: nn.Module) -> nn.Module:
    """PyG's own layer with the hyper-parameters and weights of ``ours`` (state dicts are identical)."""
    from torch_geometric.nn import GATConv, TransformerConv

    if kind == "gat":
        conv: nn.Module = GATConv(ours.in_channels, ours.out_channels, heads=ours.heads, concat=ours.concat,
                                  negative_slope=ours.negative_slope, dropout=ours.dropout,
                                  add_self_loops=ours.add_self_loops, bias=ours.bias is not None)
    else:
        conv = TransformerConv(ours.in_channels, ours.out_channels, heads=ours.heads, concat=ours.concat,
                               dropout=ours.dropout, root_weight=ours.root_weight)
    conv.load_state_dict(ours.state_dict())
    return conv


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_step(model: nn.Module, graph: BenchGraph, device: torch.device) -> Callable[[], tuple[float, float]]:
    """One full-batch training step (forward + backward + Adam); returns its (wall, process CPU) seconds.

    On a shared machine the CPU time of a single-threaded run is the steadier number (time spent
    descheduled does not count); the wall time is the one reported in summary.csv.
    """
    opt = adam(model.parameters(), lr=0.005)  # the trainer's optimizer
    model.train()

    def step() -> tuple[float, float]:
        _sync(device)
        start, cpu_start = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(graph.x, graph.edge_index), graph.y)
        loss.backward()
        opt.step()
        _sync(device)
        return time.perf_counter() - start, time.process_time() - cpu_start

    return step


def prebuild_csr(variant: str, graph: BenchGraph) -> float:
    """Build (and cache) the CSR graph the fused variant will use; returns the time it took."""
    if variant.startswith("pyg_") or attention_kind(variant) == "san":  # SAN adds its self-loops per forward
        return 0.0
    from lipgnn.nn.fused import get_csr_graph

    start = time.perf_counter()
    get_csr_graph(graph.edge_index, graph.num_nodes, add_self_loops=attention_kind(variant) == "gat")
    return time.perf_counter() - start


def clear_csr_cache() -> None:
    from lipgnn.nn.fused import clear_csr_cache

    clear_csr_cache()



def eval_output(model: nn.Module, graph: BenchGraph) -> torch.Tensor:
    """``model``'s eval-mode output on ``graph``, without gradients; the model is left in training mode."""
    model.eval()
    with torch.no_grad():
        out = model(graph.x, graph.edge_index)
    model.train()
    return out
