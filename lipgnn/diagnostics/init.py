r"""Weight initialisations compared by the energy experiments (the paper does not state its own).

- ``default``: whatever each PyTorch / PyG module does at construction (Kaiming-uniform ``Linear`` etc.).
- ``xavier``: every parameter with two or more dimensions Xavier-uniform (Glorot & Bengio),
  :math:`W \sim \mathcal{U}(-a, a)`, :math:`a = \sqrt{6 / (\text{fan}_\text{in} + \text{fan}_\text{out})}`,
  and every bias zero; LayerNorm gains (1-D ``weight``) keep their value 1.
"""

from __future__ import annotations

import torch
from torch import nn

INITS: tuple[str, ...] = ("default", "xavier")


@torch.no_grad()
def apply_init(model: nn.Module, scheme: str) -> nn.Module:
    """Re-initialise ``model`` in place with ``scheme`` (one of :data:`INITS`) and return it."""
    if scheme not in INITS:
        raise ValueError(f"init={scheme!r} is unknown; use one of {', '.join(INITS)}")
    if scheme == "default":
        return model
    for name, param in model.named_parameters():
        if param.dim() >= 2:
            nn.init.xavier_uniform_(param)
        elif name.rsplit(".", 1)[-1].startswith("bias"):
            nn.init.zeros_(param)
    return model


__all__ = ["INITS", "apply_init"]
