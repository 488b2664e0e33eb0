"""The fused SAN block (``model=san``, ``model.impl=fused``; :mod:`lipgnn.nn.fused.san`).

Its attention (all heads, with the nonlocal energy) is one operation with a hand-written backward
pass: here it is held equal to hand-computed values, to an edge-wise PyG reference and to its eager
twin (values and gradients, float32, and float64 finite differences), and whole fused SANs to the PyG
SAN (Post-LN, Pre-LN, none; nonlocal on and off; training mode).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from devices import gradcheck, seeded
from omegaconf import OmegaConf
from torch_geometric.utils import softmax

from lipgnn.config import CONF_DIR
from lipgnn.data.spec import DataSpec
from lipgnn.models import build_model
from lipgnn.nn.fused import CSRGraph, kernels, san_kernels
from lipgnn.nn.fused.san import san_attention

CONF = Path(CONF_DIR)
NONE = OmegaConf.create({"name": "none"})

pytestmark = pytest.mark.usefixtures("single_thread")


def random_graph(n: int = 12, e: int = 40, seed: int = 0) -> CSRGraph:
    """Random directed edges (duplicates and self-loops normalised away), one self-loop per node."""
    gen = seeded(seed)
    return CSRGraph.from_edge_index(torch.randint(0, n, (2, e), generator=gen), n, add_self_loops=True)


def edgewise_attention(qkv: torch.Tensor, x: torch.Tensor, graph: CSRGraph, heads: int, width: int):
    """Reference: scores per edge, PyG's softmax over each target's edges, messages summed per target;
    the nonlocal energy from P_h X formed edge by edge."""
    n = qkv.size(0)
    q, k, v = qkv.view(n, 3, heads, width).unbind(1)
    row, col = graph.row, graph.col
    alpha = softmax((q[row] * k[col]).sum(-1) / math.sqrt(width), row, num_nodes=n)  # [E, H]
    out = torch.zeros(n, heads, width, dtype=qkv.dtype).index_add(0, row, alpha.unsqueeze(-1) * v[col])
    px = torch.zeros(n, heads, x.size(1), dtype=x.dtype).index_add(0, row, alpha.unsqueeze(-1) * x[col].unsqueeze(1))
    energy = (px - x.unsqueeze(1)).pow(2).sum(dim=(0, 2))
    return out.reshape(n, -1), energy


def test_attention_by_hand_uniform_weights() -> None:
    """q = k = 0: every score is 0, so P is uniform over {self} ∪ neighbours. Path 0-1-2, one head of
    width 1, v = (3, 6, 9): P V = (4.5, 6, 7.5). X = (0, 3, 6): P X = (1.5, 3, 4.5), so
    ‖P X − X‖² = 1.5² + 0 + 1.5² = 4.5."""
    graph = CSRGraph.from_edge_index(torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), 3, add_self_loops=True)
    qkv = torch.tensor([[0.0, 0.0, 3.0], [0.0, 0.0, 6.0], [0.0, 0.0, 9.0]])
    x = torch.tensor([[0.0], [3.0], [6.0]])
    for path in ("numba", "eager"):
        with kernels.disabled() if path == "eager" else _nothing():
            out, energy = san_attention(qkv, graph, 1, 1, x)
        torch.testing.assert_close(out, torch.tensor([[4.5], [6.0], [7.5]]))
        torch.testing.assert_close(energy, torch.tensor([4.5]))


def test_attention_by_hand_two_edges() -> None:
    """Node 0 with itself and node 1: q_0 = 2, k_0 = 0, k_1 = ln 3 (width 1, so √d = 1): scores 0 and
    2 ln 3, weights 1/10 and 9/10; v = (1, 11) gives 0.1 + 9.9 = 10."""
    graph = CSRGraph.from_edge_index(torch.tensor([[1], [0]]), 2, add_self_loops=True)
    qkv = torch.tensor([[2.0, 0.0, 1.0], [0.0, math.log(3.0), 11.0]], dtype=torch.float64)
    out, _ = san_attention(qkv, graph, 1, 1)
    assert out[0, 0].item() == pytest.approx(10.0, rel=1e-12)
    assert out[1, 0].item() == pytest.approx(11.0, rel=1e-12)  # node 1 attends to itself only


def test_attention_without_edges() -> None:
    """No edges: every P_h is 0, so the aggregation is 0 and ‖P_h X − X‖² = ‖X‖² = 1 + 4 = 5."""
    graph = CSRGraph.from_edge_index(torch.zeros(2, 0, dtype=torch.long), 2, add_self_loops=False)
    qkv = torch.randn(2, 6, requires_grad=True)
    x = torch.tensor([[1.0], [2.0]], requires_grad=True)
    out, energy = san_attention(qkv, graph, 2, 1, x)
    torch.testing.assert_close(out, torch.zeros(2, 2))
    torch.testing.assert_close(energy, torch.tensor([5.0, 5.0]))
    (out.sum() + energy.sum()).backward()
    torch.testing.assert_close(x.grad, torch.tensor([[4.0], [8.0]]))  # 2 heads × 2x
    assert qkv.grad is None  # nothing depends on the scores or values


class _nothing:  # noqa: N801 - a no-op context manager, spelled like kernels.disabled()
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: object) -> None:
        return None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("with_x", [False, True])
@pytest.mark.parametrize("path", ["numba", "eager"])
@pytest.mark.parametrize("heads,width", [(3, 4), (4, 8)])  # 4 x 8 in float32: the vector loops
def test_attention_equals_edgewise_reference(dtype: torch.dtype, with_x: bool, path: str, heads: int,
                                             width: int) -> None:
    dim = 5
    graph = random_graph()
    gen = seeded(1)
    qkv = torch.randn(graph.num_src, 3 * heads * width, generator=gen, dtype=dtype) * 2
    x = torch.randn(graph.num_src, dim, generator=gen, dtype=dtype)
    w_out = torch.randn(graph.num_src, heads * width, generator=gen, dtype=dtype)
    w_e = torch.randn(heads, generator=gen, dtype=dtype)

    def grads(fn):
        a, b = qkv.clone().requires_grad_(True), x.clone().requires_grad_(True)
        out, energy = fn(a, b)
        loss = (out * w_out).sum() + ((energy * w_e).sum() if with_x else 0)
        loss.backward()
        return out.detach(), (energy.detach() if with_x else None), a.grad, (b.grad if with_x else None)

    ref = grads(lambda a, b: edgewise_attention(a, b, graph, heads, width))
    with kernels.disabled() if path == "eager" else _nothing():
        got = grads(lambda a, b: san_attention(a, graph, heads, width, b if with_x else None))
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 1e-11, "rtol": 1e-11}
    for r, g in zip(ref, got, strict=True):
        if r is None:
            assert g is None
        else:
            torch.testing.assert_close(g, r, **tol)


def test_vector_loops_only_for_float32_four_heads_of_eight() -> None:
    qkv32, qkv64 = torch.zeros(2, 96), torch.zeros(2, 96, dtype=torch.float64)
    assert san_kernels.vectorised(qkv32, 4, 8)
    assert not san_kernels.vectorised(qkv64, 4, 8)
    assert not san_kernels.vectorised(torch.zeros(2, 96), 2, 16)
    assert not san_kernels.vectorised(qkv32, 4, 8, torch.zeros(2, 5))  # the energy's rows must have 32 channels
    from lipgnn.nn.fused import san_vector_kernels

    assert (san_vector_kernels._HEADS, san_vector_kernels._WIDTH) == (san_kernels.VEC_HEADS, san_kernels.VEC_WIDTH)


def _scalar_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(san_kernels, "vectorised", lambda *args: False)


@pytest.mark.parametrize("with_x", [False, True])
def test_vector_loops_equal_scalar_loops(monkeypatch: pytest.MonkeyPatch, with_x: bool) -> None:
    """The vector loops (Cora-like degrees, a row without edges, prefetches running past the last edge) give
    the scalar loops' outputs, weights, energies and gradients up to the reassociated head sums."""
    n, heads, width = 300, 4, 8
    gen = seeded(3)
    edge_index = torch.randint(0, n - 1, (2, 1500), generator=gen)  # node n-1: no edges at all
    graph = CSRGraph.from_edge_index(edge_index, n, add_self_loops=False)
    assert int(graph.rowptr[-1] - graph.rowptr[-2]) == 0
    qkv = torch.randn(n, 3 * heads * width, generator=gen) * 2
    x = torch.randn(n, 32, generator=gen)
    w_out, w_e = torch.randn(n, heads * width, generator=gen), torch.randn(heads, generator=gen)

    def run() -> list[torch.Tensor]:
        a, b = qkv.clone().requires_grad_(True), x.clone().requires_grad_(True)
        out, energy = san_attention(a, graph, heads, width, b if with_x else None)
        loss = (out * w_out).sum() + ((energy * w_e).sum() if with_x else 0)
        loss.backward()
        return [out.detach(), a.grad] + ([energy.detach(), b.grad] if with_x else [])

    vec = run()
    _scalar_loops(monkeypatch)
    scalar = run()
    assert vec[0][-1].abs().sum() == 0  # the row without edges aggregates nothing
    for v, s in zip(vec, scalar, strict=True):  # float32 rounding of sums over up to 32 terms, values up to ~50
        torch.testing.assert_close(v, s, atol=1e-4, rtol=1e-4)


