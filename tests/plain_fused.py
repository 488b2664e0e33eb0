"""What the plain fused layers' tests share (test_fused_gcn.py, test_fused_ggnn.py): an awkward graph and a
spy on the CSR product a layer module calls."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from devices import on_device


def awkward_graph() -> torch.Tensor:
    """Self-loops already present (one node twice), a parallel edge, an isolated node (7), a node with
    out-edges only (6)."""
    src = torch.tensor([0, 1, 2, 2, 3, 4, 5, 5, 1, 0, 3, 3, 4, 6, 1, 2, 2])
    dst = torch.tensor([0, 0, 0, 1, 1, 1, 2, 3, 3, 3, 4, 4, 4, 5, 1, 2, 2])
    return torch.stack([src, dst])


def count_spmm(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> list[int]:
    """Spy on ``module.csr_spmm``: the list that gets a 1 per call."""
    calls: list[int] = []
    original = module.csr_spmm
    monkeypatch.setattr(module, "csr_spmm", lambda *a: calls.append(1) or original(*a))
    return calls


def models_by_impl(name: str, impls: tuple[str, ...] = ("pyg", "fused"), norm: str = "none",
                   ) -> dict[str, torch.nn.Module]:
    """A 3-block model ``name`` (width 8, no dropout, ``norm``) per ``model.impl``, each built from seed 0."""
    from omegaconf import OmegaConf

    from lipgnn.data.spec import DataSpec
    from lipgnn.models import build_model

    nets = {}
    for impl in impls:
        cfg = OmegaConf.create({"name": name, "hidden": 8, "dropout": 0.0, "impl": impl})
        torch.manual_seed(0)
        spec = DataSpec(num_features=6, num_classes=3)
        nets[impl] = on_device(build_model(cfg, OmegaConf.create({"name": norm}), spec, 3))
    return nets


def assert_fused_model_loads_and_equals_pyg(nets: dict[str, torch.nn.Module]) -> None:
    """The fused model has the PyG model's state-dict keys, loads its weights and then gives its output."""
    assert nets["pyg"].state_dict().keys() == nets["fused"].state_dict().keys()
    nets["fused"].load_state_dict(nets["pyg"].state_dict())
    x, ei = torch.randn(8, 6), awkward_graph()
    for net in nets.values():
        net.eval()
    torch.testing.assert_close(nets["fused"](x, ei), nets["pyg"](x, ei), atol=1e-5, rtol=1e-5)


def assert_layer_classes(nets: dict[str, torch.nn.Module], fused_cls: type, pyg_cls: type) -> None:
    """Every block's conv is ``pyg_cls`` for ``model.impl=pyg`` and ``fused_cls`` for ``fused`` and ``auto``
    (CPU) where built."""
    for impl, net in nets.items():
        want = pyg_cls if impl == "pyg" else fused_cls
        assert all(type(b.conv) is want for b in net.blocks), impl
