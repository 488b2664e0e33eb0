"""The locality order of deep fused stacks (lipgnn.nn.fused.locality): a stack run on its graph relabelled
in reverse Cuthill–McKee order computes the caller's run (same dropout masks, outputs and gradients)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from devices import seeded
from omegaconf import OmegaConf

from lipgnn.config import CONF_DIR
from lipgnn.data.spec import DataSpec
from lipgnn.diagnostics.tracing import trace_layers
from lipgnn.models import build_model
from lipgnn.nn.fused import kernels, locality
from lipgnn.nn.fused.dropout import dropout
from lipgnn.nn.fused.graph import get_csr_graph

NUM_NODES, IN_CHANNELS = 300, 12


def graph_with_parallel_edges_and_loops(seed: int = 0) -> torch.Tensor:
    """A random directed graph with repeated edges and some self-loops already present."""
    gen = seeded(seed)
    ei = torch.randint(0, NUM_NODES, (2, 1500), generator=gen)
    loops = torch.arange(0, NUM_NODES, 7).repeat(2, 1)
    return torch.cat([ei, ei[:, :40], loops], dim=1)


@pytest.mark.cpu_only
@pytest.mark.parametrize("shape", [(257, 64), (301, 1), (120, 3), (9, 8)])
def test_dropout_with_a_row_map_keeps_each_elements_decision(shape: tuple[int, int]) -> None:
    """Dropping a row-permuted tensor with ``rows`` gives exactly the permuted result of dropping the
    original (same seed), forward and backward, for even widths (carried state) and odd ones."""
    x = torch.randn(*shape, generator=seeded(1))
    perm = torch.randperm(shape[0], generator=seeded(2))
    torch.manual_seed(5)
    plain = dropout(x, 0.6)
    torch.manual_seed(5)
    moved = dropout(x[perm], 0.6, rows=perm)
    assert torch.equal(moved, plain[perm])
    assert 0.5 < float((plain == 0).float().mean()) < 0.7
    a, b = x.clone().requires_grad_(), x[perm].clone().requires_grad_()
    torch.manual_seed(5)
    dropout(a, 0.6).sum().backward()
    torch.manual_seed(5)
    dropout(b, 0.6, rows=perm).sum().backward()
    assert torch.equal(b.grad, a.grad[perm])


@pytest.mark.parametrize("self_loops", [True, False])
def test_relabelled_graph_maps_every_edge_to_its_original(self_loops: bool) -> None:
    """The relabelled CSR is P A Pᵀ: edge e of it is the caller's edge edge_order[e] (parallel edges
    included), node_order is the RCM order, and its rows are no wider than the caller's."""
    ei = graph_with_parallel_edges_and_loops()
    base = get_csr_graph(ei, NUM_NODES, self_loops)
    moved = locality.relabel(base, locality.rcm_order(base))
    graph, order = moved.graph, moved.graph.node_order
    assert torch.equal(torch.sort(order).values, torch.arange(NUM_NODES))
    assert torch.equal(moved.inverse[order], torch.arange(NUM_NODES))
    assert torch.equal(torch.sort(graph.edge_order).values, torch.arange(base.num_edges))
    assert torch.equal(order[graph.row], base.row[graph.edge_order])
    assert torch.equal(order[graph.col], base.col[graph.edge_order])
    assert torch.equal(graph.perm, base.perm[graph.edge_order])
    assert graph.self_loops == self_loops
    gap = (graph.row - graph.col).abs().double().mean()
    assert gap < (base.row - base.col).abs().double().mean()


