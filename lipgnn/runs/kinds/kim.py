"""The ``kim`` job kind: Kim et al.'s experiments and ``lip_estimates``, one unit of work per job.

A unit (one N and p, one model, one layer stack) is named by ``kim.unit``, an axis of the experiment's sweep. The
budget's parameters live in the ``kim`` node: the paper's protocol, where it states one, in
``conf/experiment/<experiment>.yaml`` (what ``budget=paper`` runs, its units in the sweeper's ``design``), the reduced
one every committed record was made with in ``conf/grid/<experiment>_cpu.yaml``. Its record
stores the unit's own config (:func:`unit`), and its id is derived from that config
(:func:`lipgnn.identity.run_id` with ``unit=``): ``<experiment>-<unit>-<budget>-s<seed>-<hash>``. A unit is
cheap: a rerun skips finished records (``overwrite=true`` redoes them).

    python train.py -m experiment=kim_bounds budget=cpu
    python train.py experiment=kim_invertibility budget=cpu kim.unit=l2-c0.5 seed=0
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from lipgnn.errors import ConfigError
from lipgnn.runs.registry import Job, JobKind, register_job_kind

Compute = Callable[[], dict[str, Any]]
Unit = tuple[dict[str, Any], Compute]


@register_job_kind("kim")
class Kim(JobKind):
    def validate(self, cfg: DictConfig) -> None:
        unit(cfg)

    def check_inputs(self, cfg: DictConfig, settings: Any) -> None:
        if str(cfg.experiment_name) == "lip_estimates":  # the only kim experiment that reads a dataset
            super().check_inputs(cfg, settings)

    def run_id(self, cfg: DictConfig) -> str:
        from lipgnn.identity import run_id

        return run_id(unit(cfg)[0], unit=str(cfg.kim.unit))

    def record_config(self, cfg: DictConfig) -> dict[str, Any]:
        return unit(cfg)[0]

    def compute(self, job: Job) -> dict[str, Any]:
        from lipgnn.train import gc_pause

        gc_pause.resume()
        _, compute = unit(job.cfg)
        started = time.time()
        diagnostics = compute()
        return {"status": "completed", "wall_time_s": round(time.time() - started, 3), "diagnostics": diagnostics}


def params(cfg: DictConfig) -> dict[str, Any]:
    """The budget's parameters: the ``kim`` node without ``unit``."""
    node = cfg.get("kim")
    if node is None:
        raise ConfigError(f"experiment {cfg.experiment_name} has no kim node; a kim job reads its budget's parameters "
                          "from conf/grid/<experiment>_<budget>.yaml (give budget=cpu or budget=paper)")
    values = OmegaConf.to_container(node, resolve=True)
    assert isinstance(values, dict)
    values.pop("unit", None)
    return values


def budget_params(experiment: str, budget: str) -> dict[str, Any]:
    """The ``kim`` parameters a budget runs with, read without composing: the experiment's (the paper's protocol)
    with ``conf/grid/<experiment>_<budget>.yaml``'s over them ({} for an experiment without a kim node)."""
    from lipgnn.config import CONF_DIR

    nodes = [OmegaConf.load(path).get("kim") for path in (Path(CONF_DIR) / "experiment" / f"{experiment}.yaml",
                                                         Path(CONF_DIR) / "grid" / f"{experiment}_{budget}.yaml")
             if path.is_file()]
    merged = OmegaConf.merge(*[node for node in nodes if node is not None]) if any(nodes) else {}
    values = OmegaConf.to_container(merged, resolve=True) if merged else {}
    assert isinstance(values, dict)
    values.pop("unit", None)
    return values


