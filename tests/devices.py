"""What a test needs from the device it runs on (`pytest --torch-device cuda`; conftest.py sets the default).

Random inputs come from a generator on the default device, so the same test draws its inputs where its
tensors live. Tests of the compiled CPU loops carry the ``cpu_only`` mark (conftest.py skips them on CUDA,
where the fused layers take the eager twins that the other tests cover).
"""

from __future__ import annotations

import torch


def seeded(seed: int) -> torch.Generator:
    """A generator on the default device, seeded."""
    return torch.Generator(torch.get_default_device()).manual_seed(seed)
