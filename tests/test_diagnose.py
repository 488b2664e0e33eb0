"""lipgnn.diagnostics.diagnose on any PyG model, the `lipgnn diagnose` command line, model=pyg_stack and the
depth_board artifact."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.nn import GATConv, GATv2Conv, TransformerConv
from torch_geometric.nn.models import GAT, GCN

from lipgnn.diagnostics.diagnose import COLUMNS, diagnose
from lipgnn.diagnostics.energy import GraphMeasure
from lipgnn.diagnostics.measures import mean_average_distance
from lipgnn.diagnostics.summary import summarise
from lipgnn.errors import ConfigError


def _data(n: int = 40, f: int = 12, classes: int = 3, seed: int = 0) -> Data:
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n, (160,), generator=gen)
    dst = torch.randint(0, n, (160,), generator=gen)
    edge_index = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)
    y = torch.randint(0, classes, (n,), generator=gen)
    return Data(x=torch.randn(n, f, generator=gen), edge_index=edge_index, y=y,
                train_mask=torch.arange(n) < n // 2)


def test_any_pyg_model_gives_the_input_row_and_one_row_per_message_passing_call() -> None:
    data = _data()
    torch.manual_seed(0)
    model = GCN(12, 16, 5, out_channels=3)
    result = diagnose(model, data, labels=data.y)
    df = result.layers
    assert list(df.columns) == list(COLUMNS)
    assert list(df["layer"]) == ["input"] + [f"convs.{i}" for i in range(5)] and list(df["depth"]) == list(range(6))
    assert set(df["kind"][1:]) == {"GCNConv"}
    measured = ["dirichlet", "laplacian", "rayleigh", "feature_norm", "mad", "group_distance_ratio", "group_ratio"]
    assert df[measured].notna().all().all() and df["lipschitz_lower"][1:].notna().all()
    assert df["attn_grad_norm"].isna().all()  # train_steps=0
    # the energies are the suite's E_1 / E_2 per entry of the input and of each layer's output
    outputs: list[torch.Tensor] = [data.x]
    hooks = [conv.register_forward_hook(lambda m, a, o: outputs.append(o.detach())) for conv in model.convs]
    model.eval()
    with torch.no_grad():
        model(data.x, data.edge_index)
    for h in hooks:
        h.remove()
    graph = GraphMeasure(data.edge_index, data.num_nodes)
    assert df["dirichlet"].tolist() == pytest.approx([graph.energy(h, 1, normalise="entries") for h in outputs])
    assert df["laplacian"].tolist() == pytest.approx([graph.energy(h, 2, normalise="entries") for h in outputs])
    # the Rayleigh quotient is 2 tr(X^T L X) / ||X||_F^2 with L = D - A (a dense computation)
    adj = torch.zeros(data.num_nodes, data.num_nodes, dtype=torch.float64)
    adj[data.edge_index[0], data.edge_index[1]] = 1.0
    adj.fill_diagonal_(0.0)
    lap = torch.diag(adj.sum(1)) - adj
    dense = [float(2 * torch.trace(h.double().T @ lap @ h.double()) / (h.double() ** 2).sum()) for h in outputs]
    assert df["rayleigh"].tolist() == pytest.approx(dense, rel=1e-9)
    assert df["feature_norm"].tolist() == pytest.approx([float(h.double().norm() / data.num_nodes ** 0.5)
                                                         for h in outputs])
    assert isinstance(result.summary, str) and "\n" not in result.summary and "energy/|X|^2" in result.summary


def test_suite_energy_code_is_the_one_used() -> None:
    """The suite's DeepGNN: its last block has no activation, so diagnose's last row equals the suite's traced
    energy of X^L (lipgnn.diagnostics.tracing), computed by the same GraphMeasure."""
    from lipgnn.diagnostics.tracing import layer_energies
    from lipgnn.models import build_model

    data = _data()
    spec = type("Spec", (), {"num_features": 12, "num_classes": 3, "input": "dense"})()
    model_cfg = {"name": "gat", "hidden": 16, "heads": 1, "dropout": 0.0, "attn_dropout": 0.0, "impl": "pyg"}
    torch.manual_seed(0)
    model = build_model(model_cfg, {"name": "lip"}, spec, 3)
    result = diagnose(model, data, forward=lambda m, d: m(d.x, d.edge_index, None))
    assert len(result.layers) == 4
    suite = layer_energies(model, data, m=1, normalise="entries")
    assert result.layers["dirichlet"].iloc[-1] == pytest.approx(suite[-1], rel=1e-9)


def test_mad_is_chen_et_al_global_mad() -> None:
    from sklearn.metrics import pairwise_distances

    h = torch.randn(30, 5, dtype=torch.float64)
    h[3] = h[4]  # a pair at distance 0: excluded from that row's average (Chen et al.'s nonzero count)
    dist = pairwise_distances(h.numpy(), h.numpy(), metric="cosine")
    dist[dist < 1e-12] = 0.0
    expected = float(np.mean(dist.sum(1) / ((dist != 0).sum(1) + 1e-8)))
    assert mean_average_distance(h) == pytest.approx(expected, rel=1e-9)
    assert mean_average_distance(torch.ones(10, 4)) == pytest.approx(0.0, abs=1e-12)  # fully smoothed


def test_lipschitz_lower_is_below_the_layer_jacobian_norm() -> None:
    """The node-subset bound is a submatrix norm: at most the full layer's Jacobian norm at the same input."""
    data = _data(n=25)
    torch.manual_seed(1)
    model = GAT(12, 8, 2, out_channels=3, v2=True).double()
    data.x = data.x.double()
    result = diagnose(model, data, lipschitz_nodes=5, power_iters=50)
    conv = model.convs[0].eval()
    jac = torch.func.jacrev(lambda z: conv(z, data.edge_index))(data.x)
    full = float(torch.linalg.matrix_norm(jac.detach().reshape(jac.size(0) * jac.size(1), -1), ord=2))
    bound = result.layers["lipschitz_lower"].iloc[1]  # row 0: the input features
    assert 0 < bound <= full * (1 + 1e-6)


