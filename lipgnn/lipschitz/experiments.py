"""Kim et al.'s experiments and ``lip_estimates``, one command each, writing run records.

    python -m lipgnn.lipschitz.experiments kim_bounds budget=cpu [seed=0] [results_dir=results]
    python -m lipgnn.lipschitz.experiments kim_divergence budget=cpu
    python -m lipgnn.lipschitz.experiments kim_invertibility budget=cpu
    python -m lipgnn.lipschitz.experiments lip_estimates budget=cpu

Each unit of work (one N and p, one model, one layer stack) is one record under
``<results_dir>/runs/<experiment>/<run_id>.json`` (:func:`lipgnn.results.store.write_record`); the run id
is derived from the unit's full config and seed, so re-running skips finished units (``overwrite=true``
redoes them). Budgets (:data:`BUDGETS`): ``paper`` is the paper's protocol where it states one, ``cpu``
the reduced one every committed record was made with (fewer steps / restarts; stated in each config).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from lipgnn.errors import ConfigError
from lipgnn.identity import run_id

BUDGETS: dict[str, dict[str, dict[str, Any]]] = {
    # Fig. 2 / App. I and K: H = D = 1, W^Q = W^V = W^O = 1, 50 inits X_ij ~ U[-c, c] with c ~ U[0, 10],
    # Adam lr 0.1 "till convergence" (here a fixed number of steps).
    "kim_bounds": {
        "cpu": {"ns": [100, 158, 251, 398, 631, 1000], "restarts": 50, "steps": 200, "lr": 0.1,
                "p2_ns": [100, 251, 631, 1000], "p2_restarts": 5, "p2_steps": 60},
        "paper": {"ns": list(range(100, 1001, 100)), "restarts": 50, "steps": 1000, "lr": 0.1,
                  "p2_ns": list(range(100, 1001, 100)), "p2_restarts": 50, "p2_steps": 1000},
    },
    # App. L: the paper optimises ||J_f(X)||_inf for a trained DP-MHA with D = 512; here random weights.
    "kim_divergence": {
        "cpu": {"n": 16, "dim": 8, "heads": 2, "restarts": 5, "steps": 500, "lr": 0.1, "trace_every": 10},
        "paper": {"n": 16, "dim": 8, "heads": 2, "restarts": 5, "steps": 1000, "lr": 0.1, "trace_every": 10},
    },
    # Fig. 3: 8 heads, N = D = 64, batch 128, c in {0.5, 0.7, 0.9}, random weights.
    "kim_invertibility": {
        "cpu": {"n": 64, "dim": 64, "heads": 8, "batch": 128, "cs": [0.5, 0.7, 0.9], "iters": 30},
        "paper": {"n": 64, "dim": 64, "heads": 8, "batch": 128, "cs": [0.5, 0.7, 0.9], "iters": 30},
    },
    # Beyond the papers: per-layer estimates and bounds on Cora, at init and after a modest training.
    "lip_estimates": {
        "cpu": {"variants": ["gat", "gat_lip", "gt", "gt_lip", "gt_l2"], "depths": [2, 30], "epochs": 30,
                "lr": 0.005, "steps": 0, "power_iters": 10, "dataset": "cora"},
        "paper": {"variants": ["gat", "gat_lip", "gt", "gt_lip", "gt_l2"], "depths": [2, 30], "epochs": 200,
                  "lr": 0.005, "steps": 20, "power_iters": 50, "dataset": "cora"},
    },
}


def _write(results_dir: str, experiment: str, unit: str, config: dict[str, Any], diagnostics: dict[str, Any],
           started: float, overwrite: bool) -> None:
    from lipgnn.provenance import loaded_commit, versions
    from lipgnn.results.store import write_record

    record = {
        "run_id": run_id(config, unit=unit), "experiment": experiment, "status": "completed",
        "config": config, "seed": config["seed"], "git_commit": loaded_commit(), "versions": versions(),
        "wall_time_s": round(time.time() - started, 3), "diagnostics": diagnostics,
    }
    write_record(results_dir, record)
    print(f"[completed] {record['run_id']} ({record['wall_time_s']:.1f}s)", flush=True)


def _done(results_dir: str, experiment: str, unit: str, config: dict[str, Any], overwrite: bool) -> bool:
    from lipgnn.results.store import run_record_path

    return not overwrite and run_record_path(results_dir, experiment, run_id(config, unit=unit)).exists()


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


def kim_bounds(budget: str, seed: int) -> Iterator[tuple[str, dict[str, Any], Callable[[], dict[str, Any]]]]:
    from lipgnn.lipschitz.bounds import l2_mha_bound
    from lipgnn.lipschitz.estimate import maximise_jacobian_norm

    b = BUDGETS["kim_bounds"][budget]
    for p, ns, restarts, steps in (("inf", b["ns"], b["restarts"], b["steps"]),
                                   ("2", b["p2_ns"], b["p2_restarts"], b["p2_steps"])):
        for n in ns:
            config = {"experiment": "kim_bounds", "budget": {"name": budget}, "seed": seed, "n": n, "p": p,
                      "heads": 1, "dim": 1, "weights": "identity", "restarts": restarts, "steps": steps,
                      "lr": b["lr"], "init": "X_ij ~ U[-c, c], c ~ U[0, 10]"}
            if p == "2":
                # the power iteration's start vectors come from the unit's generator (reproducible values)
                config["power_init"] = "v ~ N(0, I) from the unit's generator"

            def compute(n: int = n, p: str = p, restarts: int = restarts, steps: int = steps) -> dict[str, Any]:
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

            yield f"p{p}-n{n}", config, compute


# ------------------------------------------------------------------------------------- kim_divergence


def kim_divergence(budget: str, seed: int) -> Iterator[tuple[str, dict[str, Any], Callable[[], dict[str, Any]]]]:
    from lipgnn.lipschitz.estimate import maximise_jacobian_norm
    from lipgnn.nn import DotProductMultiheadAttention, L2MultiheadAttention

    b = BUDGETS["kim_divergence"][budget]
    for model in ("dp", "l2"):
        config = {"experiment": "kim_divergence", "budget": {"name": budget}, "seed": seed, "model": model,
                  **{k: b[k] for k in ("n", "dim", "heads", "restarts", "steps", "lr", "trace_every")},
                  "weights": "random (Glorot uniform)", "norm": "exact inf-norm of the full Jacobian"}

        def compute(model: str = model) -> dict[str, Any]:
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

        yield model, config, compute


# ---------------------------------------------------------------------------------- kim_invertibility


def kim_invertibility(budget: str, seed: int) -> Iterator[tuple[str, dict[str, Any], Callable[[], dict[str, Any]]]]:
    from lipgnn.lipschitz.bounds import l2_mha_bound
    from lipgnn.nn import DotProductMultiheadAttention, L2MultiheadAttention

    b = BUDGETS["kim_invertibility"][budget]
    for model in ("l2", "dp", "l2_contractive"):
        for c in b["cs"]:
            config = {"experiment": "kim_invertibility", "budget": {"name": budget}, "seed": seed, "model": model,
                      "c": c, **{k: b[k] for k in ("n", "dim", "heads", "batch", "iters")},
                      "weights": "random (Glorot uniform)",
                      "inputs": "x_i = 0 for one random i per sample, other entries ~ U[0, 1)"}

            def compute(model: str = model, c: float = c) -> dict[str, Any]:
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

            yield f"{model}-c{c}", config, compute


# -------------------------------------------------------------------------------------- lip_estimates


def lip_estimates(budget: str, seed: int) -> Iterator[tuple[str, dict[str, Any], Callable[[], dict[str, Any]]]]:
    from omegaconf import OmegaConf

    from lipgnn.lipschitz.cli import compose

    b = BUDGETS["lip_estimates"][budget]
    # Shallow models first, then the deep ones with a LipschitzNorm bound: the cheap and the asked-for first.
    lip_first = sorted(b["variants"], key=lambda v: (not v.endswith("_lip"), b["variants"].index(v)))
    depths = sorted(b["depths"])
    order = [(d, v) for d in depths for v in (b["variants"] if d == depths[0] else lip_first)]
    for depth, variant in order:
        overrides = [f"variant={variant}", f"dataset={b['dataset']}", f"depth={depth}", f"seed={seed}",
                     f"train.epochs={b['epochs']}", f"train.lr={b['lr']}", "model.impl=pyg", "log.progress=false"]
        cfg = compose(overrides)
        run_cfg = OmegaConf.to_container(cfg, resolve=True)
        run_cfg.pop("hydra", None)
        config = {"experiment": "lip_estimates", "budget": {"name": budget}, "seed": seed, "variant": variant,
                  "depth": depth, "steps": b["steps"], "power_iters": b["power_iters"], "run": run_cfg}

        def compute(cfg: Any = cfg, variant: str = variant, depth: int = depth) -> dict[str, Any]:
            return _estimate_variant(cfg, b, seed, variant, depth)

        yield f"{variant}-L{depth}", config, compute


def _estimate_variant(cfg: Any, b: dict[str, Any], seed: int, variant: str, depth: int) -> dict[str, Any]:
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


EXPERIMENTS = {"kim_bounds": kim_bounds, "kim_divergence": kim_divergence,
               "kim_invertibility": kim_invertibility, "lip_estimates": lip_estimates}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: python -m lipgnn.lipschitz.experiments kim_bounds budget=cpu [seed=0] [results_dir=results]"
    try:
        if not argv or argv[0] not in EXPERIMENTS:
            raise ConfigError(f"experiment {argv[0] if argv else '(none)'!r} is unknown; choose one of "
                              f"{', '.join(EXPERIMENTS)}")
        options = {"budget": "cpu", "seed": "0", "results_dir": "results", "overwrite": "false"}
        for item in argv[1:]:
            key, sep, value = item.partition("=")
            if not sep or key not in options:
                raise ConfigError(f"argument {item!r} is not one of {', '.join(k + '=' for k in options)}")
            options[key] = value
        name = argv[0]
        if options["budget"] not in BUDGETS[name]:
            raise ConfigError(f"budget={options['budget']} is unknown for {name}; use {' or '.join(BUDGETS[name])}")
        if not options["seed"].isdigit():
            raise ConfigError(f"seed={options['seed']} must be a non-negative integer")
        seed, overwrite = int(options["seed"]), options["overwrite"].lower() in ("1", "true", "yes")
        units = list(EXPERIMENTS[name](options["budget"], seed))
    except ConfigError as exc:
        print(f"error: {exc} ({usage})", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    for unit, config, compute in units:
        if _done(options["results_dir"], name, unit, config, overwrite):
            print(f"[skipped] {run_id(config, unit=unit)}: record exists (overwrite=true redoes it)")
            continue
        started = time.time()
        _write(options["results_dir"], name, unit, config, compute(), started, overwrite)
    return 0


if __name__ == "__main__":
    sys.exit(main())
