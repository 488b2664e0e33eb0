"""What a test needs from the device it runs on (`pytest --torch-device cuda`; conftest.py sets the default).

Random inputs come from a generator on the default device, so the same test draws its inputs where its
tensors live. Tests of the compiled CPU loops carry the ``cpu_only`` mark (conftest.py skips them on CUDA,
where the fused layers take the eager twins that the other tests cover).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def on_cuda() -> bool:
    """Do the tests run with CUDA as the default device (``--torch-device cuda``)?"""
    return torch.get_default_device().type == "cuda"


def seeded(seed: int) -> torch.Generator:
    """A generator on the default device, seeded."""
    return torch.Generator(torch.get_default_device()).manual_seed(seed)


def on_device(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` on the default device. Needed for PyG's ``GatedGraphConv``, whose weight comes from the
    legacy ``torch.Tensor`` constructor, which ignores the default device (the trainer moves every model)."""
    return module.to(torch.get_default_device())


def exact() -> dict[str, float]:
    """Tolerances for "the same computation twice gives the same numbers": bitwise on CPU. On CUDA, PyG's
    scatter sums accumulate with atomics in no fixed order, so two runs agree to float rounding only."""
    if on_cuda():
        return {"rtol": 1.3e-6, "atol": 1e-6}
    return {"rtol": 0.0, "atol": 0.0}


def nondet_tol() -> float:
    """``gradcheck``'s ``nondet_tol``: 0 on CPU; on CUDA the scatter sums of a backward pass are atomics,
    so running it twice on the same input differs by float64 rounding."""
    return 1e-12 if on_cuda() else 0.0


def gradcheck(fn: Callable[..., object], inputs: tuple[torch.Tensor, ...], **kwargs: object) -> bool:
    """``torch.autograd.gradcheck`` with :func:`nondet_tol` for the device."""
    return torch.autograd.gradcheck(fn, inputs, nondet_tol=nondet_tol(), **kwargs)
