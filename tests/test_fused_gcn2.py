"""The fused GCNII layer (lipgnn.nn.fused.gcn2_conv) against PyG's GCN2Conv, whose drop-in subclass it is, and the
GCNII model's dropouts on the fused path."""

from __future__ import annotations

import pytest
import torch
from plain_fused import (
    assert_fused_model_loads_and_equals_pyg,
    assert_layer_classes,
    awkward_graph,
    count_spmm,
    models_by_impl,
)
from torch_geometric.nn import GCN2Conv

from lipgnn.nn.fused import FusedGCN2Conv, kernels


def pair(channels: int = 4, layer: int = 3, seed: int = 0, **kw) -> tuple[GCN2Conv, FusedGCN2Conv]:
    torch.manual_seed(seed)
    ref = GCN2Conv(channels, alpha=0.2, theta=0.5, layer=layer, **kw)
    fused = FusedGCN2Conv(channels, alpha=0.2, theta=0.5, layer=layer, **kw)
    fused.load_state_dict(ref.state_dict())
    return ref, fused


@pytest.mark.parametrize("mode", ["numba", "eager"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shared", [True, False])
def test_fused_gcn2_equals_pyg_values_and_gradients(mode: str, dtype: torch.dtype, shared: bool) -> None:
    ref, fused = pair(shared_weights=shared)
    ref, fused = ref.to(dtype), fused.to(dtype)
    ei = awkward_graph()
    x, x_0, g = (torch.randn(8, 4, dtype=dtype) for _ in range(3))
    outs, grads = [], []
    for conv in (ref, fused):
        xl, x0l = x.clone().requires_grad_(True), x_0.clone().requires_grad_(True)
        if mode == "eager" and conv is fused:
            with kernels.disabled():
                out = conv(xl, x0l, ei)
        else:
            out = conv(xl, x0l, ei)
        (out * g).sum().backward()
        outs.append(out.detach())
        grads.append([xl.grad, x0l.grad, *(p.grad for p in conv.parameters())])
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(outs[1], outs[0], atol=tol, rtol=tol)
    for a, b in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    with torch.no_grad():  # node 7 is isolated: P̂x_7 = x_7 (its self-loop, degree 1)
        h = (1 - fused.alpha) * x[7] + fused.alpha * x_0[7]
        expected = (1 - fused.beta) * h + fused.beta * h @ fused.weight1
        if not shared:
            expected = ((1 - fused.alpha) * x[7]) @ ((1 - fused.beta) * torch.eye(4, dtype=dtype)
                                                    + fused.beta * fused.weight1)
            expected += (fused.alpha * x_0[7]) @ ((1 - fused.beta) * torch.eye(4, dtype=dtype)
                                                  + fused.beta * fused.weight2)
        torch.testing.assert_close(outs[1][7], expected, atol=tol, rtol=tol)


def test_fused_gcn2_takes_the_csr_path_and_falls_back_where_pyg_options_differ(monkeypatch) -> None:
    import lipgnn.nn.fused.gcn2_conv as module

    calls = count_spmm(monkeypatch, module)
    ei, x, x_0 = awkward_graph(), torch.randn(8, 4), torch.randn(8, 4)
    _, fused = pair()
    fused(x, x_0, ei)
    assert calls == [1]
    calls.clear()
    for kw in ({"add_self_loops": False}, {"normalize": False}, {"cached": True}):
        ref, fused = pair(**kw)
        torch.testing.assert_close(fused(x, x_0, ei), ref(x, x_0, ei))
    _, fused = pair()
    w = torch.rand(ei.size(1))
    torch.testing.assert_close(fused(x, x_0, ei, w), GCN2Conv.forward(fused, x, x_0, ei, w))
    assert calls == []


def test_gcnii_builds_the_fused_layer_and_dropouts_with_the_same_state_dict() -> None:
    nets = models_by_impl("gcnii", impls=("pyg", "fused", "auto"))
    assert_layer_classes(nets, FusedGCN2Conv, GCN2Conv)
    assert nets["fused"].dropout_fn is FusedGCN2Conv.feature_dropout
    assert nets["pyg"].dropout_fn is torch.nn.functional.dropout
    assert_fused_model_loads_and_equals_pyg({k: nets[k] for k in ("pyg", "fused")})


def test_gcnii_training_step_equals_pyg_without_dropout() -> None:
    """Dropout off: a training step's loss and every parameter gradient of the fused GCNII equal PyG's."""
    nets = models_by_impl("gcnii")
    nets["fused"].load_state_dict(nets["pyg"].state_dict())
    x, ei, y = torch.randn(8, 6), awkward_graph(), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    losses = {}
    for impl, net in nets.items():
        net.train()
        losses[impl] = torch.nn.functional.cross_entropy(net(x, ei), y)
        losses[impl].backward()
    torch.testing.assert_close(losses["fused"], losses["pyg"], atol=1e-6, rtol=1e-6)
    for (name, a), b in zip(nets["fused"].named_parameters(), nets["pyg"].parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("impl", ["fused", "pyg"])
def test_gcnii_dropouts_take_the_fused_twins_on_the_fused_path(impl: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """GCNII's four dropout sites (input features, each block's input, the head's input), each with p = 0.6 in
    training: on the fused path the sparse-feature dropout, the layers' compiled dropout and the same for the head,
    never F.dropout (their distributions are tested in test_sparse_input.py and test_fused.py); with
    model.impl=pyg F.dropout at all four."""
    import torch.nn.functional as F
    from omegaconf import OmegaConf

    from lipgnn.data.spec import DataSpec
    from lipgnn.models import build_model
    from lipgnn.nn.fused.sparse_input import SparseInputLinear

    calls: list[tuple[str, tuple[int, ...], float]] = []

    def spy(site: str, original):
        def run(h, p, training=True, *args, **kwargs):
            calls.append((site, tuple(h.shape), p))
            return original(h, p, training, *args, **kwargs)
        return run

    cfg = OmegaConf.create({"name": "gcnii", "hidden": 16, "dropout": 0.6, "impl": impl})
    torch.manual_seed(0)
    net = build_model(cfg, OmegaConf.create({"name": "none"}), DataSpec(num_features=30, num_classes=3), 2).train()
    stock, compiled = F.dropout, FusedGCN2Conv.feature_dropout
    assert net.dropout_fn is (compiled if impl == "fused" else stock)
    monkeypatch.setattr(F, "dropout", spy("F.dropout", F.dropout))
    if isinstance(net.encoder, SparseInputLinear):
        monkeypatch.setattr(net.encoder, "dropped", spy("input", net.encoder.dropped))
    monkeypatch.setattr(FusedGCN2Conv, "feature_dropout", staticmethod(spy("block", FusedGCN2Conv.feature_dropout)))
    net.dropout_fn = spy("head", net.dropout_fn)
    x = torch.where(torch.rand(20, 30) < 0.1, torch.rand(20, 30), torch.zeros(()))
    net(x, awkward_graph().clamp(max=19))  # first sight of the features: the sparse input path from the next step
    calls.clear()
    net(x, awkward_graph().clamp(max=19))
    n = 20
    if impl == "fused":
        assert calls == [("input", (n, 30), 0.6), ("block", (n, 16), 0.6), ("block", (n, 16), 0.6),
                         ("head", (n, 16), 0.6)]
    else:
        assert calls == [("F.dropout", (n, 30), 0.6), ("F.dropout", (n, 16), 0.6), ("F.dropout", (n, 16), 0.6),
                         ("head", (n, 16), 0.6)]