def test_attention_gradients_with_train_steps_and_the_model_is_restored() -> None:
    data = _data()
    torch.manual_seed(2)
    model = GAT(12, 16, 3, out_channels=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = diagnose(model, data, train_steps=3, lipschitz=False)
    grads = result.layers["attn_grad_norm"][1:]
    assert grads.notna().all() and (grads > 0).all()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert "attention gradients reach" in result.summary
    with pytest.raises(ConfigError):
        diagnose(model, Data(x=data.x, edge_index=data.edge_index), train_steps=1)


def test_model_without_message_passing_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        diagnose(nn.Linear(12, 3), _data())
    assert "\n" not in str(err.value) and "MessagePassing" in str(err.value)


def _table(rayleigh: list[float], mad: list[float], norm: list[float]) -> pd.DataFrame:
    n = len(rayleigh)
    nan = [math.nan] * n
    return pd.DataFrame({"depth": range(n), "rayleigh": rayleigh, "mad": mad, "feature_norm": norm,
                         "dirichlet": [r * v * v for r, v in zip(rayleigh, norm, strict=True)], "group_ratio": nan,
                         "attn_grad_norm": nan, "lipschitz_lower": nan})


@pytest.mark.parametrize(("rayleigh", "mad", "verdict"), [
    ([1.0] * 5, [0.9, 0.9, 0.8, 0.7, 0.6], "no smoothing"),        # MAD falls 1.5x: under SMOOTHING
    ([1.0] * 5, [0.9, 0.8, 0.6, 0.5, 0.4], "smoothing"),           # MAD falls 2.25x
    ([1.0, 0.5, 0.25, 0.2, 0.4], [0.9] * 5, "smoothing"),          # energy/|X|^2 falls 2.5x
    ([1.0] * 5, [0.9, 0.5, 0.2, 0.1, 0.05], "over-smoothing"),     # MAD falls 18x (GCN's limit)
    ([1.0, 0.1, 0.05, 0.01, 0.005], [0.9] * 5, "over-smoothing"),  # energy/|X|^2 falls 200x (attention's)
])
def test_smoothing_verdict_reads_the_scale_free_quantities(rayleigh: list[float], mad: list[float],
                                                           verdict: str) -> None:
    for norm in ([1.0] * 5, [1.0, 10.0, 100.0, 1e3, 1e4], [1.0, 0.1, 1e-2, 1e-3, 1e-4]):  # whatever the scale
        line = summarise(_table(rayleigh, mad, norm))
        assert f": {verdict};" in line, line


@pytest.mark.parametrize(("norm", "verdict"), [
    ([1.0, 2.0, 4.0, 8.0, 9.9], "scale stable"), ([1.0, 2.0, 4.0, 8.0, 10.0], "over-scaling"),
    ([1.0, 0.5, 0.3, 0.2, 0.11], "scale stable"), ([1.0, 0.5, 0.3, 0.2, 0.1], "features shrink"),
])
def test_scale_verdict_reads_the_feature_norm(norm: list[float], verdict: str) -> None:
    for rayleigh in ([1.0] * 5, [1.0, 0.1, 0.01, 1e-3, 1e-4]):
        line = summarise(_table(rayleigh, [0.9] * 5, norm))
        assert f"feature norm {'rises' if norm[-1] > 1 else 'falls'}" in line and f": {verdict};" in line, line


def test_summary_gives_the_rate_and_the_raw_energy() -> None:
    line = summarise(_table([2.0 ** -k for k in range(10)], [0.9] * 10, [1.0] * 10))
    assert line.startswith("energy/|X|^2 falls 512x from layer 0 to 9, halving every 1 layers, MAD 0.9 -> 0.9: "
                           "over-smoothing; feature norm"), line
    assert "raw energy falls 512x from layer 0 to 9 (scale and smoothing together)" in line


def _cora(data_root: Path) -> Data:
    from lipgnn.config import compose
    from lipgnn.data import load

    return next(iter(load(compose(["dataset=cora"]).dataset, 0).eval_batches()))


class _ResidualLayerNormGAT(nn.Module):
    """A hand-written stack a PyG user would write: x <- x + relu(GATConv(LayerNorm(x)))."""

    def __init__(self, features: int, hidden: int, classes: int, depth: int) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(features, hidden), nn.Linear(hidden, classes)
        self.convs = nn.ModuleList(GATConv(hidden, hidden) for _ in range(depth))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(depth))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for conv, norm in zip(self.convs, self.norms, strict=True):
            x = x + torch.relu(conv(norm(x), edge_index))
        return self.out(x)