def units(experiment: str, b: dict[str, Any]) -> list[str]:
    """Every unit a budget's parameters define, in the order the experiment runs them."""
    if experiment == "kim_bounds":
        return [f"pinf-n{n}" for n in b["ns"]] + [f"p2-n{n}" for n in b["p2_ns"]]
    if experiment == "kim_divergence":
        return ["dp", "l2"]
    if experiment == "kim_invertibility":
        return [f"{model}-c{c}" for model in ("l2", "dp", "l2_contractive") for c in b["cs"]]
    if experiment == "lip_estimates":
        # Shallow models first, then the deep ones with a LipschitzNorm bound: the cheap and the asked-for first.
        lip_first = sorted(b["variants"], key=lambda v: (not v.endswith("_lip"), b["variants"].index(v)))
        depths = sorted(b["depths"])
        return [f"{v}-L{d}" for d in depths for v in (b["variants"] if d == depths[0] else lip_first)]
    raise ConfigError(f"experiment_name={experiment} is not a kim experiment; use one of: {', '.join(EXPERIMENTS)}")


def unit(cfg: DictConfig) -> Unit:
    """``(config, compute)`` of the job's unit: the record's config, and the computation of its diagnostics."""
    experiment, b = str(cfg.experiment_name), params(cfg)
    name = cfg.kim.get("unit")
    known = units(experiment, b)
    if name not in known:
        raise ConfigError(f"kim.unit={name} is not a unit of {experiment} at budget={cfg.budget.name}; use one of: "
                          f"{', '.join(known)}")
    budget, seed = str(cfg.budget.name), int(cfg.seed)
    return EXPERIMENTS[experiment](b, str(name), budget, seed)


# ------------------------------------------------------------------------------------------ kim_bounds


def _unit_l2_mha() -> torch.nn.Module:
    from lipgnn.nn import L2MultiheadAttention

    attn = L2MultiheadAttention(1, 1).double()
    with torch.no_grad():  # App. I: all free parameters fixed to the identity
        attn.q_weight.fill_(1.0)
        attn.v_weight.fill_(1.0)
        attn.o_weight.fill_(1.0)
    return attn


def _appendix_i_inits(restarts: int, n: int, dim: int, gen: torch.Generator) -> torch.Tensor:
    c = torch.rand(restarts, 1, 1, generator=gen, dtype=torch.float64) * 10.0
    return (torch.rand(restarts, n, dim, generator=gen, dtype=torch.float64) * 2.0 - 1.0) * c


def _full_inf_norm_by_rows(attn: torch.nn.Module, x: torch.Tensor, chunk: int = 100) -> float:
    """||J_F(X)||_inf of the whole map, block row by block row (O(N^2) work, O(chunk N) memory)."""
    from lipgnn.lipschitz.estimate import inf_norm

    n = x.size(0)
    chunks = [list(range(s, min(s + chunk, n))) for s in range(0, n, chunk)]
    return max(inf_norm(lambda z, rows=rows: attn(z, rows=rows), x) for rows in chunks)


