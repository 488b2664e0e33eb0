"""lipgnn.diagnostics.monitor in a plain PyG training loop, in diagnose(train_steps, every) and in the trainer
(log.diagnose_every)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn.models import GAT, GCN

from lipgnn.diagnostics import diagnose, monitor
from lipgnn.diagnostics.calls import QUANTITIES
from lipgnn.errors import ConfigError


def _cora() -> Data:
    from lipgnn.config import compose
    from lipgnn.data import load

    return next(iter(load(compose(["dataset=cora"]).dataset, 0).eval_batches()))


def _train(data: Data, epochs: int, every: int | None) -> tuple[GCN, object]:
    """The loop a PyG user writes, optionally inside the monitor."""
    torch.manual_seed(0)
    model = GCN(data.num_features, 16, 2, out_channels=7, dropout=0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    def loop() -> None:
        for _ in range(epochs):
            model.train()
            opt.zero_grad()
            out = model(data.x, data.edge_index)
            F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
            opt.step()

    if every is None:
        loop()
        return model, None
    with monitor(model, data, every=every, labels=data.y, mad_nodes=256) as m:
        loop()
    return model, m


def test_monitor_in_a_plain_pyg_loop_on_cora(tmp_path: Path, data_root: Path) -> None:
    data = _cora()
    model, m = _train(data, 20, every=5)
    frame = m.frame
    # every 5th training forward pass (0, 5, 10, 15) and the state the loop leaves (20 steps)
    assert sorted(set(frame["epoch"])) == [0, 5, 10, 15, 20]
    assert list(frame[frame["epoch"] == 20]["layer"]) == ["input", "convs.0", "convs.1"]
    assert frame[list(QUANTITIES)].notna().all().all()
    first, last = (frame[(frame["epoch"] == e) & (frame["depth"] == 2)].iloc[0] for e in (0, 20))
    assert first["feature_norm"] != last["feature_norm"]  # it measured the model as it trained
    assert frame[frame["depth"] == 0]["rayleigh"].nunique() == 1  # the input features do not train
    path = m.heatmap(tmp_path / "heat.png", "rayleigh")
    assert path.stat().st_size > 1000
    # measuring draws no random numbers and changes nothing: the same weights as without the monitor
    plain, _ = _train(data, 20, every=None)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), plain.state_dict().values(),
                                                strict=True))


def test_step_records_only_the_epochs_it_is_given() -> None:
    data = Data(x=torch.randn(30, 6), edge_index=torch.randint(0, 30, (2, 90)), y=torch.randint(0, 3, (30,)))
    model = GAT(6, 8, 2, out_channels=3)
    with monitor(model, data, every=2) as m:
        for epoch in range(1, 6):
            model.train()
            model(data.x, data.edge_index)  # a training forward pass: not counted once step() is used
            m.step(epoch)
    assert sorted(set(m.frame["epoch"])) == [2, 4]
    assert set(m.frame["kind"][m.frame["depth"] > 0]) == {"GATConv [plain attention]"}
    with pytest.raises(ConfigError, match="every=0"):
        monitor(model, data, every=0)
    with pytest.raises(ConfigError, match="recorded nothing"):
        monitor(model, data).heatmap("x.png")


def test_diagnose_with_train_steps_and_every_keeps_the_history(tmp_path: Path) -> None:
    data = Data(x=torch.randn(30, 6), edge_index=torch.randint(0, 30, (2, 90)), y=torch.randint(0, 3, (30,)))
    torch.manual_seed(0)
    model = GAT(6, 8, 3, out_channels=3)
    result = diagnose(model, data, train_steps=6, every=3, lipschitz=False)
    assert sorted(set(result.history["epoch"])) == [0, 3, 6]
    # step 0 is the model as given: the table's values
    at_start = result.history[result.history["epoch"] == 0].reset_index(drop=True)
    assert at_start["rayleigh"].tolist() == pytest.approx(result.layers["rayleigh"].tolist())
    assert result.heatmap(tmp_path / "h.png", "mad").exists()
    assert "history" in result.to_record()
    with pytest.raises(ConfigError, match="no history"):
        diagnose(model, data, lipschitz=False).heatmap(tmp_path / "x.png")
    with pytest.raises(ConfigError, match="pass train_steps > 0"):
        diagnose(model, data, every=2)


def test_log_diagnose_every_records_the_quantities_over_training(tmp_path: Path, data_root: Path) -> None:
    """log.diagnose_every=2 on a 4-epoch run: rows at epochs 0, 2, 4 in the record (beside log.energy's), a heat
    map drawn from the record, and the same training as without it."""
    from lipgnn.diagnostics.monitor import frame_from_record, heatmap
    from lipgnn.runs import run
    from tests.conftest import compose_cfg

    base = ["model=gat", "depth=3", "train.epochs=4", "log.progress=false", "model.hidden=8"]
    record = run(compose_cfg([*base, "log.diagnose_every=2", "log.energy=true", f"results_dir={tmp_path / 'a'}"]))
    payload = record["diagnostics"]["monitor"]
    assert payload["every"] == 2 and "energy" in record["diagnostics"]
    frame = frame_from_record(payload)
    assert sorted(set(frame["epoch"])) == [0, 2, 4] and sorted(set(frame["depth"])) == [0, 1, 2, 3]
    assert frame["rayleigh"].notna().all()
    assert heatmap(frame, tmp_path / "heat.png", "mad").stat().st_size > 1000
    plain = run(compose_cfg([*base, f"results_dir={tmp_path / 'b'}"]))
    assert "diagnostics" not in plain or "monitor" not in plain["diagnostics"]
    assert plain["history"]["loss"] == record["history"]["loss"]


def test_log_diagnose_every_survives_a_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              data_root: Path) -> None:
    """Interrupted after epoch 3's checkpoint and resumed: the record's rows are those of an uninterrupted
    run (the first segment's come from the checkpoint's carry, none twice)."""
    from lipgnn.diagnostics.monitor import frame_from_record
    from lipgnn.runs import run
    from tests.conftest import compose_cfg, interrupted_at

    base = ["model=gat", "depth=2", "train.epochs=4", "train.checkpoint_every=1", "log.progress=false",
            "model.hidden=8", "log.diagnose_every=1"]
    whole = frame_from_record(run(compose_cfg([*base, f"results_dir={tmp_path / 'a'}"]))["diagnostics"]["monitor"])

    with interrupted_at(monkeypatch, 3), pytest.raises(Exception, match="interrupted"):
        run(compose_cfg([*base, f"results_dir={tmp_path / 'b'}"]))
    record = run(compose_cfg([*base, f"results_dir={tmp_path / 'b'}"]))
    assert record["resumed_from"] == 3
    resumed = frame_from_record(record["diagnostics"]["monitor"])
    assert list(resumed["epoch"]) == list(whole["epoch"]) == [e for e in range(5) for _ in range(3)]
    assert resumed["rayleigh"].tolist() == pytest.approx(whole["rayleigh"].tolist(), rel=1e-6)
