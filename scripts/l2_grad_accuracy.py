"""How far the L2-attention layer's float32 gradients are from float64, for the fused (eager) path and for
the reference layer, and how far the reference layer is from itself when run twice (CUDA's scatter
atomics). ``python scripts/l2_grad_accuracy.py [cpu|cuda]``; 20 seeds, max absolute error over elements.
The layer and graph are those of tests/test_l2_fused.py (2 heads, concatenated, untied query and key)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from devices import seeded  # noqa: E402
from test_l2_fused import IN_CHANNELS, NUM_NODES, _graph, l2_pair, param_grads  # noqa: E402

from lipgnn.nn.fused import kernels  # noqa: E402


def main(device: str) -> None:
    torch.set_default_device(device)
    print("device:", device, "| 20 seeds, max abs over elements")
    worst: dict[tuple[str, str], float] = {}

    def keep(tag: str, name: str, value: float) -> None:
        worst[(tag, name)] = max(worst.get((tag, name), 0.0), value)

    for seed in range(20):
        ref, fused = l2_pair(2 + seed, heads=2, concat=True, tie_qk=False)
        x, ei = torch.randn(NUM_NODES, IN_CHANNELS, generator=seeded(4 + seed)), _graph(2 + seed)
        w = torch.randn(NUM_NODES, 12, generator=seeded(3 + seed))
        truth = param_grads(ref.double(), x.double(), ei, w.double())
        ref.float()
        with kernels.disabled():
            got = param_grads(fused, x, ei, w)
        pyg, pyg2 = param_grads(ref, x, ei, w), param_grads(ref, x, ei, w)
        for n, want in truth.items():
            keep("fused", n, (got[n].double() - want).abs().max().item())
            keep("pyg", n, (pyg[n].double() - want).abs().max().item())
            keep("fused_vs_pyg", n, (got[n] - pyg[n]).abs().max().item())
            keep("pyg_vs_pyg", n, (pyg[n] - pyg2[n]).abs().max().item())
    for n in sorted({k[1] for k in worst}):
        print(f"{n:18s} vs float64: fused {worst[('fused', n)]:.2e} pyg {worst[('pyg', n)]:.2e} | "
              f"fused-pyg {worst[('fused_vs_pyg', n)]:.2e} | pyg run twice {worst[('pyg_vs_pyg', n)]:.2e}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