def kim_bounds(b: dict[str, Any], name: str, budget: str, seed: int) -> Unit:
    """Fig. 2 / App. I and K: the L2-MHA bound against gradient-ascent lower bounds of ||J||_p, p = inf, 2.
    H = D = 1, W^Q = W^V = W^O = 1, inits X_ij ~ U[-c, c] with c ~ U[0, 10], Adam "till convergence" (here a
    fixed number of steps)."""
    p, n = name[1:].split("-n")
    n = int(n)
    restarts, steps = (b["restarts"], b["steps"]) if p == "inf" else (b["p2_restarts"], b["p2_steps"])
    config = {"experiment": "kim_bounds", "budget": {"name": budget}, "seed": seed, "n": n, "p": p,
              "heads": 1, "dim": 1, "weights": "identity", "restarts": restarts, "steps": steps,
              "lr": b["lr"], "init": "X_ij ~ U[-c, c], c ~ U[0, 10]"}
    if p == "2":
        # the power iteration's start vectors come from the unit's generator (reproducible values)
        config["power_init"] = "v ~ N(0, I) from the unit's generator"

    def compute() -> dict[str, Any]:
        from lipgnn.lipschitz.bounds import l2_mha_bound
        from lipgnn.lipschitz.estimate import maximise_jacobian_norm

        attn = _unit_l2_mha()
        gen = torch.Generator().manual_seed(seed * 100_003 + n)
        x0 = _appendix_i_inits(restarts, n, 1, gen)
        if p == "inf":
            # Ascend one block row (permutation equivariance: all rows share the supremum, F.2.1),
            # then report the whole Jacobian's norm at the end points.
            lb = maximise_jacobian_norm(lambda z: attn(z, rows=[0]), x0, "inf", steps=steps, lr=b["lr"],
                                        vectorize=True)
            order = np.argsort(lb.values)[::-1][:5]
            # the full norm is >= the row's; evaluated for the 5 best restarts
            values = list(lb.values)
            for r in order:
                values[r] = max(values[r], _full_inf_norm_by_rows(attn, lb.xs[r]))
        else:
            lb = maximise_jacobian_norm(attn, x0, 2, steps=steps, lr=b["lr"], generator=gen)
            values = list(lb.values)
        finite = [v for v in values if math.isfinite(v)]
        return {"n": n, "p": p, "upper": l2_mha_bound(attn, n, p), "lower": max(finite),
                "top5": sorted(finite, reverse=True)[:5], "values": values}

    return config, compute


# ------------------------------------------------------------------------------------- kim_divergence


def kim_divergence(b: dict[str, Any], model: str, budget: str, seed: int) -> Unit:
    """App. L: gradient ascent of the exact ||J_f(X)||_inf of DP-MHA (unbounded) and L2-MHA (bounded), random
    weights (the paper optimises a trained DP-MHA with D = 512)."""
    config = {"experiment": "kim_divergence", "budget": {"name": budget}, "seed": seed, "model": model,
              **{k: b[k] for k in ("n", "dim", "heads", "restarts", "steps", "lr", "trace_every")},
              "weights": "random (Glorot uniform)", "norm": "exact inf-norm of the full Jacobian"}

    def compute() -> dict[str, Any]:
        from lipgnn.lipschitz.estimate import maximise_jacobian_norm
        from lipgnn.nn import DotProductMultiheadAttention, L2MultiheadAttention

        torch.manual_seed(seed)
        attn = (DotProductMultiheadAttention(b["dim"], b["heads"]) if model == "dp"
                else L2MultiheadAttention(b["dim"], b["heads"])).double()
        gen = torch.Generator().manual_seed(seed)
        x0 = _appendix_i_inits(b["restarts"], b["n"], b["dim"], gen)
        lb = maximise_jacobian_norm(attn, x0, "inf", steps=b["steps"], lr=b["lr"], vectorize=True,
                                    trace_every=b["trace_every"])
        out = {"model": model, "steps": list(range(0, b["steps"] + 1, b["trace_every"])), "trace": lb.trace,
               "final": lb.values}
        if model == "l2":
            from lipgnn.lipschitz.bounds import l2_mha_bound

            out["upper"] = l2_mha_bound(attn, b["n"], "inf")
        return out

    return config, compute


# ---------------------------------------------------------------------------------- kim_invertibility


