"""The one seeding rule (lipgnn.seeding): every door that builds a model from a config (training, energy, Kim,
``lipgnn diagnose``, ``lipgnn lipschitz``, the bench; the demo's Cora models are training runs) starts it from the
same initial weights."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import torch

from lipgnn.config import compose, validate
from lipgnn.seeding import start

#: one model every door can build: the Kim unit gat_lip-L2 on Cora, PyG's layers (what the Lipschitz doors run)
OVERRIDES = ["variant=gat_lip", "dataset=cora", "depth=2", "seed=3", "model.impl=pyg"]


class Captured(Exception):
    """Stops a door once it holds its model: the model's state at that moment is the door's initial weights."""


def _capture(store: dict[str, Any]):
    def capture(model: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
        store["state"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        raise Captured

    return capture


def _reference() -> dict[str, torch.Tensor]:
    model, _ = start(validate(compose(OVERRIDES)))
    return model.state_dict()


def _training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, torch.Tensor]:
    from lipgnn.runs import run
    from lipgnn.train.trainer import Trainer

    got: dict[str, Any] = {}
    monkeypatch.setattr(Trainer, "fit", lambda self, model, *a, **k: _capture(got)(model))
    with pytest.raises(Captured):
        run(compose([*OVERRIDES, "train.epochs=1", f"results_dir={tmp_path}"]))
    return got["state"]


def _energy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, torch.Tensor]:
    from lipgnn.runs.kinds.energy import build_untrained

    model, _ = build_untrained(compose(OVERRIDES))
    return model.state_dict()


def _kim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, torch.Tensor]:
    from lipgnn.lipschitz import layers
    from lipgnn.runs import run

    got: dict[str, Any] = {}
    monkeypatch.setattr(layers, "estimate_layers", _capture(got))
    with pytest.raises(Captured):
        run(compose(["experiment=lip_estimates", "budget=paper", "kim.unit=gat_lip-L2", "seed=3",
                     f"results_dir={tmp_path}"]))
    return got["state"]


def _diagnose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, torch.Tensor]:
    from lipgnn.diagnostics.diagnose_cli import _prepare

    model, *_ = _prepare(OVERRIDES)
    return model.state_dict()


def _lipschitz(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, torch.Tensor]:
    from lipgnn.lipschitz import cli, layers

    got: dict[str, Any] = {}
    monkeypatch.setattr(layers, "estimate_layers", _capture(got))
    with pytest.raises(Captured):
        cli.run(argparse.Namespace(overrides=OVERRIDES, checkpoint=None, steps=0), [])
    return got["state"]


def _bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, torch.Tensor]:
    from lipgnn.bench.variants import build_variant
    from lipgnn.data import load

    spec = load(validate(compose(OVERRIDES)).dataset, 3).spec
    return build_variant("gat_lip", 2, spec.num_features, spec.num_classes, seed=3).state_dict()


DOORS = {"bench": _bench, "training": _training, "energy": _energy, "kim": _kim, "diagnose": _diagnose,
         "lipschitz": _lipschitz}


@pytest.mark.parametrize("door", sorted(DOORS))
def test_every_door_starts_from_the_same_weights(door: str, data_root, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    reference = _reference()
    # Another draw between two doors must not matter: each door seeds for itself.
    torch.rand(17)
    state = DOORS[door](tmp_path, monkeypatch)
    assert state.keys() == reference.keys()
    for key, value in reference.items():
        assert torch.equal(state[key], value), f"{door}: {key} differs from lipgnn.seeding.start's"


def test_the_seed_decides_the_weights(data_root) -> None:
    settings = validate(compose(OVERRIDES))
    model, task = start(settings)
    again, _ = start(settings, task=task)
    other, _ = start(validate(compose([*OVERRIDES[:-2], "seed=4", "model.impl=pyg"])), task=task)
    first = next(iter(model.parameters()))
    assert torch.equal(first, next(iter(again.parameters())))
    assert not torch.equal(first, next(iter(other.parameters())))
