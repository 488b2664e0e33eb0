"""``lipgnn lipschitz model=gat norm=lip dataset=cora depth=30 [--checkpoint PATH]``: per layer, the
estimated Lipschitz constant and its bound (:mod:`lipgnn.lipschitz.layers`), at initialization and, with
``--checkpoint``, for trained weights (a trainer checkpoint ``{"model": state_dict, ...}`` or a plain
``state_dict``)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch

from lipgnn.errors import ConfigError, LipgnnError
from lipgnn.store.checkpoint import InvalidCheckpoint, load_weights


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("lipschitz", help="per-layer Lipschitz estimates and bounds of a model on its graph")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. model=gat norm=lip dataset=cora depth=2")
    parser.add_argument("--checkpoint", default=None, help="trained weights to report as well")
    parser.add_argument("--steps", type=int, default=5, help="gradient-ascent steps per layer (0: at the input only)")


def _load_weights(model: torch.nn.Module, path: str) -> None:
    if not Path(path).is_file():
        raise ConfigError(f"--checkpoint {path}: no such file; give a trainer checkpoint or a saved state_dict")
    try:
        state = load_weights(Path(path))
    except InvalidCheckpoint as exc:
        raise ConfigError(f"--checkpoint {exc}") from None
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise ConfigError(f"--checkpoint {path} does not fit this model ({first}); "
                          "use the overrides it was trained with") from None


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from lipgnn.config import compose, validate
    from lipgnn.lipschitz.layers import estimate_layers, format_report
    from lipgnn.seeding import start

    try:
        cfg = compose([*args.overrides, *extra])
        settings = validate(cfg)
        # PyG's layers: the estimate differentiates through the layers with torch.func (jacrev), which the fused
        # layers' autograd Functions do not support; both have the same state-dict keys and values (tested equal).
        model, task = start(settings, model=dataclasses.replace(settings.model, impl="pyg"))
        batch = next(iter(task.eval_batches()))
        states = [("initialization", None)]
        if args.checkpoint:
            states.append((f"checkpoint {args.checkpoint}", args.checkpoint))
        for label, path in states:
            if path is not None:
                _load_weights(model, path)
            result = estimate_layers(model, batch.x, batch.edge_index, getattr(batch, "edge_attr", None),
                                     steps=args.steps, seed=int(cfg.seed))
            title = (f"{cfg.model.name} norm={cfg.norm.name} {cfg.dataset.name} depth={cfg.depth}, {label} "
                     "(Frobenius norms; estimate = lower bound, bound = LipschitzNorm's, inf = none)")
            print(format_report(title, result))
    except (HydraException, OmegaConfBaseException, LipgnnError) as exc:
        message = str(exc).strip()
        first = message.splitlines()[0] if message else type(exc).__name__
        print(f"error: {first} (usage: lipgnn lipschitz model=gat norm=lip dataset=cora depth=2)", file=sys.stderr)
        return 2
    return 0