def _linear_gcn(features: int, depth: int, gain: float) -> GCN:
    """GCN propagation only: every layer's weight ``gain`` times the identity, no bias, no activation."""
    torch.manual_seed(0)
    model = GCN(features, features, depth, out_channels=features, act=None, bias=False)
    with torch.no_grad():
        for conv in model.convs:
            conv.lin.weight.copy_(gain * torch.eye(features))
    return model


def test_verdicts_on_the_issue_models(data_root: Path) -> None:
    """Smoothing and scale are judged apart: the residual + LayerNorm GAT's raw energy rises while its
    features smooth (no "explode"), the 32-layer GCN over-smooths while its features shrink, GCN propagation at
    a constant scale over-smooths with a stable norm, and the same propagation times 3 per layer over-scales."""
    data = _cora(data_root)
    options = {"labels": data.y, "lipschitz": False, "mad_nodes": 256}
    torch.manual_seed(0)
    line = diagnose(_ResidualLayerNormGAT(data.num_features, 64, 7, 16), data, **options).summary
    assert "explode" not in line and "raw energy rises" in line and "energy/|X|^2 falls" in line, line
    assert ": smoothing;" in line and ": scale stable;" in line, line
    torch.manual_seed(0)
    line = diagnose(GCN(data.num_features, 64, 32, out_channels=7), data, **options).summary
    assert ": over-smoothing;" in line and ": features shrink;" in line, line
    graph = _data(n=60, f=8)
    graph.x = graph.x.abs()  # positive features: much of their norm lies along GCN's limit direction
    line = diagnose(_linear_gcn(8, 32, 1.0), graph, labels=graph.y, lipschitz=False).summary
    assert ": over-smoothing;" in line and ": scale stable;" in line, line
    line = diagnose(_linear_gcn(8, 8, 3.0), graph, labels=graph.y, lipschitz=False).summary
    assert ": over-scaling;" in line, line


