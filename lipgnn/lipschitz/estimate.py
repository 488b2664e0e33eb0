r"""Empirical lower bounds on Lipschitz constants: :math:`\mathrm{Lip}_p(f) \ge \|J_f(X)\|_p` for every
:math:`X` (Kim et al., Theorem 2.1), maximised over :math:`X` by gradient ascent with restarts (§5.1,
Appendix I).

Any module works, given as a function ``f(x) -> y`` of one input tensor (dense attentions on a set, a
graph layer on a fixed graph: ``lambda x: conv(x, edge_index)``); the Jacobian is that of
:math:`\mathrm{vec}(x) \mapsto \mathrm{vec}(f(x))`.

* ``p = inf``: the exact induced ∞-norm, the maximum absolute row sum of the full Jacobian
  (``torch.func.jacrev``; small inputs). A map restricted to some output rows gives the norm of those
  block rows, itself a lower bound on :math:`\|J_f\|_\infty`; for permutation-equivariant maps
  (self-attention) one block row reaches the same supremum (Appendix F.2.1).
* ``p = 2``: the spectral norm by power iteration on :math:`J^\top J` with ``torch.func.jvp`` /
  ``torch.func.vjp`` (no Jacobian is formed; Appendix B), for large inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.func import grad, jacrev, jvp, vjp, vmap

from lipgnn.nn.lipschitz_bounds import normalise_p

Fn = Callable[[Tensor], Tensor]


def jacobian_matrix(f: Fn, x: Tensor, chunk_size: int | None = None) -> Tensor:
    """The full Jacobian of ``vec(x) -> vec(f(x))``, ``[f(x).numel(), x.numel()]`` (``torch.func.jacrev``)."""
    jac = jacrev(f, chunk_size=chunk_size)(x)
    return jac.reshape(-1, x.numel())


def inf_norm(f: Fn, x: Tensor, chunk_size: int | None = None) -> float:
    r""":math:`\|J_f(x)\|_\infty`, the maximum absolute row sum of the exact Jacobian."""
    with torch.no_grad():
        return float(jacobian_matrix(f, x.detach(), chunk_size).abs().sum(dim=1).max())


def _inf_objective(f: Fn) -> Fn:
    return lambda x: jacrev(f)(x).reshape(-1, x.numel()).abs().sum(dim=1).max()


def spectral_norm(f: Fn, x: Tensor, iters: int = 50, v0: Tensor | None = None, tol: float = 1e-6,
                  generator: torch.Generator | None = None) -> tuple[float, Tensor]:
    r""":math:`\|J_f(x)\|_2` by power iteration :math:`v \leftarrow J^\top J v / \|J^\top J v\|`
    (Appendix B), with ``jvp`` for :math:`Jv` and ``vjp`` for :math:`J^\top u`. Returns the estimate
    :math:`\|J v\|` (an underestimate of the spectral norm, hence still a lower bound on the Lipschitz
    constant) and the final unit vector :math:`v` (reuse it as ``v0`` to warm-start). Stops when the
    estimate changes by less than ``tol`` relative."""
    x = x.detach()
    v = torch.randn(x.shape, generator=generator, dtype=x.dtype) if v0 is None else v0.detach().clone()
    v = v / v.norm()
    _, pullback = vjp(f, x)
    sigma = 0.0
    for _ in range(max(1, iters)):
        # f's parameters require grad, so Jv and J^T(Jv) carry an autograd history through them; kept,
        # every iterate would hold all earlier iterations' graphs (memory growing with iters x depth).
        # The values are the same either way: only the history is dropped.
        _, jv = jvp(f, (x,), (v,))
        jv = jv.detach()
        new_sigma = float(jv.norm())
        (w,) = pullback(jv)
        w = w.detach()
        w_norm = w.norm()
        if not torch.isfinite(w_norm) or w_norm == 0:
            return new_sigma, v
        v = w / w_norm
        if abs(new_sigma - sigma) <= tol * max(new_sigma, 1e-30):
            sigma = new_sigma
            break
        sigma = new_sigma
    return sigma, v


@dataclass
class LowerBound:
    """Result of :func:`maximise_jacobian_norm`: one value per restart (each a lower bound on
    :math:`\\mathrm{Lip}_p`), the best one, its input, the objective every ``trace_every`` steps and every
    restart's final point."""

    p: str
    values: list[float]
    best: float
    x_best: Tensor
    steps: int
    trace: list[list[float]] = field(default_factory=list)
    xs: Tensor | None = None  # every restart's final point, [R, ...]


