"""Nonlocal message passing (Guan & He §4.1) on the fused CSR layers against the PyG path.

``NonlocalScale`` scales head :math:`h`'s aggregation by :math:`\\tfrac{1}{n}\\|P_h X - X\\|^2`. With a
fused conv it reads :math:`P_h` from the conv's ``csr_heads`` (no ``return_attention_weights``
fallback, no ``[E, H, d]`` messages); here its outputs and gradients (w.r.t. ``x`` and every
parameter) are held equal to the PyG path's for SAN blocks (Pre-LN, Post-LN, none), GT and GAT convs,
both factor sources and with and without the factor's gradient, and the reference forward is made to
raise to show the fused path never takes it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from devices import gradcheck, seeded
from omegaconf import OmegaConf

from lipgnn.config import CONF_DIR
from lipgnn.data.spec import DataSpec
from lipgnn.models import build_model
from lipgnn.models import nonlocal_mp as nonlocal_module
from lipgnn.models.nonlocal_mp import NonlocalScale, head_laplacian_energy, head_laplacian_energy_csr
from lipgnn.nn import FusedLipGATConv, FusedLipTransformerConv, LipGATConv, LipTransformerConv
from lipgnn.nn.fused import CSRGraph, get_csr_graph

CONF = Path(CONF_DIR)
NONE = OmegaConf.create({"name": "none"})
NUM_NODES = 30
TOL = {torch.float32: {"atol": 1e-5, "rtol": 1e-5}, torch.float64: {"atol": 1e-10, "rtol": 1e-10}}


pytestmark = pytest.mark.usefixtures("single_thread")


def random_graph(seed: int = 0) -> torch.Tensor:
    """Random directed edges among the first 26 nodes (4 isolated), with a duplicate and a self-loop."""
    gen = seeded(seed)
    ei = torch.randint(0, 26, (2, 110), generator=gen)
    return torch.cat([ei, ei[:, :5], torch.tensor([[3], [3]])], dim=1)


def no_reference_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference layers' forward and the edge-wise energy raise: the fused path must use neither."""

    def boom(*args, **kwargs):
        raise AssertionError("the fused nonlocal path fell back to the reference layer")

    monkeypatch.setattr(LipTransformerConv, "forward", boom)
    monkeypatch.setattr(LipGATConv, "forward", boom)
    monkeypatch.setattr(nonlocal_module, "head_laplacian_energy", boom)


def _grads(module: torch.nn.Module, x: torch.Tensor, run) -> tuple[torch.Tensor, torch.Tensor, dict]:
    x = x.clone().requires_grad_(True)
    out = run(module, x)
    # A fixed random projection, so every output entry's gradient is checked.
    weight = torch.randn(out.shape, generator=seeded(3), dtype=out.dtype)
    (out * weight).sum().backward()
    return out.detach(), x.grad, {name: p.grad for name, p in module.named_parameters() if p.grad is not None}


def _close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, name: str) -> None:
    """Within ``TOL`` relative to each entry and, absolutely, to the tensor's largest entry: a gradient
    entry is a sum of terms as large as the tensor's largest, so float32 rounds it at that scale."""
    tol = TOL[dtype]
    atol = tol["atol"] * max(1.0, float(expected.abs().max()))
    torch.testing.assert_close(actual, expected, atol=atol, rtol=tol["rtol"], msg=lambda m: f"{name}: {m}")


def _assert_equal(ref: tuple, fused: tuple, dtype: torch.dtype) -> None:
    (out_r, gx_r, gp_r), (out_f, gx_f, gp_f) = ref, fused
    _close(out_f, out_r, dtype, "output")
    _close(gx_f, gx_r, dtype, "grad of x")
    assert gp_f.keys() == gp_r.keys() and gp_r
    for name in gp_r:
        _close(gp_f[name], gp_r[name], dtype, f"grad of {name}")


def _san(impl: str, placement: str, source: str, grad: bool, dtype: torch.dtype) -> torch.nn.Module:
    cfg = OmegaConf.load(CONF / "model" / "san.yaml")
    cfg.hidden, cfg.heads, cfg.ffn_hidden = 8, 2, 16
    cfg["nonlocal"], cfg.nonlocal_source, cfg.nonlocal_grad = True, source, grad
    cfg.layer_norm, cfg.impl = placement, impl
    torch.manual_seed(6)
    return build_model(cfg, NONE, DataSpec(num_features=5, num_classes=3), 3).to(dtype).eval()


