"""The fused GCN layer (lipgnn.nn.fused.gcn_conv) against PyG's GCNConv, whose drop-in subclass it is."""

from __future__ import annotations

import pytest
import torch
from plain_fused import assert_fused_model_loads_and_equals_pyg, awkward_graph, count_spmm, models_by_impl
from torch_geometric.nn import GCNConv

from lipgnn.nn.fused import FusedGCNConv, get_csr_graph, kernels
from lipgnn.nn.fused.gcn_conv import gcn_edge_weights


def pair(in_ch: int = 5, out_ch: int = 4, seed: int = 0, **kw) -> tuple[GCNConv, FusedGCNConv]:
    torch.manual_seed(seed)
    ref = GCNConv(in_ch, out_ch, **kw)
    fused = FusedGCNConv(in_ch, out_ch, **kw)
    fused.load_state_dict(ref.state_dict())
    torch.nn.init.normal_(fused.bias)  # a non-zero bias, so the test sees it
    ref.load_state_dict(fused.state_dict())
    return ref, fused


def test_edge_weights_are_the_symmetric_normalisation_by_hand() -> None:
    # path 0 - 1 - 2 (both directions) plus self-loops: degrees 2, 3, 2
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    g = get_csr_graph(ei, 3, True)
    w = gcn_edge_weights(g, torch.float64).view(-1)
    expected = {(0, 0): 1 / 2, (0, 1): 1 / 6**0.5, (1, 0): 1 / 6**0.5, (1, 1): 1 / 3, (1, 2): 1 / 6**0.5,
                (2, 1): 1 / 6**0.5, (2, 2): 1 / 2}
    got = {(int(i), int(j)): float(v) for i, j, v in zip(g.row, g.col, w, strict=True)}
    assert got == pytest.approx(expected)
    assert gcn_edge_weights(g, torch.float64) is gcn_edge_weights(g, torch.float64)  # cached per graph


@pytest.mark.parametrize("mode", ["numba", "eager"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fused_gcn_equals_pyg_values_and_gradients(mode: str, dtype: torch.dtype) -> None:
    ref, fused = pair()
    ref, fused = ref.to(dtype), fused.to(dtype)
    ei = awkward_graph()
    x = torch.randn(8, 5, dtype=dtype)
    g = torch.randn(8, 4, dtype=dtype)
    outs, grads = [], []
    for conv in (ref, fused):
        xl = x.clone().requires_grad_(True)
        if mode == "eager" and conv is fused:
            with kernels.disabled():
                out = conv(xl, ei)
                (out * g).sum().backward()
        else:
            out = conv(xl, ei)
            (out * g).sum().backward()
        outs.append(out.detach())
        grads.append([xl.grad, *(p.grad for p in conv.parameters())])
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(outs[1], outs[0], atol=tol, rtol=tol)
    for a, b in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    with torch.no_grad():  # node 7 is isolated: degree 1 (its self-loop), so its output is Θx_7 + b
        torch.testing.assert_close(outs[1][7], fused.lin(x[7]) + fused.bias, atol=tol, rtol=tol)


def test_fused_gcn_takes_the_csr_path_and_falls_back_where_pyg_options_differ(monkeypatch) -> None:
    import lipgnn.nn.fused.gcn_conv as module

    calls = count_spmm(monkeypatch, module)
    ei, x = awkward_graph(), torch.randn(8, 5)
    _, fused = pair()
    fused(x, ei)
    assert calls == [1]
    calls.clear()
    for kw in ({"improved": True}, {"add_self_loops": False}, {"normalize": False}, {"cached": True}):
        ref, fused = pair(**kw)
        torch.testing.assert_close(fused(x, ei), ref(x, ei))
    _, fused = pair()
    w = torch.rand(ei.size(1))
    torch.testing.assert_close(fused(x, ei, w), GCNConv.forward(fused, x, ei, w))  # edge weights: PyG's path
    assert calls == []


def test_models_build_the_fused_gcn_with_the_same_state_dict() -> None:

    nets = models_by_impl("gcn")
    assert all(type(b.conv) is FusedGCNConv for b in nets["fused"].blocks)
    assert_fused_model_loads_and_equals_pyg(nets)


def test_a_graph_first_seen_under_inference_mode_still_trains() -> None:
    """The cached weights are made outside inference mode, so an evaluation under torch.inference_mode that
    meets the graph first does not break the training step after it (inference tensors cannot be saved for
    backward)."""
    ref, fused = pair()
    ei, x = awkward_graph(), torch.randn(8, 5)
    with torch.inference_mode():
        torch.testing.assert_close(fused(x, ei), ref(x, ei))
    fused(x, ei).sum().backward()
    ref(x, ei).sum().backward()
    torch.testing.assert_close(fused.lin.weight.grad, ref.lin.weight.grad)