def maximise_jacobian_norm(
    f: Fn,
    x0: Tensor,
    p: float | int | str = "inf",
    *,
    steps: int = 200,
    lr: float = 0.1,
    vectorize: bool = False,
    f_eval: Fn | None = None,
    power_iters: int = 3,
    trace_every: int = 0,
    generator: torch.Generator | None = None,
) -> LowerBound:
    r"""Maximise :math:`\|J_f(X)\|_p` over :math:`X` with Adam from each restart ``x0[r]`` (Appendix I).

    Args:
        f: the map, applied to one input of shape ``x0.shape[1:]``.
        x0: ``[R, ...]`` starting points, one per restart.
        p: ``inf`` (exact Jacobian; differentiated through ``torch.func.jacrev``) or ``2``
            (power iteration; the ascent direction is the gradient of :math:`\|J(X)v\|` for the current
            top right singular vector :math:`v`, which is the gradient of :math:`\sigma_{\max}` where
            it is simple, and :math:`v` is warm-started with ``power_iters`` iterations per step).
        steps, lr: Adam steps and learning rate (the paper: lr 0.1 until convergence).
        vectorize: ``f`` works under ``torch.func.vmap`` (dense attentions): all restarts in one
            batched computation (p = inf only).
        f_eval: map whose exact norm is reported at the final points (default ``f``); e.g. ``f``
            restricted to one output row for the ascent and the full map for the result.
        trace_every: record the objective every that many steps (0: none).
        generator: draws the power iteration's random start vectors (p = 2), so that a seeded generator
            makes the result reproducible (``None``: the global RNG).

    Non-finite objectives stop a restart (its last finite value is kept).
    """
    p = normalise_p(p)
    f_eval = f if f_eval is None else f_eval
    restarts = x0.size(0)
    xs = x0.detach().clone()
    trace: list[list[float]] = [[] for _ in range(restarts)]
    alive = torch.ones(restarts, dtype=torch.bool)
    last_good = xs.clone()

    if p == "inf":
        objective = _inf_objective(f)
        grad_value = vmap(grad_and_value_fn(objective)) if vectorize else None
        x = xs.clone().requires_grad_(True)
        opt = torch.optim.Adam([x], lr=lr)
        for step in range(steps + 1):
            if grad_value is not None:
                g, val = grad_value(x.detach())
            else:
                pairs = [grad_and_value_fn(objective)(x.detach()[r]) for r in range(restarts)]
                g = torch.stack([pr[0] for pr in pairs])
                val = torch.stack([pr[1] for pr in pairs])
            finite = torch.isfinite(val) & torch.isfinite(g.flatten(1)).all(dim=1)
            alive &= finite
            if trace_every and step % trace_every == 0:
                for r in range(restarts):
                    trace[r].append(float(val[r].detach()) if finite[r] else math.inf)
            last_good[alive] = x.detach()[alive]
            if step == steps or not alive.any():
                break
            opt.zero_grad()
            x.grad = torch.where(alive.view(-1, *[1] * (x.dim() - 1)), -g, torch.zeros_like(g))
            opt.step()
        finals = [_safe(lambda r=r: inf_norm(f_eval, last_good[r])) for r in range(restarts)]
    else:
        finals = []
        for r in range(restarts):
            x = xs[r].clone().requires_grad_(True)
            opt = torch.optim.Adam([x], lr=lr)
            _, v = spectral_norm(f, x, iters=30, generator=generator)
            for step in range(steps + 1):
                sigma, v = spectral_norm(f, x, iters=power_iters, v0=v, tol=0.0)
                if not math.isfinite(sigma):
                    alive[r] = False
                    break
                if trace_every and step % trace_every == 0:
                    trace[r].append(sigma)
                last_good[r] = x.detach()
                if step == steps:
                    break
                vv = v.detach()
                g = grad(lambda z, vv=vv: jvp(f, (z,), (vv,))[1].norm())(x.detach())
                opt.zero_grad()
                x.grad = -g
                opt.step()
            finals.append(_safe(lambda r=r: spectral_norm(f_eval, last_good[r], iters=100, generator=generator)[0]))
    best = max(range(restarts), key=lambda r: finals[r] if math.isfinite(finals[r]) else -math.inf)
    return LowerBound(p=p, values=finals, best=finals[best], x_best=last_good[best].clone(), steps=steps,
                      trace=trace if trace_every else [], xs=last_good)


def lower_bound_at(f: Fn, h: Tensor, *, steps: int = 5, power_iters: int = 30,
                   generator: torch.Generator | None = None) -> tuple[float, float]:
    r"""``(at_input, estimate)`` for a map ``f`` at its actual input ``h``: :math:`\|J_f(h)\|_2` by power
    iteration, and the larger of that and ``steps`` steps of :func:`maximise_jacobian_norm` (p = 2) from ``h``
    (Adam step size 0.05 times ``h``'s standard deviation). Both are lower bounds on :math:`\mathrm{Lip}_2(f)`."""
    at_input, _ = spectral_norm(f, h, iters=power_iters, generator=generator)
    best = at_input
    if steps > 0:
        std = float(h.std()) if h.numel() > 1 else 0.0
        lr = 0.05 * std if std > 0 else 0.05
        lb = maximise_jacobian_norm(f, h.unsqueeze(0), 2, steps=steps, lr=lr, power_iters=3, generator=generator)
        if math.isfinite(lb.best):
            best = max(best, lb.best)
    return at_input, best


def grad_and_value_fn(objective: Fn) -> Callable[[Tensor], tuple[Tensor, Tensor]]:
    """``torch.func.grad_and_value`` of a scalar objective (kept as a function so ``vmap`` can wrap it)."""
    from torch.func import grad_and_value

    return grad_and_value(objective)


def _safe(compute: Callable[[], float]) -> float:
    try:
        value = float(compute())
    except (RuntimeError, ValueError):
        return math.nan
    return value if math.isfinite(value) else math.nan