def test_group_ratio_does_not_depend_on_the_feature_scale(data_root: Path) -> None:
    """The 32-layer GCN's last layer, as it is and times 1e6: the scale-free ratio agrees within 1 %, PyG's
    (eps = 1e-5 in its denominator) does not."""
    data = _cora(data_root)
    torch.manual_seed(0)
    model = GCN(data.num_features, 64, 32, out_channels=7)
    options = {"labels": data.y, "lipschitz": False, "mad_nodes": 64}
    plain = diagnose(model, data, **options).layers.iloc[-1]
    handle = model.convs[-1].register_forward_hook(lambda m, a, out: out * 1e6)
    scaled = diagnose(model, data, **options).layers.iloc[-1]
    handle.remove()
    assert scaled["feature_norm"] == pytest.approx(plain["feature_norm"] * 1e6, rel=1e-4)
    assert scaled["group_ratio"] == pytest.approx(plain["group_ratio"], rel=0.01)
    assert abs(scaled["group_distance_ratio"] / plain["group_distance_ratio"] - 1) > 0.01


def test_no_separation_baseline_is_the_ratio_of_label_free_features() -> None:
    from torch_geometric.nn import DiffGroupNorm

    from lipgnn.diagnostics.measures import group_distance_ratio, group_ratio, no_separation_baseline

    gen = torch.Generator().manual_seed(0)
    y = torch.randint(0, 7, (1400,), generator=gen)
    x = torch.randn(1400, 16, generator=gen, dtype=torch.float64)
    baseline = no_separation_baseline(y)
    assert baseline == pytest.approx(7 / 36, rel=0.01)  # C / (C-1)^2 for large classes
    assert group_ratio(x, y) == pytest.approx(baseline, rel=0.02)
    assert group_ratio(x * 1e-6, y) == pytest.approx(group_ratio(x, y), rel=1e-9)
    assert group_distance_ratio(x * 1e-6, y) < 0.5 * baseline  # PyG's eps: far below "no separation"
    separated = x + 10.0 * torch.nn.functional.one_hot(y, 16).double()
    assert group_ratio(separated, y) > 2 * baseline
    assert math.isnan(group_ratio(x, torch.zeros(1400, dtype=torch.long)))  # one class: no ratio
    # the raw column is PyG's function; on sampled rows, close to it
    pyg = DiffGroupNorm.group_distance_ratio(separated, y)
    assert group_distance_ratio(separated, y) == pytest.approx(pyg, rel=1e-9)
    rows = torch.randperm(1400, generator=gen)[:300]
    assert group_distance_ratio(separated, y, rows) == pytest.approx(pyg, rel=0.03)
    # a class absent from the labels (PyG divides by its size): the classes present are used
    assert group_ratio(separated, y * 2) == pytest.approx(group_ratio(separated, y), rel=1e-12)


class _GraphClassifier(nn.Module):
    """GINEConv with edge features, then a mean pool per graph: forward(x, edge_index, edge_attr, batch)."""

    def __init__(self, features: int, edge_dim: int, classes: int) -> None:
        super().__init__()
        from torch_geometric.nn import GINEConv

        self.convs = nn.ModuleList(GINEConv(nn.Sequential(nn.Linear(features, features), nn.ReLU()),
                                            edge_dim=edge_dim) for _ in range(2))
        self.out = nn.Linear(features, classes)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor,
                batch: torch.Tensor) -> torch.Tensor:
        from torch_geometric.nn import global_mean_pool

        for conv in self.convs:
            x = conv(x, edge_index, edge_attr)
        return self.out(global_mean_pool(x, batch))


def test_batched_graphs_with_graph_labels_and_edge_features() -> None:
    """A batch of graphs: edge_attr and batch reach the model from the data, graph labels become each node's
    label (the same ratios as labels given per node), and training steps score one logit row per graph."""
    from torch_geometric.data import Batch

    graphs = []
    for seed in range(6):
        g = _data(n=12, f=6, seed=seed)
        graphs.append(Data(x=g.x, edge_index=g.edge_index, edge_attr=torch.rand(g.edge_index.size(1), 3),
                           y=torch.tensor([seed % 2])))
    batch = Batch.from_data_list(graphs)
    torch.manual_seed(0)
    model = _GraphClassifier(6, 3, 2)
    trained = diagnose(model, batch, labels=batch.y, train_steps=2, every=1, lipschitz=False)
    assert sorted(set(trained.history["epoch"])) == [0, 1, 2]  # two steps of a graph-level loss ran
    per_graph = trained.layers
    per_node = diagnose(model, batch, labels=batch.y[batch.batch], lipschitz=False).layers
    assert per_graph["group_ratio"].notna().all()
    assert per_graph["group_ratio"].tolist() == pytest.approx(per_node["group_ratio"].tolist(), rel=1e-12)
    assert list(per_graph["kind"][1:]) == ["GINEConv", "GINEConv"]
    with pytest.raises(ConfigError, match="one label per node, or per graph") as err:
        diagnose(model, batch, labels=torch.zeros(5, dtype=torch.long))
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="not class indices"):
        diagnose(model, batch, labels=torch.rand(batch.num_nodes))


