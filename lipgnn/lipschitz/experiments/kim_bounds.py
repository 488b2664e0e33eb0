"""Kim et al. Fig. 2 / App. I and K: the L2-MHA Lipschitz bound against gradient-ascent lower bounds of
||J||_p, p = inf, 2, one unit per p and N."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from lipgnn.config_schema import KimBoundsConfig
from lipgnn.lipschitz.experiments.registry import Unit, register_unit_experiment


def units(b: KimBoundsConfig) -> list[str]:
    return [f"pinf-n{n}" for n in b.ns] + [f"p2-n{n}" for n in b.p2_ns]


def _unit_l2_mha() -> torch.nn.Module:
    from lipgnn.nn import L2MultiheadAttention

    attn = L2MultiheadAttention(1, 1).double()
    with torch.no_grad():  # App. I: all free parameters fixed to the identity
        attn.q_weight.fill_(1.0)
        attn.v_weight.fill_(1.0)
        attn.o_weight.fill_(1.0)
    return attn


def appendix_i_inits(restarts: int, n: int, dim: int, gen: torch.Generator) -> torch.Tensor:
    c = torch.rand(restarts, 1, 1, generator=gen, dtype=torch.float64) * 10.0
    return (torch.rand(restarts, n, dim, generator=gen, dtype=torch.float64) * 2.0 - 1.0) * c


def _full_inf_norm_by_rows(attn: torch.nn.Module, x: torch.Tensor, chunk: int = 100) -> float:
    """||J_F(X)||_inf of the whole map, block row by block row (O(N^2) work, O(chunk N) memory)."""
    from lipgnn.lipschitz.estimate import inf_norm

    n = x.size(0)
    chunks = [list(range(s, min(s + chunk, n))) for s in range(0, n, chunk)]
    return max(inf_norm(lambda z, rows=rows: attn(z, rows=rows), x) for rows in chunks)


@register_unit_experiment("kim_bounds", units, KimBoundsConfig)
def kim_bounds(b: KimBoundsConfig, name: str, budget: str, seed: int) -> Unit:
    """Fig. 2 / App. I and K: the L2-MHA bound against gradient-ascent lower bounds of ||J||_p, p = inf, 2.
    H = D = 1, W^Q = W^V = W^O = 1, inits X_ij ~ U[-c, c] with c ~ U[0, 10], Adam "till convergence" (here a
    fixed number of steps)."""
    p, n = name[1:].split("-n")
    n = int(n)
    restarts, steps = (b.restarts, b.steps) if p == "inf" else (b.p2_restarts, b.p2_steps)
    config = {"experiment": "kim_bounds", "budget": {"name": budget}, "seed": seed, "n": n, "p": p,
              "heads": 1, "dim": 1, "weights": "identity", "restarts": restarts, "steps": steps,
              "lr": b.lr, "init": "X_ij ~ U[-c, c], c ~ U[0, 10]"}
    if p == "2":
        # the power iteration's start vectors come from the unit's generator (reproducible values)
        config["power_init"] = "v ~ N(0, I) from the unit's generator"

    def compute() -> dict[str, Any]:
        from lipgnn.lipschitz.estimate import maximise_jacobian_norm
        from lipgnn.nn.lipschitz_bounds import l2_mha_bound

        attn = _unit_l2_mha()
        gen = torch.Generator().manual_seed(seed * 100_003 + n)
        x0 = appendix_i_inits(restarts, n, 1, gen)
        if p == "inf":
            # Ascend one block row (permutation equivariance: all rows share the supremum, F.2.1),
            # then report the whole Jacobian's norm at the end points.
            lb = maximise_jacobian_norm(lambda z: attn(z, rows=[0]), x0, "inf", steps=steps, lr=b.lr,
                                        vectorize=True)
            order = np.argsort(lb.values)[::-1][:5]
            # the full norm is >= the row's; evaluated for the 5 best restarts
            values = list(lb.values)
            for r in order:
                values[r] = max(values[r], _full_inf_norm_by_rows(attn, lb.xs[r]))
        else:
            lb = maximise_jacobian_norm(attn, x0, 2, steps=steps, lr=b.lr, generator=gen)
            values = list(lb.values)
        finite = [v for v in values if math.isfinite(v)]
        return {"n": n, "p": p, "upper": l2_mha_bound(attn, n, p), "lower": max(finite),
                "top5": sorted(finite, reverse=True)[:5], "values": values}

    return config, compute
