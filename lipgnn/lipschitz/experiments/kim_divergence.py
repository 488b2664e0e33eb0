"""Kim et al. App. L: gradient ascent of the exact ||J_f(X)||_inf of DP-MHA (diverges) and L2-MHA (bounded),
one unit per model."""

from __future__ import annotations

from typing import Any

import torch

from lipgnn.config_schema import KimDivergenceConfig
from lipgnn.lipschitz.experiments.kim_bounds import appendix_i_inits
from lipgnn.lipschitz.experiments.registry import Unit, register_unit_experiment
from lipgnn.seeding import seed_run


def units(b: KimDivergenceConfig) -> list[str]:
    return ["dp", "l2"]


@register_unit_experiment("kim_divergence", units, KimDivergenceConfig)
def kim_divergence(b: KimDivergenceConfig, model: str, budget: str, seed: int) -> Unit:
    """App. L: gradient ascent of the exact ||J_f(X)||_inf of DP-MHA (unbounded) and L2-MHA (bounded), random
    weights (the paper optimises a trained DP-MHA with D = 512)."""
    config = {"experiment": "kim_divergence", "budget": {"name": budget}, "seed": seed, "model": model,
              **{k: getattr(b, k) for k in ("n", "dim", "heads", "restarts", "steps", "lr", "trace_every")},
              "weights": "random (Glorot uniform)", "norm": "exact inf-norm of the full Jacobian"}

    def compute() -> dict[str, Any]:
        from lipgnn.lipschitz.estimate import maximise_jacobian_norm
        from lipgnn.nn import DotProductMultiheadAttention, L2MultiheadAttention

        seed_run(seed)  # the weights' initialisation
        attn = (DotProductMultiheadAttention(b.dim, b.heads) if model == "dp"
                else L2MultiheadAttention(b.dim, b.heads)).double()
        gen = torch.Generator().manual_seed(seed)
        x0 = appendix_i_inits(b.restarts, b.n, b.dim, gen)
        lb = maximise_jacobian_norm(attn, x0, "inf", steps=b.steps, lr=b.lr, vectorize=True,
                                    trace_every=b.trace_every)
        out = {"model": model, "steps": list(range(0, b.steps + 1, b.trace_every)), "trace": lb.trace,
               "final": lb.values}
        if model == "l2":
            from lipgnn.nn.lipschitz_bounds import l2_mha_bound

            out["upper"] = l2_mha_bound(attn, b.n, "inf")
        return out

    return config, compute