def test_heterodata_is_one_line() -> None:
    from torch_geometric.data import HeteroData

    data = HeteroData()
    data["paper"].x = torch.randn(5, 4)
    data["paper", "cites", "paper"].edge_index = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ConfigError, match="not HeteroData: pass data.to_homogeneous") as err:
        diagnose(GCN(4, 8, 2), data)
    assert "\n" not in str(err.value)


def test_forward_error_names_the_layer_call_and_keeps_the_cause() -> None:
    from torch_geometric.nn import GCNConv

    from lipgnn.errors import ModelError

    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.convs = nn.ModuleList([GCNConv(12, 16), GCNConv(16, 16), GCNConv(8, 3)])

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            for conv in self.convs:
                x = conv(x, edge_index)
            return x

    with pytest.raises(ModelError) as err:
        diagnose(Broken(), _data())
    assert str(err.value).startswith("Broken's forward pass failed in layer convs.2 (GCNConv) (call 3): RuntimeError")
    assert "\n" not in str(err.value) and isinstance(err.value.__cause__, RuntimeError)


def test_kind_names_the_class_and_lipschitz_norm() -> None:
    from lipgnn.nn import lipschitz_norm

    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.plain = GATConv(12, 8)
            self.lip = lipschitz_norm(GATConv(8, 8), alpha=2.0, impl="pyg")

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            return self.lip(self.plain(x, edge_index), edge_index)

    kinds = diagnose(Two(), _data(), lipschitz=False).layers["kind"].tolist()
    assert kinds == ["input features", "GATConv [plain attention]", "LipGATConv [LipschitzNorm a=2]"]


def test_lipschitz_budget_bounds_the_step_and_is_said() -> None:
    data = _data()
    torch.manual_seed(0)
    model = GCN(12, 8, 4, out_channels=3)
    none = diagnose(model, data, lipschitz_budget_s=0.0)
    assert none.layers["lipschitz_lower"].isna().all() and none.settings["lipschitz_measured"] == 0
    assert none.summary.endswith("Lipschitz bound on 0 of 4 layers (budget 0 s)")
    full = diagnose(model, data, lipschitz_budget_s=60.0)
    assert full.layers["lipschitz_lower"][1:].notna().all() and "Lipschitz bound on" not in full.summary


