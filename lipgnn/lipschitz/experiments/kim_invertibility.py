"""Kim et al. Fig. 3: fixed-point inversion of y = x + c f(x) for L2-MHA, contractive L2-MHA and DP-MHA, one
unit per model and c."""

from __future__ import annotations

import math
from typing import Any

import torch

from lipgnn.config_schema import KimInvertibilityConfig
from lipgnn.lipschitz.experiments.registry import Unit, register_unit_experiment
from lipgnn.seeding import seed_run


def units(b: KimInvertibilityConfig) -> list[str]:
    return [f"{model}-c{c}" for model in ("l2", "dp", "l2_contractive") for c in b.cs]


@register_unit_experiment("kim_invertibility", units, KimInvertibilityConfig)
def kim_invertibility(b: KimInvertibilityConfig, name: str, budget: str, seed: int) -> Unit:
    """Fig. 3: fixed-point inversion of y = x + c f(x) (8 heads, N = D = 64, batch 128, random weights); the
    error after each iteration z <- y - c f(z)."""
    model, c_text = name.rsplit("-c", 1)
    c = next(v for v in b.cs if f"{v}" == c_text)
    config = {"experiment": "kim_invertibility", "budget": {"name": budget}, "seed": seed, "model": model,
              "c": c, **{k: getattr(b, k) for k in ("n", "dim", "heads", "batch", "iters")},
              "weights": "random (Glorot uniform)",
              "inputs": "x_i = 0 for one random i per sample, other entries ~ U[0, 1)"}

    def compute() -> dict[str, Any]:
        from lipgnn.nn import DotProductMultiheadAttention, L2MultiheadAttention
        from lipgnn.nn.lipschitz_bounds import l2_mha_bound

        seed_run(seed)  # the weights' initialisation
        if model == "dp":
            f = DotProductMultiheadAttention(b.dim, b.heads).double()
        else:
            f = L2MultiheadAttention(b.dim, b.heads, contractive=model == "l2_contractive").double()
        gen = torch.Generator().manual_seed(seed + 1)
        x = torch.rand(b.batch, b.n, b.dim, generator=gen, dtype=torch.float64)
        zero = torch.randint(0, b.n, (b.batch,), generator=gen)
        x[torch.arange(b.batch), zero] = 0.0
        with torch.no_grad():
            y = x + c * f(x)
            z = y.clone()
            errors = []
            for _ in range(b.iters):
                z = y - c * f(z)
                err = (z - x).abs().amax(dim=(1, 2)).max()
                errors.append(float(err) if torch.isfinite(err) else math.inf)
        out = {"model": model, "c": c, "errors": errors, "final_error": errors[-1]}
        if model != "dp":
            out["lip_inf_bound"] = l2_mha_bound(f, b.n, "inf") / (
                l2_mha_bound(f, b.n, "inf") if model == "l2_contractive" else 1.0)
        return out

    return config, compute