def test_vector_loops_keep_a_nan() -> None:
    """A NaN score (a diverging run) stays visible: its row's output is NaN, the other rows are not."""
    graph = random_graph(n=20, e=60)
    qkv = torch.randn(20, 96, generator=seeded(4))
    qkv[5, 0] = float("nan")  # row 5's query: every score of row 5, head 0
    out, _ = san_attention(qkv, graph, 4, 8)
    assert torch.isnan(out[5, :8]).all() and torch.isfinite(out[5, 8:]).all()
    assert torch.isfinite(out[torch.arange(20) != 5]).all()


def test_attention_gradcheck() -> None:
    heads, width = 2, 3
    graph = random_graph(8, 20, seed=2)
    gen = seeded(3)
    qkv = torch.randn(8, 3 * heads * width, generator=gen, dtype=torch.float64, requires_grad=True)
    x = torch.randn(8, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda a, b: san_attention(a, graph, heads, width, b), (qkv, x))
    assert gradcheck(lambda a: san_attention(a, graph, heads, width)[0], (qkv,))


def _san(impl: str, placement: str, use_nonlocal: bool, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    cfg = OmegaConf.load(CONF / "model" / "san.yaml")
    cfg.hidden, cfg.heads, cfg.ffn_hidden = 8, 2, 16
    cfg.layer_norm, cfg.impl, cfg["nonlocal"] = placement, impl, use_nonlocal
    cfg.dropout = 0.0
    torch.manual_seed(6)
    return build_model(cfg, NONE, DataSpec(num_features=5, num_classes=3), 3).to(dtype).train()


@pytest.mark.parametrize("placement", ["post", "pre", "none"])
@pytest.mark.parametrize("use_nonlocal", [False, True])
@pytest.mark.parametrize("path", ["numba", "eager"])
def test_fused_san_training_step_equals_pyg(placement: str, use_nonlocal: bool, path: str) -> None:
    """Outputs and every parameter's gradient of a 3-layer SAN in training mode (float64: without
    LayerNorm the nonlocal factors compound beyond a float32 comparison)."""
    dtype = torch.float64
    gen = seeded(7)
    x = torch.randn(30, 5, generator=gen, dtype=dtype)
    edge_index = torch.randint(0, 26, (2, 110), generator=gen)
    results = []
    for impl in ("pyg", "fused"):
        net = _san(impl, placement, use_nonlocal, dtype)
        if impl == "fused":
            assert all(block.fused_path(x, None) for block in net.blocks)
        with kernels.disabled() if path == "eager" and impl == "fused" else _nothing():
            out = net(x, edge_index)
            (out * torch.randn(out.shape, generator=seeded(8), dtype=dtype)).sum().backward()
        results.append((out.detach(), {n: p.grad for n, p in net.named_parameters()}))
    (out_r, grads_r), (out_f, grads_f) = results
    _close(out_f, out_r, "output")
    assert grads_f.keys() == grads_r.keys()
    for name, grad in grads_r.items():
        if grad is None:  # a parameter the loss does not reach on either path
            assert grads_f[name] is None, name
        else:
            _close(grads_f[name], grad, name)


def _close(actual: torch.Tensor, expected: torch.Tensor, name: str) -> None:
    """Within 1e-10 relative to each entry and, absolutely, to the tensor's largest entry (a gradient
    entry sums terms as large as that; without LayerNorm the nonlocal factors make them ~1e3)."""
    atol = 1e-10 * max(1.0, float(expected.abs().max()))
    torch.testing.assert_close(actual, expected, atol=atol, rtol=1e-10, msg=lambda m: f"{name}: {m}")


def test_fused_san_float32_equals_pyg_within_1e5() -> None:
    gen = seeded(9)
    x = torch.randn(30, 5, generator=gen)
    edge_index = torch.randint(0, 26, (2, 110), generator=gen)
    outs = []
    for impl in ("pyg", "fused"):
        net = _san(impl, "post", True)
        out = net(x, edge_index)
        out.sum().backward()
        outs.append((out.detach(), net.blocks[0].conv.lin_query.weight.grad))
    torch.testing.assert_close(outs[1][0], outs[0][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(outs[1][1], outs[0][1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("use_nonlocal", [False, True])
def test_fused_san_at_the_papers_width_equals_pyg_within_1e5(use_nonlocal: bool) -> None:
    """conf/model/san.yaml's SAN (hidden 32, 4 heads of width 8: the vector loops), float32, training mode."""
    gen = seeded(10)
    x = torch.randn(60, 5, generator=gen)
    edge_index = torch.randint(0, 60, (2, 240), generator=gen)
    results = []
    for impl in ("pyg", "fused"):
        cfg = OmegaConf.load(CONF / "model" / "san.yaml")
        cfg.impl, cfg.dropout, cfg["nonlocal"] = impl, 0.0, use_nonlocal
        torch.manual_seed(0)
        net = build_model(cfg, NONE, DataSpec(num_features=5, num_classes=3), 3).train()
        out = net(x, edge_index)
        (out * torch.randn(out.shape, generator=seeded(11))).sum().backward()
        results.append((out.detach(), {k: p.grad for k, p in net.named_parameters()}))
    assert san_kernels.vectorised(torch.zeros(1, 96), 4, 8)
    torch.testing.assert_close(results[1][0], results[0][0], atol=1e-5, rtol=1e-5)
    assert results[1][1].keys() == results[0][1].keys()
    for name, grad in results[0][1].items():
        torch.testing.assert_close(results[1][1][name], grad, atol=1e-5, rtol=1e-4, msg=f"{name}: not close")


def test_fused_path_only_where_it_applies() -> None:
    """LipschitzNorm, attention dropout in training, edge features and the PyG impl take the conv's path."""
    x = torch.randn(4, 8)
    fused = _san("fused", "post", False)
    block = fused.blocks[0]
    assert block.fused_path(x, None)
    assert not block.fused_path(x, torch.randn(3, 2))
    block.conv.dropout = 0.3
    assert not block.fused_path(x, None)
    block.eval()
    assert block.fused_path(x, None)  # no attention dropout in evaluation
    assert not _san("pyg", "post", False).blocks[0].fused_path(x, None)
    cfg = OmegaConf.load(CONF / "model" / "san.yaml")
    cfg.impl = "fused"
    lip = build_model(cfg, OmegaConf.create({"name": "lip"}), DataSpec(num_features=5, num_classes=3), 1)
    assert not lip.blocks[0].fused_path(torch.randn(4, 32), None)
