"""``train.cuda_graphs`` (lipgnn/train/cuda_graph.py): the captured step is the trainer's step.

On CPU the graphed step runs eagerly through the same code, so it must equal the trainer's own step bit for
bit (row index instead of a boolean mask, in-place zeroed gradients, the learning rate in a tensor). On CUDA
(``pytest --torch-device cuda``) the step is captured after three eager ones and replayed; there no two runs
are bit-equal (atomic scatter sums), so the captured run is compared with an eager one beside the gap between
two eager runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from devices import on_cuda
from omegaconf import OmegaConf
from torch_geometric.data import Data

from lipgnn.config import CONF_DIR, validate
from lipgnn.data.spec import DataSpec, TaskData
from lipgnn.errors import ConfigError
from lipgnn.identity import run_id
from lipgnn.models import build_model
from lipgnn.train.cuda_graph import WARMUP_STEPS
from lipgnn.train.trainer import Trainer, set_warmup_lr

N, FEATURES, CLASSES = 120, 12, 4


def random_task(batches: int = 1) -> TaskData:
    """A random graph on the CPU, as a dataset holds it: on CUDA the trainer moves it each epoch, so a
    captured step must keep reading its own static copy (and the caches built from that copy)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, FEATURES, generator=g, device="cpu")
    src, dst = torch.randint(0, N, (2, 600), generator=g, device="cpu")
    keep = src != dst
    edge_index = torch.stack([src[keep], dst[keep]])
    y = torch.randint(0, CLASSES, (N,), generator=g, device="cpu")
    split = torch.arange(N, device="cpu") % 3
    data = Data(x=x, edge_index=edge_index, y=y, train_mask=split == 0, val_mask=split == 1, test_mask=split == 2)
    spec = DataSpec(num_features=FEATURES, num_classes=CLASSES)
    return TaskData(name="random", spec=spec, metric="acc", train_batches=lambda _g: [data] * batches,
                    eval_batches=lambda: [data])


def model_for(name: str, norm: str, dropout: float) -> torch.nn.Module:
    from conftest import compose_cfg

    cfg = compose_cfg([f"model={name}", f"norm={norm}", "model.hidden=16", f"model.dropout={dropout}",
                       "model.impl=fused"] + ([f"model.attn_dropout={dropout}"] if name != "san" else []))
    torch.manual_seed(0)
    device = torch.get_default_device()
    return build_model(cfg.model, cfg.norm, DataSpec(num_features=FEATURES, num_classes=CLASSES), 3,
                       device=device).to(device)


def train_cfg(**keys: object) -> OmegaConf:
    cfg = OmegaConf.load(Path(CONF_DIR) / "train" / "default.yaml")
    cfg.update({"lr": 0.02, "epochs": 10, **keys})
    return cfg


def fit(graphs: bool, name: str = "gat", norm: str = "lip", dropout: float = 0.0, **keys: object):  # noqa: ANN201
    model = model_for(name, norm, dropout)
    trainer = Trainer(train_cfg(cuda_graphs=graphs, **keys), device=torch.get_default_device(), seed=0,
                      progress=False)
    result = trainer.fit(model, random_task())
    return result, model, trainer


CASES = [("gat", "lip", {}), ("gt", "lip", {"warmup_epochs": 8}), ("san", "none", {"grad_clip": 0.5}),
         ("gat", "none", {"train_metric": "online", "scheduler": "plateau", "plateau_patience": 1}),
         ("gcn", "pairnorm", {}), ("gin", "none", {}), ("ggnn", "none", {})]


@pytest.mark.parametrize(("name", "norm", "keys"), CASES, ids=[f"{c[0]}-{c[1]}-{'-'.join(c[2])}" for c in CASES])
def test_graphed_training_equals_eager(name: str, norm: str, keys: dict[str, object]) -> None:
    eager, eager_model, _ = fit(False, name, norm, **keys)
    graphed, graphed_model, trainer = fit(True, name, norm, **keys)
    assert eager.status == graphed.status == "completed"
    # Warm-up and plateau reach the captured step alike (on CUDA the rate is held in float32, as the kernel reads it).
    assert graphed.history["lr"] == pytest.approx(eager.history["lr"], rel=1e-6 if on_cuda() else 0.0)
    if "train_online" in eager.history:
        assert graphed.history["train_online"] == eager.history["train_online"]
    assert trainer.graphed is not None
    if not on_cuda():  # the same code eagerly: bit-equal losses, scores and parameters
        assert trainer.graphed.replays == 0
        assert graphed.history == eager.history
        for a, b in zip(graphed_model.parameters(), eager_model.parameters(), strict=True):
            assert torch.equal(a, b)
        return
    assert trainer.graphed.replays == 10 - WARMUP_STEPS
    assert trainer.graphed._pinned  # what the captured kernels read stays referenced
    control, _, _ = fit(False, name, norm, **keys)
    gap = max(abs(a - b) for a, b in zip(control.history["loss"], eager.history["loss"], strict=True))
    diff = max(abs(a - b) for a, b in zip(graphed.history["loss"], eager.history["loss"], strict=True))
    assert diff <= 10 * gap + 1e-5, (diff, gap)