def test_lipschitz_iterations_stop_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clock that advances 1 s per reading, budget 2.5 s: the first layer's power iteration stops after its
    second iterate (still a lower bound: at most the uncut estimate), and no further layer starts."""
    import itertools

    import lipgnn.diagnostics.layer_lipschitz as layer_lipschitz

    data = _data()
    torch.manual_seed(0)
    model = GCN(12, 8, 3, out_channels=3)
    full = diagnose(model, data, power_iters=50).layers["lipschitz_lower"]
    clock = itertools.count()
    monkeypatch.setattr(layer_lipschitz.time, "perf_counter", lambda: float(next(clock)))
    result = diagnose(model, data, power_iters=50, lipschitz_budget_s=2.5)
    bounds = result.layers["lipschitz_lower"]
    assert result.settings["lipschitz_measured"] == 1 and result.settings["lipschitz_cut"] == 1
    assert 0 < bounds[1] <= full[1] * (1 + 1e-9) and bounds[2:].isna().all()
    assert result.summary.endswith("Lipschitz bound on 1 of 3 layers, 1 cut short (budget 2.5 s)")


def test_edge_features_reach_only_models_that_use_them() -> None:
    """PyG's GAT names edge_attr in its forward: built without edge_dim it must not receive the data's edge
    features (it would fail), built with edge_dim it must (its output changes)."""
    data = _data()
    data.edge_attr = torch.rand(data.edge_index.size(1), 3)
    bare = Data(x=data.x, edge_index=data.edge_index)
    torch.manual_seed(0)
    plain = GAT(12, 8, 2, out_channels=3)
    assert diagnose(plain, data, lipschitz=False).layers["rayleigh"].tolist() == pytest.approx(
        diagnose(plain, bare, lipschitz=False).layers["rayleigh"].tolist())
    torch.manual_seed(0)
    with_edges = GAT(12, 8, 2, out_channels=3, edge_dim=3)
    used = diagnose(with_edges, data, lipschitz=False).layers["rayleigh"]
    assert used[2] != pytest.approx(diagnose(with_edges, bare, lipschitz=False).layers["rayleigh"][2])


# ------------------------------------------------------------------------------------------- devices (mocked on CPU)
def test_diagnose_moves_the_model_and_data_to_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here: ``Module.to`` and ``Data.to`` are spied on (and keep the tensors on the CPU); diagnose must
    call both with the device before it measures, and report the data's device."""
    data = _data()
    torch.manual_seed(0)
    model = GCN(12, 8, 2, out_channels=3)
    moved: list[tuple[str, str]] = []
    module_to, data_to = nn.Module.to, Data.to

    def spy_module(self: nn.Module, *args, **kwargs):
        moved.append(("model", str(args[0] if args else kwargs.get("device"))))
        return module_to(self, "cpu")

    def spy_data(self: Data, device, *args, **kwargs):
        moved.append(("data", str(device)))
        return data_to(self, "cpu")

    monkeypatch.setattr(nn.Module, "to", spy_module)
    monkeypatch.setattr(Data, "to", spy_data)
    result = diagnose(model, data, lipschitz=False, device="cuda:1")
    assert ("model", "cuda:1") in moved and ("data", "cuda:1") in moved
    assert result.settings["device"] == "cpu" and result.layers["rayleigh"].notna().all()


def test_wrapped_layer_after_a_move_takes_the_eager_path_equal_to_pyg() -> None:
    """A layer wrapped on CPU is the fused class; moved off the CPU, every compiled-loop decision
    (``kernels.available``) is False, which ``kernels.disabled()`` reproduces on CPU: the output then equals
    PyG's path. Wrapped where its parameters are on another device, the wrapper picks PyG's class."""
    from lipgnn.nn import LipGATConv, LipTransformerConv, lipschitz_norm
    from lipgnn.nn.fused import FusedLipGATConv, FusedLipTransformerConv, kernels
    from lipgnn.nn.wrap import _target_class

    data = _data()
    torch.manual_seed(0)
    for stock, fused_cls, pyg_cls in ((GATConv(12, 8, heads=2), FusedLipGATConv, LipGATConv),
                                      (TransformerConv(12, 4, heads=2), FusedLipTransformerConv, LipTransformerConv)):
        fused = lipschitz_norm(stock).eval()
        reference = lipschitz_norm(stock, impl="pyg").eval()
        assert type(fused) is fused_cls and type(reference) is pyg_cls
        with kernels.disabled():
            assert torch.allclose(fused(data.x, data.edge_index), reference(data.x, data.edge_index), atol=1e-5)
        assert _target_class(type(stock), "auto", torch.device("cuda")) is pyg_cls


def test_plot_writes_a_file(tmp_path: Path) -> None:
    data = _data()
    result = diagnose(GCN(12, 8, 3, out_channels=3), data, lipschitz=False)
    path = result.plot(tmp_path / "d.png")
    assert path.stat().st_size > 1000
    record = result.to_record()
    json.dumps(record)
    assert record["layers"]["layer"] == ["convs.0", "convs.1", "convs.2"]


