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

from lipgnn.diagnostics.diagnose import COLUMNS, diagnose, mean_average_distance, summarise
from lipgnn.diagnostics.energy import GraphMeasure
from lipgnn.errors import ConfigError


def _data(n: int = 40, f: int = 12, classes: int = 3, seed: int = 0) -> Data:
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n, (160,), generator=gen)
    dst = torch.randint(0, n, (160,), generator=gen)
    edge_index = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)
    y = torch.randint(0, classes, (n,), generator=gen)
    return Data(x=torch.randn(n, f, generator=gen), edge_index=edge_index, y=y,
                train_mask=torch.arange(n) < n // 2)


def test_any_pyg_model_gives_one_row_per_message_passing_call() -> None:
    data = _data()
    torch.manual_seed(0)
    model = GCN(12, 16, 5, out_channels=3)
    result = diagnose(model, data, labels=data.y)
    df = result.layers
    assert list(df.columns) == list(COLUMNS)
    assert list(df["layer"]) == [f"convs.{i}" for i in range(5)] and set(df["kind"]) == {"GCNConv"}
    assert df[["dirichlet", "laplacian", "mad", "group_distance_ratio", "lipschitz_lower"]].notna().all().all()
    assert df["attn_grad_norm"].isna().all()  # train_steps=0
    # the energies are the suite's E_1 / E_2 per entry of each layer's output
    outputs: list[torch.Tensor] = []
    hooks = [conv.register_forward_hook(lambda m, a, o: outputs.append(o.detach())) for conv in model.convs]
    model.eval()
    with torch.no_grad():
        model(data.x, data.edge_index)
    for h in hooks:
        h.remove()
    graph = GraphMeasure(data.edge_index, data.num_nodes)
    assert df["dirichlet"].tolist() == pytest.approx([graph.energy(h, 1, normalise="entries") for h in outputs])
    assert df["laplacian"].tolist() == pytest.approx([graph.energy(h, 2, normalise="entries") for h in outputs])
    assert isinstance(result.summary, str) and "\n" not in result.summary and "energy" in result.summary


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
    assert len(result.layers) == 3
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
    bound = result.layers["lipschitz_lower"].iloc[0]
    assert 0 < bound <= full * (1 + 1e-6)


def test_attention_gradients_with_train_steps_and_the_model_is_restored() -> None:
    data = _data()
    torch.manual_seed(2)
    model = GAT(12, 16, 3, out_channels=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = diagnose(model, data, train_steps=3, lipschitz=False)
    grads = result.layers["attn_grad_norm"]
    assert grads.notna().all() and (grads > 0).all()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert "attention gradients reach" in result.summary
    with pytest.raises(ConfigError):
        diagnose(model, Data(x=data.x, edge_index=data.edge_index), train_steps=1)


def test_model_without_message_passing_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        diagnose(nn.Linear(12, 3), _data())
    assert "\n" not in str(err.value) and "MessagePassing" in str(err.value)


def test_summary_names_over_smoothing_and_its_rate() -> None:
    rows = pd.DataFrame({"dirichlet": [2.0 ** -k for k in range(0, 20, 2)], "attn_grad_norm": [math.nan] * 10,
                         "lipschitz_lower": [math.nan] * 10})
    line = summarise(rows)
    assert line.startswith("energy falls 2.6·10^5x from layer 1 to 10, halving every 0.5 layers: over-smoothing")
    flat = summarise(rows.assign(dirichlet=[1.0] * 10))
    assert "no strong over-smoothing" in flat


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
from torch_geometric.nn.models import GCN
def make_model(in_channels, out_channels):
    return GCN(in_channels, 16, 3, out_channels=out_channels)
def one_arg(in_channels):
    return None
def linear(in_channels, out_channels):
    import torch
    return torch.nn.Linear(in_channels, out_channels)
'''


@pytest.mark.parametrize(("target", "fragment"), [
    ("missing.py:make_model", "does not exist"),
    ("models.py:nope", "has no function 'nope'"),
    ("models.py:one_arg", "must take (in_channels, out_channels)"),
    ("models.py:linear", "no torch_geometric MessagePassing layer"),
])
def test_cli_bad_factory_is_one_line(tmp_path: Path, capsys, data_root, target: str, fragment: str) -> None:
    from lipgnn.diagnostics.diagnose_cli import main

    (tmp_path / "models.py").write_text(FACTORIES)
    code = main([str(tmp_path / target), "dataset=cora", "--no-plot", "--no-lipschitz"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and "\n" not in err and fragment in err, err


def test_cli_factory_and_suite_model(tmp_path: Path, capsys, data_root) -> None:
    from lipgnn.diagnostics.diagnose_cli import main

    (tmp_path / "models.py").write_text(FACTORIES)
    assert main([f"{tmp_path / 'models.py'}:make_model", "dataset=cora", "--no-lipschitz",
                 "--plot", str(tmp_path / "f.png")]) == 0
    out = capsys.readouterr().out
    assert "convs.2" in out and "energy" in out and (tmp_path / "f.png").exists()
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
    assert len(result.layers) == 64 and "over-smoothing" in result.summary
