"""Beyond the papers: per-layer Lipschitz estimates and LipschitzNorm bounds of one model on Cora, at
initialisation and after a modest training, one unit per model and depth."""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import OmegaConf

from lipgnn.config_schema import LipEstimatesConfig
from lipgnn.lipschitz.experiments.registry import Unit, register_unit_experiment


def units(b: LipEstimatesConfig) -> list[str]:
    # Shallow models first, then the deep ones with a LipschitzNorm bound: the cheap and the asked-for first.
    lip_first = sorted(b.variants, key=lambda v: (not v.endswith("_lip"), b.variants.index(v)))
    depths = sorted(b.depths)
    return [f"{v}-L{d}" for d in depths for v in (b.variants if d == depths[0] else lip_first)]


@register_unit_experiment("lip_estimates", units, LipEstimatesConfig, reads_dataset=True)
def lip_estimates(b: LipEstimatesConfig, name: str, budget: str, seed: int) -> Unit:
    """Beyond the papers: per-layer Lipschitz estimates and bounds (:mod:`lipgnn.lipschitz.layers`) of one model
    on Cora, at initialisation and after a modest training (its training config is stored under ``run``)."""
    from lipgnn.config import compose

    variant, depth_text = name.rsplit("-L", 1)
    depth = int(depth_text)
    overrides = [f"variant={variant}", f"dataset={b.dataset}", f"depth={depth}", f"seed={seed}",
                 f"train.epochs={b.epochs}", f"train.lr={b.lr}", "model.impl=pyg", "log.progress=false"]
    cfg = compose(overrides)
    run_cfg = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(run_cfg, dict)
    run_cfg.pop("hydra", None)
    config = {"experiment": "lip_estimates", "budget": {"name": budget}, "seed": seed, "variant": variant,
              "depth": depth, "steps": b.steps, "power_iters": b.power_iters, "run": run_cfg}

    def compute() -> dict[str, Any]:
        from lipgnn.config import validate
        from lipgnn.lipschitz.layers import estimate_layers
        from lipgnn.seeding import start
        from lipgnn.train.trainer import Trainer

        settings = validate(cfg)
        model, task = start(settings)
        batch = next(iter(task.eval_batches()))
        args = (batch.x, batch.edge_index, getattr(batch, "edge_attr", None))
        kwargs = {"steps": b.steps, "power_iters": b.power_iters, "seed": seed}
        init = estimate_layers(model, *args, **kwargs)
        trainer = Trainer(settings.train, device=torch.device("cpu"), seed=seed, progress=False)
        result = trainer.fit(model, task)  # the model keeps its last-epoch weights
        trained = estimate_layers(model, *args, **kwargs)
        return {"variant": variant, "depth": depth, "init": init, "trained": trained,
                "training": {"status": result.status, "epochs_run": result.epochs_run, "best": result.best,
                             "last": result.last}}

    return config, compute