# ------------------------------------------------------------------------------------------- command line
FACTORIES = '''
import torch
from torch_geometric.nn import GCNConv
from torch_geometric.nn.models import GCN
def make_model(in_channels, out_channels):
    return GCN(in_channels, 16, 3, out_channels=out_channels)
def one_arg(in_channels):
    return None
def linear(in_channels, out_channels):
    import torch
    return torch.nn.Linear(in_channels, out_channels)
def with_forward(in_channels, out_channels):
    model = GCN(in_channels, 16, 2, out_channels=out_channels)
    return model, lambda m, d: m(d.x, d.edge_index)
class Broken(torch.nn.Module):
    def __init__(self, in_channels):
        super().__init__()
        self.conv1 = GCNConv(in_channels, 16)
        self.conv2 = GCNConv(8, 3)  # the wrong width: fails in its second layer call
    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index), edge_index)
def broken(in_channels, out_channels):
    return Broken(in_channels)
'''


@pytest.mark.parametrize(("target", "fragment"), [
    ("missing.py:make_model", "does not exist"),
    ("models.py:nope", "has no function 'nope'"),
    ("models.py:one_arg", "must take (in_channels, out_channels)"),
    ("models.py:linear", "no torch_geometric MessagePassing layer"),
    ("models.py:broken", "Broken's forward pass failed in layer conv2 (GCNConv) (call 2): RuntimeError"),
    ("models.py", "names no factory: write"),
])
def test_cli_bad_factory_is_one_line(tmp_path: Path, capsys, data_root, target: str, fragment: str) -> None:
    from lipgnn.diagnostics.diagnose_cli import main

    (tmp_path / "models.py").write_text(FACTORIES)
    code = main([str(tmp_path / target), "dataset=cora", "--no-plot", "--no-lipschitz"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and "\n" not in err and fragment in err, err


def test_cli_debug_prints_the_traceback_and_help_is_plain_text(tmp_path: Path, capsys, data_root) -> None:
    from lipgnn.diagnostics.diagnose_cli import main

    (tmp_path / "models.py").write_text(FACTORIES)
    assert main([f"{tmp_path / 'models.py'}:broken", "dataset=cora", "--no-plot", "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "conv2" in err and err.strip().splitlines()[-1].startswith("error: ")
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "make_model(in_channels, out_channels)" in text and "--json PATH" in text
    assert not any(markup in text for markup in ("``", ":func:", ":math:", ":class:", "\\")), text


def test_cli_factory_and_suite_model(tmp_path: Path, capsys, data_root) -> None:
    from lipgnn.diagnostics.diagnose_cli import main

    (tmp_path / "models.py").write_text(FACTORIES)
    assert main([f"{tmp_path / 'models.py'}:make_model", "dataset=cora", "--no-lipschitz",
                 "--plot", str(tmp_path / "f.png")]) == 0
    out = capsys.readouterr().out
    assert "convs.2" in out and "energy" in out and (tmp_path / "f.png").exists()
    assert main([f"{tmp_path / 'models.py'}:with_forward", "dataset=cora", "--no-plot", "--lipschitz-budget", "0",
                 "--csv", str(tmp_path / "t.csv"), "--json", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "Lipschitz bound on 0 of 2 layers (budget 0 s)" in out and "group_ratio without separation: 0.19" in out

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    record = json.loads((tmp_path / "t.json").read_text(), parse_constant=refuse)
    table = pd.read_csv(tmp_path / "t.csv")
    assert list(table.columns) == list(COLUMNS) and list(table["layer"]) == ["input", "convs.0", "convs.1"]
    assert record["layers"]["layer"] == ["convs.0", "convs.1"] and record["input"]["layer"] == "input"
    assert record["layers"]["rayleigh"] == pytest.approx(table["rayleigh"][1:].tolist())
    assert record["settings"]["lipschitz_measured"] == 0 and record["layers"]["lipschitz_lower"] == [None, None]
    assert main(["model=pyg_stack", "model.conv=gatv2", "norm=lip", "depth=3", "dataset=cora", "--no-plot",
                 "--train-steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "LipGATv2Conv" in out and "attention gradients reach" in out


# ------------------------------------------------------------------------------------------- model=pyg_stack
@pytest.mark.parametrize(("conv", "cls"), [("gat", GATConv), ("gatv2", GATv2Conv), ("transformer", TransformerConv)])
def test_pyg_stack_builds_stock_layers_and_their_lipschitz_norm(conv: str, cls: type) -> None:
    from lipgnn.config import compose as compose_cfg
    from lipgnn.models import build_model

    spec = type("Spec", (), {"num_features": 12, "num_classes": 3, "input": "dense"})()
    plain_cfg = compose_cfg(["model=pyg_stack", f"model.conv={conv}", "norm=none", "depth=3"])
    lip_cfg = compose_cfg(["model=pyg_stack", f"model.conv={conv}", "norm=lip", "norm.alpha=2.0", "depth=3"])
    torch.manual_seed(0)
    plain = build_model(plain_cfg.model, plain_cfg.norm, spec, 3)
    torch.manual_seed(0)
    lip = build_model(lip_cfg.model, lip_cfg.norm, spec, 3)
    assert all(type(b.conv) is cls for b in plain.blocks)
    assert all(isinstance(b.conv, cls) and b.conv.lipschitz_norm and b.conv.alpha == 2.0 for b in lip.blocks)
    for (k1, v1), (k2, v2) in zip(plain.state_dict().items(), lip.state_dict().items(), strict=True):
        assert k1 == k2 and torch.equal(v1, v2)  # same parameters: only the scores differ


def test_pyg_stack_bad_conv_is_refused() -> None:
    from lipgnn.config import compose as compose_cfg

    with pytest.raises(ConfigError, match="model.conv"):
        compose_cfg(["model=pyg_stack", "model.conv=gcn"])


# ------------------------------------------------------------------------------------------- depth_board
def _record(conv: str, norm: str, depth: int, seed: int, test: float, energies: list[float]) -> dict:
    return {"run_id": f"{conv}-{norm}-{depth}-{seed}", "experiment": "depth_board", "status": "completed",
            "config": {"model": {"name": "pyg_stack", "conv": conv}, "norm": {"name": norm},
                       "dataset": {"name": "cora"}, "depth": depth, "seed": seed, "budget": {"name": "cpu"},
                       "train": {"epochs": 100}},
            "seed": seed, "best": {"test": test, "val": test, "epoch": 5}, "epochs_run": 100,
            "diagnostics": {"diagnose": {"layers": {"dirichlet": energies}}}}


def test_depth_board_renders_drop_depth_ratio_budget_and_missing(tmp_path: Path) -> None:
    from lipgnn.results.artifacts.lipschitznorm.depth_board import ARTIFACT, runs
    from lipgnn.store import load_records, write_record

    accs = {2: 0.80, 8: 0.78, 16: 0.74, 32: 0.50}
    for seed in (0, 1):
        for depth, acc in accs.items():
            write_record(tmp_path, _record("gatv2", "none", depth, seed, acc + 0.01 * seed, [1.0, 1e-3]))
    write_record(tmp_path, _record("gatv2", "lip", 2, 0, 0.81, [1.0, 0.5]))
    df = load_records(tmp_path, "depth_board")
    assert len(runs(df)) == 9
    md = ARTIFACT.table(df)["md"]
    body = ARTIFACT.report(df)["depth_board-table"]
    row = next(line for line in body.splitlines() if line.startswith("| GATv2Conv | plain"))
    assert "| 16 |" in row  # 74.5 <= 80.5 - 5 first at 16 (78.5 at 8 is not)
    assert "1e+03" in row or "1.00e+03" in row  # energy ratio 1/1e-3
    assert "budget cpu: 100 epochs" in body and "budget cpu: 100 epochs" in md
    assert "Missing runs (63)" in body and "L32 seeds 0, 1, 2: GATConv plain" in body
    lip_row = next(line for line in body.splitlines() if line.startswith("| GATv2Conv | LipschitzNorm"))
    assert "not run: 8, 16, 32" in lip_row
    ARTIFACT.figure(df)


@pytest.mark.slow
def test_cost_of_a_64_layer_gcn_on_cora(data_root) -> None:
    """The issue's cost target: a 64-layer GCN on Cora, train_steps=0, within 10 s of one thread's CPU time."""
    import time

    from lipgnn.config import compose
    from lipgnn.data import load

    cfg = compose(["dataset=cora"])
    data = next(iter(load(cfg.dataset, 0).eval_batches()))
    torch.manual_seed(0)
    model = GCN(data.num_features, 64, 64, out_channels=7)
    torch.set_num_threads(1)
    start = time.process_time()
    result = diagnose(model, data)
    assert time.process_time() - start <= 10.0
    assert len(result.layers) == 65 and ": over-smoothing;" in result.summary  # the input row and 64 layers
