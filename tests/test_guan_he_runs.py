"""scripts/guan_he_runs.py: the gh_depth runs train on the data layer's random 60/20/20 split."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from conftest import ROOT

from lipgnn.config import validate
from lipgnn.data import load
from lipgnn.data.splits import random_split


def _runs():
    spec = importlib.util.spec_from_file_location("guan_he_runs", ROOT / "scripts" / "guan_he_runs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gh_depth_trains_on_the_data_layers_random_split(data_root: Path, tmp_path: Path) -> None:
    runs = _runs()
    cfg = runs.make_config("cpu", "nonlocal", "cora", 2, 1, str(tmp_path))
    validate(cfg)  # what run_one checks first: the strict schema accepts every key the script sets
    assert (cfg.dataset.split, cfg.dataset.train_per_class) == ("random", None)
    assert (cfg.dataset.train_fraction, cfg.dataset.val_fraction, cfg.dataset.test_fraction) == (0.6, 0.2, 0.2)
    assert (cfg.model.layer_norm, cfg.model["nonlocal"]) == ("post", True)
    assert (cfg.train.lr, cfg.train.warmup_epochs) == (1e-4, 20)
    (data,) = list(load(cfg.dataset, 1).eval_batches())
    expected = random_split(data.y, "cora", 1, train_per_class=None, train_fraction=0.6, val_fraction=0.2,
                            test_fraction=0.2)
    for mask, want in zip((data.train_mask, data.val_mask, data.test_mask), expected, strict=True):
        assert mask.equal(want)
    assert [int(m.sum()) for m in expected] == [1625, 542, 541]