@pytest.mark.skipif(not on_cuda(), reason="replays exist on CUDA only")
def test_each_replay_draws_fresh_dropout() -> None:
    """With the parameters frozen (lr 0), a replayed step's loss changes between epochs only through dropout."""
    frozen = {"lr": 1e-30, "weight_decay": 0.0}
    still, _, _ = fit(True, dropout=0.0, **frozen)
    noisy, _, trainer = fit(True, dropout=0.5, **frozen)
    assert trainer.graphed is not None and trainer.graphed.replays == 10 - WARMUP_STEPS
    replayed = slice(WARMUP_STEPS, None)
    assert max(still.history["loss"][replayed]) - min(still.history["loss"][replayed]) < 1e-5
    assert len(set(noisy.history["loss"][replayed])) == len(noisy.history["loss"][replayed])


def test_several_batches_are_refused() -> None:
    trainer = Trainer(train_cfg(cuda_graphs=True), device=torch.get_default_device(), seed=0, progress=False)
    with pytest.raises(ConfigError, match="one full-batch step.*train.cuda_graphs=false"):
        trainer.fit(model_for("gat", "none", 0.0), random_task(batches=2))


def test_warmup_writes_a_tensor_rate_in_place() -> None:
    rate = torch.tensor(0.0)
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=rate)
    set_warmup_lr(opt, 0.01, 4, 1)
    assert opt.param_groups[0]["lr"] is rate and float(rate) == pytest.approx(0.0025)


@pytest.mark.parametrize(("overrides", "message"), [
    (["model.impl=pyg"], "cannot capture PyG's layers"),
    (["model=gcnii"], "captures the fused layers"),
    (["train.checkpoint_activations=true"], "checkpoint_activations=true is not supported"),
    (["train.batch_size=8"], "mini-batches"),
    (["log.grad_norms=true", "train.grad_clip=1.0"], "reads the gradients before clipping"),
    (["device=cpu"], "needs a CUDA device"),
])
def test_config_errors(make_cfg, overrides: list[str], message: str) -> None:  # noqa: ANN001
    with pytest.raises(ConfigError, match=message):
        validate(make_cfg("train.cuda_graphs=true", *overrides))


def test_not_part_of_the_run_identity(make_cfg) -> None:  # noqa: ANN001
    assert run_id(make_cfg("train.cuda_graphs=true")) == run_id(make_cfg())


@pytest.mark.parametrize("first", [False, True], ids=["eager-then-graphed", "graphed-then-graphed"])
def test_a_resumed_graphed_run_continues_the_uninterrupted_one(tmp_path: Path, first: bool) -> None:
    """A checkpoint holds the rate as a float (eager run) or a tensor (graphed run); either way the resumed
    graphed run continues the schedule (warm-up over both segments) and, on CPU, equals a run never stopped."""
    keys = {"warmup_epochs": 6, "checkpoint_every": 4}
    whole, whole_model, _ = fit(True, "gt", "lip", **keys)
    ckpt = tmp_path / "ckpt.pt"
    model = model_for("gt", "lip", 0.0)
    Trainer(train_cfg(cuda_graphs=first, epochs=4, **keys), device=torch.get_default_device(), seed=0,
            progress=False, checkpoint_path=ckpt).fit(model, random_task())
    model = model_for("gt", "lip", 0.0)
    resumed = Trainer(train_cfg(cuda_graphs=True, **keys), device=torch.get_default_device(), seed=0,
                      progress=False, checkpoint_path=ckpt).fit(model, random_task())
    assert resumed.resumed_from == 4
    assert resumed.history["lr"] == pytest.approx(whole.history["lr"], rel=1e-6 if on_cuda() else 0.0)
    if not on_cuda():
        assert resumed.history == whole.history
        assert all(torch.equal(a, b) for a, b in zip(model.parameters(), whole_model.parameters(), strict=True))