def kim_invertibility(b: dict[str, Any], name: str, budget: str, seed: int) -> Unit:
    """Fig. 3: fixed-point inversion of y = x + c f(x) (8 heads, N = D = 64, batch 128, random weights); the
    error after each iteration z <- y - c f(z)."""
    model, c_text = name.rsplit("-c", 1)
    c = next(v for v in b["cs"] if f"{v}" == c_text)
    config = {"experiment": "kim_invertibility", "budget": {"name": budget}, "seed": seed, "model": model,
              "c": c, **{k: b[k] for k in ("n", "dim", "heads", "batch", "iters")},
              "weights": "random (Glorot uniform)",
              "inputs": "x_i = 0 for one random i per sample, other entries ~ U[0, 1)"}

    def compute() -> dict[str, Any]:
        from lipgnn.lipschitz.bounds import l2_mha_bound
        from lipgnn.nn import DotProductMultiheadAttention, L2MultiheadAttention

        torch.manual_seed(seed)
        if model == "dp":
            f = DotProductMultiheadAttention(b["dim"], b["heads"]).double()
        else:
            f = L2MultiheadAttention(b["dim"], b["heads"], contractive=model == "l2_contractive").double()
        gen = torch.Generator().manual_seed(seed + 1)
        x = torch.rand(b["batch"], b["n"], b["dim"], generator=gen, dtype=torch.float64)
        zero = torch.randint(0, b["n"], (b["batch"],), generator=gen)
        x[torch.arange(b["batch"]), zero] = 0.0
        with torch.no_grad():
            y = x + c * f(x)
            z = y.clone()
            errors = []
            for _ in range(b["iters"]):
                z = y - c * f(z)
                err = (z - x).abs().amax(dim=(1, 2)).max()
                errors.append(float(err) if torch.isfinite(err) else math.inf)
        out = {"model": model, "c": c, "errors": errors, "final_error": errors[-1]}
        if model != "dp":
            out["lip_inf_bound"] = l2_mha_bound(f, b["n"], "inf") / (
                l2_mha_bound(f, b["n"], "inf") if model == "l2_contractive" else 1.0)
        return out

    return config, compute


# -------------------------------------------------------------------------------------- lip_estimates


def lip_estimates(b: dict[str, Any], name: str, budget: str, seed: int) -> Unit:
    """Beyond the papers: per-layer Lipschitz estimates and bounds (:mod:`lipgnn.lipschitz.layers`) of one model
    on Cora, at initialisation and after a modest training (its training config is stored under ``run``)."""
    from lipgnn.config import compose

    variant, depth_text = name.rsplit("-L", 1)
    depth = int(depth_text)
    overrides = [f"variant={variant}", f"dataset={b['dataset']}", f"depth={depth}", f"seed={seed}",
                 f"train.epochs={b['epochs']}", f"train.lr={b['lr']}", "model.impl=pyg", "log.progress=false"]
    cfg = compose(overrides)
    run_cfg = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(run_cfg, dict)
    run_cfg.pop("hydra", None)
    config = {"experiment": "lip_estimates", "budget": {"name": budget}, "seed": seed, "variant": variant,
              "depth": depth, "steps": b["steps"], "power_iters": b["power_iters"], "run": run_cfg}

    def compute() -> dict[str, Any]:
        from torch_geometric import seed_everything

        from lipgnn.data import load
        from lipgnn.lipschitz.layers import estimate_layers
        from lipgnn.models import build_model
        from lipgnn.train.trainer import Trainer

        task = load(cfg.dataset, seed)
        seed_everything(seed)
        model = build_model(cfg.model, cfg.norm, task.spec, depth)
        batch = next(iter(task.eval_batches()))
        args = (batch.x, batch.edge_index, getattr(batch, "edge_attr", None))
        kwargs = {"steps": b["steps"], "power_iters": b["power_iters"], "seed": seed}
        init = estimate_layers(model, *args, **kwargs)
        trainer = Trainer(cfg.train, device=torch.device("cpu"), seed=seed, progress=False)
        result = trainer.fit(model, task)  # the model keeps its last-epoch weights
        trained = estimate_layers(model, *args, **kwargs)
        return {"variant": variant, "depth": depth, "init": init, "trained": trained,
                "training": {"status": result.status, "epochs_run": result.epochs_run, "best": result.best,
                             "last": result.last}}

    return config, compute


EXPERIMENTS: dict[str, Callable[[dict[str, Any], str, str, int], Unit]] = {
    "kim_bounds": kim_bounds, "kim_divergence": kim_divergence, "kim_invertibility": kim_invertibility,
    "lip_estimates": lip_estimates}