def assert_relabelled_run_is_the_callers(monkeypatch: pytest.MonkeyPatch, model: torch.nn.Module, x: torch.Tensor,
                                         ei: torch.Tensor) -> list:
    """One training step of ``model`` (float64, dropouts live) with ``locality_order`` on and off, the same seed:
    the relabelling ran, and outputs and every parameter gradient agree; returns stack_graph's results."""
    calls: list = []
    original = locality.stack_graph
    monkeypatch.setattr(locality, "stack_graph", lambda *a: calls.append(original(*a)) or calls[-1])

    def run(on: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.locality_order = on
        model.zero_grad()
        torch.manual_seed(11)
        out = model(x, ei)
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
        # parameters a model leaves unused (SAN's conv keeps a lin_skip it never applies) get no gradient
        return out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    out_on, grads_on = run(True)
    assert calls and calls[-1] is not None
    out_off, grads_off = run(False)
    torch.manual_seed(12)
    assert not torch.allclose(model(x, ei).detach(), out_off)  # the dropouts are live: another seed, another output
    torch.testing.assert_close(out_on, out_off, atol=1e-10, rtol=1e-10)
    assert grads_on and len(grads_on) == len(grads_off)
    for g_on, g_off in zip(grads_on, grads_off, strict=True):
        torch.testing.assert_close(g_on, g_off, atol=1e-10, rtol=1e-9)
    return calls


def _model(name: str, norm: str, heads: int, nonlocal_source: str | None = None) -> torch.nn.Module:
    spec = SimpleNamespace(num_features=IN_CHANNELS, num_classes=3, input="dense", vocab_sizes=(), edge_dim=None)
    cfg = SimpleNamespace(name=name, hidden=8 * heads, heads=heads, dropout=0.6, attn_dropout=0.3, impl="fused",
                          **{"nonlocal": nonlocal_source is not None, "nonlocal_source": nonlocal_source or "x"})
    torch.manual_seed(0)
    return build_model(cfg, SimpleNamespace(name=norm), spec, 4)


@pytest.mark.cpu_only
@pytest.mark.parametrize("name, norm, heads, recompute, nonlocal_source", [
    ("gat", "lip", 1, False, None), ("gat", "none", 2, False, None), ("gt", "lip", 2, False, None),
    ("gat", "lip", 1, True, None), ("gat", "lip", 2, False, "x"), ("gt", "none", 2, False, "xv"),
])
def test_a_relabelled_stack_is_the_callers_run(monkeypatch: pytest.MonkeyPatch, name: str, norm: str,
                                               heads: int, recompute: bool, nonlocal_source: str | None) -> None:
    """Training mode with feature and attention dropout: the stack run in RCM order (locality_order on)
    gives the outputs and every parameter gradient of the stack in the caller's order, the same seed
    drawing the same masks (also with activation checkpointing, which replays them in the backward, and
    with nonlocal message passing, whose energies sum over all nodes); the relabelling really ran."""
    monkeypatch.setattr(locality, "MIN_NODES", 0)
    ei = graph_with_parallel_edges_and_loops()
    # float64, so that only the masks could make a difference beyond summation order; small inputs with the
    # nonlocal factor, which multiplies each layer by an energy (unit-scale inputs reach outputs of 1e15-1e35
    # in four layers, where rounding alone moves gradients that are zero in exact arithmetic)
    x = torch.randn(NUM_NODES, IN_CHANNELS, generator=seeded(3), dtype=torch.float64)
    x = x if nonlocal_source is None else 0.1 * x
    model = _model(name, norm, heads, nonlocal_source).double().train()
    model.checkpoint_activations = recompute
    assert_relabelled_run_is_the_callers(monkeypatch, model, x, ei)


def test_a_hooked_stack_runs_in_the_callers_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Layer tracing (forward hooks on the blocks) sees every layer in the caller's order."""
    monkeypatch.setattr(locality, "MIN_NODES", 0)
    ei = graph_with_parallel_edges_and_loops()
    x = torch.randn(NUM_NODES, IN_CHANNELS, generator=seeded(3))
    model = _model("gat", "lip", 1)
    traced = trace_layers(model, x, ei)
    model.locality_order = False
    plain = trace_layers(model, x, ei)
    for a, b in zip(traced, plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_small_graphs_and_pyg_stacks_keep_the_callers_order() -> None:
    """Below MIN_NODES, and for stacks whose convs are not the fused ones, nothing is relabelled."""
    ei = graph_with_parallel_edges_and_loops()
    h = torch.randn(NUM_NODES, 8)
    assert locality.stack_graph(_model("gat", "lip", 1).blocks, ei, h) is None
    spec = SimpleNamespace(num_features=IN_CHANNELS, num_classes=3, input="dense", vocab_sizes=(), edge_dim=None)
    cfg = SimpleNamespace(name="gat", hidden=8, heads=1, dropout=0.6, attn_dropout=0.3, impl="pyg")
    pyg = build_model(cfg, SimpleNamespace(name="lip"), spec, 2)
    big = torch.randn(locality.MIN_NODES, 8)
    assert locality.stack_graph(pyg.blocks, ei, big) is None


def _san(placement: str, norm: str, attn_dropout: float, nonlocal_source: str | None = None) -> torch.nn.Module:
    cfg = OmegaConf.load(Path(CONF_DIR) / "model" / "san.yaml")
    cfg.hidden, cfg.heads, cfg.ffn_hidden, cfg.impl = 8, 2, 16, "fused"
    cfg.layer_norm, cfg.attn_dropout, cfg["nonlocal"] = placement, attn_dropout, nonlocal_source is not None
    cfg.nonlocal_source = nonlocal_source or "x"
    torch.manual_seed(0)
    return build_model(cfg, OmegaConf.create({"name": norm}), DataSpec(num_features=IN_CHANNELS, num_classes=3), 3)


@pytest.mark.cpu_only
@pytest.mark.parametrize("placement, norm, attn_dropout, nonlocal_source", [
    ("post", "none", 0.0, None), ("pre", "none", 0.0, None), ("post", "none", 0.3, None), ("post", "lip", 0.0, None),
    ("post", "none", 0.0, "x"), ("pre", "none", 0.0, "xv"), ("post", "none", 0.3, "x"),
])
def test_a_relabelled_san_stack_is_the_callers_run(monkeypatch: pytest.MonkeyPatch, placement: str, norm: str,
                                                   attn_dropout: float, nonlocal_source: str | None) -> None:
    """SAN (lipgnn.models.san): its blocks run in RCM order, and the relabelled run is the caller's: the
    encoder's input dropout and the attention dropout (which takes the conv path) draw the same masks, outputs
    and every gradient agree, in the fused block and in the conv path (attention dropout, LipschitzNorm), with
    and without nonlocal message passing (the fused block's energies; the conv path's through csr_heads)."""
    monkeypatch.setattr(locality, "MIN_NODES", 0)
    ei = graph_with_parallel_edges_and_loops()
    x = torch.randn(NUM_NODES, IN_CHANNELS, generator=seeded(3), dtype=torch.float64)
    x = x if nonlocal_source is None else 0.1 * x  # as in test_a_relabelled_stack_is_the_callers_run
    model = _san(placement, norm, attn_dropout, nonlocal_source).double().train()
    assert_relabelled_run_is_the_callers(monkeypatch, model, x, ei)


@pytest.mark.cpu_only
def test_deep_stacks_relabel_from_fewer_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stack relabels from MIN_NODES nodes, or from MIN_NODES_DEEP once it has DEEP_STACK blocks (the
    permutations a forward adds pay back over more layers); one node or one block short, it keeps the
    caller's order."""
    assert locality.MIN_NODES_DEEP < locality.MIN_NODES
    ei = graph_with_parallel_edges_and_loops()
    h = torch.randn(NUM_NODES, 8)
    blocks = _model("gat", "lip", 1).blocks  # 4 blocks
    monkeypatch.setattr(locality, "MIN_NODES", NUM_NODES)
    monkeypatch.setattr(locality, "MIN_NODES_DEEP", NUM_NODES - 100)
    monkeypatch.setattr(locality, "DEEP_STACK", 4)
    assert locality.stack_graph(blocks, ei, h) is not None
    monkeypatch.setattr(locality, "MIN_NODES", NUM_NODES + 1)
    assert locality.stack_graph(blocks, ei, h) is not None  # deep enough: MIN_NODES_DEEP applies
    monkeypatch.setattr(locality, "DEEP_STACK", 5)
    assert locality.stack_graph(blocks, ei, h) is None  # one block short: MIN_NODES applies
    monkeypatch.setattr(locality, "DEEP_STACK", 4)
    monkeypatch.setattr(locality, "MIN_NODES_DEEP", NUM_NODES + 1)
    assert locality.stack_graph(blocks, ei, h) is None  # one node short


def test_stacks_keep_the_callers_order_without_the_compiled_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    """The locality order needs the compiled loops (on CUDA, or with ``LIPGNN_KERNELS=eager``, the masks come
    from ``F.dropout`` in the caller's coordinates): a stack that would relabel on CPU keeps the caller's order
    there. Runs on every device; on CUDA the compiled loops never apply."""
    ei = graph_with_parallel_edges_and_loops()
    h = torch.randn(NUM_NODES, 8)
    blocks = _model("gat", "lip", 1).blocks
    monkeypatch.setattr(locality, "MIN_NODES", 0)
    if kernels.available(h):
        assert locality.stack_graph(blocks, ei, h) is not None
    with kernels.disabled():
        assert locality.stack_graph(blocks, ei, h) is None
