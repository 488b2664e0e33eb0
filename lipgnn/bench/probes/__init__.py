"""Device probes: ``python -m lipgnn.bench --probe NAME`` (``make bench ARGS="--probe NAME"``).

A probe answers one question about how the bench's models run on a device and prints what it finds; it judges
nothing (exit status 0 whatever it measures) and writes no record. ``scripts/cuda_check.sh`` runs them on a GPU
machine after its other steps, with their output kept beside the bench's.

==================  ==============================================================================  =========
probe               question                                                                        devices
==================  ==============================================================================  =========
``determinism``     is a training step, and each sparse or scatter op it is built of, bitwise       CPU, CUDA
                    reproducible (``tests/test_reproducibility.py`` asserts it on CPU)?
``launches``        where does a small-graph step's time go: kernels per layer, kernel time         CPU, CUDA
                    against wall time, copies and synchronisations with the ops that issue them?
``cuda-graph``      does replaying a step captured in a CUDA graph pay, and does it train as        CUDA
                    the eager step does (against an eager-against-eager control)?
==================  ==============================================================================  =========

Each probe runs the bench's variants (:func:`lipgnn.bench.variants.build_variant`) on the bench's graphs: the
SAN variants on Cora (the graph of the bench's SAN row), the GAT and GT variants on the others, both on the tiny
test graph.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from lipgnn.errors import ConfigError

#: probe name -> (module under lipgnn.bench.probes, default graphs, default depth, default repeats)
PROBES: dict[str, tuple[str, tuple[str, ...], int, int]] = {
    "determinism": ("determinism", ("pubmed", "cora"), 30, 2),
    "launches": ("launches", ("pubmed", "cora"), 10, 5),
    "cuda-graph": ("cuda_graph", ("pubmed", "cora"), 10, 20),
}

GAT_GT_VARIANTS: tuple[str, ...] = ("pyg_gat", "gat", "gat_lip", "pyg_gt", "gt", "gt_lip")
SAN_PROBE_VARIANTS: tuple[str, ...] = ("pyg_san", "san", "san_lip")


@dataclass(frozen=True)
class ProbeConfig:
    """One probe run: ``graphs`` and ``depths`` as the bench names them, ``repeats`` timed steps where the probe
    times (``launches``: unprofiled steps; ``cuda-graph``: replays and eager steps), ``device`` cpu|cuda|auto,
    ``threads`` for ``torch.set_num_threads`` (None: torch's)."""

    probe: str
    graphs: tuple[str, ...]
    depths: tuple[int, ...]
    repeats: int
    device: str = "auto"
    seed: int = 0
    threads: int | None = None


def variants_on(graph: str, variants: Sequence[str] = GAT_GT_VARIANTS + SAN_PROBE_VARIANTS) -> list[str]:
    """The ``variants`` a probe runs on ``graph``: SAN ones on Cora, GAT/GT ones on the others, all on ``tiny``."""
    if graph == "tiny":
        return list(variants)
    san = graph == "cora"
    return [v for v in variants if (v in SAN_PROBE_VARIANTS) == san]


def resolve_device(name: str) -> torch.device:
    """``auto`` → CUDA where torch sees a device, else CPU; ``cuda`` where there is none is a :class:`ConfigError`."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {name}: torch sees no CUDA device here; run on a GPU machine or pass --device cpu")
    return device


def run_probe(cfg: ProbeConfig, log: Callable[[str], None] = print) -> None:
    """Run ``cfg.probe`` (a key of :data:`PROBES`), each finding a line to ``log``."""
    if cfg.probe not in PROBES:
        raise ConfigError(f"unknown probe {cfg.probe!r}; choose from {', '.join(PROBES)}")
    device = resolve_device(cfg.device)
    module = importlib.import_module(f"{__name__}.{PROBES[cfg.probe][0]}")
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    module.run(cfg, device, log)