# Without LayerNorm the nonlocal factors compound over the layers (outputs ~1e3 here), beyond what a
# 1e-5 relative float32 comparison survives: that placement is compared in float64 only.
@pytest.mark.parametrize(("placement", "dtype"), [
    ("pre", torch.float32), ("post", torch.float32),
    ("pre", torch.float64), ("post", torch.float64), ("none", torch.float64),
])
@pytest.mark.parametrize("source", ["x", "xv"])
@pytest.mark.parametrize("grad", [True, False])
def test_fused_nonlocal_san_equals_pyg(
    placement: str, source: str, grad: bool, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = torch.randn(NUM_NODES, 5, generator=seeded(5), dtype=dtype)
    edge_index = random_graph()
    ref = _grads(_san("pyg", placement, source, grad, dtype), x, lambda m, x: m(x, edge_index))
    fused_net = _san("fused", placement, source, grad, dtype)
    no_reference_path(monkeypatch)
    fused = _grads(fused_net, x, lambda m, x: m(x, edge_index))
    _assert_equal(ref, fused, dtype)


def _conv_pair(kind: str, lip: bool, dtype: torch.dtype) -> tuple[torch.nn.Module, torch.nn.Module]:
    classes = {"gt": (LipTransformerConv, FusedLipTransformerConv), "gat": (LipGATConv, FusedLipGATConv)}
    ref_cls, fused_cls = classes[kind]
    kwargs = {"heads": 3, "lipschitz_norm": lip}
    torch.manual_seed(1)
    ref = ref_cls(7, 4, **kwargs).to(dtype)
    fused = fused_cls(7, 4, **kwargs).to(dtype)
    fused.load_state_dict(ref.state_dict())
    return ref, fused


@pytest.mark.parametrize("kind", ["gt", "gat"])
@pytest.mark.parametrize("lip", [False, True])
@pytest.mark.parametrize("source", ["x", "xv"])
@pytest.mark.parametrize("grad", [True, False])
def test_fused_nonlocal_conv_equals_pyg(kind: str, lip: bool, source: str, grad: bool,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """GT (with its root term ``lin_skip``) and GAT (bias), with and without LipschitzNorm, float64."""
    dtype = torch.float64
    x = torch.randn(NUM_NODES, 7, generator=seeded(2), dtype=dtype)
    edge_index = random_graph(1)
    if kind == "gt":  # TransformerConv adds no self-loops: give every node one, as the models do
        loops = torch.arange(NUM_NODES).repeat(2, 1)
        edge_index = torch.cat([edge_index, loops], dim=1)
    ref_conv, fused_conv = _conv_pair(kind, lip, dtype)
    scale = NonlocalScale(source=source, grad=grad)
    ref = _grads(ref_conv, x, lambda m, x: scale(m, x, edge_index))
    ref_factor = scale.last_factor
    no_reference_path(monkeypatch)
    fused = _grads(fused_conv, x, lambda m, x: scale(m, x, edge_index))
    _assert_equal(ref, fused, dtype)
    torch.testing.assert_close(scale.last_factor, ref_factor, **TOL[dtype])


def test_csr_energy_equals_edgewise_energy_and_gradcheck() -> None:
    """head_laplacian_energy_csr = head_laplacian_energy (any edge order), and its gradient in ``x`` and
    the attention values is the exact one (finite differences, float64)."""
    edge_index = random_graph(2)
    graph = get_csr_graph(edge_index, NUM_NODES, True)
    gen = seeded(4)
    x = torch.randn(NUM_NODES, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    alpha = torch.rand(graph.num_edges, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(head_laplacian_energy_csr(x, alpha, graph),
                               head_laplacian_energy(x, alpha, graph.edge_index))
    assert gradcheck(lambda x, a: head_laplacian_energy_csr(x, a, graph), (x, alpha))


def test_csr_energy_on_a_path_by_hand() -> None:
    """P = uniform over {self} ∪ neighbours on the path 0-1-2, X = (0, 3, 6)ᵀ: P X = (1.5, 3, 4.5),
    ‖P X − X‖² = 1.5² + 0 + 1.5² = 4.5, over n = 3: 1.5 for both heads."""
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    graph = CSRGraph.from_edge_index(edge_index, 3, add_self_loops=True)
    counts = torch.bincount(graph.row, minlength=3).to(torch.float64)
    alpha = (1 / counts[graph.row]).unsqueeze(1).repeat(1, 2)
    x = torch.tensor([[0.0], [3.0], [6.0]], dtype=torch.float64)
    expected = torch.tensor([1.5, 1.5], dtype=torch.float64)
    torch.testing.assert_close(head_laplacian_energy_csr(x, alpha, graph), expected)


@pytest.mark.parametrize("kind", ["gt", "gat"])
def test_return_attention_weights_keeps_pyg_semantics(kind: str) -> None:
    """External callers asking for the weights still get PyG's (edge_index, alpha) in PyG's edge order."""
    ref, fused = _conv_pair(kind, False, torch.float32)
    x = torch.randn(NUM_NODES, 7, generator=seeded(8))
    edge_index = random_graph(3)
    out_r, (ei_r, a_r) = ref(x, edge_index, return_attention_weights=True)
    out_f, (ei_f, a_f) = fused(x, edge_index, return_attention_weights=True)
    assert torch.equal(ei_f, ei_r)
    torch.testing.assert_close(a_f, a_r)
    torch.testing.assert_close(out_f, out_r)


def test_csr_heads_is_none_where_the_csr_path_does_not_cover_the_input() -> None:
    """Bipartite input (and, for GT, edge features without edge_dim) → ``None``: NonlocalScale then
    uses the reference path, with the same result."""
    _, fused = _conv_pair("gt", False, torch.float64)
    x = torch.randn(NUM_NODES, 7, generator=seeded(9), dtype=torch.float64)
    edge_index = random_graph(4)
    assert fused.csr_heads((x, x), edge_index) is None
    edge_attr = torch.randn(edge_index.size(1), 2, dtype=torch.float64)
    assert fused.csr_heads(x, edge_index, edge_attr) is None
    parts = fused.csr_heads(x, edge_index)
    assert parts is not None and parts.heads.shape == (NUM_NODES, 3, 4)
    assert parts.alpha.shape == (parts.graph.num_edges, 3)
